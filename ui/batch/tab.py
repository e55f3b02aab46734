"""The Batch tab: many prompts at once, at a class of the user's choosing, with the results to
download as JSONL and CSV."""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr

from ui.account.uploads import UploadRefused, uploaded_file
from ui.batch.jobs import BatchInputError, parse_prompts, run_batch, write_results
from ui.chat.chat_settings import ChatSettings
from ui.i18n import message
from ui.page import Labels, Page, code_of


def build_batch_tab(page: Page, t: gr.I18n) -> Labels:
    with gr.Tab(t("batch"), elem_id="tab-batch") as tab:
        prompts = gr.Textbox(label=t("prompts"), lines=6, elem_id="batch-prompts")
        upload = gr.File(label=t("upload"), file_types=[".txt", ".jsonl"], type="filepath")
        with gr.Row():
            batch_priority = gr.Radio(["high", "medium", "low"], value="low", label=t("priority"))
            batch_concurrency = gr.Slider(1, 32, value=4, step=1, label=t("concurrency"))
        run = gr.Button(t("run_batch"), variant="primary", elem_id="run-batch")
        batch_status = gr.Markdown(elem_id="batch-status")
        table = gr.Dataframe(headers=["#", "prompt", "answer", "status", "tokens", "queue_wait_s", "reasoning"],
                             label=t("results"), elem_id="batch-table", wrap=True)
        with gr.Row():
            # Gradio takes an I18nData label; its annotation says str.
            download_jsonl = gr.DownloadButton(t("download_jsonl"), visible=False,  # type: ignore[arg-type]
                                               elem_id="download-jsonl")
            download_csv = gr.DownloadButton(t("download_csv"), visible=False,  # type: ignore[arg-type]
                                             elem_id="download-csv")

    async def batch(text: str, file: str | None, prio: str, conc: float, language: str,
                    request: gr.Request, progress: gr.Progress = gr.Progress()) -> tuple:  # noqa: B008 - Gradio's way
        caller = page.caller_of(request)
        try:
            items = parse_prompts(text, uploaded_file(file))
        except (BatchInputError, UploadRefused) as exc:
            gr.Warning(str(exc))
            return f"⚠️ {exc}", gr.update(), gr.update(visible=False), gr.update(visible=False)
        progress((0, len(items)), desc="batch")
        results = await run_batch(page.services.pipeline, caller, items, ChatSettings(priority=prio, temperature=0.7),
                                  int(conc), lambda done, total: progress((done, total), desc="batch"))
        folder = Path(tempfile.mkdtemp(prefix="gptoss-batch-"))
        rows = [[r.index + 1, r.prompt, r.answer, r.status, r.tokens, r.queue_wait_s, r.reasoning]
                for r in results]
        return (message(code_of(language), "batch_done", n=len(results)), rows,
                gr.update(value=str(write_results(results, "jsonl", folder)), visible=True),
                gr.update(value=str(write_results(results, "csv", folder)), visible=True))

    page.then_header(run.click(batch, [prompts, upload, batch_priority, batch_concurrency, page.lang],
                               [batch_status, table, download_jsonl, download_csv], concurrency_limit=None))
    return {tab: "batch", prompts: "prompts", upload: "upload", batch_priority: "priority",
            batch_concurrency: "concurrency", run: "run_batch", table: "results", download_jsonl: "download_jsonl",
            download_csv: "download_csv"}

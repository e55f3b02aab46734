"""The Batch tab: many prompts at once, at a class of the user's choosing, with the results to
download as JSONL and CSV; or the same prompts as a batch job of the Batch API, run on idle
capacity, with the caller's jobs (from the page or a script) listed with their progress."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from batches.store import StorageFull
from core.private_files import private_folder_in
from pipeline.refusal import Refusal
from ui.account.uploads import UploadRefused, uploaded_file
from ui.batch import api_jobs
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
        table = gr.Dataframe(
            headers=["#", "prompt", "answer", "status", "tokens", "queue_wait_s", "reasoning"],
            label=t("results"),
            elem_id="batch-table",
            wrap=True,
        )
        with gr.Row():
            # Gradio takes an I18nData label; its annotation says str.
            download_jsonl = gr.DownloadButton(
                t("download_jsonl"),  # type: ignore[arg-type]
                visible=False,
                elem_id="download-jsonl",
            )
            download_csv = gr.DownloadButton(
                t("download_csv"),  # type: ignore[arg-type]
                visible=False,
                elem_id="download-csv",
            )
        jobs = _build_jobs(page, t, prompts, upload)

    run_prompts = _PromptBatch(page)
    page.then_header(
        run.click(
            run_prompts.run,
            [prompts, upload, batch_priority, batch_concurrency, page.lang],
            [batch_status, table, download_jsonl, download_csv],
            concurrency_limit=None,
            api_name="batch",
        )
    )
    return {
        tab: "batch",
        prompts: "prompts",
        upload: "upload",
        batch_priority: "priority",
        batch_concurrency: "concurrency",
        run: "run_batch",
        table: "results",
        download_jsonl: "download_jsonl",
        download_csv: "download_csv",
        **jobs,
    }


class _PromptBatch:
    """The prompts run now as ordinary requests of the class chosen, with their results to download."""

    def __init__(self, page: Page) -> None:
        self.page = page

    async def run(
        self,
        text: str,
        file: str | None,
        prio: str,
        conc: float,
        language: str,
        request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 - Gradio's way
    ) -> tuple:
        caller = self.page.caller_of(request)
        try:
            items = await asyncio.to_thread(parse_prompts, text, uploaded_file(file))
        except (BatchInputError, UploadRefused) as exc:
            gr.Warning(str(exc))
            return f"⚠️ {exc}", gr.update(), gr.update(visible=False), gr.update(visible=False)
        progress((0, len(items)), desc="batch")
        results = await run_batch(
            self.page.services.pipeline,
            caller,
            items,
            ChatSettings(priority=prio, temperature=0.7),
            _concurrency(conc),
            lambda done, total: progress((done, total), desc="batch"),
        )
        folder = private_folder_in(get_upload_folder(), "gptoss-batch-")  # served by Gradio as is, not copied
        rows = [[r.index + 1, r.prompt, r.answer, r.status, r.tokens, r.queue_wait_s, r.reasoning] for r in results]
        return (
            message(code_of(language), "batch_done", n=len(results)),
            rows,
            gr.update(value=str(write_results(results, "jsonl", folder)), visible=True),
            gr.update(value=str(write_results(results, "csv", folder)), visible=True),
        )


def _build_jobs(page: Page, t: gr.I18n, prompts: gr.Textbox, upload: gr.File) -> Labels:
    """Batch jobs: submit the prompts as one, list the caller's jobs every few seconds, cancel one,
    download its answers or errors."""
    submit = gr.Button(t("submit_job"), elem_id="submit-job")
    job_status = gr.Markdown(elem_id="job-status")
    listing = gr.Dataframe(
        headers=["id", "status", "progress", "completed", "failed", "total", "from"],
        label=t("jobs"),
        elem_id="job-table",
        interactive=False,
    )
    with gr.Row():
        job_id = gr.Textbox(label=t("job_id"), elem_id="job-id", scale=3)
        cancel = gr.Button(t("cancel_job"), elem_id="cancel-job")
        refresh = gr.Button(t("refresh"), elem_id="refresh-jobs")
    with gr.Row():
        # Gradio takes an I18nData label; its annotation says str.
        output = gr.DownloadButton(
            t("download_output"),  # type: ignore[arg-type]
            interactive=False,
            elem_id="download-output",
        )
        errors = gr.DownloadButton(
            t("download_errors"),  # type: ignore[arg-type]
            interactive=False,
            elem_id="download-errors",
        )
    timer = gr.Timer(2.0)
    jobs = _JobHandlers(page)
    submit.click(jobs.submit_job, [prompts, upload, page.lang], [job_status, job_id, listing], concurrency_limit=None)
    for trigger in (timer.tick, refresh.click):
        trigger(jobs.listed, None, listing, concurrency_limit=None, show_progress="hidden")
    for trigger in (job_id.change, refresh.click):
        trigger(jobs.files, job_id, [output, errors], concurrency_limit=None, show_progress="hidden")
    cancel.click(jobs.cancel_job, [job_id, page.lang], [job_status, listing], concurrency_limit=None)
    return {
        submit: "submit_job",
        listing: "jobs",
        job_id: "job_id",
        cancel: "cancel_job",
        refresh: "refresh",
        output: "download_output",
        errors: "download_errors",
    }


class _JobHandlers:
    """Each an endpoint of the page, for the signed-in caller's own jobs only."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def _store_and_runner(self) -> tuple:
        services = self.page.services
        if services.batch_runner is None:
            raise gr.Error("batch jobs are not available")
        return services.batches, services.batch_runner

    async def submit_job(self, text: str, file: str | None, language: str, request: gr.Request) -> tuple:
        caller, services = self.page.caller_of(request), self.page.services
        try:
            services.pipeline.limiter.admit_request(caller)  # as POST /v1/batches counts it
        except Refusal as refused:
            return f"⚠️ {refused.message}", gr.update(), gr.update()
        try:
            items = await asyncio.to_thread(parse_prompts, text, uploaded_file(file))
        except (BatchInputError, UploadRefused) as exc:
            return f"⚠️ {exc}", gr.update(), gr.update()
        store, runner = self._store_and_runner()
        try:
            state = await api_jobs.submit(
                store, runner, services.config, caller, services.engine.capabilities.model, items, 0.7
            )
        except StorageFull as exc:
            return f"⚠️ {exc}", gr.update(), gr.update()
        shown = message(code_of(language), "job_submitted", id=state["id"], n=len(items))
        return shown, state["id"], await api_jobs.rows(store, caller)

    async def listed(self, request: gr.Request) -> list[list]:
        return await api_jobs.rows(self.page.services.batches, self.page.caller_of(request))

    async def cancel_job(self, batch_id: str | None, language: str, request: gr.Request) -> tuple:
        caller = self.page.caller_of(request)
        store, runner = self._store_and_runner()
        state = await api_jobs.cancel(store, runner, caller, batch_id)
        return message(code_of(language), "job_state", state=state), await api_jobs.rows(store, caller)

    async def files(self, batch_id: str | None, request: gr.Request) -> tuple:
        """The job's answers and errors behind the two buttons, once it has them."""
        caller = self.page.caller_of(request)
        root = Path(get_upload_folder())
        found = [
            await api_jobs.download(self.page.services.batches, caller, batch_id, which, root)
            for which in ("output", "error")
        ]
        return tuple(gr.update(value=str(p) if p else None, interactive=p is not None) for p in found)


def _concurrency(value: object) -> int:
    """The slider's 1-32, whatever a call over HTTP sends."""
    return int(min(32.0, max(1.0, value))) if isinstance(value, (int, float)) and value == value else 1

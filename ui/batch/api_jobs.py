"""The page's batch jobs, on the Batch API's store and runner: the prompts become an input file
and a batch owned by the signed-in caller, exactly as `POST /v1/files` and `POST /v1/batches`
would make them, so the page and a script see the same jobs. No Gradio."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
from pathlib import Path

from batches import shapes
from batches.runner import BatchRunner
from batches.store import BatchStore, StorageFull, new_id
from core.private_files import private_dir, write_private
from pipeline.caller import Caller
from settings.schema import Config

ENDPOINT = "/v1/chat/completions"
JOBS_SHOWN = 20
_FOLDER_KEY = secrets.token_bytes(16)  # this process's: the names of the folders downloads are served from


async def submit(
    store: BatchStore,
    runner: BatchRunner,
    config: Config,
    caller: Caller,
    model: str,
    prompts: list[str],
    temperature: float,
) -> dict:
    """The new batch; StorageFull where the caller has too many files or unfinished batches."""
    if await store.unfinished_of(caller.name) >= config.batches.max_unfinished:
        raise StorageFull(f"{config.batches.max_unfinished} of your batches are not finished yet")
    lines = [
        {
            "custom_id": f"prompt-{i + 1}",
            "method": "POST",
            "url": ENDPOINT,
            "body": {"model": model, "messages": [{"role": "user", "content": p}], "temperature": temperature},
        }
        for i, p in enumerate(prompts)
    ]
    content = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
    uploaded = await store.put_file(caller.name, "batch", "page-prompts.jsonl", content)
    state = shapes.new_batch(
        new_id("batch"),
        uploaded.id,
        ENDPOINT,
        "24h",
        {"source": "page"},
        store.clock(),
        config.batches.completion_window_s,
    )
    try:
        await store.put_batch(caller.name, caller.cache_namespace, state, config.batches.max_unfinished)
    except StorageFull:
        await store.delete_file(uploaded.id, caller.name)  # another job of this caller's came first
        raise
    runner.add(caller.name, caller.cache_namespace, state)
    return state


async def rows(store: BatchStore, caller: Caller) -> list[list]:
    """The caller's latest batches, API and page alike: id, status, a progress bar, counts."""
    out = []
    for state in await store.batches(caller.name, None, JOBS_SHOWN):
        if state["status"] in ("in_progress", "cancelling", "finalizing"):
            state = shapes.with_counts(state, await store.counts(state["id"]))
        counts = state["request_counts"]
        done = counts["completed"] + counts["failed"]
        out.append(
            [
                state["id"],
                state["status"],
                bar(done, counts["total"]),
                counts["completed"],
                counts["failed"],
                counts["total"],
                (state.get("metadata") or {}).get("source", "api"),
            ]
        )
    return out


def bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else 0
    return f"{'█' * filled}{'░' * (width - filled)} {done}/{total}"


async def cancel(store: BatchStore, runner: BatchRunner, caller: Caller, batch_id: str | None) -> str:
    state = await store.cancel((batch_id or "").strip(), caller.name)
    if state is None:
        return "no such batch"
    if state["status"] == "cancelling":
        runner.cancel(state["id"], state)
    return state["status"]


async def download(store: BatchStore, caller: Caller, batch_id: str | None, which: str, root: Path) -> Path | None:
    """The batch's output or error file, written 0600 to a 0700 folder of its own inside `root` (the
    page's Gradio cache) for the page to serve (none is made for a job that has no such file, as
    while its id is being typed). Written once: the folder's name is a per-process key's digest of
    the caller and the file (no other request can predict it), so the next call finds it; a copy per
    call left a folder per poll on disk. A file deleted since takes its copy with it: Gradio serves
    whatever is in its cache to whoever holds the link."""
    state = await store.batch((batch_id or "").strip(), caller.name)
    file_id = state.get(f"{which}_file_id") if state is not None else None
    if state is None or not file_id:
        return None
    digest = hmac.new(_FOLDER_KEY, f"{caller.name}\0{file_id}".encode(), hashlib.sha256).hexdigest()[:32]
    path = Path(root) / f"gptoss-job-{digest}" / f"{state['id']}-{which}.jsonl"
    if await store.file(file_id, caller.name) is None:
        shutil.rmtree(path.parent, ignore_errors=True)
        return None
    if path.exists():
        return path
    content = await store.content(file_id, caller.name)
    if content is None:
        return None
    private_dir(path.parent)
    part = write_private(path.with_name(f".{path.name}.{secrets.token_hex(4)}"), content)
    os.replace(part, path)  # whole or not there: a browser may be fetching the one before
    return path

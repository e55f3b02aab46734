"""Batch jobs from the page: prompts in, answers out in input order, as JSONL or CSV. No Gradio."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from core.private_files import private_dir, write_private
from pipeline.caller import Caller
from pipeline.chat import ChatPipeline
from pipeline.events import Finished, Refused
from ui.chat.call import run_chat
from ui.chat.chat_settings import ChatSettings

MAX_PROMPTS = 1000


class BatchInputError(ValueError):
    pass


@dataclass(slots=True)
class BatchResult:
    index: int
    prompt: str
    answer: str
    status: str
    tokens: int
    queue_wait_s: float
    reasoning: str = ""  # the model's thinking, where it writes some (gpt-oss)


def parse_prompts(text: str | None, path: Path | None = None) -> list[str]:
    """One prompt per line of pasted text or a .txt file; .jsonl lines hold {"prompt": ...}."""
    prompts = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if path is not None:
        if path.suffix.lower() not in (".txt", ".jsonl"):
            raise BatchInputError(f"{path.name}: upload a .txt or .jsonl file")
        content = path.read_text(encoding="utf-8", errors="replace")
        prompts += (
            _jsonl_prompts(content)
            if path.suffix.lower() == ".jsonl"
            else [line.strip() for line in content.splitlines() if line.strip()]
        )
    if not prompts:
        raise BatchInputError("no prompts: paste one per line or upload a file")
    if len(prompts) > MAX_PROMPTS:
        raise BatchInputError(f"{len(prompts)} prompts; at most {MAX_PROMPTS} per batch")
    return prompts


def _jsonl_prompts(content: str) -> list[str]:
    out = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            raise BatchInputError(f"line {number} is not valid JSON") from None
        prompt = item.get("prompt") if isinstance(item, dict) else item if isinstance(item, str) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise BatchInputError(f'line {number}: expected {{"prompt": "..."}} or a JSON string')
        out.append(prompt.strip())
    return out


async def run_batch(
    pipeline: ChatPipeline,
    caller: Caller,
    prompts: list[str],
    settings: ChatSettings,
    concurrency: int,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[BatchResult]:
    gate = asyncio.Semaphore(max(1, concurrency))
    results: list[BatchResult | None] = [None] * len(prompts)
    done = 0

    async def one(index: int, prompt: str) -> None:
        nonlocal done
        async with gate:
            results[index] = await _answer(pipeline, caller, index, prompt, settings)
        done += 1
        progress(done, len(prompts))

    await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return [r for r in results if r is not None]


async def _answer(
    pipeline: ChatPipeline, caller: Caller, index: int, prompt: str, settings: ChatSettings
) -> BatchResult:
    async for event in run_chat(pipeline, caller, [{"role": "user", "content": prompt}], settings):
        if isinstance(event, Finished):
            return BatchResult(
                index,
                prompt,
                event.text,
                "cached" if event.cached else "ok",
                event.usage.completion_tokens,
                round(event.queue_wait_s, 2),
                event.reasoning,
            )
        if isinstance(event, Refused):
            return BatchResult(index, prompt, event.partial_text, f"error: {event.refusal.message}", 0, 0.0)
    return BatchResult(index, prompt, "", "error: no answer", 0, 0.0)


def write_results(results: list[BatchResult], fmt: str, directory: Path) -> Path:
    """The results as one file for the page to hand out: 0600, in `directory` (made 0700 if missing)."""
    private_dir(directory)
    rows = [asdict(r) for r in results]
    if fmt == "jsonl":
        return write_private(
            directory / "batch-results.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        )
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(BatchResult.__dataclass_fields__))
    writer.writeheader()
    writer.writerows(rows)
    return write_private(directory / f"batch-results.{fmt}", text.getvalue())

"""Batch jobs from the page: prompts in, answers out in input order, as JSONL or CSV. No Gradio."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from core.private_files import private_dir, write_private
from pipeline.caller import Caller
from pipeline.chat import ChatPipeline
from pipeline.events import Finished, Refused
from protocols.unicode_text import lone_surrogate_at
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
    """One prompt per line of pasted text or a .txt file; .jsonl lines hold {"prompt": ...}. Reads
    no further than one prompt past `MAX_PROMPTS`: a 50 MB upload of 13 million lines was parsed
    whole before it was counted, on the event loop, and the server answered nothing for 16 s.
    It reads a file, so the page calls it in a thread."""
    prompts: list[str] = []
    _take(prompts, _plain([text or ""]))
    if path is not None:
        suffix = path.suffix.lower()
        if suffix not in (".txt", ".jsonl"):
            raise BatchInputError(f"{path.name}: upload a .txt or .jsonl file")
        with path.open(encoding="utf-8", errors="replace") as lines:
            if suffix == ".jsonl":
                _take(prompts, _jsonl_prompts(lines))
            else:
                _take(prompts, _plain(lines))
    if not prompts:
        raise BatchInputError("no prompts: paste one per line or upload a file")
    return prompts


def _take(prompts: list[str], more: Iterable[str]) -> None:
    for prompt in more:
        if len(prompts) == MAX_PROMPTS:
            raise BatchInputError(f"more than {MAX_PROMPTS} prompts; at most {MAX_PROMPTS} per batch")
        if lone_surrogate_at(prompt) is not None:
            raise BatchInputError(f"prompt {len(prompts) + 1}: text must be valid Unicode, without lone surrogates")
        prompts.append(prompt)


_LINE = re.compile(r"[^\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+")  # what str.splitlines keeps, less empty lines


def _plain(texts: Iterable[str]) -> Iterator[str]:
    """The non-blank lines of `texts`, split where str.splitlines splits (form feeds, U+2028 and the
    like too) but one at a time: a 50 MB line of form feeds split whole took 1.2 GB."""
    return (line for text in texts for match in _LINE.finditer(text) if (line := match.group().strip()))


def _jsonl_prompts(lines: Iterable[str]) -> Iterator[str]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise BatchInputError(f"line {number} is not valid JSON") from None
        prompt = item.get("prompt") if isinstance(item, dict) else item if isinstance(item, str) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise BatchInputError(f'line {number}: expected {{"prompt": "..."}} or a JSON string')
        yield prompt.strip()


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

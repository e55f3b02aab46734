"""Runs batches on the capacity interactive traffic leaves: a line starts only while nobody waits in
the queue and the running limit has a slot free, so batch work never delays an interactive request
that arrives after it by more than the lines already running (they are not preempted: see
docs/scheduling.md). Batches take turns by owner, so one caller's 50,000 lines do not hold back
another's ten. A line refused for capacity or a rate limit goes back and is tried again after its
Retry-After; every other answer, error or not, is the line's result, committed as it comes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from batches import shapes
from batches.store import DONE, FAILED, BatchStore, Line
from pipeline.caller import Caller

log = logging.getLogger("gpt_oss_webui.batches")

_TICK_S = 0.2
_VALIDATE_CHUNK = 500  # lines checked between two yields to the event loop


@dataclass(slots=True, frozen=True)
class Answer:
    status: int
    body: dict
    request_id: str
    retry_after_s: float | None = None  # set: not an answer, try the line again after this


Run = Callable[[Caller, str, dict], Awaitable[Answer]]  # (owner, endpoint, body) -> its answer
FreeSlots = Callable[[], int]
Owner = Callable[[str, str], Caller | None]  # (name, cache namespace) -> the caller, None if its key is gone


@dataclass(slots=True)
class _Batch:
    owner: str
    namespace: str
    state: dict
    running: dict[int, asyncio.Task] = field(default_factory=dict)
    retry_at: float = 0.0


class BatchRunner:
    def __init__(self, store: BatchStore, run: Run, check: shapes.CheckBody, free_slots: FreeSlots, owner: Owner,
                 max_lines: int, max_parallel: int = 0, clock: Callable[[], float] = time.time) -> None:
        self.store, self.run, self.check, self.free_slots, self.owner = store, run, check, free_slots, owner
        self.max_lines, self.max_parallel, self.clock = max_lines, max_parallel, clock
        self._batches: dict[str, _Batch] = {}
        self._wake = asyncio.Event()
        self._turn = 0

    @property
    def lines_running(self) -> int:
        return sum(len(b.running) for b in self._batches.values())

    @property
    def unfinished(self) -> int:
        return len(self._batches)

    def running_of(self, owner: str | None) -> dict[str, int]:
        """Lines in the engine now per batch, of one owner's batches (None: everyone's)."""
        return {batch_id: len(b.running) for batch_id, b in self._batches.items() if owner in (None, b.owner)}

    async def load(self) -> None:
        """Every batch the last process left unfinished, to resume where it stopped."""
        for owner, namespace, state in await self.store.unfinished():
            self._batches[state["id"]] = _Batch(owner, namespace, state)
        if self._batches:
            log.info("resuming %d unfinished batches", len(self._batches))

    def add(self, owner: str, namespace: str, state: dict) -> None:
        self._batches[state["id"]] = _Batch(owner, namespace, state)
        self._wake.set()

    def cancel(self, batch_id: str, state: dict) -> None:
        if (batch := self._batches.get(batch_id)) is not None:
            batch.state = state
        self._wake.set()

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _TICK_S)
            self._wake.clear()
            try:
                await self.step()
            except Exception:
                log.exception("a batch step failed; trying again")

    async def stop(self) -> None:
        tasks = [t for b in self._batches.values() for t in b.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def step(self) -> None:
        for batch_id, batch in list(self._batches.items()):
            status = batch.state["status"]
            if status == "validating":
                await self._validate(batch)
            elif status in ("cancelling", "in_progress") and not batch.running:
                await self._maybe_finish(batch)
            if batch.state["status"] not in ("validating", "in_progress", "cancelling", "finalizing"):
                self._batches.pop(batch_id, None)
        await self._start_lines()

    async def _validate(self, batch: _Batch) -> None:
        state = batch.state
        content = await self.store.content(state["input_file_id"], batch.owner)
        lines: list[Line] = []
        errors: list[dict] = []
        if content is None:
            errors = [shapes.error("file_not_found", f"input file {state['input_file_id']} is gone", param="input_file_id")]
        else:
            text = content.decode("utf-8", errors="replace")
            lines, errors = await _checked(state["id"], text, state["endpoint"], self.check, self.max_lines)
        now = int(self.clock())
        if errors:
            shown = errors[:shapes.MAX_ERRORS]
            state.update(status="failed", failed_at=now, errors={"object": "list", "data": shown})
            log.info("batch %s failed validation: %d errors", state["id"], len(errors))
        else:
            state.update(status="in_progress", in_progress_at=now,
                         request_counts={"total": len(lines), "completed": 0, "failed": 0})
        await self.store.update_batch(state, lines)

    async def _maybe_finish(self, batch: _Batch) -> None:
        state, now = batch.state, self.clock()
        if state["status"] == "cancelling":
            await self.store.fail_pending(state["id"], lambda cid: shapes.unanswered_line(
                cid, "batch_cancelled", "the batch was cancelled before this request ran"))
            await self._finalize(batch, "cancelled", "cancelled_at")
        elif now >= state["expires_at"]:
            await self.store.fail_pending(state["id"], lambda cid: shapes.unanswered_line(
                cid, "batch_expired", "the batch's completion window ended before this request ran"))
            await self._finalize(batch, "expired", "expired_at")
        elif not (await self.store.counts(state["id"])).get("pending"):
            await self._finalize(batch, "completed", "completed_at")

    async def _finalize(self, batch: _Batch, status: str, stamp: str) -> None:
        """The output and error files and the batch's end, in one transaction."""
        state = batch.state
        state.update(status="finalizing", finalizing_at=int(self.clock()))
        outputs: list[tuple[str, bytes]] = []
        for state_of_line, key in ((DONE, "output_file_id"), (FAILED, "error_file_id")):
            rows = await self.store.results(state["id"], state_of_line)
            if rows:
                file_id = f"file-{state['id'].removeprefix('batch_')}-{key.split('_')[0]}"
                outputs.append((file_id, shapes.jsonl(rows)))
                state[key] = file_id
        state = shapes.with_counts(state, await self.store.counts(state["id"]))
        state.update(status=status, **{stamp: int(self.clock())})
        batch.state = state
        await self.store.update_batch(state, outputs=outputs, caller=batch.owner)
        log.info("batch %s %s: %s", state["id"], status, state["request_counts"])

    async def _start_lines(self) -> None:
        free = self.free_slots()
        if self.max_parallel:
            free = min(free, self.max_parallel - self.lines_running)
        now = self.clock()
        ready = [b for b in self._batches.values() if b.state["status"] == "in_progress" and b.retry_at <= now]
        if free <= 0 or not ready:
            return
        owners = sorted({b.owner for b in ready})
        self._turn = (self._turn + 1) % len(owners)
        for owner in owners[self._turn:] + owners[:self._turn]:  # one owner after another, a line each
            for batch in (b for b in ready if b.owner == owner):
                lines = await self.store.pending(batch.state["id"], set(batch.running), 1)
                if lines:
                    self._start(batch, lines[0])
                    free -= 1
                    break
            if free <= 0:
                return
        if free > 0 and any(b.running for b in ready):
            self._wake.set()  # more room: another round at once

    def _start(self, batch: _Batch, line: Line) -> None:
        batch.running[line.line] = asyncio.create_task(self._answer(batch, line), name=f"batch-line-{line.line}")

    async def _answer(self, batch: _Batch, line: Line) -> None:
        try:
            caller = self.owner(batch.owner, batch.namespace)
            if caller is None:
                answer = Answer(401, {"error": {"message": "the key that created this batch is no longer configured",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}}, "")
            else:
                answer = await self.run(caller, batch.state["endpoint"], line.body)
            if answer.retry_after_s is not None:
                batch.retry_at = self.clock() + max(1.0, answer.retry_after_s)
                return
            state = DONE if 200 <= answer.status < 300 else FAILED
            await self.store.finish_line(line.batch_id, line.line, state,
                                         shapes.output_line(line.custom_id, answer.request_id, answer.status, answer.body))
        finally:
            batch.running.pop(line.line, None)
            self._wake.set()


async def _checked(batch_id: str, text: str, endpoint: str, check: shapes.CheckBody, max_lines: int
                   ) -> tuple[list[Line], list[dict]]:
    """Every line checked, in chunks with a yield between them: 50,000 lines must not hold the event loop."""
    rows, whole = shapes.rows_of(text, max_lines)
    if whole is not None:
        return [], [whole]
    lines: list[Line] = []
    errors: list[dict] = []
    seen: set[str] = set()
    for start in range(0, len(rows), _VALIDATE_CHUNK):
        for number, row in rows[start:start + _VALIDATE_CHUNK]:
            try:
                lines.append(shapes.checked_line(batch_id, number, row, endpoint, check, seen))
            except ValueError as exc:
                errors.append(shapes.error("invalid_request", str(exc), number))
        await asyncio.sleep(0)
    return lines, errors

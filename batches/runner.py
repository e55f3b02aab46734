"""Runs batches on the capacity interactive traffic leaves: a line starts only within the room the
scheduler gives background work (scheduler/background.py), counting every line of ours in flight,
and a line preempted for interactive work goes back to be tried again, its partial answer dropped. Batches take turns by owner, so one
caller's 50,000 lines do not hold back another's ten. A line refused for a rate limit goes back and
is tried again after its Retry-After; every other answer, error or not, is the line's result,
committed as it comes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from batches import shapes
from batches.store import DONE, FAILED, BatchStore, Line
from pipeline.caller import Caller

log = logging.getLogger("gpt_oss_webui.batches")

_TICK_S = 0.2
_PURGE_EVERY_S = 600.0
_MAX_RETRIES = 30  # a line refused this often for capacity or a rate limit fails with its last refusal
_MAX_STEP_FAILURES = 5  # a batch whose step keeps failing fails, so it cannot hold up the others


@dataclass(slots=True, frozen=True)
class Answer:
    status: int
    body: dict
    request_id: str
    retry_after_s: float | None = None  # set: not an answer, try the line again after this
    yielded: bool = False  # the line gave way to interactive work: tried again as soon as there is room


Run = Callable[[Caller, str, dict], Awaitable[Answer]]  # (owner, endpoint, body) -> its answer
Room = Callable[[], int]  # background lines the engine may hold now in all, ours in flight included
Owner = Callable[[str, str], Caller | None]  # (name, cache namespace) -> the caller, None if its key is gone


@dataclass(slots=True)
class _Batch:
    owner: str
    namespace: str
    state: dict
    running: dict[int, asyncio.Task] = field(default_factory=dict)
    waiting: dict[int, float] = field(default_factory=dict)  # line -> when it may be tried again
    tries: dict[int, int] = field(default_factory=dict)
    exhausted: bool = False  # no pending line was found the last time one was looked for
    failures: int = 0
    pending: int = 0  # lines not answered yet (running ones too), kept as they end: read at every scrape


class BatchRunner:
    def __init__(
        self,
        store: BatchStore,
        run: Run,
        check: shapes.CheckBody,
        room: Room,
        owner: Owner,
        max_lines: int,
        max_line_bytes: int,
        max_parallel: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.run, self.check, self.room, self.owner = store, run, check, room, owner
        self.max_lines, self.max_line_bytes, self.max_parallel, self.clock = (
            max_lines,
            max_line_bytes,
            max_parallel,
            clock,
        )
        self._batches: dict[str, _Batch] = {}
        self._wake = asyncio.Event()
        self._turn = 0
        self._held_until = 0.0  # a line was refused for want of room: none starts before then
        self._purged = clock()

    @property
    def lines_running(self) -> int:
        return sum(len(b.running) for b in self._batches.values())

    @property
    def unfinished(self) -> int:
        return len(self._batches)

    def lines_of(self) -> dict[str, tuple[str, int, int]]:
        """Every unfinished batch's owner, lines in the engine and lines waiting to run."""
        return {
            batch_id: (b.owner, len(b.running), max(0, b.pending - len(b.running)))
            for batch_id, b in self._batches.items()
        }

    def running_of(self, owner: str | None) -> dict[str, int]:
        """Lines in the engine now per batch, of one owner's batches (None: everyone's)."""
        return {batch_id: len(b.running) for batch_id, b in self._batches.items() if owner in (None, b.owner)}

    async def load(self) -> None:
        """Every batch the last process left unfinished, to resume where it stopped."""
        for owner, namespace, state in await self.store.unfinished():
            pending = (await self.store.counts(state["id"])).get("pending", 0)
            self._batches[state["id"]] = _Batch(owner, namespace, state, pending=pending)
        if self._batches:
            log.info("resuming %d unfinished batches", len(self._batches))

    def add(self, owner: str, namespace: str, state: dict) -> None:
        self._batches[state["id"]] = _Batch(owner, namespace, state)
        self._wake.set()

    def cancel(self, batch_id: str, state: dict) -> None:
        """The store has the batch `cancelling` now; its running lines end, no other starts."""
        if (batch := self._batches.get(batch_id)) is not None:
            batch.state = state
        self._wake.set()

    async def run_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _TICK_S)
            self._wake.clear()
            await self.step()

    async def stop(self) -> None:
        tasks = [t for b in self._batches.values() for t in b.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def step(self) -> None:
        for batch_id, batch in list(self._batches.items()):
            try:
                await self._advance(batch)
                batch.failures = 0
            except Exception:
                batch.failures += 1
                log.exception("batch %s: a step failed (%d in a row)", batch_id, batch.failures)
                if batch.failures >= _MAX_STEP_FAILURES:
                    await self._give_up(batch)
            if batch.state["status"] not in ("validating", "in_progress", "cancelling", "finalizing"):
                self._batches.pop(batch_id, None)
        try:
            await self._start_lines()
            if self.clock() - self._purged > _PURGE_EVERY_S:
                self._purged = self.clock()
                await self.store.purge()
        except Exception:
            log.exception("starting batch lines failed; trying again")

    async def _advance(self, batch: _Batch) -> None:
        status = batch.state["status"]
        if status == "validating":
            await self._validate(batch)
        elif status in ("cancelling", "in_progress", "finalizing") and not batch.running:
            await self._maybe_finish(batch)

    async def _validate(self, batch: _Batch) -> None:
        state = batch.state
        content = await self.store.content(state["input_file_id"], batch.owner)
        lines: list[Line] = []
        errors: list[dict] = []
        if content is None:
            errors = [
                shapes.error("file_not_found", f"input file {state['input_file_id']} is gone", param="input_file_id")
            ]
        else:
            lines, errors = await asyncio.to_thread(
                shapes.checked_file,
                state["id"],
                content,
                state["endpoint"],
                self.check,
                self.max_lines,
                self.max_line_bytes,
            )
        now = int(self.clock())
        if errors:
            new = {**state, "status": "failed", "failed_at": now, "errors": {"object": "list", "data": errors}}
            log.info("batch %s failed validation: %d errors", state["id"], len(errors))
        else:
            new = {
                **state,
                "status": "in_progress",
                "in_progress_at": now,
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            }
        await self._change(batch, new, "validating", lines=lines)
        batch.pending = len(lines) if batch.state["status"] == "in_progress" else 0

    async def _change(self, batch: _Batch, new: dict, was: str, **changes: Any) -> None:
        """The batch's next state, kept only once stored; where a cancel came first, the store's."""
        if await self.store.update_batch(new, was, **changes):
            batch.state = new
        elif (stored := await self.store.batch(new["id"], None)) is not None:
            batch.state = stored

    async def _maybe_finish(self, batch: _Batch) -> None:
        state, now = batch.state, self.clock()
        if state["status"] == "cancelling":
            await self.store.fail_pending(
                state["id"],
                lambda cid: shapes.unanswered_line(
                    cid, "batch_cancelled", "the batch was cancelled before this request ran"
                ),
            )
            await self._finalize(batch, "cancelled", "cancelled_at")
        elif state["status"] == "finalizing" or (
            batch.exhausted and not batch.waiting and not (await self.store.counts(state["id"])).get("pending")
        ):
            await self._finalize(batch, "completed", "completed_at")
        elif now >= state["expires_at"]:
            await self.store.fail_pending(
                state["id"],
                lambda cid: shapes.unanswered_line(
                    cid, "batch_expired", "the batch's completion window ended before this request ran"
                ),
            )
            await self._finalize(batch, "expired", "expired_at")

    async def _finalize(self, batch: _Batch, status: str, stamp: str) -> None:
        """The output and error files and the batch's end, in one transaction."""
        state = {**batch.state, "finalizing_at": batch.state.get("finalizing_at") or int(self.clock())}
        outputs: list[tuple[str, bytes]] = []
        for state_of_line, key in ((DONE, "output_file_id"), (FAILED, "error_file_id")):
            rows = await self.store.results(state["id"], state_of_line)
            if rows:
                file_id = f"file-{state['id'].removeprefix('batch_')}-{key.split('_')[0]}"
                outputs.append((file_id, await asyncio.to_thread(shapes.jsonl, rows)))  # up to 50,000 answers
                state[key] = file_id
        state = shapes.with_counts(state, await self.store.counts(state["id"]))
        state.update(status=status, **{stamp: int(self.clock())})
        await self._change(batch, state, batch.state["status"], outputs=outputs, caller=batch.owner)
        log.info("batch %s %s: %s", state["id"], batch.state["status"], batch.state["request_counts"])

    async def _give_up(self, batch: _Batch) -> None:
        new = {
            **batch.state,
            "status": "failed",
            "failed_at": int(self.clock()),
            "errors": {"object": "list", "data": [shapes.error("server_error", "the server could not run this batch")]},
        }
        with contextlib.suppress(Exception):
            await self._change(batch, new, batch.state["status"])
        batch.state = new

    async def _start_lines(self) -> None:
        if self.clock() < self._held_until:
            return
        free = self.room() - self.lines_running  # a line started but not yet admitted counts too
        if self.max_parallel:
            free = min(free, self.max_parallel - self.lines_running)
        now = self.clock()
        ready = [
            b for b in self._batches.values() if b.state["status"] == "in_progress" and now < b.state["expires_at"]
        ]
        if free <= 0 or not ready:
            return
        owners = sorted({b.owner for b in ready})
        self._turn = (self._turn + 1) % len(owners)
        turns = owners[self._turn :] + owners[: self._turn]
        started = True
        while started and free > 0:  # one owner after another, a line each, until the room is used
            started = False
            for owner in turns:
                if free > 0 and await self._start_next(owner, ready, now):
                    free -= 1
                    started = True

    async def _start_next(self, owner: str, ready: list[_Batch], now: float) -> bool:
        for batch in (b for b in ready if b.owner == owner):
            if await self._start_one(batch, now):
                return True
        return False

    async def _start_one(self, batch: _Batch, now: float) -> bool:
        skip = set(batch.running) | {line for line, at in batch.waiting.items() if at > now}
        lines = await self.store.pending(batch.state["id"], skip, 1)
        batch.exhausted = not lines and not batch.running
        if not lines:
            return False
        line = lines[0]
        batch.waiting.pop(line.line, None)
        batch.running[line.line] = asyncio.create_task(self._answer(batch, line), name=f"batch-line-{line.line}")
        return True

    async def _answer(self, batch: _Batch, line: Line) -> None:
        try:
            answer = await self._answer_of(batch, line)
            if answer.yielded:  # no line starts for a tick: the room was not there (a refusal repeated would spin)
                batch.waiting[line.line] = self._held_until = self.clock() + _TICK_S
                return
            tries = batch.tries[line.line] = batch.tries.get(line.line, 0) + 1
            if answer.retry_after_s is not None and tries < _MAX_RETRIES:
                batch.waiting[line.line] = self.clock() + max(1.0, answer.retry_after_s)
                return
            state = DONE if 200 <= answer.status < 300 else FAILED
            await self.store.finish_line(
                line.batch_id,
                line.line,
                state,
                shapes.output_line(line.custom_id, answer.request_id, answer.status, answer.body),
            )
            batch.tries.pop(line.line, None)
            batch.pending -= 1
        finally:
            batch.running.pop(line.line, None)
            self._wake.set()

    async def _answer_of(self, batch: _Batch, line: Line) -> Answer:
        caller = self.owner(batch.owner, batch.namespace)
        if caller is None:
            return Answer(401, _error("the key that created this batch is no longer configured", "invalid_api_key"), "")
        try:
            return await self.run(caller, batch.state["endpoint"], json.loads(line.body))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s line %d failed", batch.state["id"], line.line)
            return Answer(500, _error("the server failed this request", "server_error"), "")


def _error(message: str, code: str) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}

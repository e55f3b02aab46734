"""Lines of one batch that share a prompt prefix run one after another (for the engine's prefix
cache), while the output file keeps the input's order."""

from __future__ import annotations

import asyncio
import json

from batches import shapes
from batches.runner import Answer, BatchRunner
from batches.store import BatchStore
from pipeline.caller import Caller

SYSTEMS = ["You label sentiment. " * 20, "You translate to French. " * 20]


def body(i: int) -> dict:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEMS[i % 2]}, {"role": "user", "content": f"text {i}"}],
    }


async def run_batch(tmp_path, rows: list[dict]) -> tuple[list[str], list[str]]:
    store = BatchStore(str(tmp_path / "b.sqlite3"), 100, 2**30, 100, 86_400)
    await store.open()
    ran: list[str] = []

    async def run(caller: Caller, endpoint: str, data: dict) -> Answer:
        ran.append(data["messages"][1]["content"])
        return Answer(200, {"echo": data["messages"][1]["content"]}, "r")

    content = "".join(
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": row}) + "\n"
        for i, row in enumerate(rows)
    ).encode()
    file = await store.put_file("alice", "batch", "in.jsonl", content)
    state = shapes.new_batch("batch_1", file.id, "/v1/chat/completions", "24h", None, 0, 86_400)
    await store.put_batch("alice", "", state)
    runner = BatchRunner(
        store,
        run,
        lambda endpoint, data: None,
        lambda: 1,
        lambda name, ns: Caller(name),
        max_lines=100,
        max_line_bytes=10**6,
        clock=lambda: 1.0,
    )
    runner.add("alice", "", state)
    while runner.unfinished:
        await runner.step()
        await asyncio.sleep(0)
    done = await store.batch("batch_1", "alice")
    output = await store.content(done["output_file_id"], "alice")
    await store.close()
    return ran, [json.loads(row)["custom_id"] for row in output.decode().splitlines()]


def test_lines_that_share_a_prefix_run_together_and_the_output_keeps_the_input_order(tmp_path) -> None:
    ran, output = asyncio.run(run_batch(tmp_path, [body(i) for i in range(8)]))
    assert ran == [f"text {i}" for i in (0, 2, 4, 6, 1, 3, 5, 7)]  # one system prompt's lines, then the other's
    assert output == [f"c{i}" for i in range(8)]

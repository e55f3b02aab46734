"""OpenAI's Files and Batch APIs through the `openai` SDK against a live server on the simulator:
upload, create, poll to completed, read output and errors; validation naming each bad line;
cancel mid-run; each caller's files and batches its own; a `kill -9` mid-batch resumed without a
line lost or answered twice; interactive requests first while a batch runs."""

from __future__ import annotations

import io
import json
import re
import signal
import sqlite3
import sys
import time

import httpx
import openai
import pytest

from scheduler.request import PriorityClass
from tests.app_process import free_port, start_app
from tests.conftest import live_server

KEYS = "server.keys=[{name: alice, key: sk-alice-0001}, {name: bob, key: sk-bob-00001}]"


def jsonl(rows: list[dict]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r) + "\n" for r in rows).encode())


def line(i: int, **body) -> dict:
    return {
        "custom_id": f"req-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "sim", "messages": [{"role": "user", "content": f"Question {i}"}], "max_tokens": 8, **body},
    }


def wait_done(client: openai.OpenAI, batch_id: str, timeout: float = 30) -> openai.types.Batch:
    deadline = time.monotonic() + timeout
    while (batch := client.batches.retrieve(batch_id)).status not in ("completed", "failed", "cancelled", "expired"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)
    return batch


def test_a_batch_runs_to_completed_with_its_output_and_errors(tmp_path) -> None:
    with live_server(KEYS, f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        client = live.client(api_key="sk-alice-0001")
        rows = [line(i) for i in range(20)] + [line(20, max_tokens=10**9)]  # the last cannot fit the context
        uploaded = client.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
        assert uploaded.bytes > 0 and uploaded.purpose == "batch" and uploaded.filename == "in.jsonl"
        batch = client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"job": "eval"},
        )
        assert batch.status == "validating" and batch.metadata == {"job": "eval"}
        done = wait_done(client, batch.id)
        assert done.status == "completed" and done.request_counts.total == 21
        assert (done.request_counts.completed, done.request_counts.failed) == (20, 1)
        assert done.in_progress_at and done.finalizing_at and done.completed_at
        outputs = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(o["custom_id"] for o in outputs) == sorted(f"req-{i}" for i in range(20))
        body = outputs[0]["response"]["body"]
        assert outputs[0]["response"]["status_code"] == 200 and body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["content"] and body["usage"]["completion_tokens"] == 8
        errors = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
        assert [e["custom_id"] for e in errors] == ["req-20"] and errors[0]["response"]["status_code"] == 400
        used = live.services.pipeline.usage.report(0, 2**40)["alice"]
        assert used.requests >= 21 and used.completion_tokens >= 160  # the owner's usage counts its lines
        listed = client.batches.list(limit=5)
        assert [b.id for b in listed.data] == [batch.id]
        assert {f.id for f in client.files.list().data} >= {uploaded.id, done.output_file_id}


@pytest.mark.parametrize(
    "rows, where",
    [
        ([line(1), {**line(2), "custom_id": "req-1"}], (2, "custom_id")),
        ([line(1), "not json"], (2, "JSON")),
        ([line(1), {**line(2), "url": "/v1/embeddings"}], (2, "url")),
        ([line(1), {**line(2), "method": "GET"}], (2, "method")),
        ([line(1), line(2, temperature="hot")], (2, "body.temperature")),
        ([line(1), line(2, stream=True)], (2, "stream")),
        ([line(1), line(2, frobnicate=True)], (2, "body.frobnicate")),
        ([line(1), line(2, request_id="mine-2")], (2, "body.request_id")),
        ([line(1), {**line(2), "custom_id": "\udfff"}], (2, "custom_id: text must be valid Unicode")),
        ([line(1), line(2, user="\ud800")], (2, "body.user: text must be valid Unicode")),
    ],
)
def test_validation_names_each_bad_line_and_runs_none(tmp_path, rows, where) -> None:
    with live_server(f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        client = live.client()
        text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
        done = wait_done(
            client,
            client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id,
        )
        assert done.status == "failed" and done.failed_at and done.output_file_id is None
        [err] = done.errors.data
        assert err.line == where[0] and where[1] in err.message
        assert live.services.pipeline.usage.report(0, 2**40) == {}  # nothing ran


def response_line(i: int, **body) -> dict:
    return {
        "custom_id": f"resp-{i}",
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": "sim", "input": f"Question {i}", "max_output_tokens": 8, **body},
    }


def test_a_responses_batch_stores_and_chains_each_answer_for_its_owner_only(tmp_path) -> None:
    with live_server(
        KEYS, f"batches.path={tmp_path / 'b.sqlite3'}", f"responses.path={tmp_path / 'r.sqlite3'}"
    ) as live:
        alice, bob = live.client(api_key="sk-alice-0001"), live.client(api_key="sk-bob-00001")
        first, bobs = alice.responses.create(model="sim", input="Hello"), bob.responses.create(model="sim", input="Hi")
        rows = [
            response_line(0),
            response_line(1, instructions="Be brief."),
            response_line(2, store=False),
            response_line(3, previous_response_id=first.id),
            response_line(4, previous_response_id=bobs.id),
        ]
        uploaded = alice.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
        done = wait_done(
            alice, alice.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h").id
        )
        assert done.status == "completed" and (done.request_counts.completed, done.request_counts.failed) == (4, 1)
        out = {
            o["custom_id"]: o["response"]
            for o in map(json.loads, alice.files.content(done.output_file_id).text.splitlines())
        }
        assert sorted(out) == ["resp-0", "resp-1", "resp-2", "resp-3"]
        for answer in out.values():
            body = answer["body"]
            assert answer["status_code"] == 200 and answer["request_id"] == body["id"]
            assert (
                body["object"] == "response" and body["status"] == "incomplete" and body["usage"]["output_tokens"] == 8
            )
            assert any(item["type"] == "message" for item in body["output"])
        assert out["resp-1"]["body"]["instructions"] == "Be brief."
        chained = alice.responses.retrieve(out["resp-3"]["body"]["id"])  # stored for its owner, on the chain
        assert chained.previous_response_id == first.id
        with pytest.raises(openai.NotFoundError):  # not stored with store: false
            alice.responses.retrieve(out["resp-2"]["body"]["id"])
        with pytest.raises(openai.NotFoundError):  # another caller's answer is not bob's to read
            bob.responses.retrieve(out["resp-0"]["body"]["id"])
        [error] = [json.loads(x) for x in alice.files.content(done.error_file_id).text.splitlines()]
        assert error["custom_id"] == "resp-4" and error["response"]["status_code"] == 404  # bob's chain is not alice's


@pytest.mark.parametrize(
    "row, where",
    [
        (response_line(2, background=True), "body.background"),
        (response_line(2, frobnicate=1), "body.frobnicate"),
        (response_line(2, input=[]), "body.input"),
        (response_line(2, tool_choice="required"), "body.tool_choice"),
        (response_line(2, tools=[{"type": "web_search"}]), "body.tools"),
        (line(2), "url"),
    ],
)
def test_a_responses_line_is_checked_as_post_v1_responses_checks_it(tmp_path, row, where) -> None:
    with live_server(f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        client = live.client()
        uploaded = client.files.create(file=("in.jsonl", jsonl([response_line(1), row])), purpose="batch")
        done = wait_done(
            client,
            client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h").id,
        )
        [err] = done.errors.data
        assert done.status == "failed" and err.line == 2 and where in err.message


def test_a_text_completions_batch_answers_each_line_as_post_v1_completions(tmp_path) -> None:
    def text_line(i: int, **body) -> dict:
        body = {"model": "sim", "prompt": f"Count to {i}:", "max_tokens": 6, **body}
        return {"custom_id": f"cmpl-{i}", "method": "POST", "url": "/v1/completions", "body": body}

    with live_server(f"batches.path={tmp_path / 'b.sqlite3'}", "engine.sim.natural_stop=false") as live:
        client = live.client()
        bad = client.files.create(file=("in.jsonl", jsonl([text_line(0), text_line(1, suffix="!")])), purpose="batch")
        refused = wait_done(
            client, client.batches.create(input_file_id=bad.id, endpoint="/v1/completions", completion_window="24h").id
        )
        assert refused.status == "failed" and "body.suffix" in refused.errors.data[0].message
        rows = [text_line(0), text_line(1, echo=True)]
        uploaded = client.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
        done = wait_done(
            client,
            client.batches.create(input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h").id,
        )
        out = {
            o["custom_id"]: o["response"]["body"]
            for o in map(json.loads, client.files.content(done.output_file_id).text.splitlines())
        }
    assert done.status == "completed" and sorted(out) == ["cmpl-0", "cmpl-1"]
    assert all(b["object"] == "text_completion" and b["usage"]["completion_tokens"] == 6 for b in out.values())
    assert out["cmpl-1"]["choices"][0]["text"].startswith("Count to 1:")


def test_bad_requests_to_the_api_are_400s_in_openais_shape(tmp_path) -> None:
    with live_server(f"batches.path={tmp_path / 'b.sqlite3'}", "batches.max_file_bytes=2048") as live:
        client = live.client()
        with pytest.raises(openai.BadRequestError, match="purpose"):
            client.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="fine-tune")
        with pytest.raises(openai.APIStatusError) as big:
            client.files.create(file=("in.jsonl", io.BytesIO(b"x" * 5000)), purpose="batch")
        assert big.value.status_code == 413
        uploaded = client.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        for fields, param in [
            ({"completion_window": "1h"}, "completion_window"),
            ({"endpoint": "/v1/embeddings"}, "endpoint"),
            ({"output_expires_after": {"anchor": "created_at", "seconds": 3600}}, "output_expires_after"),
        ]:
            body = {
                "input_file_id": uploaded.id,
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                **fields,
            }
            got = httpx.post(f"{live.url}/v1/batches", json=body)
            assert got.status_code == 400 and got.json()["error"]["param"] == param
        assert (
            httpx.post(f"{live.url}/v1/files", content=b"{}", headers={"content-type": "application/json"}).status_code
            == 400
        )
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve("batch_nope")


def test_each_callers_files_and_batches_are_its_own(tmp_path) -> None:
    with live_server(KEYS, f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        alice, bob = live.client(api_key="sk-alice-0001"), live.client(api_key="sk-bob-00001")
        uploaded = alice.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        batch = alice.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = wait_done(alice, batch.id)
        for read in (
            lambda: bob.files.retrieve(uploaded.id),
            lambda: bob.files.content(done.output_file_id),
            lambda: bob.batches.retrieve(batch.id),
            lambda: bob.batches.cancel(batch.id),
            lambda: bob.files.delete(uploaded.id),
        ):
            with pytest.raises(openai.NotFoundError):
                read()
        with pytest.raises(openai.NotFoundError):  # bob cannot run a batch over alice's file
            bob.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert bob.files.list().data == [] and bob.batches.list().data == []
        assert alice.files.delete(uploaded.id).deleted


def test_cancel_mid_run_keeps_the_answered_lines_and_reports_the_rest(tmp_path) -> None:
    with live_server(
        f"batches.path={tmp_path / 'b.sqlite3'}", "engine.sim.token_latency_ms=20", "batches.max_parallel=2"
    ) as live:
        client = live.client()
        uploaded = client.files.create(file=("in.jsonl", jsonl([line(i) for i in range(40)])), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 20
        while client.batches.retrieve(batch.id).request_counts.completed < 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.batches.cancel(batch.id).status == "cancelling"
        done = wait_done(client, batch.id)
        assert done.status == "cancelled" and done.cancelled_at and done.request_counts.total == 40
        answered = client.files.content(done.output_file_id).text.splitlines()
        unanswered = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
        assert len(answered) >= 4 and len(answered) + len(unanswered) == 40
        assert all(u["error"]["code"] == "batch_cancelled" and u["response"] is None for u in unanswered)
        with pytest.raises(openai.APIStatusError) as again:
            client.batches.cancel(batch.id)
        assert again.value.status_code == 409


def test_interactive_requests_go_first_while_a_batch_runs(tmp_path) -> None:
    with live_server(
        f"batches.path={tmp_path / 'b.sqlite3'}",
        "engine.sim.token_latency_ms=20",
        "scheduler.max_concurrency=4",
        "scheduler.limit.adaptive=false",
        "scheduler.background.quiet_s=0.5",
    ) as live:
        client = live.client()
        uploaded = client.files.create(
            file=("in.jsonl", jsonl([line(i, max_tokens=30) for i in range(40)])), purpose="batch"
        )
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        sched = live.services.scheduler
        status = live.wait_for(lambda s: s["running"] >= 3)  # alone, the batch fills the engine
        assert status["batch_lines_running"] >= 3 and status["batches"][0]["id"] == batch.id
        assert status["batches"][0]["lines_pending"] > 0
        scraped = httpx.get(f"{live.url}/metrics").text
        running = re.search(
            rf'gptoss_batch_lines{{batch="{batch.id}",owner="anonymous",state="running"}} (\d+)', scraped
        )
        waiting = re.search(
            rf'gptoss_batch_lines{{batch="{batch.id}",owner="anonymous",state="waiting"}} (\d+)', scraped
        )
        assert running and int(float(running[1])) >= 3 and waiting and 0 < int(float(waiting[1])) <= 40 - 3
        with httpx.Client(base_url=live.url, timeout=30) as http:
            for cls in ("high", "medium"):
                started = http.post(
                    "/v1/chat/completions",
                    headers={"X-Priority": cls},
                    json={"model": "sim", "messages": [{"role": "user", "content": "now"}], "max_tokens": 3},
                )
                assert started.status_code == 200
                assert int(started.headers["x-queue-wait-ms"]) < 1000  # batch lines gave their slots back
        assert client.batches.retrieve(batch.id).status == "in_progress"
        assert sched.queue.count(PriorityClass.LOW) == 0  # batch lines never wait in the queue
        yielded = re.search(r"^gptoss_batch_lines_yielded_total (\S+)", httpx.get(f"{live.url}/metrics").text, re.M)
        assert yielded and float(yielded[1]) >= 1
        done = wait_done(client, batch.id)
        outputs = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(o["custom_id"] for o in outputs) == sorted(f"req-{i}" for i in range(40))  # once each
        assert all(o["response"]["body"]["usage"]["completion_tokens"] == 30 for o in outputs)  # whole answers
        assert done.error_file_id is None


def test_kill_9_mid_batch_resumes_without_a_line_lost_or_twice(tmp_path) -> None:
    port = free_port()
    args = [
        sys.executable,
        "app.py",
        "--port",
        str(port),
        "--set",
        "engine.backend=sim",
        "--set",
        "server.ui=false",
        "--set",
        "engine.sim.token_latency_ms=5",
        "--set",
        "cache.enabled=false",
        "--set",
        "logging.file=",
        "--set",
        "monitor.gpu=false",
        "--set",
        f"batches.path={tmp_path / 'b.sqlite3'}",
        "--set",
        f"responses.path={tmp_path / 'r.sqlite3'}",
        "--set",
        "engine.sim.natural_stop=false",
    ]
    url = f"http://127.0.0.1:{port}"
    proc = start_app(args, url)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0)
        uploaded = client.files.create(
            file=("in.jsonl", jsonl([line(i, seed=i, temperature=0) for i in range(500)])), purpose="batch"
        )
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 60
        while (seen := client.batches.retrieve(batch.id)).request_counts.completed < 100:
            assert time.monotonic() < deadline and seen.status in ("validating", "in_progress")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        with sqlite3.connect(tmp_path / "b.sqlite3") as db:  # what was committed before the kill
            before = {
                json.loads(r)["custom_id"]: json.loads(r)
                for (r,) in db.execute("SELECT result FROM lines WHERE state = 'done'")
            }
        proc = start_app(args, url)
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0)
        done = wait_done(client, batch.id, timeout=120)
        assert done.status == "completed" and done.request_counts.completed == 500
        outputs = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(o["custom_id"] for o in outputs) == sorted(f"req-{i}" for i in range(500))  # each once
        assert len(before) >= 100 and all(o == before[o["custom_id"]] for o in outputs if o["custom_id"] in before)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_line_no_check_can_handle_fails_its_own_batch_and_no_other(tmp_path) -> None:
    with live_server(KEYS, f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        alice, bob = live.client(api_key="sk-alice-0001"), live.client(api_key="sk-bob-00001")
        nested: dict = {"type": "object"}
        for _ in range(100):
            nested = {"type": "object", "properties": {"x": nested}}
        tool = {"type": "function", "function": {"name": "f", "parameters": nested}}
        text = "[" * 200_000 + "\n" + json.dumps(line(2, tools=[tool])) + "\n"
        bad = alice.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
        poisoned = alice.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions", completion_window="24h")
        good = bob.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        fine = bob.batches.create(input_file_id=good.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert wait_done(bob, fine.id).status == "completed"
        failed = wait_done(alice, poisoned.id)
        assert failed.status == "failed" and [e.line for e in failed.errors.data] == [1, 2]


def test_echoed_values_are_cut_short_and_json_may_hold_line_separators(tmp_path) -> None:
    with live_server(f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        client = live.client()
        rows = [{**line(1), "method": "M" * 200_000}]
        text = "".join(json.dumps(r) + "\n" for r in rows)
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
        done = wait_done(
            client,
            client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id,
        )
        assert done.status == "failed" and len(done.errors.data[0].message) < 400
        separators = (
            json.dumps(line(1, messages=[{"role": "user", "content": "a\u2028b\u2029c\x85d"}]), ensure_ascii=False)
            + "\n"
        )
        uploaded = client.files.create(file=("in.jsonl", io.BytesIO(separators.encode())), purpose="batch")
        done = wait_done(
            client,
            client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id,
        )
        assert done.status == "completed" and done.request_counts.total == 1


def test_one_callers_files_never_push_out_anothers(tmp_path) -> None:
    with live_server(
        KEYS, f"batches.path={tmp_path / 'b.sqlite3'}", "batches.max_files=3", "batches.max_batches=1"
    ) as live:
        alice, bob = live.client(api_key="sk-alice-0001"), live.client(api_key="sk-bob-00001")
        kept = alice.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        done = wait_done(
            alice,
            alice.batches.create(input_file_id=kept.id, endpoint="/v1/chat/completions", completion_window="24h").id,
        )
        for _ in range(3):
            bob.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        with pytest.raises(openai.BadRequestError, match="delete some"):
            bob.files.create(file=("in.jsonl", jsonl([line(1)])), purpose="batch")
        assert alice.files.retrieve(kept.id).id == kept.id and alice.files.content(done.output_file_id).text
        assert alice.batches.retrieve(done.id).status == "completed"


def test_a_line_held_back_by_a_rate_limit_lets_the_others_run(tmp_path) -> None:
    keys = "server.keys=[{name: alice, key: sk-alice-0001, tpm: 200}]"
    with live_server(keys, f"batches.path={tmp_path / 'b.sqlite3'}") as live:
        client = live.client(api_key="sk-alice-0001")
        long = " ".join(["word"] * 400)
        rows = [line(0, messages=[{"role": "user", "content": long}])] + [line(i, max_tokens=2) for i in range(1, 6)]
        uploaded = client.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 15
        while (seen := client.batches.retrieve(batch.id)).request_counts.completed < 5:
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
        assert seen.status == "in_progress"  # line 0 waits for its window; the rest ran

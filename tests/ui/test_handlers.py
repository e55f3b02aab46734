"""The page's logic without a browser: chat events, batch, operator settings, monitor figures."""

from __future__ import annotations

import asyncio
import csv
import json
import tracemalloc

import pytest

from app import build_app
from pipeline.caller import Caller
from pipeline.events import Finished, Queued, ReasoningDelta, Refused, Started, TextDelta
from scheduler.request import PriorityClass
from scheduler.snapshot import snapshot
from settings import load_config
from tests.conftest import FAST_SIM
from ui.admin.operator import SettingsError, apply_limits, apply_preset
from ui.batch.jobs import MAX_PROMPTS, BatchInputError, parse_prompts, run_batch, write_results
from ui.chat.call import build_body, run_chat
from ui.chat.chat_settings import ChatSettings
from ui.chat.views import ShownAnswer
from ui.i18n import message
from ui.monitor.figures import MonitorHistory, figures, process_memory_bytes

ANON = Caller("anonymous")
ADMIN = Caller("key-admin", admin=True)


async def services_with(*overrides: str):
    config = load_config(None, overrides=[*FAST_SIM, *overrides])
    _, services = build_app(config)
    await services.engine.start()
    await services.scheduler.start()
    if services.cache is not None:
        await services.cache.open()
    return services


async def close(services) -> None:
    await services.scheduler.shutdown()
    await services.engine.stop()
    if services.cache is not None:
        await services.cache.close()


async def events(services, text: str = "hi", caller: Caller = ANON, **settings) -> list:
    history = [{"role": "user", "content": text}]
    return [e async for e in run_chat(services.pipeline, caller, history, ChatSettings(**settings))]


async def test_answer_streams_text_then_done():
    services = await services_with()
    out = await events(services, max_tokens=6, temperature=0, caller=Caller("key-1234"))
    assert isinstance(out[0], Started) and out[0].priority == "medium" and isinstance(out[-1], Finished)
    deltas = [e.text for e in out if isinstance(e, TextDelta)]
    assert len(deltas) == 6 and "".join(deltas) == out[-1].text and len(out[-1].text.split()) == 6
    assert out[-1].usage.completion_tokens == 6 and not out[-1].cached
    request_id = next(iter(services.scheduler.state.finished))
    assert services.scheduler.finished_info(request_id)["caller"] == "key-1234"  # who asked, for the status
    await close(services)


async def test_waiting_answers_report_their_queue_position():
    services = await services_with("scheduler.max_concurrency=1", "engine.sim.token_latency_ms=10")
    blocker = asyncio.create_task(events(services, max_tokens=250))
    await asyncio.sleep(0.05)
    out = await events(services, max_tokens=3, priority="low")
    queued = [e for e in out if isinstance(e, Queued)]
    assert queued and queued[0].position == 1 and queued[0].queue_length == 1
    assert isinstance(out[-1], Finished) and out[-1].queue_wait_s > 0.5
    await blocker
    await close(services)


async def test_full_queue_is_a_rejection_with_retry_time():
    services = await services_with(
        "scheduler.max_concurrency=1", "scheduler.max_queue_size=1", "engine.sim.token_latency_ms=10"
    )
    blocker = asyncio.create_task(events(services, max_tokens=100))
    waiter = asyncio.create_task(events(services, max_tokens=3))
    await asyncio.sleep(0.05)
    out = await events(services, max_tokens=3)
    assert isinstance(out[-1], Refused) and out[-1].refusal.status == 429 and out[-1].refusal.retry_after_s >= 1
    await asyncio.gather(blocker, waiter)
    await close(services)


async def test_bad_settings_and_timeouts_are_readable_errors():
    services = await services_with("engine.sim.token_latency_ms=20")
    bad = await events(services, temperature=5.0)
    assert isinstance(bad[-1], Refused) and bad[-1].refusal.param == "temperature"
    slow = await events(services, max_tokens=500, timeout_s=0.3)
    assert isinstance(slow[-1], Refused) and "0.3 s" in slow[-1].refusal.message and slow[-1].partial_text
    await asyncio.sleep(0.05)
    assert services.scheduler.admission.running == 0 and services.engine.stats().running == 0
    await close(services)


async def test_cancelling_the_answer_aborts_it_in_the_engine():
    services = await services_with("engine.sim.token_latency_ms=20")
    stream = run_chat(services.pipeline, ANON, [{"role": "user", "content": "hi"}], ChatSettings(max_tokens=500))
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()  # what the page's stop button does to the handler
    await asyncio.sleep(0.05)
    assert services.scheduler.admission.running == 0 and services.engine.stats().running == 0
    await close(services)


async def test_repeated_deterministic_answers_come_from_the_cache(tmp_path):
    services = await services_with("cache.enabled=true", f"cache.path={tmp_path / 'c.sqlite3'}")
    first = await events(services, max_tokens=5, temperature=0)
    second = await events(services, max_tokens=5, temperature=0)
    assert isinstance(second[-1], Finished) and second[-1].cached is True
    assert second[-1].text == first[-1].text and not first[-1].cached
    await close(services)


async def test_batch_answers_in_input_order_with_progress(tmp_path):
    services = await services_with("engine.sim.token_latency_ms=2")
    prompts = [f"prompt number {i}" for i in range(5)]
    seen = []
    results = await run_batch(
        services.pipeline,
        ANON,
        prompts,
        ChatSettings(max_tokens=4, temperature=0),
        3,
        lambda done, total: seen.append((done, total)),
    )
    assert [r.prompt for r in results] == prompts and all(r.status == "ok" and r.answer for r in results)
    assert seen[-1] == (5, 5) and len(seen) == 5
    rows = [json.loads(line) for line in write_results(results, "jsonl", tmp_path).read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4]
    with write_results(results, "csv", tmp_path).open() as handle:
        assert [r["prompt"] for r in csv.DictReader(handle)] == prompts
    await close(services)


def test_batch_inputs(tmp_path):
    assert parse_prompts("a\n\n b \n") == ["a", "b"]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "x"}\n"y"\n')
    assert parse_prompts("", jsonl) == ["x", "y"]
    jsonl.write_text('{"prompt": "x"}\nnot json\n')
    with pytest.raises(BatchInputError, match="line 2"):
        parse_prompts("", jsonl)
    with pytest.raises(BatchInputError, match="no prompts"):
        parse_prompts("   ")
    with pytest.raises(BatchInputError, match=".txt or .jsonl"):
        parse_prompts("", tmp_path / "p.pdf")


def test_batch_input_is_read_no_further_than_one_prompt_past_the_bound(tmp_path):
    """A file of millions of lines costs what the bound does: the line after it is never parsed."""
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('"x"\n' * (MAX_PROMPTS + 1) + "not json\n")
    with pytest.raises(BatchInputError, match=f"more than {MAX_PROMPTS} prompts"):
        parse_prompts("", jsonl)
    txt = tmp_path / "p.txt"
    txt.write_text("b\n")
    assert len(parse_prompts("a\n" * (MAX_PROMPTS - 1), txt)) == MAX_PROMPTS  # the bound itself passes
    with pytest.raises(BatchInputError, match="more than"):
        parse_prompts("a\n" * MAX_PROMPTS, txt)


def test_batch_input_splits_files_as_text_and_names_what_it_cannot_take(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("one\u2028two\x0cthree\n", encoding="utf-8")
    assert parse_prompts("", txt) == ["one", "two", "three"]  # as pasted text is split
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "\\ud800"}\n')
    with pytest.raises(BatchInputError, match="prompt 1: text must be valid Unicode"):
        parse_prompts("", jsonl)
    jsonl.write_text("[" * 200_000 + "\n")
    with pytest.raises(BatchInputError, match="line 1 is not valid JSON"):
        parse_prompts("", jsonl)


def test_batch_input_splits_a_long_line_one_prompt_at_a_time(tmp_path):
    """A 6 MB line of form feeds: split whole, its two million parts took 125 MB before the count."""
    txt = tmp_path / "p.txt"
    txt.write_text("ab\x0c" * 2_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(BatchInputError, match="more than"):
            parse_prompts("", txt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 40_000_000


async def test_operator_limits_are_validated_and_live():
    services = await services_with("server.admin_keys=[adm]", "engine.sim.max_num_seqs=16")
    sched, engine = services.scheduler, services.engine
    with pytest.raises(SettingsError, match="admin key"):
        apply_limits(sched, engine, services.keyring.caller_for(None), 4, 10, 30)
    admin = services.keyring.caller_for("adm")
    with pytest.raises(SettingsError, match=r"between 0 \(the engine's slots\) and 16"):
        apply_limits(sched, engine, admin, 17, 10, 30)
    with pytest.raises(SettingsError, match="queue size must be between 1 and 1000000"):
        apply_limits(sched, engine, admin, 3, 0, 30)
    assert apply_limits(sched, engine, admin, 3, 10, 30).startswith("applied")
    assert services.scheduler.admission.max_concurrency == 3 and services.scheduler.config.max_queue_size == 10
    assert services.scheduler.max_wait_s(PriorityClass.LOW) == 30
    assert apply_preset(sched, admin, "team", "config.yaml") == (0, 256, 60.0)
    assert services.scheduler.limit.upper == 16  # 0: the engine's slots
    with pytest.raises(SettingsError, match="not defined"):
        apply_preset(sched, admin, "huge", "config.yaml")
    await close(services)


async def test_monitor_figures_without_a_gpu():
    services = await services_with()
    history = MonitorHistory(min_interval_s=0)
    assert history.rows("waiting") == [{"minutes": 0.0, "value": 0.0}]  # axes before any data
    history.sample(snapshot(services.scheduler), None, now=1.0)
    await events(services, max_tokens=5)
    history.sample(snapshot(services.scheduler), None, now=31.0)
    view = figures(snapshot(services.scheduler), None, None, history)
    assert view["gpus"] == [] and view["process_memory_gb"] > 0 and view["kv_usage_pct"] == 0
    assert view["waiting"] == {"high": 0, "medium": 0, "low": 0} and history.samples[-1].tokens_per_s == 5 / 30
    assert [r["minutes"] for r in history.rows("waiting")] == [-0.5, 0.0]
    assert process_memory_bytes() > 10 * 2**20
    await close(services)


def test_messages_in_both_languages():
    text = message("en", "queued", position=3, length=7) + message("en", "eta", s=12.4)
    assert text == "Queued: position 3 of 7, about 12 s"
    assert "第 3 位" in message("zh-CN", "queued", position=3, length=7)
    assert message("zh", "send") == "发送" and message("en", "send") == "Send"  # static labels too


async def test_a_thinking_model_streams_its_reasoning_before_the_answer(tmp_path):
    services = await services_with("engine.sim.harmony=true", "engine.sim.natural_stop=true")
    out = await events(services, max_tokens=400, temperature=0)
    kinds = [type(e).__name__ for e in out if isinstance(e, (ReasoningDelta, TextDelta))]
    assert kinds[0] == "ReasoningDelta" and kinds.index("TextDelta") > kinds.count("ReasoningDelta") - 1
    done = out[-1]
    assert isinstance(done, Finished) and done.reasoning and done.text and "<|" not in done.reasoning + done.text
    assert done.reasoning == "".join(e.text for e in out if isinstance(e, ReasoningDelta))
    results = await run_batch(services.pipeline, ANON, ["one"], ChatSettings(max_tokens=400, temperature=0), 1)
    assert (
        results[0].reasoning
        and results[0].answer
        and "reasoning" in write_results(results, "csv", tmp_path).read_text()
    )
    await close(services)


def test_the_thinking_block_folds_when_the_answer_starts():
    shown = ShownAnswer([{"role": "user", "content": "hi"}], "Thinking")
    shown.think("Let me ")
    shown.think("see.")
    thinking = shown.messages()[1]
    assert thinking["content"] == "Let me see." and thinking["metadata"] == {"title": "Thinking", "status": "pending"}
    shown.say("Hello")
    after = shown.messages()
    assert after[1]["metadata"]["status"] == "done" and after[2] == {"role": "assistant", "content": "Hello"}
    assert thinking["metadata"]["status"] == "pending"  # each update is a new value for the page
    assert [m.content for m in build_body("sim", after, ChatSettings()).messages] == ["hi", "Hello"]  # not the thinking


async def test_the_page_queue_polls_at_50_ms_not_every_millisecond():
    from ui.account.session import Sessions
    from ui.blocks import QUEUE_POLL_S, build_ui

    services = await services_with()
    try:
        page = build_ui(services, Sessions(services.keyring), "")
        queue = page._queue  # Gradio's own defaults are 0.001 and 0.01 s
        assert queue.sleep_when_free == queue.progress_update_sleep_when_free == QUEUE_POLL_S
    finally:
        await close(services)


async def test_every_page_handler_names_its_request_in_a_hint_gradio_can_read():
    """Gradio hands the request (and event data) to a parameter by its annotation, and passes none
    when a hint does not resolve (its get_type_hints swallows the NameError): every handler's
    hints resolve, and each `request` is a gr.Request."""
    import typing

    import gradio as gr

    from ui.account.session import Sessions
    from ui.blocks import build_ui

    services = await services_with()
    try:
        page = build_ui(services, Sessions(services.keyring), "")
        handlers = [block_fn.fn for block_fn in page.fns.values() if block_fn.fn is not None]
        hints = {fn.__qualname__: typing.get_type_hints(fn) for fn in handlers}
        takes_request = {name for name, hint in hints.items() if "request" in hint}
        assert {"ChatHandlers.respond", "ChatHandlers.edited", "SidebarHandlers.history_open"} <= takes_request
        assert all(hints[name]["request"] is gr.Request for name in takes_request)
    finally:
        await close(services)

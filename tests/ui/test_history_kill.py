"""`kill -9` of the server (app.py, a process of its own) while the page streams an answer: after
a restart every earlier message is there, word for word, and the answer that was streaming is
there up to its last checkpoint, marked interrupted."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import httpx
from gradio_client import Client

from tests.app_process import free_port, start_app
from ui.account.owner import BROWSER_COOKIE
from ui.chat.answer import CHECKPOINT_S


def text(content: str | list) -> str:
    """gradio_client hands a message's content as a list of parts."""
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def chat(message: str, history: list, max_tokens: int) -> list:
    return [message, history, "", "medium", max_tokens, 0.7, 1, "medium", 300, "English"]


def test_kill_9_during_a_streamed_answer_keeps_every_earlier_message(tmp_path: Path) -> None:
    port = free_port()
    args = [
        sys.executable,
        "app.py",
        "--port",
        str(port),
        "--set",
        "engine.backend=sim",
        "--set",
        "server.ui=true",
        "--set",
        "engine.sim.token_latency_ms=20",
        "--set",
        "engine.sim.natural_stop=false",
        "--set",
        "cache.enabled=false",
        "--set",
        "logging.file=",
        "--set",
        "monitor.gpu=false",
        "--set",
        f"responses.path={tmp_path}/responses.sqlite3",
        "--set",
        f"ui.history.path={tmp_path}/conversations.sqlite3",
    ]
    url = f"http://127.0.0.1:{port}"
    proc = start_app(args, url, timeout_s=90)
    try:
        browser_id = httpx.get(url + "/", timeout=10).cookies[BROWSER_COOKIE]
        headers = {"Cookie": f"{BROWSER_COOKIE}={browser_id}"}
        client = Client(url + "/", headers=headers, verbose=False)
        history: list = []
        for sent in ("first message", "second message"):
            history, *_ = client.predict(*chat(sent, history, 8), api_name="/respond")
        seen = [(m["role"], text(m["content"])) for m in history]
        job = client.submit(*chat("a long third answer", history, 400), api_name="/respond")
        started = time.monotonic()
        while time.monotonic() - started < CHECKPOINT_S * 2.5:
            time.sleep(0.05)
        partial = text(job.outputs()[-1][0][-1]["content"]) if job.outputs() else ""
        assert len(partial.split()) > 20 and not job.done(), "the third answer should be streaming now"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        proc = start_app(args, url, timeout_s=90)
        again = Client(url + "/", headers=headers, verbose=False, download_files=str(tmp_path))
        exported, _ = again.predict("JSON", "English", api_name="/history_export_all")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    (conversation,) = json.loads(Path(exported["value"]).read_text(encoding="utf-8"))["conversations"]
    messages = conversation["messages"]
    assert [(m["role"], m["content"]) for m in messages[:4]] == seen
    assert [m["outcome"] for m in messages[:4]] == ["", "done", "", "done"]
    assert messages[4] == {**messages[4], "role": "user", "content": "a long third answer"}
    streamed = messages[5]
    assert streamed["role"] == "assistant" and streamed["outcome"] == "interrupted"
    shorter, longer = sorted([streamed["content"].rstrip(), partial.rstrip()], key=len)
    assert len(streamed["content"].split()) > 10 and longer.startswith(shorter), (streamed["content"], partial)
    assert len(messages) == 6

"""Claude Code, unchanged, against a live server on the simulator (harmony) through Anthropic's
Messages API: `claude -p` with ANTHROPIC_BASE_URL pointing here. It sends its system blocks with
cache_control, a dozen tools, adaptive thinking and context management; the simulator calls one of
its tools, Claude Code runs it (or refuses it: -p grants no permissions) and sends the result
back, and the run must end with an answer and exit 0. CI installs the pinned CLI into
.claude-code/ (see .ci/run); elsewhere the test is skipped unless REQUIRE_CLAUDE_CODE is set."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import live_server

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / ".claude-code" / "node_modules" / ".bin" / "claude"
CLAUDE = str(LOCAL) if LOCAL.exists() else shutil.which("claude")
if CLAUDE is None and os.environ.get("REQUIRE_CLAUDE_CODE"):
    raise RuntimeError("REQUIRE_CLAUDE_CODE is set but Claude Code is not installed (.claude-code/ or PATH)")
pytestmark = pytest.mark.skipif(CLAUDE is None, reason="Claude Code not installed")


def test_claude_code_loops_through_a_tool_and_answers(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # Claude Code's system prompt and tools run to about 20,000 tokens: past the simulator's default context
    with live_server(
        "server.keys=[{name: coder, key: sk-coder-0001}]",
        "engine.sim.harmony=true",
        "engine.sim.natural_stop=true",
        "engine.sim.max_model_len=200000",
        "engine.sim.kv_tokens=4000000",
        f"responses.path={tmp_path / 'r.sqlite3'}",
    ) as live:
        env = {
            **os.environ,
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": live.url,
            "ANTHROPIC_API_KEY": "sk-coder-0001",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "200000",
            "NO_COLOR": "1",
        }
        done = subprocess.run(
            [CLAUDE, "-p", "Say hello", "--model", "sim"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
        served = live.services.pipeline.usage.report(0, 2**40).get("coder")
        calls = live.services.pipeline.tool_calls.get("made", 0)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert done.stdout.strip(), output[-3000:]  # -p prints the last answer
    assert served is not None and served.requests >= 2 and served.completion_tokens > 0
    assert calls >= 1, output[-3000:]  # a tool was called and its result sent back

"""OpenAI's Codex CLI, unchanged, against a live server on the simulator (harmony): `codex exec`
through a custom model provider with `wire_api = "responses"`. Codex sends `store: false` with
sealed reasoning, hosted tools and its own function tools; it must end with an answer and exit 0.
CI installs the pinned CLI into .codex-cli/ (see .ci/run); elsewhere the test is skipped unless
REQUIRE_CODEX is set."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import live_server

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / ".codex-cli" / "node_modules" / ".bin" / "codex"
CODEX = str(LOCAL) if LOCAL.exists() else shutil.which("codex")
if CODEX is None and os.environ.get("REQUIRE_CODEX"):
    raise RuntimeError("REQUIRE_CODEX is set but the Codex CLI is not installed (.codex-cli/ or PATH)")
pytestmark = pytest.mark.skipif(CODEX is None, reason="Codex CLI not installed")

CONFIG = """check_for_update_on_startup = false
model = "sim"
model_provider = "local"

[model_providers.local]
name = "local"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "LOCAL_API_KEY"
"""


def test_codex_exec_finishes_with_an_answer(tmp_path) -> None:
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # Codex's instructions and tools run to about 10,000 tokens: past the simulator's default context
    with live_server(
        "engine.sim.harmony=true",
        "engine.sim.natural_stop=true",
        "engine.sim.max_model_len=131072",
        "engine.sim.kv_tokens=2000000",
        f"responses.path={tmp_path / 'r.sqlite3'}",
    ) as live:
        (home / "config.toml").write_text(CONFIG.format(url=live.url))
        env = {**os.environ, "CODEX_HOME": str(home), "LOCAL_API_KEY": "sk-local", "NO_COLOR": "1"}
        done = subprocess.run(
            [CODEX, "exec", "--strict-config", "--skip-git-repo-check", "Say hello"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        served = live.services.pipeline.usage.report(0, 2**40).get("anonymous")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "context window" not in output and "tokens used" in output, output[-3000:]
    answer = done.stdout.strip()
    assert answer, output[-3000:]  # codex exec prints the last message on stdout
    assert served is not None and served.requests >= 1 and served.completion_tokens > 0

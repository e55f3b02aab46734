"""Secrets never reach the logs: the filter itself, its installation, and a real server's log file."""

from __future__ import annotations

import logging
import signal
import subprocess

import httpx
import pytest
from uvicorn.logging import AccessFormatter

from monitor.logs import SecretFilter, install_secret_filter
from tests.monitor.helpers import chat
from tests.test_app import free_port, start, wait_healthy

SECRET = "vip-secret-123"
ACCESS_FORMAT = '%(levelname)s %(client_addr)s - "%(request_line)s" %(status_code)s'


def record(msg: str, *args, name: str = "gpt_oss_webui.test") -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args or None, None)


def filtered(msg: str, *args, secrets=(SECRET,)) -> logging.LogRecord:
    rec = record(msg, *args)
    assert SecretFilter(secrets).filter(rec) is True  # masks, never drops
    return rec


def test_masks_query_tokens_bearer_values_and_configured_keys():
    rec = filtered("GET %s %d", "/v1/chat/completions?mode=batch&token=abc-123&x=1", 200)
    assert rec.getMessage() == "GET /v1/chat/completions?mode=batch&token=***&x=1 200"
    assert filtered("url=%s", "/x?api_key=k1").getMessage() == "url=/x?api_key=***"
    assert (
        filtered("headers: Authorization: %s", "Bearer sk-live-987").getMessage()
        == "headers: Authorization: Bearer ***"
    )
    assert filtered("caller %s used %d tokens", SECRET, 12).getMessage() == "caller *** used 12 tokens"
    assert filtered(f"plain message with {SECRET} inside").getMessage() == "plain message with *** inside"
    # a secret split between the template and an argument is still masked
    assert filtered("GET /x?token=%s", "unknown-key").getMessage() == "GET /x?token=***"
    assert filtered("Authorization: Bearer %s", "sk-1").getMessage() == "Authorization: Bearer ***"
    rec = filtered("nothing %s here %d", "secret-free", 3)
    assert rec.args == ("secret-free", 3) and rec.msg == "nothing %s here %d"  # untouched


def test_longer_keys_are_masked_before_their_prefixes():
    rec = filtered("keys %s %s", "abc", "abcdef", secrets=("abc", "abcdef"))
    assert rec.getMessage() == "keys *** ***"


def test_a_masked_access_record_still_formats_with_uvicorns_access_formatter():
    rec = record(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:5555",
        "POST",
        f"/v1/chat/completions?token={SECRET}",
        "1.1",
        200,
        name="uvicorn.access",
    )
    SecretFilter([SECRET]).filter(rec)
    line = AccessFormatter(ACCESS_FORMAT, use_colors=False).format(rec)
    assert line == 'INFO 127.0.0.1:5555 - "POST /v1/chat/completions?token=*** HTTP/1.1" 200 OK'


@pytest.fixture
def clean_filters():
    """install_secret_filter changes process-wide loggers: take its filters off again."""
    names = ("gpt_oss_webui", "uvicorn.access", "uvicorn.error")
    before = {n: list(logging.getLogger(n).filters) for n in names}
    handler = logging.StreamHandler()
    logging.getLogger("gpt_oss_webui").addHandler(handler)
    yield handler
    logging.getLogger("gpt_oss_webui").removeHandler(handler)
    for name in names:
        logging.getLogger(name).filters[:] = before[name]


def test_install_applies_to_uvicorn_access_and_our_handlers(clean_filters):
    install_secret_filter([SECRET, ""])
    access = logging.getLogger("uvicorn.access")
    assert any(isinstance(f, SecretFilter) for f in access.filters)
    assert any(isinstance(f, SecretFilter) for f in logging.getLogger("uvicorn.error").filters)
    assert any(isinstance(f, SecretFilter) for f in clean_filters.filters)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            seen.append(self.format(rec))

    keep = Keep()
    keep.setFormatter(AccessFormatter(ACCESS_FORMAT, use_colors=False))
    access.addHandler(keep)
    level, disabled = access.level, access.disabled
    access.setLevel(logging.INFO)
    access.disabled = False
    try:
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET", f"/v1/models?token={SECRET}", "1.1", 200)
    finally:
        access.removeHandler(keep)
        access.setLevel(level)
        access.disabled = disabled
    assert seen == ['INFO 127.0.0.1:1 - "GET /v1/models?token=*** HTTP/1.1" 200 OK']


def test_livez(make_server):
    live = make_server()
    response = httpx.get(live.url + "/livez", timeout=10)
    assert response.status_code == 200 and response.json() == {"status": "alive"}


def test_a_real_server_never_writes_the_priority_key(tmp_path):
    log_file = tmp_path / "x.log"
    port = free_port()
    proc = start(
        "--engine",
        "sim",
        "--port",
        str(port),
        "--set",
        f"logging.file={log_file}",
        "--set",
        "monitor.gpu=false",
        "--set",
        "cache.enabled=false",
        "--set",
        f"scheduler.priority_keys=[{SECRET}]",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        response = httpx.post(
            f"{url}/v1/chat/completions?token={SECRET}",
            json={"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            headers={"Authorization": f"Bearer {SECRET}"},
            timeout=30,
        )
        assert response.status_code == 200 and response.headers["x-priority"] == "high"
        assert chat(url, max_tokens=2, headers={"Authorization": f"Bearer {SECRET}"}).status_code == 200
        assert httpx.get(f"{url}/livez?token={SECRET}", timeout=10).json() == {"status": "alive"}
    finally:
        out = interrupt(proc)
    assert proc.returncode == 130
    written = log_file.read_text()
    assert "finish id=" in written  # the queue log reached the file
    assert SECRET not in written
    assert SECRET not in out
    assert "/v1/chat/completions?token=*** HTTP/1.1" in out  # uvicorn's access line, masked
    assert "Traceback" not in out and "Logging error" not in out


def test_a_named_key_from_a_key_file_is_logged_by_its_name_only(tmp_path):
    secret, log_file, port = "sk-named-5ecret-77", tmp_path / "x.log", free_port()
    key_file = tmp_path / "keys.yaml"
    key_file.write_text(f"- {{name: alice, key: {secret}, class: high}}\n")
    proc = start(
        "--engine",
        "sim",
        "--port",
        str(port),
        "--set",
        f"logging.file={log_file}",
        "--set",
        "monitor.gpu=false",
        "--set",
        "cache.enabled=false",
        "--set",
        f"server.key_file={key_file}",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401  # named keys: a key is required
        response = chat(url, max_tokens=2, headers={"Authorization": f"Bearer {secret}"})
        assert response.status_code == 200 and response.headers["x-priority"] == "high"
        assert httpx.get(f"{url}/v1/models?token={secret}", timeout=10).status_code == 200
    finally:
        out = interrupt(proc)
    written = log_file.read_text()
    assert "caller=alice" in written
    assert secret not in written and secret not in out


def interrupt(proc: subprocess.Popen) -> str:
    """Ctrl-C, then what the server printed; killed if it does not stop."""
    try:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        return out
    finally:
        proc.kill()
        if proc.stdout and not proc.stdout.closed:
            proc.stdout.close()

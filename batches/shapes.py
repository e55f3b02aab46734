"""OpenAI's Batch API objects and the checks on an input file, pure: the batch object, each
output and error line, and the validation that names every bad line before anything runs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from batches.store import Line
from protocols.unicode_text import ESCAPED_SURROGATE, lone_surrogate_at

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions")
MAX_ERRORS = 100  # validation errors named in a failed batch; the count says how many more
CheckBody = Callable[
    [str, dict], None
]  # (endpoint, body); raises ValueError naming the problem, as the endpoint would answer 400


def new_batch(
    batch_id: str, input_file_id: str, endpoint: str, window: str, metadata: dict | None, now: float, window_s: float
) -> dict:
    return {
        "id": batch_id,
        "object": "batch",
        "endpoint": endpoint,
        "model": None,
        "errors": None,
        "input_file_id": input_file_id,
        "completion_window": window,
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": int(now),
        "in_progress_at": None,
        "expires_at": int(now + window_s),
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": metadata,
        "usage": None,
    }


def error(code: str, message: str, line: int | None = None, param: str | None = None) -> dict:
    return {"code": code, "message": message, "param": param, "line": line}


def rows_of(content: bytes, max_lines: int) -> tuple[list[tuple[int, bytes]], dict | None]:
    """The non-blank rows with their 1-based line numbers (split at "\n" only: U+2028 and its
    kind are legal inside a JSON string), or the error that fails the whole file."""
    rows = [(n, row.rstrip(b"\r")) for n, row in enumerate(content.split(b"\n"), 1) if row.strip()]
    if not rows:
        return [], error("empty_file", "the input file has no requests")
    if len(rows) > max_lines:
        return [], error(
            "too_many_requests", f"the input file has {len(rows)} requests; at most {max_lines} fit in one batch"
        )
    return rows, None


def shown(value: object, most: int = 80) -> str:
    """A client's value in a message, cut short: an error never echoes megabytes back."""
    text = repr(value)
    return text if len(text) <= most else text[:most] + f"... ({len(text)} characters)"


def checked_line(
    batch_id: str, number: int, row: bytes, endpoint: str, check: CheckBody, seen: set[str], max_bytes: int
) -> Line:
    """One request of the input file, checked as its endpoint would check it; ValueError names the problem."""
    if len(row) > max_bytes:
        raise ValueError(f"the request is {len(row)} bytes; at most {max_bytes} fit in one")
    try:
        item = json.loads(row.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not valid UTF-8") from None
    except (ValueError, RecursionError):
        raise ValueError("not valid JSON") from None
    if not isinstance(item, dict):
        raise ValueError("a request must be a JSON object with custom_id, method, url and body")
    if ESCAPED_SURROGATE.search(row) and (where := lone_surrogate_at(item)) is not None:
        raise ValueError(f"{where or 'a field name'}: text must be valid Unicode, without lone surrogates")
    extra = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if extra:
        raise ValueError(f"unknown field {shown(extra[0])}; a request has custom_id, method, url and body")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 512:
        raise ValueError("custom_id must be a string of 1 to 512 characters")
    if custom_id in seen:
        raise ValueError(f"custom_id {shown(custom_id)} is used twice; each request needs its own")
    seen.add(custom_id)
    if item.get("method") != "POST":
        raise ValueError(f"method must be POST; got {shown(item.get('method'))}")
    if item.get("url") != endpoint:
        raise ValueError(f"url must be the batch's endpoint {endpoint}; got {shown(item.get('url'))}")
    body = item.get("body")
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if body.get("stream"):
        raise ValueError("body.stream: a batch request cannot stream")
    check(endpoint, body)
    return Line(batch_id, number, custom_id, json.dumps(body, ensure_ascii=False))


def checked_file(
    batch_id: str, content: bytes, endpoint: str, check: CheckBody, max_lines: int, max_bytes: int
) -> tuple[list[Line], list[dict]]:
    """Every line checked (in a thread: a large file takes seconds), in the order they are to run;
    any failure of a check is the line's error, never the batch runner's."""
    rows, whole = rows_of(content, max_lines)
    if whole is not None:
        return [], [whole]
    lines: list[Line] = []
    errors: list[dict] = []
    seen: set[str] = set()
    for number, row in rows:
        try:
            lines.append(checked_line(batch_id, number, row, endpoint, check, seen, max_bytes))
        except ValueError as exc:
            errors.append(error("invalid_request", str(exc)[:300], number))
        except Exception:  # a check that failed on its own (nesting past a library's recursion): the line's fault
            errors.append(error("invalid_request", "the request could not be checked (nested too deeply?)", number))
        if len(errors) >= MAX_ERRORS:
            errors.append(error("too_many_errors", f"checking stopped after {MAX_ERRORS} bad requests", number))
            break
    return sorted(lines, key=_prompt_key), errors


def _prompt_key(line: Line) -> str:
    """The start of the prompt a line's body makes (tools, instructions, then the messages), so
    that sorting on it puts lines with a shared prefix next to each other: run together, the
    engine's prefix cache still holds what they share."""
    body = json.loads(line.body)
    return json.dumps(
        [body.get("tools"), body.get("instructions"), body.get("messages", body.get("input"))], ensure_ascii=False
    )


def output_line(custom_id: str, request_id: str, status: int, body: dict) -> dict:
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def unanswered_line(custom_id: str, code: str, message: str) -> dict:
    return {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def jsonl(rows: list[str]) -> bytes:
    return "".join(row + "\n" for row in rows).encode("utf-8")


def with_counts(batch: dict, counts: dict[str, int]) -> dict[str, Any]:
    done, failed = counts.get("done", 0), counts.get("failed", 0)
    return {**batch, "request_counts": {"total": sum(counts.values()), "completed": done, "failed": failed}}

"""Files on the page: a handler opens only a file that this browser uploaded through Gradio's upload
route. Gradio checks that a file lies in its upload folder only once the Blocks were `launch()`ed,
never when they are mounted in our app, so a client could name any path on the server in a
`FileData` it sends; this records what each session uploaded and refuses every other path before
Gradio sees the call."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradio.utils import get_upload_folder
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ui.account.owner import BROWSER_COOKIE
from ui.account.session import COOKIE

log = logging.getLogger("gpt_oss_webui.page")
UPLOAD_ROUTE = "/gradio_api/upload"
REFUSED = "That file was not uploaded from this page: upload it again."
_MAX_OWNERS = 10_000
_MAX_FILES_PER_OWNER = 256


class UploadRefused(ValueError):
    """A file reference that this session did not upload (the message never names the path)."""


class Uploads:
    """What each browser session uploaded, newest kept, within bounds: files per session, sessions,
    and `max_bytes` on disk in all. A file that falls out is deleted (no handler may open it any
    more): Gradio keeps every upload in its cache for as long as the server runs, so without a bound
    a signed-in client uploading over and over fills the disk every store writes to. Past
    `max_bytes` the session holding the most bytes loses its oldest file first."""

    def __init__(self, max_bytes: int = 2 << 30) -> None:
        self.max_bytes = max_bytes
        self._by_owner: OrderedDict[str, OrderedDict[str, int]] = OrderedDict()  # path -> bytes
        self._bytes: dict[str, int] = {}
        self._holders: dict[str, int] = {}  # Gradio names an upload by its content: sessions may share a path
        self.total_bytes = 0

    def add(self, owner: str, paths: list[str]) -> None:
        files = self._by_owner.pop(owner, None) or OrderedDict()
        self._by_owner[owner] = files
        for path in paths:
            if path not in files:
                files[path] = _size(path)
                self._count(owner, files[path])
                self._holders[path] = self._holders.get(path, 0) + 1
            files.move_to_end(path)
        while len(files) > _MAX_FILES_PER_OWNER:
            self._drop(owner)
        while len(self._by_owner) > _MAX_OWNERS:
            self._forget(next(iter(self._by_owner)))
        while self.total_bytes > self.max_bytes:
            self._drop(max(self._bytes, key=lambda o: self._bytes[o]))

    def owns(self, owner: str, path: str) -> bool:
        return path in self._by_owner.get(owner, ())

    def _count(self, owner: str, size: int) -> None:
        self._bytes[owner] = self._bytes.get(owner, 0) + size
        self.total_bytes += size

    def _drop(self, owner: str) -> None:
        """The owner's oldest file, off the disk too."""
        files = self._by_owner[owner]
        path, size = files.popitem(last=False)
        self._count(owner, -size)
        self._let_go(path)
        if not files:
            self._forget(owner)

    def _forget(self, owner: str) -> None:
        for path in self._by_owner.pop(owner, {}):
            self._let_go(path)
        self.total_bytes -= self._bytes.pop(owner, 0)

    def _let_go(self, path: str) -> None:
        """Deleted once no session holds it any more."""
        self._holders[path] -= 1
        if not self._holders[path]:
            del self._holders[path]
            _delete(path)


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _delete(path: str) -> None:
    """An upload and the folder Gradio made for it, where now empty; nothing outside its upload folder."""
    root, found = Path(get_upload_folder()).resolve(), Path(path)
    with contextlib.suppress(OSError):
        if found.parent.resolve().is_relative_to(root) and found.parent.resolve() != root:
            found.unlink(missing_ok=True)
            found.parent.rmdir()


def owner_key(cookies: dict[str, str]) -> str:
    """The session that uploads and then uses a file: its sign-in session, else its browser id."""
    session = cookies.get(COOKIE)
    if session:
        return "session:" + session
    return "browser:" + cookies.get(BROWSER_COOKIE, "")


def uploaded_file(path: str | None) -> Path | None:
    """The file a handler may open: a regular file inside Gradio's upload folder (after the checks
    on the wire, which tie it to the session). Anything else is UploadRefused."""
    if not path:
        return None
    folder = Path(get_upload_folder()).resolve()
    candidate = Path(path)
    resolved = candidate.resolve()
    if candidate.is_symlink() or not resolved.is_relative_to(folder) or not resolved.is_file():
        raise UploadRefused(REFUSED)
    return resolved


def read_upload(path: str) -> bytes:
    """The bytes of a file this session uploaded (the upload limit bounds its size)."""
    found = uploaded_file(path)
    try:
        return found.read_bytes() if found is not None else b""
    except OSError:
        raise UploadRefused(REFUSED) from None


def file_references(value: Any) -> Iterator[str]:
    """Every path a Gradio payload names: any object with a string `path` (a `FileData`, with
    its meta or without), at any depth; iterative, so no nesting exhausts the stack. A component's
    `constructor_args` (a Chatbot message of type "component" builds one on the server, and an
    avatar or icon path there is copied into Gradio's cache) counts as a path no one uploaded:
    the page never sends one."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("path"), str):
                yield item["path"]
            if "constructor_args" in item:
                yield ""
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class UploadGuard:
    """Records the paths Gradio's upload route answers with, per session, and refuses any other
    Gradio call whose JSON names a file that session did not upload."""

    def __init__(self, app: ASGIApp, uploads: Uploads, max_body_bytes: int) -> None:
        self.app = app
        self.uploads = uploads
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "POST" or not path.startswith("/gradio_api/"):
            await self.app(scope, receive, send)
            return
        owner = owner_key(Request(scope).cookies)
        if path.rstrip("/") == UPLOAD_ROUTE:
            await self._upload(scope, receive, send, owner)
            return
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            await JSONResponse({"error": "request body too large"}, status_code=413)(scope, _no_receive, send)
            return
        if not self._allowed(owner, body):
            await JSONResponse({"error": REFUSED}, status_code=403)(scope, _no_receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _allowed(self, owner: str, body: bytes) -> bool:
        try:
            payload = json.loads(body) if body else None
        except (ValueError, RecursionError):
            return True  # not JSON: Gradio refuses it, and no file can be named in it
        return all(self.uploads.owns(owner, path) for path in file_references(payload))

    async def _upload(self, scope: Scope, receive: Receive, send: Send, owner: str) -> None:
        """Gradio's upload route, its answer recorded; where a malformed multipart body (a part
        named `filename*=`) fails inside Gradio, a 400 and one log line instead of its 500."""
        chunks: list[bytes] = []
        status = 0

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            if status >= 500:
                return  # held back: what failed is told below
            if message["type"] == "http.response.body" and status == 200:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self._remember(owner, b"".join(chunks))
            await send(message)

        try:
            await self.app(scope, receive, record)
        except Exception as exc:  # noqa: BLE001 - Gradio's own parser on a client's body
            if status and status < 500:
                raise
            log.info("upload refused: Gradio could not read it (%s: %s)", type(exc).__name__, exc)
            await JSONResponse({"error": "the upload could not be read"}, status_code=400)(scope, _no_receive, send)

    def _remember(self, owner: str, body: bytes) -> None:
        try:
            paths = json.loads(body)
        except ValueError:
            return
        if isinstance(paths, list):
            self.uploads.add(owner, [p for p in paths if isinstance(p, str)])


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None past `limit`."""
    parts, seen = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        parts.append(message.get("body", b""))
        seen += len(parts[-1])
        if seen > limit:
            return None
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}

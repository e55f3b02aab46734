"""Reasoning a client may carry but neither read nor forge: `include: ["reasoning.encrypted_content"]`
seals a reasoning item's text with a server key (Fernet: AES-128-CBC with an HMAC-SHA256 tag),
bound to the caller, so a stateless client (`store: false`, as Codex runs) can pass it back on
its next turn. The key lives in a file beside the store, made on first use, so tokens outlive a
restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from core.private_files import FILE_MODE, private_dir, tighten


class SealError(ValueError):
    pass


class ReasoningSeal:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    @classmethod
    def from_file(cls, path: Path) -> ReasoningSeal:
        """The key in `path`, written (owner-only) when missing; one open to others is tightened."""
        if path.exists():
            tighten(path)
        else:
            private_dir(path.parent)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            with os.fdopen(descriptor, "wb") as out:
                out.write(Fernet.generate_key())
        return cls(path.read_bytes().strip())

    def seal(self, text: str, caller: str) -> str:
        return self._fernet.encrypt(json.dumps({"caller": caller, "text": text}).encode()).decode()

    def open(self, token: str, caller: str) -> str:
        try:
            sealed = json.loads(self._fernet.decrypt(token.encode()))
        except (InvalidToken, ValueError):
            raise SealError("encrypted_content was not made by this server, or was changed") from None
        if sealed.get("caller") != caller:
            raise SealError("encrypted_content belongs to another caller")
        return sealed["text"]

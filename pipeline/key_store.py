"""Keys made at run time by an admin, and the audit log of admin actions, in the usage ledger's
SQLite file. A key is kept as its SHA-256 only (its secret is shown once, when made or rotated);
the keys from the configuration stay read-only beside these."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import aiosqlite

from core.sqlite_file import SqliteFile, schema
from settings.schema import KeyConfig

log = logging.getLogger("gpt_oss_webui.keys")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS api_keys (name TEXT PRIMARY KEY, config TEXT NOT NULL, created REAL NOT NULL)",
    """CREATE TABLE IF NOT EXISTS audit (at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
       target TEXT NOT NULL, detail TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_by_time ON audit (at)",
)
MAX_AUDIT = 100_000  # past it, the oldest entries go


class KeyStore:
    def __init__(self, path: str, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = asyncio.Lock()  # one key change at a time: its read, store and keyring update together
        self._file = SqliteFile(Path(path), "the key store", log, clock)

    async def open(self) -> None:
        await self._file.open(schema(*_SCHEMA))

    async def close(self) -> None:
        await self._file.close()

    async def keys(self) -> list[tuple[KeyConfig, float]]:
        async with self._file.connected().execute("SELECT config, created FROM api_keys ORDER BY name") as cur:
            return [(KeyConfig.model_validate(json.loads(row[0])), row[1]) async for row in cur]

    async def put(self, key: KeyConfig, actor: str, action: str, detail: dict) -> bool:
        """Made (`create`: only a name never used), or changed or rotated (only a key still
        stored), with its audit entry, in one transaction; False where that does not hold."""
        config = json.dumps(key.model_dump(by_alias=True))
        async with self._file.transaction() as db:
            if action == "create":
                async with db.execute(
                    "SELECT 1 FROM audit WHERE target = ? AND action = 'create' LIMIT 1", (key.name,)
                ) as cur:
                    if await cur.fetchone() is not None:
                        return False
                cur = await db.execute(
                    "INSERT OR IGNORE INTO api_keys VALUES (?, ?, ?)", (key.name, config, self.clock())
                )
            else:
                cur = await db.execute("UPDATE api_keys SET config = ? WHERE name = ?", (config, key.name))
            if cur.rowcount == 0:
                return False
            await self._audit(db, actor, action, key.name, detail)
        return True

    async def delete(self, name: str, actor: str) -> bool:
        async with self._file.transaction() as db:
            cur = await db.execute("DELETE FROM api_keys WHERE name = ?", (name,))
            if cur.rowcount:
                await self._audit(db, actor, "revoke", name, {})
        return cur.rowcount > 0

    async def record(self, actor: str, action: str, target: str, detail: dict) -> None:
        async with self._file.transaction() as db:
            await self._audit(db, actor, action, target, detail)

    async def _audit(self, db: aiosqlite.Connection, actor: str, action: str, target: str, detail: dict) -> None:
        await db.execute(
            "INSERT INTO audit VALUES (?, ?, ?, ?, ?)", (self.clock(), actor, action, target, json.dumps(detail))
        )
        await db.execute("DELETE FROM audit WHERE rowid <= (SELECT MAX(rowid) FROM audit) - ?", (MAX_AUDIT,))

    async def audit_log(self, limit: int) -> list[dict]:
        async with self._file.connected().execute(
            "SELECT at, actor, action, target, detail FROM audit ORDER BY at DESC LIMIT ?", (limit,)
        ) as cur:
            return [
                {"at": row[0], "actor": row[1], "action": row[2], "target": row[3], "detail": json.loads(row[4])}
                async for row in cur
            ]

"""Files the server writes are its owner's alone, whatever the umask: 0600 files, 0700 folders it
makes. A file an older version left readable by others is tightened, with a one-line warning."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("gpt_oss_webui.files")

FILE_MODE = 0o600
DIR_MODE = 0o700
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def private_dir(path: Path) -> None:
    """`path` and its missing parents, each one made here 0700; folders already there are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for made in missing:
        os.chmod(made, DIR_MODE)


def private_file(path: Path) -> None:
    """`path` exists and is 0600: made empty when missing (in a private folder), else tightened."""
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        tighten(path)


def private_sqlite(path: Path) -> None:
    """A SQLite file and the `-wal` / `-shm` / `-journal` beside it. Call it before connecting (SQLite
    gives those files the database's own mode) and after, for any made before this module was."""
    private_file(path)
    for suffix in SQLITE_SIDECARS:
        tighten(Path(f"{path}{suffix}"))


def tighten(path: Path) -> None:
    """When `path` exists and group or others have any access to it: 0600, and a warning."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        os.chmod(path, FILE_MODE)
        log.warning("file %s was open to group or others (mode %03o); made it owner-only (600)", path, mode)


def open_to_others(path: Path) -> bool:
    """Group or others may read `path` (False when it is not there)."""
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRGRP | stat.S_IROTH))
    except OSError:
        return False

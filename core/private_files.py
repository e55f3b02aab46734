"""Files the server writes are its owner's alone, whatever the umask: 0600 files, 0700 folders it
makes. A file an older version left readable by others is tightened, with a one-line warning; so is
the folder a library keeps its files in (Gradio's cache, where the page's uploads and exports lie)."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("gpt_oss_webui.files")

FILE_MODE = 0o600
DIR_MODE = 0o700
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
_own_folders: dict[str, Path] = {}  # environment variable -> the folder this process made for it
_warned_folders: set[Path] = set()


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


def private_folder_in(root: str | Path, prefix: str) -> Path:
    """A fresh 0700 folder inside `root` (made 0700 when missing), for a file handed to a browser:
    a name no other request can predict, in a folder no other local user can list."""
    private_dir(Path(root))
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def write_private(path: Path, content: str | bytes) -> Path:
    """`path` written 0600 from its first byte, so no umask ever widens it (a file already there is
    made 0600 too, since O_CREAT keeps an existing file's mode)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), FILE_MODE)
        handle.write(data)
    return path


def private_env_folder(variable: str, prefix: str) -> Path:
    """The folder a library keeps its files in, named by `variable` (Gradio's GRADIO_TEMP_DIR, whose
    default /tmp/gradio every local user shares, made 0755). The operator's folder is made 0700 or
    tightened, with one warning; unset, it is a fresh 0700 folder of this process, removed at exit,
    and set in the environment for the library to read (call this before the library is imported)."""
    named = os.environ.get(variable)
    if named and Path(named) != _own_folders.get(variable):
        private_dir(Path(named))
        _tighten_folder(Path(named))
        return Path(named)
    own = _own_folders.get(variable)
    if own is None or not own.is_dir():
        own = _own_folders[variable] = Path(tempfile.mkdtemp(prefix=prefix))
        atexit.register(shutil.rmtree, own, ignore_errors=True)
    os.environ[variable] = str(own)
    return own


def _tighten_folder(path: Path) -> None:
    """0700 with a warning when group or others may enter `path`; one warning where it is not ours to change."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & 0o077:
        return
    try:
        os.chmod(path, DIR_MODE)
    except PermissionError:
        if path not in _warned_folders:
            _warned_folders.add(path)
            log.warning(
                "folder %s is open to group or others (mode %03o) and not ours to change: other local "
                "users may read the files kept there",
                path,
                mode,
            )
        return
    log.warning("folder %s was open to group or others (mode %03o); made it owner-only (700)", path, mode)

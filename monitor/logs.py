"""Logging to stdout and to a size-rotated file (owner-only, its backups too), both set from the
`logging` config section."""

from __future__ import annotations

import io
import logging
import logging.handlers
import re
from collections.abc import Iterable
from pathlib import Path

from core.private_files import private_file, tighten
from settings.schema import LoggingConfig

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_PATTERNS = (re.compile(r"((?:token|api_key|key)=)[^&\s\"']+", re.I), re.compile(r"(Bearer\s+)\S+", re.I))


class SecretFilter(logging.Filter):
    """Masks API keys and tokens in every record: query strings, bearer headers, configured keys."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = self.mask(message)
        if masked == message:
            return True
        if record.args and isinstance(record.args, tuple):
            # Keep the arguments when masking them one by one is enough: formatters such as
            # uvicorn's access log unpack record.args.
            args = tuple(self.mask(a) if isinstance(a, str) else a for a in record.args)
            try:
                if str(record.msg) % args == masked:
                    record.args = args
                    return True
            except (TypeError, ValueError):
                pass
        record.msg, record.args = masked, None
        return True

    def mask(self, text: str) -> str:
        for pattern in _PATTERNS:
            text = pattern.sub(r"\1***", text)
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def install_secret_filter(secrets: Iterable[str]) -> None:
    """On our handlers and on uvicorn's loggers (its access log carries query strings)."""
    secret_filter = SecretFilter(secrets)
    for handler in logging.getLogger("gpt_oss_webui").handlers:
        handler.addFilter(secret_filter)
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(secret_filter)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Each file it opens, the first and each one after a rotation, is made 0600 before it is
    written; a rotated backup keeps that mode, and older backups open to others are tightened."""

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        for n in range(1, backup_count + 1):
            tighten(Path(f"{path}.{n}"))
        super().__init__(path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8")

    def _open(self) -> io.TextIOWrapper:
        private_file(Path(self.baseFilename))
        return super()._open()


def configure_logging(config: LoggingConfig) -> None:
    root = logging.getLogger("gpt_oss_webui")
    root.setLevel(config.level)
    root.propagate = False
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter(_FORMAT)
    console = logging.StreamHandler()
    console.setFormatter(formatter)
    root.addHandler(console)
    if config.file:
        rotating = PrivateRotatingFileHandler(Path(config.file), config.max_bytes, config.backup_count)
        rotating.setFormatter(formatter)
        root.addHandler(rotating)

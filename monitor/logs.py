"""Logging to stdout and to a size-rotated file, both set from the `logging` config section."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

from settings.schema import LoggingConfig

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
        path = Path(config.file)
        path.parent.mkdir(parents=True, exist_ok=True)
        rotating = logging.handlers.RotatingFileHandler(
            path, maxBytes=config.max_bytes, backupCount=config.backup_count, encoding="utf-8"
        )
        rotating.setFormatter(formatter)
        root.addHandler(rotating)

"""Build a validated `Config` from config.yaml, a preset and `--set key=value` overrides.

Every error is one line naming the key, the value and what is allowed, so a bad config stops
start-up with something an operator can fix without reading a traceback.
"""

from __future__ import annotations

import logging
import os
import typing
from pathlib import Path
from typing import Any, get_args

import yaml
from annotated_types import Ge, Le
from pydantic import BaseModel, ValidationError

from core.private_files import open_to_others
from settings.schema import Config

KEYS_ENV = "GPT_OSS_WEBUI_KEYS"  # named keys as a key file holds them, kept off the command line (`ps`)
log = logging.getLogger("gpt_oss_webui.settings")


class ConfigError(ValueError):
    pass


def load_config(
    path: str | Path | None = "config.yaml",
    preset: str | None = None,
    overrides: typing.Sequence[str] = (),
) -> Config:
    raw = _read_yaml(path) if path else {}
    presets = raw.pop("presets", None) or {}
    chosen = preset or raw.pop("preset", None)
    raw.pop("preset", None)
    for name in (chosen or "").split(","):
        if not name.strip():
            continue
        if name.strip() not in presets:
            allowed = ", ".join(presets) or "(none defined)"
            raise ConfigError(f"preset: {name.strip()!r} is not defined; allowed: {allowed}")
        raw = _merge(raw, presets[name.strip()])
    for item in overrides:
        key, value = _split_override(item)
        _set_dotted(raw, key, value)
    return build(_with_key_file(raw))


def build(data: Any) -> Config:
    """Validate a mapping laid over the defaults, so a partial section keeps its other values."""
    if not isinstance(data, dict):
        raise ConfigError(f"(top level): expected a mapping, got {data!r}")
    try:
        return Config.model_validate(_merge(Config().model_dump(), data))
    except ValidationError as exc:
        raise ConfigError(one_line(exc.errors()[0])) from None


def one_line(error: Any) -> str:
    """A pydantic error as `key: value is not allowed; expected ...`."""
    key = ".".join(str(part) for part in error["loc"])
    value, kind = error.get("input"), error["type"]
    parent, annotation, info = _field(error["loc"])
    if kind == "extra_forbidden":
        return f"{key}: unknown key; allowed: {', '.join(parent.model_fields)}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"{key or '(top level)'}: expected a mapping, got {value!r}"
    if kind == "value_error":
        return f"{key}: {error['msg'].removeprefix('Value error, ')}"
    if kind == "literal_error":
        return f"{key}: {value!r} is not allowed; allowed: {', '.join(map(str, get_args(annotation)))}"
    if annotation is bool:
        return f"{key}: {value!r} is not allowed; expected true or false"
    if annotation is int:
        return f"{key}: {value!r} is not allowed; expected an integer{_range(info)}"
    if annotation is float:
        shown = float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        return f"{key}: {shown!r} is not allowed; expected a number{_range(info)}"
    if annotation is str:
        return f"{key}: {value!r} is not allowed; expected a string"
    return f"{key}: {value!r} is not allowed; {error['msg'][:1].lower()}{error['msg'][1:]}"


def _field(loc: tuple) -> tuple[type[BaseModel], Any, Any]:
    """The model holding the last key of `loc`, that key's type and its field info."""
    model: type[BaseModel] = Config
    annotation: Any = Config
    info = None
    for part in loc:
        info = model.model_fields.get(str(part)) if isinstance(model, type) else None
        if info is None:
            break
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and part != loc[-1]:
            model = annotation
    return model, annotation, info


def _range(info: Any) -> str:
    if info is None:
        return ""
    lo = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    hi = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if lo is not None and hi is not None:
        return f" between {lo} and {hi}"
    if lo is not None:
        return f" >= {lo}"
    return ""


def _with_key_file(raw: dict) -> dict:
    """`server.key_file` holds more named keys (a YAML list, or a mapping with `keys`), so secrets
    can live apart from the main config, readable by the service alone; the environment variable
    GPT_OSS_WEBUI_KEYS may hold the same YAML or JSON, so no key shows in `ps`."""
    server = raw.get("server", {})
    path, env = (server.get("key_file"), os.environ.get(KEYS_ENV, "")) if isinstance(server, dict) else (None, "")
    if not path and not env.strip():
        return raw
    keys = [*(server.get("keys") or [])]
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"server.key_file {path}: cannot be read ({exc.strerror})") from None
        keys += _named_keys(f"server.key_file {path}", text)
    if env.strip():
        keys += _named_keys(f"environment variable {KEYS_ENV}", env)
    return _merge(raw, {"server": {"keys": keys}})


def _named_keys(source: str, text: str) -> list:
    try:
        data = yaml.safe_load(text) or []
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    keys = data.get("keys") if isinstance(data, dict) else data
    if not isinstance(keys, list) or not all(isinstance(key, dict) for key in keys):
        raise ConfigError(f"{source}: expected a list of keys, each a mapping such as {{name: a, key: ...}}")
    return keys


def warn_of_open_key_files(path: str | Path | None, config: Config) -> None:
    """One warning for each file holding keys that group or others may read: `server.key_file`,
    and the config file when it holds keys themselves (not only `key_sha256`)."""
    files = [Path(config.server.key_file)] if config.server.key_file else []
    try:
        if path and _holds_plain_keys(_read_yaml(path)):
            files.insert(0, Path(path))
    except ConfigError:
        pass
    for file in filter(open_to_others, files):
        log.warning("%s holds API keys and is readable by group or others; run chmod 600 %s", file, file)


def _holds_plain_keys(raw: dict) -> bool:
    presets = raw.get("presets")
    return any(map(_plain_keys_in, (raw, *(presets.values() if isinstance(presets, dict) else ()))))


def _plain_keys_in(section: Any) -> bool:
    server, scheduler = _mapping(section, "server"), _mapping(section, "scheduler")
    keys = server.get("keys")
    named = keys if isinstance(keys, list) else []
    return bool(
        server.get("api_keys")
        or server.get("admin_keys")
        or scheduler.get("priority_keys")
        or any(isinstance(key, dict) and key.get("key") for key in named)
    )


def _mapping(node: Any, key: str) -> dict:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def _read_yaml(path: str | Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping at the top level")
    return data


def _split_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {item!r}: expected dotted.key=value")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    return key.strip(), value


def _set_dotted(raw: dict, key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out

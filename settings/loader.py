"""Build a validated `Config` from config.yaml, a preset and `--set key=value` overrides.

Every error is one line naming the key, the value and what is allowed, so a bad config stops
start-up with something an operator can fix without reading a traceback.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from settings.schema import Config


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
    return build(Config, raw)


def build(cls: type, data: Any, prefix: str = "", base: Any = None) -> Any:
    """Turn a mapping into the dataclass `cls` over `base`, checking keys, types and ranges."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or '(top level)'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key; allowed: {', '.join(fields)}")
    hints = typing.get_type_hints(cls)
    base = base if base is not None else cls()
    values = {}
    for name, f in fields.items():
        current = getattr(base, name)
        values[name] = _coerce(hints[name], data[name], prefix + name, f.metadata, current) if name in data else current
    return cls(**values)


def _coerce(tp: Any, value: Any, key: str, meta: Any, current: Any) -> Any:
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key + ".", current)
    origin = get_origin(tp)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: {value!r} is not allowed; expected a mapping")
        return dict(value)
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
            raise ConfigError(f"{key}: {value!r} is not allowed; expected a list of strings")
        return [str(v) for v in value]
    return _scalar(tp, value, key, meta)


def _scalar(tp: Any, value: Any, key: str, meta: Any) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: {value!r} is not allowed; expected true or false")
        return value
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{key}: {value!r} is not allowed; expected a string")
        return str(value)
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key}: {value!r} is not allowed; expected an integer{_range(meta)}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: {value!r} is not allowed; expected a number{_range(meta)}")
        value = float(value)
    lo, hi = meta.get("min"), meta.get("max")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        kind = "an integer" if tp is int else "a number"
        raise ConfigError(f"{key}: {value!r} is not allowed; expected {kind}{_range(meta)}")
    return value


def _range(meta: Any) -> str:
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f" between {lo} and {hi}"
    if lo is not None:
        return f" >= {lo}"
    return ""


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

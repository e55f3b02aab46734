"""The configuration reference, rendered from settings/schema.py so it cannot drift from the code.

Every key's type, default, bounds and description are declared once, in the schema; this module
only walks it. It writes docs/configuration.md and prints the same reference as plain text for
`python app.py --help-config`. tests/settings/test_config_docs.py renders it in memory and fails
when the file on disk differs.

    python scripts/config_docs.py           # rewrite docs/configuration.md
    python scripts/config_docs.py --check   # exit 1 when docs/configuration.md is stale
    python scripts/config_docs.py --text    # the plain-text reference, as app.py --help-config prints it
"""

from __future__ import annotations

import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: the repository root is not on the path yet
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

from settings.schema import Config  # noqa: E402

DOC_PATH = ROOT / "docs" / "configuration.md"
REGENERATE = ".venv/bin/python scripts/config_docs.py"
REQUIRED = "required"


@dataclass(frozen=True)
class Key:
    path: str  # dotted, as `--set` takes it: scheduler.limit.high_reserve
    type: str
    default: str  # as YAML writes it
    bounds: str  # "" when any value of the type is allowed
    description: str


@dataclass(frozen=True)
class Group:
    """One model of the schema: a section (`server`), a nested one (`scheduler.limit`) or the shape
    of a list's entries (`server.keys[]`)."""

    path: str
    intro: str
    keys: tuple[Key, ...]


def groups(model: type[BaseModel] = Config) -> list[Group]:
    """Every section of the schema, top to bottom, each with its keys."""
    defaults = Config().model_dump()
    out: list[Group] = []
    for name, info in model.model_fields.items():
        section = _model_of(info.annotation)
        if section is None:
            raise TypeError(f"config key {name!r} is not a section: the top level holds sections only")
        out += _walk(section, name, defaults[name], _intro(info, section))
    return out


def keys() -> list[Key]:
    return [key for group in groups() for key in group.keys]


def _walk(model: type[BaseModel], path: str, defaults: dict | None, intro: str) -> list[Group]:
    rows: list[Key] = []
    nested: list[Group] = []
    for name, info in model.model_fields.items():
        child = f"{path}.{info.alias or name}"
        default = defaults[name] if defaults is not None else info.get_default(call_default_factory=True)
        sub = _model_of(info.annotation)
        if sub is not None:
            nested += _walk(sub, child, default, _intro(info, sub))
            continue
        item = _list_item_model(info.annotation)
        if item is not None:
            rows.append(Key(child, f"list; entries as in `{child}[]`", _yaml(default), "", _sentence(info.description)))
            nested += _walk(item, f"{child}[]", None, _intro(info, item))
            continue
        rows.append(Key(child, _type_name(info.annotation), _yaml(default), _bounds(info), _sentence(info.description)))
    return [Group(path, intro, tuple(rows)), *nested]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is list:
        return _model_of(get_args(annotation)[0])
    return None


def _intro(info: FieldInfo, model: type[BaseModel]) -> str:
    """A nested section's text: its field's description, then its class's docstring."""
    parts = [_sentence(info.description), _sentence(" ".join((model.__doc__ or "").split()))]
    return " ".join(p for p in parts if p)


def _sentence(text: str | None) -> str:
    text = (text or "").strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", "...", "?", "!")) else text + "."


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(_yaml(a) for a in get_args(annotation))
    if origin is list:
        return f"list of {_type_name(get_args(annotation)[0])}s"
    if origin is dict:
        return "mapping"
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(annotation, str(annotation))


def _bounds(info: FieldInfo) -> str:
    found: dict[str, Any] = {}
    for item in info.metadata:
        for attr in ("ge", "gt", "le", "lt", "min_length", "pattern"):
            if getattr(item, attr, None) is not None:
                found[attr] = getattr(item, attr)
    parts = []
    if "ge" in found and "le" in found:
        parts.append(f"{_number(found['ge'])} to {_number(found['le'])}")
    else:
        parts += [f">= {_number(found['ge'])}"] if "ge" in found else []
        parts += [f"<= {_number(found['le'])}"] if "le" in found else []
    parts += [f"> {_number(found['gt'])}"] if "gt" in found else []
    parts += [f"< {_number(found['lt'])}"] if "lt" in found else []
    parts += [f"at least {found['min_length']} characters"] if "min_length" in found else []
    parts += [f"matches `{found['pattern']}`"] if "pattern" in found else []
    return ", ".join(parts)


def _number(value: Any) -> str:
    return repr(value)


def _yaml(value: Any) -> str:
    """A value as it would be written in config.yaml."""
    if value is PydanticUndefined:
        return REQUIRED
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return "".join(c for c in title.lower() if c.isalnum() or c in " -_").replace(" ", "-")


def _code(default: str) -> str:
    return default if default == REQUIRED else f"`{_cell(default)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown() -> str:
    all_groups = groups()
    lines = [
        "<!-- Generated from settings/schema.py by scripts/config_docs.py: do not edit by hand.",
        f"     Regenerate with `{REGENERATE}`; tests/settings/test_config_docs.py fails while it is stale. -->",
        "",
        "# Configuration reference",
        "",
        "You want to look up a key: what it does, its type, its default and the values it allows. How to set",
        "keys (config.yaml, presets, `--set dotted.key=value`) is in [Getting started](getting-started.md#configuring-it).",
        "`python app.py --help-config` prints this same reference. Descriptions live in `settings/schema.py`,",
        f"beside each key's type and bounds; after changing them run `{REGENERATE}`.",
        "",
        f"{len(keys())} keys in {len(all_groups)} sections:",
        "",
    ]
    for group in all_groups:
        indent = "  " if "." in group.path else ""
        lines.append(f"{indent}- [`{group.path}`](#{_anchor(group.path)})")
    for group in all_groups:
        level = "##" if "." not in group.path else "###"
        lines += ["", f"{level} {group.path}", ""]
        if group.intro:
            lines += textwrap.wrap(group.intro, 110, break_on_hyphens=False) + [""]
        if group.keys:
            lines += ["| key | type | default | allowed | description |", "| --- | --- | --- | --- | --- |"]
            lines += [
                f"| `{k.path}` | {_cell(k.type)} | {_code(k.default)} | {_cell(k.bounds)} | {_cell(k.description)} |"
                for k in group.keys
            ]
    return "\n".join(lines).rstrip() + "\n"


def render_text() -> str:
    out = [
        "Configuration reference, from settings/schema.py (the same as docs/configuration.md).",
        "Set a key in config.yaml, or at start-up: python app.py --set dotted.key=value",
        "",
    ]
    for group in groups():
        out.append(group.path)
        if group.intro:
            out += textwrap.wrap(group.intro.replace("`", ""), 100, initial_indent="  ", subsequent_indent="  ")
        for k in group.keys:
            facts = ", ".join(p for p in (k.type, f"default {k.default}", k.bounds) if p).replace("`", "")
            out.append(f"  {k.path}  ({facts})")
            out += textwrap.wrap(
                k.description.replace("`", ""), 100, initial_indent="      ", subsequent_indent="      "
            )
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if "--text" in argv:
        print(render_text(), end="")
        return 0
    text = render_markdown()
    if "--check" in argv:
        if not DOC_PATH.exists() or DOC_PATH.read_text(encoding="utf-8") != text:
            print(f"{DOC_PATH.relative_to(ROOT)} is stale; run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    DOC_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {DOC_PATH.relative_to(ROOT)} ({len(keys())} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

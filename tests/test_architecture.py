"""The structure drawn from the code holds and is what the docs say: docs/architecture.md's map is
what scripts/architecture_map.py renders today, the parts form floors with no import cycle, the
two transports never import each other and nothing but app.py imports them; inside ui/, its parts
form floors too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scripts import architecture_map as arch


def test_the_map_in_architecture_md_is_current() -> None:
    on_disk = arch.DOC_PATH.read_text(encoding="utf-8")
    assert on_disk == arch.with_map(on_disk), f"docs/architecture.md is stale: run {arch.REGENERATE} and commit it"


def test_every_import_runs_down_a_floor() -> None:
    edges = arch.graph()
    floor = arch.floors(edges)  # raises on a cycle
    assert all(floor[part] > floor[used] for part, uses in edges.items() for used in uses)
    assert floor["core"] == 0 and floor["app"] == max(floor.values())


def test_the_transports_stand_apart() -> None:
    edges = arch.graph()
    assert "ui" not in edges["api"] and "api" not in edges["ui"]
    assert [part for part, uses in edges.items() if uses & {"api", "ui"}] == ["app"]


def test_a_cycle_has_no_floor() -> None:
    with pytest.raises(ValueError, match="cycle"):
        arch.floors({"a": {"b"}, "b": {"a"}})


def ui_part(path: Path) -> str:
    """A subpackage of ui/ ("chat"), or one of its top modules ("page")."""
    relative = path.relative_to(arch.ROOT / "ui")
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def test_the_page_parts_form_floors_too() -> None:
    """The chat knows nothing of the sidebar beside it (the sidebar fills it through ui.chat.parts),
    and every part stands on ui.page, which stands on none of them."""
    edges: dict[str, set[str]] = {}
    for path in (arch.ROOT / "ui").rglob("*.py"):
        uses = edges.setdefault(ui_part(path), set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ui."):
                uses.add(node.module.split(".")[1])
    edges.pop("__init__", None)
    floor = arch.floors({part: uses - {part} for part, uses in edges.items()})  # raises on a cycle
    assert floor["page"] < floor["chat"] < floor["history"] < floor["blocks"] < floor["mount"]

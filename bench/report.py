"""What every benchmark's report shares: a result table (printed as text, written as Markdown),
the cell formats, a PASS/MISS row, a Markdown section rewritten in place, strict JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import note, table


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[object]]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        return table(self.title, self.headers, self.rows, self.notes)

    def markdown(self) -> str:
        def cells(row: Sequence[object]) -> str:
            return "| " + " | ".join(str(c).replace("|", "/") for c in row) + " |"

        out = [
            f"#### {self.title}",
            "",
            cells(self.headers),
            cells(["---"] * len(self.headers)),
            *(cells(r) for r in self.rows),
            "",
        ]
        return "\n".join(out + [f"- {n}" for n in self.notes] + [""])


def ms(x: float) -> str:
    return "-" if x != x else f"{x * 1000:,.0f}"


def num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None or x != x else format(x, fmt)


def check_row(name: str, goal: str, value: str, ok: bool | None) -> list[object]:
    return [name, goal, value, "n/a" if ok is None else ("PASS" if ok else "MISS")]


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the part of a Markdown file from `heading` (a `## ` line) to the next `## ` heading
    with `section` (which starts with that heading), or append it when the file has none."""
    section = section.rstrip() + "\n"
    text = path.read_text() if path.exists() else ""
    old = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)  # to the next `## ` heading or the end
    if old.search(text):
        path.write_text(old.sub(lambda m: section + ("\n" if m.end() < len(text) else ""), text, count=1))
    else:
        path.write_text(text.rstrip() + "\n\n" + section if text.strip() else section)
    note(f"wrote {path}")


def write_json(path: Path, data: Any) -> None:
    """`data` as indented JSON; NaN (no samples) becomes null, which JSON has."""
    strict = json.loads(json.dumps(data), parse_constant=lambda _: None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(strict, indent=1) + "\n")
    note(f"wrote {path}")

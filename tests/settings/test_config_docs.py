"""The configuration reference cannot drift from the schema: docs/configuration.md is what
scripts/config_docs.py renders from settings/schema.py today, every key has a description, and
`python app.py --help-config` prints the same keys."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from scripts import config_docs
from settings.schema import Config

ROOT = Path(__file__).resolve().parents[2]


def leaf_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key a config file can set, walked independently of the renderer."""
    out = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        annotation = info.annotation
        item = getattr(annotation, "__args__", (None,))[0] if getattr(annotation, "__origin__", None) is list else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += leaf_paths(annotation, path + ".")
        elif isinstance(item, type) and issubclass(item, BaseModel):
            out += [path, *leaf_paths(item, path + "[].")]
        else:
            out.append(path)
    return out


def test_configuration_md_is_current():
    on_disk = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert on_disk == config_docs.render_markdown(), (
        f"docs/configuration.md is stale: run {config_docs.REGENERATE} and commit the result"
    )


def test_every_key_is_documented_once_with_a_description():
    documented = [key.path for key in config_docs.keys()]
    assert sorted(documented) == sorted(leaf_paths(Config))
    assert len(documented) == len(set(documented))
    assert [key.path for key in config_docs.keys() if not key.description] == []


def test_reference_shows_defaults_and_bounds_from_the_schema():
    by_path = {key.path: key for key in config_docs.keys()}
    high_reserve = by_path["scheduler.limit.high_reserve"]
    assert (high_reserve.type, high_reserve.default, high_reserve.bounds) == ("number", "0.1", "0.0 to 0.9")
    assert by_path["scheduler.max_wait_s.low"].default == "60.0"
    assert by_path["engine.backend"].default == "auto"
    assert by_path["server.keys[].class"].type == "one of high, medium, low"
    assert by_path["server.default_limits.rpm"].type == "integer or null"
    markdown = config_docs.render_markdown()
    assert "| `scheduler.limit.high_reserve` | number | `0.1` | 0.0 to 0.9 |" in markdown
    assert "scripts/config_docs.py" in markdown.splitlines()[1]  # the header says how to regenerate it


def test_help_config_prints_every_key():
    result = subprocess.run(
        [sys.executable, "app.py", "--help-config"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == config_docs.render_text()
    printed = {
        line.split()[0]
        for line in result.stdout.splitlines()
        if line.startswith("  ") and "(" in line and not line.startswith("   ")
    }
    assert set(leaf_paths(Config)) <= printed


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(config_docs, "DOC_PATH", stale)
    monkeypatch.setattr(config_docs, "ROOT", tmp_path)
    assert config_docs.main(["--check"]) == 1
    assert "configuration.md is stale" in capsys.readouterr().err
    assert config_docs.main([]) == 0
    assert config_docs.main(["--check"]) == 0

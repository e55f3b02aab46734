"""The project installs as a package: a wheel built from the tree holds every module the server
imports, so the installed `gpt-oss-webui` command starts (a package left out of pyproject.toml
fails only there, at import)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module_the_server_imports(tmp_path) -> None:
    tree = tmp_path / "tree"  # a copy: pip builds in the tree it is given, and leaves build/ there
    shutil.copytree(
        ROOT,
        tree,
        ignore=shutil.ignore_patterns(
            ".*",
            "__pycache__",
            "models",
            "data",
            "logs",
            "docs",
            "tests",
            "bench",
            "scripts",
            "test-artifacts",
            "build",
            "*.egg-info",
            "node_modules",
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(tree),
        ],
        check=True,
        cwd=tmp_path,
        timeout=300,
    )
    [wheel] = (tmp_path / "dist").glob("gpt_oss_webui-*.whl")
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    assert (tmp_path / "site" / "engine" / "templates").is_dir()
    assert not (tmp_path / "site" / "tests").exists()
    code = (
        f"import sys; sys.path[:] = [p for p in sys.path if p not in ('', {str(ROOT)!r})]; "
        "import app, wiring, api.server, ui.page"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]

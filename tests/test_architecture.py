"""The house rules (docs/architecture.md): imports point one way, the general readers know
nothing of planner, only cli imports typer, and the old import paths still work for one
release as aliases of the modules that moved."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from planner._compat import MOVED

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold():
    # .importlinter at the repository root: the layers, the readers' and typer/rich contracts
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_import_path_is_the_moved_module(old, new):
    module = importlib.import_module(old)
    if old in ("planner.importers", "planner.export"):
        # packages: the same public names as the new module
        moved = importlib.import_module(new)
        assert set(module.__all__) == set(moved.__all__)
        assert all(getattr(module, n) is getattr(moved, n) for n in moved.__all__)
    else:
        assert module is importlib.import_module(new)


def test_no_module_left_at_a_moved_path():
    # an old path is only an alias: nothing but the one-line shim lives there
    for old in MOVED:
        parts = old.split(".")
        path = ROOT.joinpath(*parts).with_suffix(".py")
        if not path.exists():
            path = ROOT.joinpath(*parts, "__init__.py")
        assert len(path.read_text().splitlines()) <= 5, path

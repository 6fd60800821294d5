"""Shared fixtures: the CLI runner (terminal width pinned) and the fixture directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def runner() -> CliRunner:
    """CliRunner with a wide, colourless terminal so rich tables neither wrap nor truncate."""
    return CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})


@pytest.fixture
def hf_dir() -> Path:
    """tests/data/hf/<repo name>/config.json: the public configs' relevant fields."""
    return TESTS / "data" / "hf"


@pytest.fixture
def examples_dir() -> Path:
    return TESTS.parent / "examples"

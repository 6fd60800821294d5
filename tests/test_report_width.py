"""report._natural_width adds up a plain table's width instead of measuring it; rich's own
measurement (`Measurement.get`, no width limit) is the reference it must equal, for the
tables the plan view folds and for the table options the arithmetic reads."""

from __future__ import annotations

import itertools

import pytest
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from planner.config import Job, default_training, resolve_hardware
from planner.presets import get_preset
from planner.search import search
from planner.views import report


def _measured(console: Console, table: Table) -> int:
    return Measurement.get(console, console.options.update(width=10_000), table).maximum


@pytest.fixture(scope="module")
def rows():
    m = get_preset("llama3-8b")
    job = Job(
        model=m, hardware=resolve_hardware("h100-sxm"), num_gpus=64, training=default_training(m)
    )
    return report._plan_rows(search(job))[0]


@pytest.mark.parametrize("n_folds", range(len(report._FOLDS)), ids=["none", *report._FOLDS[:-1]])
def test_the_plan_table_adds_up_to_what_rich_measures(rows, n_folds):
    console = Console(width=80, record=True)
    table, _ = report._table_for(rows, set(report._FOLDS[:n_folds]), "title")
    assert report._natural_width(console, table) == _measured(console, table)


@pytest.mark.parametrize(
    "pad_edge, show_edge, collapse, padding, boxed",
    list(
        itertools.product(
            [False, True],
            [False, True],
            [False, True],
            [(0, 1), (0, 2, 0, 1), (0, 1, 0, 3)],
            [1, 0],
        )
    ),
)
def test_every_padding_and_edge_option_adds_up(pad_edge, show_edge, collapse, padding, boxed):
    t = Table(
        title="t",
        box=box.SIMPLE_HEAD if boxed else None,
        pad_edge=pad_edge,
        show_edge=show_edge,
        collapse_padding=collapse,
        padding=padding,
    )
    t.add_column("name")
    t.add_column(Text("a longer header"), justify="right")
    t.add_column("x")
    t.add_row(Text("wide cell here"), Text("1"), Text("héllo wörld ✓"))
    t.add_row(Text("a"), Text("22"), Text(""))
    console = Console(width=80)
    assert report._natural_width(console, t) == _measured(console, t)


def test_what_the_sum_does_not_cover_is_measured():
    # markup in a header, a two-line header, a fixed-width column: rich measures them
    console = Console(width=80)
    for head, width in (("[bold]bold[/bold]", None), ("two\nlines", None), ("fixed", 30)):
        t = Table()
        t.add_column(head, width=width)
        t.add_row(Text("cell"))
        assert report._natural_width(console, t) == _measured(console, t)

"""The serve table, the Pareto front and the procedure's trace read at 80, 120 and 200
columns: no line wider than the terminal, no number cut to an ellipsis, the pick's `1*`
marker whole (issue 19: at 80 columns the table cut numbers, `54...`, and the marker)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from planner.config import resolve_hardware
from planner.presets import resolve_model
from planner.serve.search import ServeOptions, search
from planner.serve.specs import ServeJob, ServingSpec
from planner.views import serve_report

# the cases; the SLO (the default interactive one) adds the Pareto front's SLO column
CASES = [
    ("deepseek-v3", 16, "h200", 0.05),
    ("llama3-70b", 8, "h100-sxm", 0.05),
    ("qwen3-235b-a22b", 8, "b200", 0.05),
    ("deepseek-v3", 16, "h200", None),
]


def _result(model, gpus, hw, tpot):
    job = ServeJob(
        model=resolve_model(model),
        hardware=resolve_hardware(hw),
        num_gpus=gpus,
        serving=ServingSpec(precision="fp8", input_length=2048, output_length=512),
    )
    return search(job, ServeOptions(top=10, tpot_s=tpot, ttft_s=3.0 if tpot else None))


@pytest.mark.parametrize("width", [80, 120, 200])
@pytest.mark.parametrize(
    "model,gpus,hw,tpot", CASES, ids=[f"{c[0]}-{'slo' if c[3] else 'no-slo'}" for c in CASES]
)
def test_serve_view_reads_at_width(model, gpus, hw, tpot, width):
    result = _result(model, gpus, hw, tpot)
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=False, color_system=None).print(
        serve_report.plan_view(result)
    )
    lines = out.getvalue().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines)
    assert not [line for line in lines if "…" in line]
    text = out.getvalue()
    for p in result.plans:  # every number of every row is printed whole
        e = p.estimate
        assert f"{p.per_gpu:,.0f}" in text and str(e.concurrency) in text
    if result.pick_rank and result.pick_rank <= len(result.plans):  # the pick is in the table
        assert any(line.lstrip().startswith(f"{result.pick_rank}*") for line in lines)


def test_the_pick_note_says_where_the_pick_is():
    """The trace's "=> ..." line says the pick is marked in the table only when it is in it; a
    pick ranked below the table is named with its rank and the --top that shows it."""
    from types import SimpleNamespace

    plans = [object()] * 10
    inside = SimpleNamespace(pick_rank=3, plans=plans)
    below = SimpleNamespace(pick_rank=17, plans=plans)
    none = SimpleNamespace(pick_rank=None, plans=plans)
    assert serve_report._pick_where(inside) == " (marked * above)"
    assert "ranked 17" in serve_report._pick_where(below)
    assert "--top 17" in serve_report._pick_where(below)
    assert "above" not in serve_report._pick_where(below)
    assert serve_report._pick_where(none) == ""

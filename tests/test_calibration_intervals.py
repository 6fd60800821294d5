"""The 80% prediction intervals (planner/calibration/intervals.py): the shipped table is what
benchmarks/data give now, the quantile rule covers 80% of exchangeable draws, and, leave one
run out, the measured step time falls inside its interval for 70-90% of the runs of every
class with at least MIN_RUNS runs (benchmarks/intervals.py prints every class; the smaller
ones have their own small-sample interval, and their coverage moves in steps of 1/4 or 1/6:
docs/calibration.md)."""

from __future__ import annotations

import math
import random
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.intervals import BAR, binomial_p, coverage, leave_one_out  # noqa: E402
from planner.calibration.interval_table import TIME  # noqa: E402
from planner.calibration.intervals import (  # noqa: E402
    MIN_RUNS,
    WIDEN,
    Interval,
    build_table,
    label,
    time_interval,
)
from planner.config import load_config, resolve_hardware  # noqa: E402
from scripts.gen_intervals import TARGET, render, residuals, serve_residuals  # noqa: E402


@pytest.fixture(scope="module")
def loo():
    return leave_one_out()


def test_the_shipped_table_is_current():
    assert TARGET.read_text() == render(*residuals(), serve_residuals()), (
        "stale: run python scripts/gen_intervals.py"
    )


def test_the_quantile_rule_covers_80_percent_of_new_draws():
    # draws from one normal law: the interval of 20 covers a 21st with probability 16/21 to
    # 18/21 by the k/(n+1) rule; averaged over 2000 trials it lands near 0.80
    rng = random.Random(1)
    inside = 0
    for _ in range(2000):
        rows = [("c", "g", rng.gauss(0, 1)) for _ in range(20)]
        lo, hi, _ = build_table(rows)[("c", "g")]
        inside += lo <= rng.gauss(0, 1) <= hi
    assert 0.76 <= inside / 2000 <= 0.84


def test_small_groups_fall_back_to_the_class_then_to_all():
    rows = [("a", "g1", 0.0)] * (MIN_RUNS - 1) + [("a", "g2", 0.1)] * MIN_RUNS
    t = build_table(rows)
    assert ("a", "g1") not in t and ("a", "g2") in t and t[("a", "*")][2] == 2 * MIN_RUNS - 1


@pytest.mark.parametrize("n", [3, 4, 6])
def test_the_small_sample_rule_covers_80_percent_of_new_draws(n):
    # a class of n < MIN_RUNS runs, its residuals normal: mean +- t(0.9, n-1) s sqrt(1 + 1/n)
    # covers a new draw with probability 0.80 exactly; over 4000 trials, within +-0.03
    # (binomial sd sqrt(0.8 x 0.2 / 4000) = 0.0063)
    rng = random.Random(n)
    inside = 0
    for _ in range(4000):
        rows = [("c", "g", rng.gauss(0.3, 0.2)) for _ in range(n)]
        lo, hi, runs = build_table(rows)[("c", "*")]
        assert runs == n and ("c", "g") not in build_table(rows)
        inside += lo <= rng.gauss(0.3, 0.2) <= hi
    assert 0.77 <= inside / 4000 <= 0.83


def test_a_small_class_stands_on_its_own_runs_not_the_pool():
    # 3 runs of class "s" far from 10 of class "b": its interval is about its own mean
    rows = (
        [("b", "g", 0.0)] * 5 + [("b", "g", 0.01)] * 5 + [("s", "g", v) for v in (0.50, 0.55, 0.60)]
    )
    t = build_table(rows)
    lo, hi, n = t[("s", "*")]
    half = 1.886 * 0.05 * math.sqrt(1 + 1 / 3)  # t(0.9, 2) x s x sqrt(1 + 1/n)
    assert (lo, hi, n) == (
        pytest.approx(0.55 - half, abs=1e-4),
        pytest.approx(0.55 + half, abs=1e-4),
        3,
    )
    assert ("s", "g") not in t  # per GPU, a group still needs MIN_RUNS


@pytest.mark.parametrize("cls", ["dense-bf16", "fsdp", "moe"])
def test_leave_one_out_coverage_is_within_the_bar(loo, cls):
    got = coverage(loo, "time", "class")[cls]
    assert got["n"] >= MIN_RUNS
    assert BAR[0] <= got["coverage"] <= BAR[1], got


def test_the_binomial_p_value_of_a_coverage_count():
    # under an honest 80% interval, k of n inside is Binomial(n, 0.8):
    # 4 of 6: the counts no more likely than 4 (P(4) = 15 x 0.8^4 x 0.2^2 = 0.24576) are
    # 0-4, i.e. 1 - P(5) - P(6) = 1 - 6 x 0.8^5 x 0.2 - 0.8^6 = 1 - 0.393216 - 0.262144
    assert binomial_p(4, 6) == pytest.approx(1 - 0.393216 - 0.262144, abs=1e-9)
    # 4 of 4 is the most likely count of four: nothing is less surprising
    assert binomial_p(4, 4) == pytest.approx(1.0)
    # 2 of 10: P(2) = 45 x 0.8^2 x 0.2^8 = 7.4e-5, and the counts 0-2 sum to 7.8e-5
    assert binomial_p(2, 10) == pytest.approx(
        sum(math.comb(10, k) * 0.8**k * 0.2 ** (10 - k) for k in range(3)), rel=1e-9
    )
    assert binomial_p(2, 10) < 1e-4


def test_off_calibrated_ground_the_interval_widens(examples_dir):
    # mi300x has no runs (fitted_on empty: a caveat): the class's interval on every GPU,
    # WIDEN x in log space
    job, layout = load_config(examples_dir / "llama3-70b-2048xh100.yaml")
    on = time_interval(job, layout)
    from dataclasses import replace

    off = time_interval(replace(job, hardware=resolve_hardware("mi300x")), layout)
    assert (on.cls, on.gpu, on.widened) == ("dense-bf16", "h100-sxm", False)
    assert on.runs == TIME[("dense-bf16", "h100-sxm")][2]
    lo, hi, _ = TIME[("dense-bf16", "*")]
    assert (off.cls, off.gpu) == ("dense-bf16", "*")
    assert off.widened and math.log(off.hi / off.lo) == pytest.approx(WIDEN * (hi - lo), rel=1e-9)


@pytest.mark.parametrize(
    "lo,hi,text", [(0.91, 1.09, "±9%"), (0.93, 1.12, "-7/+12%")], ids=["symmetric", "skewed"]
)
def test_label(lo, hi, text):
    assert label(Interval(lo, hi, "c", "g", 10)) == text


def test_validate_json_carries_the_intervals_and_their_basis(runner, examples_dir):
    import json

    from planner.cli import app

    out = json.loads(
        runner.invoke(
            app, ["validate", str(examples_dir / "llama3-70b-2048xh100.yaml"), "--json"]
        ).stdout
    )
    q10, q90, n = TIME[("dense-bf16", "h100-sxm")]
    t = out["time"]["step_time_s"]
    assert out["time"]["step_time_s_interval"] == pytest.approx(
        [t * math.exp(q10), t * math.exp(q90)]
    )
    lo, hi = out["memory"]["total_bytes_interval"]
    assert lo < out["memory"]["total_bytes"] < hi
    tps = out["throughput"]["tokens_per_s_per_gpu"]
    assert out["throughput"]["tokens_per_s_per_gpu_interval"] == pytest.approx(
        [tps / math.exp(q90), tps / math.exp(q10)]
    )
    assert {k: out["interval_basis"][k] for k in ("class", "gpu", "runs")} == {
        "class": "dense-bf16",
        "gpu": "h100-sxm",
        "runs": n,
    }


def test_plan_marks_ties_where_the_intervals_overlap(runner):
    import json

    from planner.cli import app

    args = ["plan", "--model", "llama3-8b", "--gpus", "64", "--top", "12"]
    plans = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["plans"]
    fastest = min(plans, key=lambda p: p["time"]["step_time_s"])
    best_hi = fastest["time"]["step_time_s_interval"][1]
    for p in plans:
        overlap = p["time"]["step_time_s_interval"][0] <= best_hi
        assert p["tie_with_fastest"] == (overlap and p is not fastest), p["rank"]
    text = runner.invoke(app, args).stdout
    marked = [int(m) for m in re.findall(r"^\s*(\d+)\*?=", text, flags=re.M)]
    assert marked == [p["rank"] for p in plans if p["tie_with_fastest"]]


def test_the_html_reports_show_the_intervals(runner, examples_dir, tmp_path):
    from planner.cli import app

    page = tmp_path / "v.html"
    cfg = str(examples_dir / "llama3-70b-2048xh100.yaml")
    assert runner.invoke(app, ["validate", cfg, "--html", str(page)]).exit_code == 0
    assert "80% intervals: step" in page.read_text()
    plan = tmp_path / "p.html"
    assert (
        runner.invoke(
            app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--top", "3", "--html", str(plan)]
        ).exit_code
        == 0
    )
    assert "= a tie with the fastest" in plan.read_text()


@pytest.fixture(scope="module")
def loo_serve():
    from benchmarks.intervals import leave_one_out_serve

    return leave_one_out_serve()


@pytest.mark.parametrize(
    "metric,cls",
    [
        ("output_tokens_per_s", "dense"),
        ("output_tokens_per_s", "moe"),
        ("e2e_s", "dense"),
        ("ttft_s", "dense"),
        ("tpot_s", "dense"),
    ],
    ids=lambda v: v,
)
def test_serving_leave_one_out_coverage_is_within_the_bar(loo_serve, metric, cls):
    got = coverage(loo_serve, metric, "class")[f"{metric} {cls}"]
    assert got["n"] >= MIN_RUNS
    assert BAR[0] <= got["coverage"] <= BAR[1], got


def test_serve_validate_json_carries_ttft_tpot_and_throughput_intervals(runner, examples_dir):
    import json

    from planner.calibration.interval_table import SERVE
    from planner.cli import app

    out = json.loads(
        runner.invoke(
            app, ["validate", str(examples_dir / "serve" / "llama3-70b-8xh100.yaml"), "--json"]
        ).stdout
    )
    for metric, section in (
        ("ttft_s", "latency"),
        ("tpot_s", "latency"),
        ("output_tokens_per_s", "throughput"),
    ):
        q10, q90, n = SERVE[metric][("dense", "h100-sxm")]
        v = out[section][metric]
        assert out[section][f"{metric}_interval"] == pytest.approx(
            [v * math.exp(q10), v * math.exp(q90)]
        )
        assert out["interval_basis"][metric]["runs"] == n
    assert "e2e_s_interval" not in out["latency"]  # continuous batching: no static-batch runs

"""The step-time and peak-memory accuracy bars on the published runs, one test per bar.

The step-time bars: calibration.yaml within median |error| 5% and max 15%; every class of
calibration-modern.yaml within median 10% and max 25%. The memory bar: published peak memory
within 10% for the cases that publish it, and at most 3 of the runs judged over capacity (the
fits-in-memory rule: more than 10% over). The errors are benchmarks/accuracy.py's
(predicted / measured - 1 of the step time; predicted / published - 1 of the peak memory).

A bar the model meets is a plain test. A bar it does not meet is a strict xfail that says why
(README 'Accuracy' has the evidence), paired with a guard that keeps today's figure from
getting worse; when the model meets the bar, the xfail turns into a failure and the marker
must go.
"""

from __future__ import annotations

import statistics
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import evaluate, load_cases, memory_check  # noqa: E402

DATA = ROOT / "benchmarks" / "data"


@cache
def _rows(name: str) -> tuple:
    return tuple(evaluate(load_cases(DATA / name)))


def _class(name: str, cls: str) -> list[float]:
    errs = [abs(r["error"]) for r in _rows(name) if r["class"] == cls]
    assert errs, f"no {cls} runs in {name}"
    return errs


def _worst(name: str, cls: str) -> str:
    r = max((r for r in _rows(name) if r["class"] == cls), key=lambda r: abs(r["error"]))
    return f"{r['id']}: {r['error']:+.1%}"


# ----------------------------------------------------------------------- calibration.yaml


def test_dense_bf16_median_within_5_percent():
    assert statistics.median(_class("calibration.yaml", "dense-bf16")) <= 0.05


def test_dense_bf16_max_within_15_percent():
    assert max(_class("calibration.yaml", "dense-bf16")) <= 0.15, _worst(
        "calibration.yaml", "dense-bf16"
    )


# ---------------------------------------------------------------- calibration-modern.yaml

MODERN = "calibration-modern.yaml"


LONG_CONTEXT_MEDIAN = pytest.mark.xfail(
    strict=True,
    reason=(
        "10.2% under the profiles the fit gives since it predicts each run at its own "
        "micro-batch (7.9% under the earlier, stale profiles): the class is four runs of one "
        "torchtitan sweep (Llama 3.1 8B on 8 H100, 32k-262k tokens, cp 1-8), fitted with the "
        "moe and fsdp runs of the same GPU; the median of four |errors| is the mean of the middle "
        "two, +9.0% and -11.4%"
    ),
)


@pytest.mark.parametrize("cls", ["moe", pytest.param("long-context", marks=LONG_CONTEXT_MEDIAN)])
def test_modern_class_median_within_10_percent(cls):
    assert statistics.median(_class(MODERN, cls)) <= 0.10


def test_long_context_max_within_25_percent():
    assert max(_class(MODERN, "long-context")) <= 0.25, _worst(MODERN, "long-context")


def test_fsdp_median_within_10_percent():
    assert statistics.median(_class(MODERN, "fsdp")) <= 0.10


def test_fsdp_median_does_not_regress():
    assert statistics.median(_class(MODERN, "fsdp")) <= 0.18


@pytest.mark.xfail(
    strict=True,
    reason=(
        "identical configs measured far apart in different releases: Qwen3-30B-A3B on 16 H100 "
        "(mb-26.02.01 vs mb-26.02, same model, layout and settings) took 28.9 s and 51.3 s, so "
        "no deterministic model reading these configs can be within 25% of both (the best "
        "possible max is 27.8%); the Qwen3-235B GB200 64-GPU runs and B200 mbs-1 runs differ by "
        "2x from their neighbours likewise (README 'Accuracy')"
    ),
)
def test_moe_max_within_25_percent():
    assert max(_class(MODERN, "moe")) <= 0.25, _worst(MODERN, "moe")


@pytest.mark.xfail(
    strict=True,
    reason=(
        "as the median: torchtitan's async TP and rowwise FP8 runs, and the power-limited B200 "
        "runs (their power limit is not stated) filed under the DGX B200 profile"
    ),
)
def test_fsdp_max_within_25_percent():
    assert max(_class(MODERN, "fsdp")) <= 0.25, _worst(MODERN, "fsdp")


# the guards sit just above today's maxima. moe: mb-25.11-qwen3-30b-a3b-h100-16g (-41%), the
# dropless run whose token-drop twin (mb-25.09, the same layout) measured half its time. The
# token-drop runs (mb-25.09-qwen3-30b-a3b-b200-8g +120% before) and Llama 4 Scout on GB200
# (+48%) are now costed as their recipes run them, drop-and-pad (moe_pad_expert_input_to_capacity:
# no host sync per MoE layer, the expert block inside the per-layer graphs) and, for Scout, the
# alltoall dispatcher of its recipe (corrections.yaml)
@pytest.mark.parametrize("cls,bar", [("moe", 0.45), ("fsdp", 0.50)])
def test_modern_max_does_not_regress(cls, bar):
    assert max(_class(MODERN, cls)) <= bar, _worst(MODERN, cls)


# ------------------------------------------------------------------------------ memory


def _memory():
    return memory_check(list(_rows(MODERN)))


def test_no_run_that_ran_is_judged_over_capacity():
    # every case ran; the fits-in-memory rule errors more than 10% over capacity (the Llama 4
    # Scout GB200 run was, at fp32 gradients its recipe does not use:
    # benchmarks/data/corrections.yaml)
    mem = _memory()
    assert mem["judged_infeasible"] == 0, mem["cases_judged_infeasible"]


def test_each_correction_names_a_case_and_sets_a_key_the_case_leaves_out():
    import yaml

    from benchmarks.accuracy import corrected, corrections

    data = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / MODERN
    cases = {c["id"]: c for c in yaml.safe_load(data.read_text())["cases"]}
    for cid, fix in corrections().items():
        assert cid in cases and fix["source"] and fix["why"]
        for dotted, value in fix["set"].items():
            section, key = dotted.split(".", 1)
            assert key not in cases[cid].get(section, {})  # a gap filled, never a value changed
            assert corrected(cases[cid], fix)[section][key] == value
            assert key not in cases[cid].get(section, {})  # the collected case is untouched


@pytest.mark.xfail(
    strict=True,
    reason=(
        "the 26 published peaks as the configs are written: 18 are torchtitan's (its op-level "
        "selective checkpointing and eager fp32 loss, which the configs' `recompute: selective` "
        "does not say; read from their TOMLs by the torchtitan importer 12 of the 16 distinct runs "
        "are within 10%, tests/test_torchtitan_peaks.py), 6 are a Moonlight study whose data leave "
        "out the recipe's bf16 gradients and moments (README 'Accuracy')"
    ),
)
def test_published_peaks_within_10_percent():
    mem = _memory()
    assert mem["within_10pct"] == mem["published_peaks"]


def test_published_peaks_do_not_regress():
    mem = _memory()
    assert mem["published_peaks"] >= 26
    assert mem["within_10pct"] >= 2


def test_suspect_runs_are_reported_not_scored_or_fitted():
    # calibration-modern.yaml marks the Qwen3-30B-A3B pair on 16 H100 (identical settings,
    # 28.9 s in 26.02.01 and 51.3 s in 26.02) suspect: accuracy.py reports them apart and the
    # bars above do not score them (load_cases leaves them out); calibrate.py does not fit them
    from benchmarks.accuracy import default_paths
    from benchmarks.calibrate import fit_cases

    suspect = {c.id for c in load_cases(paths=default_paths(), suspect=True)}
    assert len(suspect) == 2 and all("qwen3-30b-a3b-h100-16g" in i for i in suspect)
    scored = {r["id"] for r in _rows("calibration-modern.yaml")}
    fitted = {c.id for c in fit_cases(default_paths(), log=lambda *_: None)}
    assert scored and fitted and not suspect & scored and not suspect & fitted


def test_identifiability_selects_only_what_the_runs_pin():
    # Synthetic sensitivities (d ln t / d u per run): a column whose RMS is below
    # SENSITIVITY_MIN is not identified; a column that is nearly another's (condition number
    # of the unit-scaled pair above CONDITION_MAX) is not separable. For two unit columns at
    # angle theta the Gram matrix has eigenvalues 1 +- cos(theta): condition
    # sqrt((1 + |c|)/(1 - |c|)).
    import math

    import planner.calibration.fit as cal

    a = [0.5, -0.2, 0.3, 0.1]
    b = [x + 1e-3 * (-1) ** i for i, x in enumerate(a)]  # nearly a
    c = [0.1, 0.4, -0.3, 0.2]
    tiny = [0.01, -0.01, 0.02, 0.0]
    cos = sum(x * y for x, y in zip(a, c)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in c)
    )
    cos = abs(cos)
    assert cal._condition([a, c]) == pytest.approx(math.sqrt((1 + cos) / (1 - cos)), rel=1e-9)
    assert cal._condition([a, b]) > cal.CONDITION_MAX
    sens = {
        "matmul_efficiency": a,
        "network_efficiency": b,
        "attention_efficiency": c,
        "nvlink_efficiency": tiny,
    }
    real = cal.sensitivities
    try:
        cal.sensitivities = lambda cases, hw, names: {n: sens[n] for n in names}
        chosen, why = cal.identifiable([], None, tuple(sens))
    finally:
        cal.sensitivities = real
    assert chosen == ("matmul_efficiency", "attention_efficiency")
    assert "not separable" in why["network_efficiency"]
    assert "not identified" in why["nvlink_efficiency"]

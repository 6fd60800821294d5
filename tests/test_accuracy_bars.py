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

from benchmarks.accuracy import evaluate, load_cases, memory_check, scored  # noqa: E402

DATA = ROOT / "benchmarks" / "data"


@cache
def _rows(name: str) -> tuple:
    return tuple(evaluate(load_cases(DATA / name)))


def _class(name: str, cls: str) -> list[float]:
    # the runs on other hardware than their profile (accuracy.py NOT_THIS_HARDWARE) are
    # reported apart and scored in no class, as accuracy.py's summaries do
    errs = [abs(r["error"]) for r in scored(list(_rows(name))) if r["class"] == cls]
    assert errs, f"no {cls} runs in {name}"
    return errs


def _worst(name: str, cls: str) -> str:
    r = max(
        (r for r in scored(list(_rows(name))) if r["class"] == cls), key=lambda r: abs(r["error"])
    )
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
        "10.0% (10.02: the mean of the middle two of four |errors|, +10.8% and -9.2%): the "
        "class is four runs of one torchtitan sweep (Llama 3.1 8B on 8 H100-96G, 32k-262k "
        "tokens, cp 1-8, 32,768 tokens a GPU in each), fitted with the moe and fsdp runs of the "
        "same GPU. A least-squares line through the measured steps against the attention work "
        "a GPU does (1, 2, 4, 8 units) has a -0.25 s intercept, where the same GPU's linear "
        "layers alone take at least 1.2 s (6 x 8.03B x 32,768 x 4/3 FLOPs at the FP8 peak): no "
        "constant-rate attention fits all four; the model's line is 2.91 s + 6.42 s a unit "
        "(docs/accuracy.md)"
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
        "three scored runs over 25%: mb-25.11-qwen3-30b-a3b-h100-16g -56.5% (2x its token-drop "
        "twin mb-25.09 and the eager EP-16 runs of the same model and GPU, which the model has "
        "at -4% and +9% to +10%; its table disagrees with its recipe), "
        "mb-26.02.01-qwen3-235b-a22b-h100-256g -29.5% (DeepEP costed 28% faster than the "
        "alltoall runs of the same layout, measured alike) and "
        "mb-26.04.01-qwen3-235b-a22b-b300-256g +29.2% (+9% for its 26.04 twin); identical "
        "configs also measured far apart in different releases: Qwen3-30B-A3B on 16 H100 "
        "(mb-26.02.01 vs mb-26.02, marked suspect) took 28.9 s and 51.3 s (README 'Accuracy')"
    ),
)
def test_moe_max_within_25_percent():
    assert max(_class(MODERN, "moe")) <= 0.25, _worst(MODERN, "moe")


def test_fsdp_max_within_25_percent():
    # met since the power-limited B200 runs (-41% to -47%: 'POWER-LIMITED B200 (power limit
    # not stated)', torchtitan mxfp8.md) are reported apart instead of scored under the DGX
    # B200 profile
    assert max(_class(MODERN, "fsdp")) <= 0.25, _worst(MODERN, "fsdp")


# the guards sit just above today's maxima. moe: mb-25.11-qwen3-30b-a3b-h100-16g (-56.5%; -38%
# before FP8 quantization was costed as C++ launches, launch.CPP_LAUNCH_US), the dropless run
# whose token-drop twin (mb-25.09, the same table layout) measured half its time: the model
# now has that twin at -4% (+33% before) and the three eager EP-16 runs of the same model and
# GPU (mb-26.04, 26.04.01, 26.06) at +9% to +10% (+42% before), so the one run 2x slower than
# all of them carries the class maximum; its table also disagrees with its recipe (mbs 2 /
# vpp 24 vs 1 / 12), and its rate matches the suspect mb-26.02 (51.3 s per 1,024 sequences).
# The token-drop runs (mb-25.09-qwen3-30b-a3b-b200-8g +120% before) and Llama 4 Scout on GB200
# (+48%) are costed as their recipes run them, drop-and-pad (moe_pad_expert_input_to_capacity:
# no host sync per MoE layer, the expert block inside the per-layer graphs) and, for Scout, the
# alltoall dispatcher of its recipe (corrections.yaml)
@pytest.mark.parametrize("cls,bar", [("moe", 0.60)])
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
        "13 of the 26 published peaks within 10% (each against the part of the estimate it "
        "counts, the torchtitan runs read with torchtitan's semantics): the 70B FSDP x TP 8 runs "
        "-18% and -23% and the eager 128-GPU 8B run -11% (torchtitan), the 2025-08 B200 runs "
        "+11% to +16% (torchtitan's own peaks for the same run differ 2x between its releases), "
        "the Moonlight study -11% to -13% of its max allocated (docs/accuracy.md)"
    ),
)
def test_published_peaks_within_10_percent():
    mem = _memory()
    assert mem["within_10pct"] == mem["published_peaks"]


def test_published_peaks_do_not_regress():
    mem = _memory()
    assert mem["published_peaks"] >= 26
    assert mem["within_10pct"] >= 13
    assert mem["max_abs_error"] <= 0.25


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


def test_other_hardware_runs_are_reported_not_scored_or_fitted():
    # the four tt-2508 runs ran on 'POWER-LIMITED B200 (power limit not stated)' (torchtitan
    # torchtitan/components/quantization/mxfp8.md): one list, accuracy.py NOT_THIS_HARDWARE,
    # marks them; their step time is in no class or GPU figure and in no fit, and accuracy.py
    # prints each in its own section
    from benchmarks.accuracy import NOT_THIS_HARDWARE, default_paths, other_hardware_lines
    from benchmarks.calibrate import fit_cases

    rows = list(_rows(MODERN))
    other = {r["id"] for r in rows if r["other_hardware"]}
    assert len(other) == 4 and all(i.startswith(tuple(NOT_THIS_HARDWARE)) for i in other)
    assert not other & {r["id"] for r in scored(rows)}
    fitted = {c.id for c in fit_cases(default_paths(), log=lambda *_: None)}
    assert fitted and not other & fitted
    text = "\n".join(other_hardware_lines(rows))
    assert text.startswith("other hardware than the profile: not scored")
    assert all(i in text for i in other)


def test_each_framework_fact_names_cases_and_agrees_with_them():
    # corrections.yaml `frameworks`: each case it names exists and is read with the framework's
    # semantics; a mapped setting either fills a gap or equals the case's own (load_cases
    # raises otherwise), and the collected file is untouched
    import yaml

    from benchmarks.accuracy import framework_facts, with_framework

    cases = {c["id"]: c for c in yaml.safe_load((DATA / MODERN).read_text())["cases"]}
    facts = framework_facts()
    assert facts
    for cid, fact in facts.items():
        assert cid in cases and fact["source"] and fact["framework"] == "torchtitan"
        before = repr(cases[cid])
        read = with_framework(cases[cid], fact)
        assert read["training"]["accounting"] == "deepspeed"
        if read["parallel"]["recompute"] == "selective":
            assert read["parallel"]["recompute_modules"] == ["torchtitan_op"]
        assert repr(cases[cid]) == before
    bad = dict(cases["tt-2412-llama31-8b-8g-fsdp"])
    bad["parallel"] = {**bad["parallel"], "recompute": "full"}
    with pytest.raises(ValueError, match="parallel.recompute"):
        with_framework(bad, facts["tt-2412-llama31-8b-8g-fsdp"])


@pytest.mark.parametrize(
    "counts,expected",
    [("device", 10.0), ("reserved", 10.0 - 1.5), ("allocated", 10.0 - 1.5 - 0.05 * 8.0)],
    ids=["device", "reserved", "allocated"],
)
def test_a_peak_is_compared_with_the_part_of_the_estimate_it_counts(counts, expected):
    # a 10 GiB estimate: 8 GiB of tensors (2 weights, 2 grads, 2 optimizer, 2 activations),
    # 2 GiB other = context 1 + NCCL 0.5 + fragmentation 0.05 * 8 + 0.1 transient; reserved
    # leaves out the context and NCCL's buffers (outside the caching allocator), allocated the
    # fragmentation too
    from types import SimpleNamespace

    from benchmarks.accuracy import counted_gib
    from planner.cost.memory import MemoryBreakdown

    G = 2**30
    mem = MemoryBreakdown(2 * G, 2 * G, 2 * G, 2 * G, 2 * G, 80 * G)
    hw = SimpleNamespace(cuda_context_gib=1.0, nccl_buffer_gib=0.5, fragmentation_fraction=0.05)
    assert counted_gib(mem, hw, counts) == pytest.approx(expected)


def test_every_published_peak_kind_says_what_it_counts():
    from benchmarks.accuracy import COUNTS, default_paths

    cases = load_cases(paths=default_paths())
    peaks = [c for c in cases if c.peak_memory_gib]
    assert peaks and all(c.peak_memory_counts in COUNTS for c in peaks)


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

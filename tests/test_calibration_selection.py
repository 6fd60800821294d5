"""`planner calibrate` fits a parameter only when it pays for itself on held-out runs
(planner/calibration/fit.py select_parameters): forward selection by Akaike's criterion
(Akaike 1974) under errors of known scatter NOISE, i.e. Mallows' Cp: a parameter enters when
its fit lowers n x loss by more than 2 NOISE^2. The 'measured' step times are planner's own
estimates under a known profile (noise-free), so the right answer is known, and the gains are
derived here from the runs' errors under the base."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.calibration.fit import (
    AKAIKE_PENALTY,
    BOUNDS,
    HUBER,
    NOISE,
    Run,
    errors,
    exercised,
    select_parameters,
)
from planner.calibration.runs import calibrate
from planner.config import resolve_hardware
from planner.cost import estimate
from planner.frameworks import load_any

CONFIG = """model: llama3-8b
hardware: h100-sxm
num_gpus: 8
training: {{seq_length: {seq}, global_batch_size: 32, precision: bf16}}
parallel: {{tp: {tp}, pp: 1, dp: {dp}, micro_batch_size: 1, sequence_parallel: {sp},
           zero_stage: 1, recompute: none}}
"""
LAYOUTS = [(4096, 1, 8), (8192, 2, 4), (16384, 4, 2), (32768, 8, 1), (8192, 1, 8), (32768, 4, 2)]
# seq, tp, dp: short sequences are GEMM-bound, long ones attention-heavy


def _huber(e: float) -> float:  # the fit's loss per run (fit.HUBER), written out
    return e * e if abs(e) <= HUBER else HUBER * (2 * abs(e) - HUBER)


def _jobs(tmp_path, layouts=LAYOUTS):
    out = []
    for i, (seq, tp, dp) in enumerate(layouts):
        cfg = tmp_path / f"run{i}.yaml"
        cfg.write_text(CONFIG.format(seq=seq, tp=tp, dp=dp, sp=str(tp > 1).lower()))
        out.append((str(cfg), load_any(cfg)))
    return out


def _t(imp, hw) -> float:
    return estimate(replace(imp.job, hardware=hw), imp.layout).time.step_time_s


def _runs(jobs, hw, scale: float = 1.0):
    return [Run(name, imp.job, imp.layout, scale * _t(imp, hw), "runs") for name, imp in jobs]


def _with(hw, **values):
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update=values)})


@pytest.mark.parametrize(
    "name,value",
    [("matmul_efficiency", 0.58), ("attention_efficiency", 0.35)],
    ids=["gemm-share", "attention-share"],
)
def test_the_one_parameter_that_differs_is_fitted_and_no_other(tmp_path, name, value):
    base = resolve_hardware("h100-sxm")
    runs = _runs(_jobs(tmp_path), _with(base, **{name: value}))
    n = len(runs)
    assert name in exercised(runs, base)
    sel = select_parameters(runs, base, exercised(runs, base))
    assert sel.fitted == (name,)
    assert getattr(sel.profile.calibration, name) == pytest.approx(value, abs=0.01)
    # its gain: the loss under the base, n mean Huber(ln predicted / measured) / NOISE^2,
    # less what is left after the fit (~0: the truth is inside the bounds)
    loss0 = sum(_huber(e) for e in errors(runs, {base.name: base})) / n
    assert sel.gains[name] == pytest.approx(n * loss0 / NOISE**2, rel=0.05, abs=0.2)
    assert sel.gains[name] > AKAIKE_PENALTY
    # every other parameter, tried after it, gains less than Akaike's 2 and keeps the base's
    for other, gain in sel.gains.items():
        if other != name:
            assert gain <= AKAIKE_PENALTY, other
            assert getattr(sel.profile.calibration, other) == getattr(base.calibration, other)


# Runs all slower than the base by the same factor 1 + d: no fit can leave less than no
# loss, so no parameter gains more than n ln(1 + d)^2 / NOISE^2; for the 4 runs below that is
# under 2 (nothing may be fitted) while d < exp(NOISE sqrt(2 / 4)) - 1 = 7.3%.
@pytest.mark.parametrize("d", [0.03, 0.05, 0.07], ids=["3%", "5%", "7%"])
def test_a_miss_inside_the_noise_fits_nothing(tmp_path, d):
    base = resolve_hardware("h100-sxm")
    runs = _runs(_jobs(tmp_path, LAYOUTS[:4]), base, scale=1 + d)
    n = len(runs)
    assert n * math.log(1 + d) ** 2 / NOISE**2 < AKAIKE_PENALTY
    got = calibrate(runs, base)
    assert got.fitted == ()
    assert got.profile.calibration == base.calibration.model_copy(
        update={"fitted_on": got.profile.calibration.fitted_on}
    )
    assert got.not_fitted and all("<= 2" in why for why in got.not_fitted.values())


def test_a_miss_beyond_the_noise_is_fitted(tmp_path):
    # 4 runs 15% slower: n ln(1.15)^2 / NOISE^2 = 7.8, room for a parameter to gain over 2
    base = resolve_hardware("h100-sxm")
    runs = _runs(_jobs(tmp_path, LAYOUTS[:4]), base, scale=1.15)
    assert len(runs) * math.log(1.15) ** 2 / NOISE**2 > 3 * AKAIKE_PENALTY
    got = calibrate(runs, base)
    assert len(got.fitted) >= 1
    assert all(got.gains[k] > AKAIKE_PENALTY for k in got.fitted)
    assert max(abs(e) for e in got.after) < max(abs(e) for e in got.before)


def test_one_run_fits_at_most_one_parameter(tmp_path):
    # RUNS_PER_PARAMETER = 2, at least one: a single run 40% slower (a gain of up to
    # 1 x Huber(ln 1.4) / 0.1^2 = 9.5) fits exactly one parameter, within its bounds, and
    # says the rest were not tried
    base = resolve_hardware("h100-sxm")
    runs = _runs(_jobs(tmp_path, LAYOUTS[:1]), base, scale=1.4)
    assert _huber(math.log(1 / 1.4)) / NOISE**2 == pytest.approx(9.5, abs=0.1)
    sel = select_parameters(runs, base, exercised(runs, base))
    assert len(sel.fitted) == 1
    k = sel.fitted[0]
    lo, hi = BOUNDS[k]
    assert lo <= getattr(sel.profile.calibration, k) <= hi
    assert AKAIKE_PENALTY < sel.gains[k] <= 9.5 + 0.1
    assert all("at most 1 parameter" in w for c, w in sel.why.items() if c != k)

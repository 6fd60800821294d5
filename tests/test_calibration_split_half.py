"""Split-half check of the calibration (benchmarks/split_half.py runs every GPU; figures in
docs/calibration.md): each GPU's runs of calibration-modern.yaml, half fitted through synthetic
Megatron-LM logs, half held out. Scored by the fit's own loss (mean Huber of the log error) on
the held-out half; the shipped profile was fitted to both halves.

Here: every GPU with runs on both halves, b200 and b300 by default and the others under
`-m calibration_long` (~10-15 s each). Against the shipped profiles (re-fitted in issue 17 by
benchmarks/calibrate.py on every run, now that the fit predicts each run at its own
micro-batch, and again with drop-and-pad MoE) `planner calibrate` from half the runs does worse
on the other half on four GPUs and recovers from halved bandwidths on three: those checks are
strict expected failures with their figures. A handful of runs (5-12) fits the PRIORITY efficiencies past what they pin; the
whole fit on half of both files does predict the other half better than the profiles shipped
before the re-fit (benchmarks/split_fit.py, docs/accuracy.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.split_half import split_half

LONG = pytest.mark.calibration_long  # ~15 s each: python -m pytest -m calibration_long


def _miss(figures: str):
    return pytest.mark.xfail(strict=True, reason=f"measured {figures} (shipped | calibrated)")


# held-out median |error| (Huber loss): shipped | calibrated from half | from halved bandwidths
CALIBRATED = [
    "b200",  # 11.4% (0.0172) | 11.7% (0.0169)
    pytest.param("b300", marks=_miss("4.2% (0.0022) | 5.6% (0.0036)")),
    pytest.param("gb200-nvl72", marks=LONG),  # 4.4% (0.0100) | 8.4% (0.0069)
    pytest.param("h100-sxm", marks=[LONG, _miss("20.3% (0.0568) | 18.6% (0.0575)")]),
    pytest.param("h100-96g", marks=[LONG, _miss("5.0% (0.0090) | 6.8% (0.0103)")]),
    pytest.param("gb300-nvl72", marks=[LONG, _miss("2.7% (0.0014) | 2.7% (0.0030)")]),
]
RECOVERED = [
    pytest.param("h100-sxm", marks=LONG),  # 20.3% (0.0568) | 13.6% (0.0387)
    pytest.param("h100-96g", marks=LONG),  # 5.0% (0.0090) | 4.9% (0.0089)
    pytest.param("b200", marks=_miss("11.4% (0.0172) | 10.6% (0.0237)")),
    pytest.param("gb200-nvl72", marks=LONG),  # 4.4% (0.0100) | 5.7% (0.0042)
    pytest.param("gb300-nvl72", marks=[LONG, _miss("2.7% (0.0014) | 4.5% (0.0030)")]),
]
TOL = 1e-4  # the loss is printed to 4 decimals
_cache: dict = {}


def _res(gpu: str) -> dict:
    if gpu not in _cache:
        _cache[gpu] = split_half([gpu])[gpu]
    return _cache[gpu]


@pytest.mark.parametrize("gpu", CALIBRATED)
def test_calibrated_from_half_predicts_the_other_half_no_worse_than_shipped(gpu):
    r = _res(gpu)
    assert r["fit_runs"] >= 4 and r["test_runs"] >= 4
    assert r["calibrated"]["huber_loss"] <= r["shipped"]["huber_loss"] + TOL


@pytest.mark.parametrize("gpu", RECOVERED)
def test_from_halved_bandwidths_calibration_recovers_to_the_shipped_error(gpu):
    r = _res(gpu)
    # (b200's halved base happens to fit its held-out half better than the shipped one: the
    # bar is the shipped profile's loss, not the perturbed base's)
    assert r["perturbed"]["huber_loss"] <= r["shipped"]["huber_loss"] + TOL


@LONG
@pytest.mark.xfail(
    strict=True,
    raises=(AssertionError, KeyError),
    reason=(
        "since the fit predicts each run at the micro-batch it states (issue 17), h100-96g's "
        "half-calibration from halved bandwidths recovers the held-out loss (14.5% median, "
        "0.0428 < the shipped 0.0658) with network_efficiency at its bound and no bandwidth "
        "refitted (gain 3.2 <= 4); under the issue-17 refit's profiles it refits HBM x1.87 "
        "and NVLink x2.83, not the network: the halved network is not found again"
    ),
)
def test_halved_bandwidths_are_refitted_where_the_runs_identify_them():
    # h100-96g's FSDP runs across nodes hang on the network (d ln t / d ln bw ~ -0.7): the
    # halved network bandwidth is found again, more than doubled (the efficiencies cannot:
    # network_efficiency is bounded to 0.6-0.95)
    assert _res("h100-96g")["perturbed_bandwidths"]["network_bandwidth_gb_per_s"] >= 2.0


@pytest.mark.xfail(
    strict=True,
    reason=(
        "under the re-fitted profiles b300's five fit-half runs recover from halved bandwidths "
        "to 14.5% (0.0247) against the shipped 4.2% (0.0022): they do not pin two GEMM shares "
        "and two bandwidths (docs/calibration.md)"
    ),
)
def test_b300_from_halved_bandwidths_recovers_the_loss_not_the_bandwidths():
    # b300's fit half is 5 runs. Since the fit predicts each run at the micro-batch it states
    # (issue 17; before, the runs leaving vpp to planner were refitted at micro-batch 1 and the
    # refit was refused), calibrating from the halved base recovers the held-out loss, but by
    # NVLink x4 (the factor's bound) with the HBM bandwidth left halved: these runs' HBM and
    # NVLink time trade against each other (as gb300's do), so the refit finds the loss, not
    # the true x2 / x2, and the efficiencies sit at a bound and say so
    r = _res("b300")
    assert r["perturbed_base"]["huber_loss"] > 10 * r["shipped"]["huber_loss"]
    assert r["perturbed"]["huber_loss"] <= r["shipped"]["huber_loss"] + TOL
    assert r["perturbed_bandwidths"].get("hbm_bandwidth_gb_per_s", 1.0) < 2.0
    assert r["perturbed_at_bound"]

"""Split-half check of the calibration (benchmarks/split_half.py runs every GPU; figures in
docs/calibration.md): each GPU's runs of calibration-modern.yaml, half fitted through synthetic
Megatron-LM logs, half held out. Scored by the fit's own loss (mean Huber of the log error) on
the held-out half; the shipped profile was fitted to both halves.

Here: the GPUs where both halves of the issue's bar hold (b200, h100-sxm, h100-96g; seconds
each), and b300, which meets the first half only (its fit half holds 2 runs no profile fits,
asserted as such). gb200-nvl72 and gb300-nvl72 are left to the
benchmark (reasons in docs/calibration.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.split_half import split_half

LONG = pytest.mark.calibration_long  # ~15 s each: python -m pytest -m calibration_long
PASSING = ["b200", pytest.param("h100-sxm", marks=LONG), pytest.param("h100-96g", marks=LONG)]
TOL = 1e-4  # the loss is printed to 4 decimals
_cache: dict = {}


def _res(gpu: str) -> dict:
    if gpu not in _cache:
        _cache[gpu] = split_half([gpu])[gpu]
    return _cache[gpu]


@pytest.mark.parametrize("gpu", PASSING + ["b300"])
def test_calibrated_from_half_predicts_the_other_half_no_worse_than_shipped(gpu):
    r = _res(gpu)
    assert r["fit_runs"] >= 4 and r["test_runs"] >= 4
    assert r["calibrated"]["huber_loss"] <= r["shipped"]["huber_loss"] + TOL


@pytest.mark.parametrize("gpu", PASSING)
def test_from_halved_bandwidths_calibration_recovers_to_the_shipped_error(gpu):
    r = _res(gpu)
    # (b200's halved base happens to fit its held-out half better than the shipped one: the
    # bar is the shipped profile's loss, not the perturbed base's)
    assert r["perturbed"]["huber_loss"] <= r["shipped"]["huber_loss"] + TOL


@LONG
def test_halved_bandwidths_are_refitted_where_the_runs_identify_them():
    # h100-96g's FSDP runs across nodes hang on the network (d ln t / d ln bw ~ -0.7): the
    # halved network bandwidth is found again, more than doubled (the efficiencies cannot:
    # network_efficiency is bounded to 0.6-0.95)
    assert _res("h100-96g")["perturbed_bandwidths"]["network_bandwidth_gb_per_s"] >= 2.0


def test_b300_from_halved_bandwidths_improves_but_keeps_them():
    # b300's fit half is 5 runs, 2 of them (Qwen3-235B, release 26.02) 57% faster predicted
    # than measured under every profile (the same job under 26.04 is within 8%). A bandwidth
    # refit would serve those two and worsen the typical run (median |log error| up), so the
    # bandwidths stay halved: the bounded efficiencies improve the fit, sit at a bound and say
    # so, and the held-out error stays far from the shipped profile's
    r = _res("b300")
    assert r["perturbed_base"]["huber_loss"] > 10 * r["shipped"]["huber_loss"]
    assert r["perturbed"]["huber_loss"] < r["perturbed_base"]["huber_loss"]
    assert r["perturbed_bandwidths"] == {}
    assert "not the typical one" in r["perturbed_bandwidth_note"]
    assert r["perturbed_at_bound"]

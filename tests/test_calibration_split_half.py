"""Split-half check of the calibration on one GPU (benchmarks/split_half.py runs every GPU;
figures in docs/calibration.md): b300's runs of calibration-modern.yaml, half fitted through
synthetic Megatron-LM logs, half held out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.split_half import split_half


@pytest.fixture(scope="module")
def b300():
    return split_half(["b300"])["b300"]


def test_calibrated_from_half_predicts_the_other_half_no_worse_than_shipped(b300):
    # the shipped profile was fitted to both halves; the half-calibrated one saw only one
    assert b300["fit_runs"] >= 4 and b300["test_runs"] >= 4
    assert b300["calibrated"]["huber_loss"] <= b300["shipped"]["huber_loss"] + 1e-4
    assert b300["calibrated_fitted"][:2] == ["fp8_matmul_efficiency", "matmul_efficiency"]


def test_from_halved_bandwidths_the_fit_improves_and_names_its_bounds(b300):
    # the bounded fit cannot absorb a 2x error in the hardware's own numbers (HBM bandwidth
    # is not a fitted parameter): it moves toward the data and says which parameters sat at
    # a bound, the sign that the profile's hardware numbers are wrong
    assert b300["perturbed_base"]["huber_loss"] > 10 * b300["shipped"]["huber_loss"]
    assert b300["perturbed"]["huber_loss"] < b300["perturbed_base"]["huber_loss"]
    assert b300["perturbed_at_bound"]

"""Split-half check of the calibration (benchmarks/split_half.py runs every GPU; figures in
docs/calibration.md): each GPU's runs of calibration-modern.yaml, half fitted through synthetic
Megatron-LM logs, half held out. Scored by the fit's own loss (mean Huber of the log error) on
the held-out half; the shipped profile was fitted to both halves.

Here: every GPU with runs on both halves, b200 and b300 by default and the others under
`-m calibration_long` (~10-40 s each). `planner calibrate` chooses the efficiencies it fits by
held-out gain (planner/calibration/fit.py select_parameters, Akaike's criterion). Against the
profiles re-fitted with drop-and-pad MoE and the torchtitan runs read as they ran, from half
the runs it predicts the other half no worse than shipped on five GPUs (b200 and gb200 better;
b300, gb300 and h100-sxm fit nothing, a tie) and worse on h100-96g (it fits nvlink_efficiency,
to a bound, on a gain of 2.8). Against the profiles re-fitted with FP8 quantization costed as
C++ launches, b200, b300 and gb200 miss it (figures below), b200 recovers from halved
bandwidths and h100-sxm and gb300 no longer do, by 0.0007 and 0.0004 (the shipped losses fell:
0.0595 -> 0.0459, 0.0014 -> 0.0012); before, from halved bandwidths it recovered to within
the shipped loss on gb300 and h100-sxm. The misses are strict expected failures with their
figures: these halves do not separate HBM from NVLink time (b300 x1.87 / x4, h100-96g
x1.87 / x3.03 for the true x2 / x2), and on b200 and gb200 the elementwise bytes per
activation, charged at the HBM bandwidth, take up the halved HBM instead (the two are
confounded on every run whose elementwise time is HBM-bound)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.split_half import split_half

LONG = pytest.mark.calibration_long  # ~10-40 s each: python -m pytest -m calibration_long


def _miss(figures: str):
    return pytest.mark.xfail(strict=True, reason=f"measured {figures} (shipped | calibrated)")


# held-out median |error| (Huber loss): shipped | calibrated from half | from halved bandwidths
# (measured with the shipped profiles, `python benchmarks/split_half.py`)
CALIBRATED = [
    # b300 and b200 held this bar against the profiles before FP8 quantization was costed as
    # C++ launches (launch.CPP_LAUNCH_US): 4.2% (0.0022) | 4.2% and 11.4% (0.0172) | 6.7%
    # (0.0156); the re-fit ships a profile that predicts the held-out halves better than the
    # calibration from the other half does
    pytest.param(
        "b300",
        marks=_miss(
            "3.8% (0.0018) | 18.3% (0.0407): it fits no efficiency and refits NVLink x4.00 on "
            "a gain of 4.0, the bandwidth threshold"
        ),
    ),
    pytest.param(
        "b200",
        marks=_miss("7.3% (0.0103) | 9.4% (0.0115): it fits layer_overhead_us, to a bound"),
    ),
    pytest.param(
        "gb200-nvl72",
        marks=[
            LONG,
            _miss(
                "4.3% (0.0117) | 12.4% (0.0126): it fits step_overhead_ms, to a bound, and "
                "refits HBM x1.41, NVLink x0.57 (4.4% (0.0100) | 5.2% (0.0080) before)"
            ),
        ],
    ),
    pytest.param("h100-sxm", marks=LONG),  # 10.4% (0.0459) | 10.4% (0.0459): nothing fitted
    pytest.param("h100-96g", marks=[LONG, _miss("5.7% (0.0080) | 5.6% (0.0084)")]),
    pytest.param("gb300-nvl72", marks=LONG),  # 2.7% (0.0014) | 2.7% (0.0014): nothing fitted
]
RECOVERED = [
    pytest.param(
        "h100-sxm",
        marks=[
            LONG,
            _miss(
                "10.4% (0.0459) | 11.1% (0.0466): HBM x2.64, NVLink x1.87, network x2.00 of "
                "the halved x2 (20.6% (0.0595) | 17.8% (0.0520) before)"
            ),
        ],
    ),
    pytest.param(
        "gb300-nvl72",
        marks=[
            LONG,
            _miss(
                "1.8% (0.0012) | 2.2% (0.0016): HBM x2.14, NVLink x2.00 (2.7% (0.0014) | 2.8% "
                "(0.0012) before)"
            ),
        ],
    ),
    pytest.param("gb200-nvl72", marks=[LONG, _miss("4.4% (0.0100) | 8.9% (0.0116)")]),
    pytest.param("h100-96g", marks=[LONG, _miss("5.7% (0.0080) | 5.6% (0.0084)")]),
    "b200",  # 7.3% (0.0103) | 6.5% (0.0099): HBM and NVLink x1.87 of the halved x2
    pytest.param("b300", marks=_miss("3.8% (0.0018) | 13.9% (0.0227)")),
]
TOL = 1e-4  # the loss is printed to 4 decimals
_cache: dict = {}


def _res(gpu: str) -> dict:
    if gpu not in _cache:
        _cache[gpu] = split_half([gpu])[gpu]
    return _cache[gpu]


# every run of the GPU (`split_half.py --full`): shipped | halved base -> calibrated, Huber loss
EVERY_RUN = [
    pytest.param("b200", marks=LONG),  # 0.0133 | 0.0587 -> 0.0065
    pytest.param("gb200-nvl72", marks=LONG),  # 0.0139 | 0.0824 -> 0.0066
    pytest.param("gb300-nvl72", marks=LONG),  # 0.0031 | 0.0944 -> 0.0031 (HBM x2.14, NVLink x1.87)
    pytest.param("h100-96g", marks=LONG),  # 0.0096 | 0.0449 -> 0.0079
    pytest.param("h100-sxm", marks=LONG),  # 0.0253 | 0.0665 -> 0.0206 (HBM x0.57, NVLink x2.64)
    pytest.param(
        "b300",
        marks=[
            LONG,
            pytest.mark.xfail(
                strict=True,
                reason=(
                    "measured 0.0096 | 0.0552 -> 0.0099: HBM and NVLink come back x2.30 / x2.0, "
                    "the network stays halved (no b300 run identifies it)"
                ),
            ),
        ],
    ),
]


@pytest.mark.parametrize("gpu", EVERY_RUN)
def test_from_halved_bandwidths_every_run_recovers_the_shipped_loss(gpu):
    # the same perturbed base calibrated from all the GPU's runs, scored on them: the fit
    # itself recovers wherever the runs identify what was perturbed (a half of 4-12 runs
    # does not, RECOVERED). The shipped h100-sxm is fitted to calibration.yaml's dense runs
    # too, so on the modern runs alone a refit does better, with bandwidths no GPU has.
    a = split_half([gpu], full=True)[gpu]["full"]
    assert a["perturbed_base"]["huber_loss"] > 2 * a["shipped"]["huber_loss"]
    assert a["recovered"]["huber_loss"] <= a["shipped"]["huber_loss"] + TOL


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
        "h100-96g's half-calibration from halved bandwidths refits HBM x1.87 and NVLink x3.03 "
        "(5.6% median, 0.0084 against the shipped 0.0080), not the network: the "
        "identifiability rule picks only HBM and NVLink on this half, so the halved network "
        "is not found again"
    ),
)
def test_halved_bandwidths_are_refitted_where_the_runs_identify_them():
    # h100-96g's FSDP runs across nodes hang on the network (d ln t / d ln bw ~ -0.7): the
    # halved network bandwidth is found again, more than doubled (the efficiencies cannot:
    # network_efficiency is bounded to 0.6-0.95)
    assert _res("h100-96g")["perturbed_bandwidths"]["network_bandwidth_gb_per_s"] >= 2.0


def test_b300_from_halved_bandwidths_refits_them_and_recovers_half_the_loss():
    # b300's fit half is 5 runs: they pin the bandwidths' joint effect, not each one (HBM and
    # NVLink time trade against each other in these runs, as gb300's do), so the refit lands
    # on HBM x1.87 / NVLink x4 for the true x2 / x2 and misses the shipped loss (RECOVERED);
    # it still takes the held-out loss from 0.0400 to 0.0208
    r = _res("b300")
    assert r["perturbed_base"]["huber_loss"] > 10 * r["shipped"]["huber_loss"]
    assert r["perturbed"]["huber_loss"] < 0.6 * r["perturbed_base"]["huber_loss"]
    assert r["perturbed_bandwidths"]  # it says it refitted them

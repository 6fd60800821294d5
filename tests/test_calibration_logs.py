"""The log readers (planner/calibration/logs.py) on our own fixtures in each framework's
printed line format (tests/data/logs/): the steady-state rule (the first max(3, ceil(10%))
logged steps dropped, the median of the rest) and the units each format logs in."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from planner.calibration.logs import load_log, read_log
from planner.errors import SpecError

LOGS = Path(__file__).resolve().parent / "data" / "logs"

# Each fixture's logged values, in order, as the file states them; the steady ones are those
# after the first max(3, ceil(0.1 x n)) = 3 (every fixture has fewer than 31 records).
CASES = [
    # file, format, field, logged values (in the unit the field takes), peak GiB, peak kind
    (
        "megatron.log",
        "megatron",
        "step_time_s",
        [9.1204, 5.8902, 5.0107, 4.800, 4.820, 4.790, 5.300],
        51200.0 / 1024,
        "max allocated",
    ),
    (
        "nemo.log",
        "nemo",
        "step_time_s",
        [31.52, 6.204, 5.911, 5.402, 5.410, 5.399, 5.405],
        None,
        "",
    ),
    ("bridge.log", "nemo", "step_time_s", [14.20, 3.10, 2.75, 2.71, 2.70, 2.73], None, ""),
    (
        "torchtitan.log",
        "torchtitan",
        "tokens_per_s_per_gpu",
        [812, 6950, 7080, 7120, 7100, 7140],
        58.35,
        "max reserved",
    ),
    (
        "megatron_deepspeed.log",
        "deepspeed",
        "step_time_s",
        [40.1234, 12.100, 11.800, 11.500, 11.520],
        None,
        "",
    ),
    (
        "deepspeed_timer.log",
        "deepspeed",
        "samples_per_s",
        [30.1, 50.3, 52.0, 52.4, 51.6, 52.2],
        62.0,
        "max allocated",
    ),
]


@pytest.mark.parametrize("name,fmt,key,values,peak,kind", CASES, ids=[c[0] for c in CASES])
def test_steady_state_is_the_median_after_the_warm_up(name, fmt, key, values, peak, kind):
    s = load_log(LOGS / name)
    assert s.format == fmt
    assert (s.records, s.used) == (len(values), len(values) - 3)
    assert getattr(s, key) == pytest.approx(statistics.median(values[3:]))
    assert s.peak_memory_gib == (pytest.approx(peak) if peak else None)
    assert s.peak_memory_kind == kind
    assert f"median of {len(values) - 3} of {len(values)}" in s.rule


def test_warm_up_is_a_tenth_of_a_long_log():
    # 50 records: ceil(0.1 x 50) = 5 > 3 dropped; the first five are slow, the rest 2.0 s
    lines = [
        f"iteration {i:5d}/ 500 | elapsed time per iteration (ms): {9000.0 if i <= 5 else 2000.0} |"
        for i in range(1, 51)
    ]
    s = read_log("\n".join(lines))
    assert (s.records, s.used, s.step_time_s) == (50, 45, 2.0)


def test_a_short_log_keeps_its_last_step_and_says_so():
    s = read_log(
        "iteration 1/ 3 | elapsed time per iteration (ms): 900.0 |\n"
        "iteration 2/ 3 | elapsed time per iteration (ms): 500.0 |"
    )
    assert (s.used, s.step_time_s) == (1, 0.5)
    assert "last one" in s.notes[0]


def test_torchtitan_step_time_is_the_batch_over_tokens_per_second():
    # tps is per GPU: 64 x 8192 tokens / (7120 tok/s x 8 GPUs) = 9.2045 s
    s = load_log(LOGS / "torchtitan.log")
    t, how = s.step_time(global_batch_size=64, seq_length=8192, num_gpus=8)
    assert t == pytest.approx(64 * 8192 / (7120 * 8))
    assert how == "tokens/s per GPU"


def test_deepspeed_samples_per_second_are_the_global_batch():
    s = load_log(LOGS / "deepspeed_timer.log")
    t, _ = s.step_time(global_batch_size=512, seq_length=4096, num_gpus=64)
    assert t == pytest.approx(512 / 52.2)


@pytest.mark.parametrize(
    "text,fmt,words",
    [
        ("loss went down\nall good\n", None, "no step lines"),
        ("step: 1  loss: 3.0  tps: 100\n", "megatron", "no megatron step lines"),
        ("iteration 1/ 3 | elapsed time per iteration (ms): 900.0 |", "vllm", "not one of"),
    ],
    ids=["no-format", "wrong-format", "unknown-format"],
)
def test_logs_without_step_lines_are_one_line_errors(text, fmt, words):
    with pytest.raises(SpecError, match=words):
        read_log(text, fmt=fmt)

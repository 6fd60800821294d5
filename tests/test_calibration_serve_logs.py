"""The serving benchmark readers (planner/calibration/serve_logs.py) on our own fixtures in
each tool's output format (tests/data/logs/): vLLM `vllm bench serve` (printed block and
--save-result JSON), SGLang `bench_serving`, TensorRT-LLM `trtllm-bench`. The values asserted
are the numbers written in each fixture; the rule: the median where the tool prints one
(vLLM / SGLang `Median ...`, trtllm-bench `P50`), else the mean."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.calibration.serve_logs import detect_serve_log_format, load_serve_log, read_serve_log
from planner.errors import SpecError

LOGS = Path(__file__).resolve().parent / "data" / "logs"

CASES = [
    # file, format, TTFT ms, TPOT ms, output tok/s, requests, concurrency (a setting?),
    # mean input / output tokens (total tokens / requests, or the report's averages)
    (
        "vllm_bench_serve.txt",
        "vllm",
        298.40,
        23.61,
        634.84,
        160,
        (16, True),
        163840 / 160,
        40960 / 160,
    ),
    (
        "vllm_bench_serve.json",
        "vllm",
        401.9,
        26.35,
        1152.5,
        320,
        (32, True),
        655360 / 320,
        81920 / 320,
    ),
    (
        "sglang_bench_serving.txt",
        "sglang",
        118.07,
        9.47,
        793.61,
        128,
        (8, True),
        131072 / 128,
        32768 / 128,
    ),
    ("trtllm_bench.txt", "trtllm", 850.0, 21.70, 2512.0, 512, (63.8125, False), 1024.0, 256.0),
]


@pytest.mark.parametrize("name,fmt,ttft,tpot,tput,n,conc,isl,osl", CASES, ids=[c[0] for c in CASES])
def test_each_reader_reads_the_numbers_its_fixture_states(
    name, fmt, ttft, tpot, tput, n, conc, isl, osl
):
    s = load_serve_log(LOGS / name)
    assert s.format == fmt
    assert s.ttft_s == pytest.approx(ttft / 1e3)
    assert s.tpot_s == pytest.approx(tpot / 1e3)
    assert s.output_tokens_per_s == pytest.approx(tput)
    assert s.requests == n
    assert (s.concurrency, s.concurrency_is_setting) == (pytest.approx(conc[0]), conc[1])
    assert (s.input_length, s.output_length) == (pytest.approx(isl), pytest.approx(osl))
    assert s.aggregate == {"ttft_s": "median", "tpot_s": "median", "output_tokens_per_s": "total"}
    assert s.rule == "TTFT median, TPOT median, output tok/s total over the run"


@pytest.mark.parametrize("name,fmt", [(c[0], c[1]) for c in CASES], ids=[c[0] for c in CASES])
def test_detection_by_content_and_an_explicit_format_agree(name, fmt):
    text = (LOGS / name).read_text()
    assert detect_serve_log_format(text) == fmt
    assert read_serve_log(text, fmt=fmt) == read_serve_log(text)


def test_without_a_median_the_mean_is_used_and_said():
    # a vLLM block whose median lines are cut: the Mean lines are read
    text = "\n".join(
        line
        for line in (LOGS / "vllm_bench_serve.txt").read_text().splitlines()
        if not line.startswith("Median")
    )
    s = read_serve_log(text)
    assert (s.ttft_s, s.tpot_s) == (pytest.approx(0.31277), pytest.approx(0.0239))
    assert s.aggregate["ttft_s"] == s.aggregate["tpot_s"] == "mean"


def test_trtllm_without_percentiles_uses_the_averages():
    text = "\n".join(
        line
        for line in (LOGS / "trtllm_bench.txt").read_text().splitlines()
        if not line.startswith(("[TTFT]", "[TPOT]"))
    )
    s = read_serve_log(text)
    assert (s.ttft_s, s.tpot_s) == (pytest.approx(0.90525), pytest.approx(0.02195))
    assert s.aggregate["ttft_s"] == "mean"


def test_a_vllm_run_without_max_concurrency_states_none():
    text = (
        (LOGS / "vllm_bench_serve.txt")
        .read_text()
        .replace("Maximum request concurrency: 16", "Maximum request concurrency: None")
    )
    s = read_serve_log(text)
    assert (s.concurrency, s.concurrency_is_setting) == (None, False)


@pytest.mark.parametrize(
    "text,fmt,words",
    [
        ("", None, "no serving benchmark result found"),
        ("INFO server started\nall good\n", None, "no serving benchmark result found"),
        (
            "iteration 1/ 3 | elapsed time per iteration (ms): 900.0 |",
            "vllm",
            "no 'Serving Benchmark Result' block",
        ),
        (
            "============ Serving Benchmark Result ============\nSuccessful requests: 10\n"
            "==================================================\n",
            None,
            "states no TTFT, TPOT or output token throughput",
        ),
        ("x", "megatron", "not one of vllm, sglang, trtllm"),
    ],
    ids=["empty", "no-block", "wrong-format", "nothing-measured", "unknown-format"],
)
def test_bad_logs_are_one_line_errors_naming_the_file(text, fmt, words):
    with pytest.raises(SpecError, match=words) as err:
        read_serve_log(text, fmt=fmt, source="bench.txt")
    assert "\n" not in str(err.value)
    if fmt != "megatron":
        assert "bench.txt" in str(err.value)


def test_a_sweep_in_one_log_is_refused():
    block = (LOGS / "vllm_bench_serve.txt").read_text()
    with pytest.raises(SpecError, match="holds 2 'Serving Benchmark Result' blocks"):
        read_serve_log(block + block, source="sweep.txt")

"""Readers of serving benchmark outputs: what one benchmark run measured (TTFT, TPOT, output
throughput) and the workload it ran (requests, lengths, concurrency), from what the tool
prints or saves.

Formats (`read_serve_log(text)` tells them apart by their lines; `fmt=` names one):

- vllm: `vllm bench serve` / benchmarks/benchmark_serving.py, the printed block
  `============ Serving Benchmark Result ============` with `Successful requests:`,
  `Maximum request concurrency:`, `Total input tokens:`, `Total generated tokens:`,
  `Request throughput (req/s):`, `Output token throughput (tok/s):`, `Mean TTFT (ms):`,
  `Median TTFT (ms):`, `Mean TPOT (ms):`, `Median TPOT (ms):` ...; or its `--save-result`
  JSON (`completed`, `total_input_tokens`, `total_output_tokens`, `request_throughput`,
  `output_throughput`, `median_ttft_ms`, `mean_ttft_ms`, `median_tpot_ms`, `mean_tpot_ms`,
  `max_concurrency`).
- sglang: `python -m sglang.bench_serving`, the same block with its own lines (`Backend:`,
  `Max request concurrency:`, `Mean E2E Latency (ms):` ...).
- trtllm: `trtllm-bench` throughput/latency report: `Number of requests:`, `Number of
  concurrent requests:` (an average it measured), `Average Input Length (tokens):`, `Average
  Output Length (tokens):`, `Request Throughput (req/sec):`, `Total Output Throughput
  (tokens/sec):` and, for streaming runs, `Average time-to-first-token [TTFT] (ms):`,
  `Average time-per-output-token [TPOT] (ms):` and the percentile lines `[TTFT] P50 : X`,
  `[TPOT] P50 : X`.

Steady state: the tools print aggregates over the whole run, not per-step records, so there
is no warm-up to drop here (the tools run their own warm-up requests before measuring). The
TTFT and TPOT used are the **median** over requests where the tool prints one (vLLM and
SGLang `Median ...`, trtllm-bench `P50`), else the mean; the output throughput is the run's
total (generated tokens over the benchmark's duration). `aggregate` says which was used.
A log holds one run: a file with several result blocks (a sweep) is refused; split it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import SpecError, short
from planner.io import read_text

__all__ = [
    "SERVE_LOG_FORMATS",
    "ServeLogSummary",
    "read_serve_log",
    "load_serve_log",
    "detect_serve_log_format",
]

SERVE_LOG_FORMATS = ("vllm", "sglang", "trtllm")
METRICS = ("ttft_s", "tpot_s", "output_tokens_per_s")
"""What a serving run is fitted to, in planner.serve.estimate's names."""

_NUM = r"([-+]?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_BLOCK = "Serving Benchmark Result"


@dataclass(frozen=True)
class ServeLogSummary:
    """One benchmark run as its tool reported it (None: not reported)."""

    format: str
    ttft_s: float | None
    tpot_s: float | None
    output_tokens_per_s: float | None
    request_throughput: float | None = None
    requests: int | None = None
    concurrency: float | None = None
    """vLLM / SGLang: the --max-concurrency the clients kept (a setting); trtllm-bench: the
    average number of requests in flight it measured."""
    concurrency_is_setting: bool = False
    input_length: float | None = None
    """Mean prompt tokens per request (total input tokens / requests)."""
    output_length: float | None = None
    aggregate: dict[str, str] = field(default_factory=dict)
    """metric -> "median" | "mean" | "total": which of the tool's aggregates was read."""
    notes: list[str] = field(default_factory=list)

    def measured(self) -> dict[str, float]:
        """The metrics the log states, in METRICS' order."""
        return {m: v for m in METRICS if (v := getattr(self, m)) is not None and v > 0}

    @property
    def rule(self) -> str:
        parts = [f"{_LABEL[m]} {self.aggregate[m]}" for m in METRICS if m in self.aggregate]
        return ", ".join(parts) + " over the run"


_LABEL = {"ttft_s": "TTFT", "tpot_s": "TPOT", "output_tokens_per_s": "output tok/s"}


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _key_values(lines: list[str]) -> dict[str, float]:
    """`Key (unit):   value` lines (first occurrence of each key); values that are not
    numbers (`None`, `inf`) are left out."""
    out: dict[str, float] = {}
    for line in lines:
        m = re.match(r"^\s*#?\s*([A-Za-z\[][^:]*?)\s*:\s*" + _NUM + r"\s*$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = _f(m.group(2))
    return out


def _pick(kv: dict, median_key: str, mean_key: str) -> tuple[float | None, str]:
    if median_key in kv:
        return kv[median_key], "median"
    if mean_key in kv:
        return kv[mean_key], "mean"
    return None, ""


def _per_request(kv: dict, key: str, requests) -> float | None:
    return kv[key] / requests if key in kv and requests else None


def _summary(fmt: str, ttft_ms, ttft_how, tpot_ms, tpot_how, tput, **rest) -> ServeLogSummary:
    agg = {}
    if ttft_ms is not None:
        agg["ttft_s"] = ttft_how
    if tpot_ms is not None:
        agg["tpot_s"] = tpot_how
    if tput is not None:
        agg["output_tokens_per_s"] = "total"
    return ServeLogSummary(
        format=fmt,
        ttft_s=ttft_ms / 1e3 if ttft_ms is not None else None,
        tpot_s=tpot_ms / 1e3 if tpot_ms is not None else None,
        output_tokens_per_s=tput,
        aggregate=agg,
        **rest,
    )


def _bench_serving(fmt: str, lines: list[str]) -> ServeLogSummary:
    """vLLM's and SGLang's printed result block (they share its lines but the concurrency's)."""
    kv = _key_values(lines)
    ttft, ttft_how = _pick(kv, "Median TTFT (ms)", "Mean TTFT (ms)")
    tpot, tpot_how = _pick(kv, "Median TPOT (ms)", "Mean TPOT (ms)")
    n = int(kv["Successful requests"]) if "Successful requests" in kv else None
    conc = kv.get("Maximum request concurrency", kv.get("Max request concurrency"))
    return _summary(
        fmt,
        ttft,
        ttft_how,
        tpot,
        tpot_how,
        kv.get("Output token throughput (tok/s)"),
        request_throughput=kv.get("Request throughput (req/s)"),
        requests=n,
        concurrency=conc,
        concurrency_is_setting=conc is not None,
        input_length=_per_request(kv, "Total input tokens", n),
        output_length=_per_request(kv, "Total generated tokens", n),
    )


def _vllm_json(data: dict) -> ServeLogSummary:
    kv = {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    ttft, ttft_how = _pick(kv, "median_ttft_ms", "mean_ttft_ms")
    tpot, tpot_how = _pick(kv, "median_tpot_ms", "mean_tpot_ms")
    n = int(kv["completed"]) if "completed" in kv else None
    conc = kv.get("max_concurrency")
    return _summary(
        "vllm",
        ttft,
        ttft_how,
        tpot,
        tpot_how,
        kv.get("output_throughput"),
        request_throughput=kv.get("request_throughput"),
        requests=n,
        concurrency=conc,
        concurrency_is_setting=conc is not None,
        input_length=_per_request(kv, "total_input_tokens", n),
        output_length=_per_request(kv, "total_output_tokens", n),
    )


def _trtllm(lines: list[str]) -> ServeLogSummary:
    kv = _key_values(lines)
    pct: dict[tuple[str, str], float] = {}
    for line in lines:  # `[TTFT] P50    : 12.3400`
        m = re.match(r"^\s*\[(TTFT|TPOT)\]\s+(\w+)\s*:\s*" + _NUM, line)
        if m:
            pct.setdefault((m.group(1), m.group(2).upper()), _f(m.group(3)))
    ttft, ttft_how = (
        (pct[("TTFT", "P50")], "median")
        if ("TTFT", "P50") in pct
        else _pick(kv, "", "Average time-to-first-token [TTFT] (ms)")
    )
    tpot, tpot_how = (
        (pct[("TPOT", "P50")], "median")
        if ("TPOT", "P50") in pct
        else _pick(kv, "", "Average time-per-output-token [TPOT] (ms)")
    )
    n = int(kv["Number of requests"]) if "Number of requests" in kv else None
    return _summary(
        "trtllm",
        ttft,
        ttft_how,
        tpot,
        tpot_how,
        kv.get("Total Output Throughput (tokens/sec)"),
        request_throughput=kv.get("Request Throughput (req/sec)"),
        requests=n,
        concurrency=kv.get("Number of concurrent requests"),
        input_length=kv.get("Average Input Length (tokens)"),
        output_length=kv.get("Average Output Length (tokens)"),
    )


def _json(text: str) -> dict | None:
    s = text.strip()
    if not s.startswith("{"):
        return None
    try:
        data = json.loads(s)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def detect_serve_log_format(text: str) -> str | None:
    """vllm | sglang | trtllm by the lines (or JSON keys) only that tool writes; None: none."""
    data = _json(text)
    if data is not None:
        return "vllm" if "median_ttft_ms" in data or "output_throughput" in data else None
    if re.search(r"Total Output Throughput \(tokens/sec\)|Request Throughput \(req/sec\)", text):
        return "trtllm"
    if _BLOCK in text:
        if re.search(
            r"^\s*#?\s*(Backend|Max request concurrency|Mean E2E Latency \(ms\))\s*:", text, re.M
        ):
            return "sglang"
        return "vllm"
    return None


def _blocks(lines: list[str]) -> list[list[str]]:
    """The lines of each `Serving Benchmark Result` block (up to its closing ===== line);
    SGLang prints its `Backend:` and concurrency lines inside it, vLLM its concurrency just
    before it (kept: the lines since the previous block)."""
    out, start = [], 0
    for i, line in enumerate(lines):
        if _BLOCK in line:
            end = next(
                (j for j in range(i + 1, len(lines)) if re.match(r"^\s*#?\s*={20,}\s*$", lines[j])),
                len(lines),
            )
            out.append(lines[start:end])
            start = end + 1
    return out


def read_serve_log(text: str, *, fmt: str | None = None, source: str = "log") -> ServeLogSummary:
    """One serving benchmark run from its tool's output (module doc: formats, aggregates)."""
    where = short(source, 200)
    text = _ANSI.sub("", text)
    if fmt is not None and fmt not in SERVE_LOG_FORMATS:
        raise SpecError(
            f"serving log format {short(fmt)}: not one of {', '.join(SERVE_LOG_FORMATS)}",
            field="log_format",
            value=fmt,
        )
    fmt = fmt or detect_serve_log_format(text)
    if fmt is None:
        raise SpecError(
            f"log {where}: no serving benchmark result found (vLLM / SGLang "
            "'Serving Benchmark Result' block, vLLM --save-result JSON, or "
            "trtllm-bench's 'Request Throughput (req/sec)' report); give the "
            "benchmark's output",
            field="log",
            value=source,
        )
    lines = text.splitlines()
    data = _json(text) if fmt == "vllm" else None
    if data is not None:
        s = _vllm_json(data)
    elif fmt == "trtllm":
        if len(re.findall(r"Request Throughput \(req/sec\)", text)) > 1:
            raise SpecError(
                f"log {where}: holds several trtllm-bench reports; give one run per log",
                field="log",
                value=source,
            )
        s = _trtllm(lines)
    else:
        blocks = _blocks(lines)
        if not blocks:
            raise SpecError(
                f"log {where}: no '{_BLOCK}' block of {fmt} found; give the benchmark's output",
                field="log",
                value=source,
            )
        if len(blocks) > 1:
            raise SpecError(
                f"log {where}: holds {len(blocks)} '{_BLOCK}' blocks (a sweep); "
                "give one run per log",
                field="log",
                value=source,
            )
        s = _bench_serving(fmt, blocks[0])
    if not s.measured():
        raise SpecError(
            f"log {where}: the {fmt} output states no TTFT, TPOT or output token "
            "throughput; give the benchmark's complete output",
            field="log",
            value=source,
        )
    return s


def load_serve_log(path: str | Path, *, fmt: str | None = None) -> ServeLogSummary:
    """Read a benchmark output file (planner.io's limits) and summarize it."""
    return read_serve_log(read_text(path, what="log"), fmt=fmt, source=str(path))

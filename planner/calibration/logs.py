"""Readers of training logs: the steady-state step time (and peak memory) of a job, from the
lines its framework prints.

Formats (`read_log(text)` tells them apart by their lines; `fmt=` names one):

- megatron: Megatron-LM's and Megatron-Bridge's `training_log` line,
  `iteration N/ M | ... | elapsed time per iteration (ms): X | throughput per GPU
  (TFLOP/s/GPU): Y | ...`, and the memory report `[Rank 0] (after N iterations) memory (MB) |
  allocated: A | max allocated: Z | ...` (MB = 2**20 bytes, torch.cuda.max_memory_allocated).
- nemo: NeMo 2 (Lightning) progress lines with `train_step_timing in s: X` (and
  `TFLOPS_per_GPU: Y` where the FLOPs callback is on); Megatron-Bridge performance lines
  `step time: X s` (or `step_time: X`).
- torchtitan: `step: N  loss: L  memory: X GiB(Y%)  tps: T  tflops: F  mfu: M%` (memory is
  the max reserved; tps is tokens per second per GPU). ANSI colour codes are stripped.
- deepspeed: Megatron-DeepSpeed's iteration line (`elapsed time per iteration (ms): X`,
  `samples per second: S`, `TFLOPs: F`) and DeepSpeed's throughput timer
  (`CurrSamplesPerSec=S, ..., MaxMemAllocated=Z GB`): samples per second of the global batch.

Steady state: the first max(WARMUP_RECORDS, ceil(WARMUP_FRACTION x n)) step records are
warm-up (compilation, allocator growth, NCCL set-up) and dropped; the step time is the median
of the rest (a log with no more records than that keeps its last one, and says so). A record is
one logged line (frameworks log every `log_interval` steps, each line an average over them).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from planner.errors import SpecError, short
from planner.io import read_text

__all__ = [
    "LOG_FORMATS",
    "WARMUP_FRACTION",
    "WARMUP_RECORDS",
    "LogSummary",
    "read_log",
    "load_log",
    "detect_log_format",
]

LOG_FORMATS = ("megatron", "nemo", "torchtitan", "deepspeed")
WARMUP_FRACTION = 0.10
WARMUP_RECORDS = 3

_NUM = r"([-+]?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _find(pattern: str, line: str) -> float | None:
    m = re.search(pattern, line)
    return _f(m.group(1)) if m else None


@dataclass(frozen=True)
class Record:
    """One logged step line: what it states (None: not stated)."""

    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None
    tflops_per_gpu: float | None = None
    peak_memory_gib: float | None = None


@dataclass(frozen=True)
class LogSummary:
    """The steady state of one log."""

    format: str
    records: int
    used: int
    step_time_s: float | None
    tokens_per_s_per_gpu: float | None
    samples_per_s: float | None
    tflops_per_gpu: float | None
    peak_memory_gib: float | None
    peak_memory_kind: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def rule(self) -> str:
        dropped = self.records - self.used
        return (
            f"median of {self.used} of {self.records} logged steps (first {dropped} dropped "
            f"as warm-up)"
        )

    def step_time(
        self, *, global_batch_size: int, seq_length: int, num_gpus: int
    ) -> tuple[float, str]:
        """The measured step time and what it came from: the logged step time, else the
        global batch's tokens over tokens/s/GPU x GPUs, else its samples over samples/s."""
        if self.step_time_s is not None:
            return self.step_time_s, "step time"
        if self.tokens_per_s_per_gpu:
            return (
                global_batch_size * seq_length / (self.tokens_per_s_per_gpu * num_gpus),
                "tokens/s per GPU",
            )
        if self.samples_per_s:
            return global_batch_size / self.samples_per_s, "samples/s"
        raise SpecError(
            f"the {self.format} log states no step time, tokens/s or samples/s; "
            "give a log with its step lines",
            field="log",
        )


def _megatron(line: str) -> Record | None:
    if not re.search(r"\biteration\s+\d+\s*/\s*\d+", line):
        return None
    ms = _find(r"elapsed time per iteration \(ms\):\s*" + _NUM, line)
    if ms is None:
        return None
    return Record(
        step_time_s=ms / 1e3,
        tflops_per_gpu=_find(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM, line),
        samples_per_s=_find(r"samples per second:\s*" + _NUM, line),
    )


def _megatron_memory(line: str) -> float | None:
    if "memory (MB)" not in line:
        return None
    mb = _find(r"\|\s*max allocated:\s*" + _NUM, line)
    return mb / 1024 if mb is not None else None


def _nemo(line: str) -> Record | None:
    t = _find(r"train_step_timing in s:\s*" + _NUM, line)
    if t is None:
        t = _find(r"\bstep[ _]time:\s*" + _NUM + r"\s*s\b", line)
    if t is None:
        t = _find(r"\bstep_time:\s*" + _NUM, line)
    if t is None:
        return None
    return Record(step_time_s=t, tflops_per_gpu=_find(r"TFLOPS_per_GPU:\s*" + _NUM, line))


def _torchtitan(line: str) -> Record | None:
    if not re.search(r"\bstep:\s*\d+", line) or "tps:" not in line:
        return None
    mem = _find(r"memory:\s*" + _NUM + r"\s*GiB", line)
    return Record(
        tokens_per_s_per_gpu=_find(r"tps:\s*" + _NUM, line),
        tflops_per_gpu=_find(r"tflops:\s*" + _NUM, line),
        peak_memory_gib=mem,
    )


def _deepspeed(line: str) -> Record | None:
    rec = _megatron(line)
    if rec is not None:
        return Record(
            step_time_s=rec.step_time_s,
            samples_per_s=rec.samples_per_s,
            tflops_per_gpu=_find(r"TFLOPs:\s*" + _NUM, line),
        )
    s = _find(r"CurrSamplesPerSec=\s*" + _NUM, line)
    if s is None:
        return None
    mem = _find(r"MaxMemAllocated=\s*" + _NUM + r"\s*GB", line)
    return Record(samples_per_s=s, peak_memory_gib=mem)


_PARSERS = {
    "megatron": _megatron,
    "nemo": _nemo,
    "torchtitan": _torchtitan,
    "deepspeed": _deepspeed,
}


def detect_log_format(lines: list[str]) -> str | None:
    """The format whose step lines the log has (None: none)."""
    text = "\n".join(lines)
    if "train_step_timing in s:" in text or re.search(r"\bstep[ _]time:", text):
        return "nemo"
    if re.search(r"\bstep:\s*\d+.*\btps:", text):
        return "torchtitan"
    if "CurrSamplesPerSec=" in text or re.search(r"samples per second:|TFLOPs:", text):
        return "deepspeed"
    if "elapsed time per iteration (ms)" in text:
        return "megatron"
    return None


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def read_log(text: str, *, fmt: str | None = None, source: str = "log") -> LogSummary:
    """The steady state of a training log's text (see the module's doc for the rule)."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    fmt = fmt or detect_log_format(lines)
    if fmt is None:
        raise SpecError(
            f"log {short(source, 200)}: no step lines of {', '.join(LOG_FORMATS)} "
            "found (e.g. Megatron's 'elapsed time per iteration (ms)', NeMo's "
            "'train_step_timing in s', torchtitan's 'tps:'); give the job's "
            "training log",
            field="log",
            value=source,
        )
    if fmt not in _PARSERS:
        raise SpecError(
            f"log format {short(fmt)}: not one of {', '.join(LOG_FORMATS)}",
            field="log_format",
            value=fmt,
        )
    parse = _PARSERS[fmt]
    records = [r for r in (parse(line) for line in lines) if r is not None]
    if not records:
        raise SpecError(
            f"log {short(source, 200)}: no {fmt} step lines found; give the job's training log",
            field="log",
            value=source,
        )
    mem_lines = [m for m in (_megatron_memory(line) for line in lines) if m is not None]
    n = len(records)
    warm = max(WARMUP_RECORDS, math.ceil(WARMUP_FRACTION * n))
    notes = []
    if n <= warm:
        notes.append(
            f"only {n} logged steps, not more than the {warm} warm-up ones: the last one is used"
        )
        steady = records[-1:]
    else:
        steady = records[warm:]
    peaks = [r.peak_memory_gib for r in records if r.peak_memory_gib is not None] + mem_lines
    kind = (
        {
            "megatron": "max allocated",
            "deepspeed": "max allocated",
            "torchtitan": "max reserved",
        }.get(fmt, "")
        if peaks
        else ""
    )
    return LogSummary(
        format=fmt,
        records=n,
        used=len(steady),
        step_time_s=_median([r.step_time_s for r in steady]),
        tokens_per_s_per_gpu=_median([r.tokens_per_s_per_gpu for r in steady]),
        samples_per_s=_median([r.samples_per_s for r in steady]),
        tflops_per_gpu=_median([r.tflops_per_gpu for r in steady]),
        peak_memory_gib=max(peaks) if peaks else None,
        peak_memory_kind=kind,
        notes=notes,
    )


def load_log(path: str | Path, *, fmt: str | None = None) -> LogSummary:
    """Read a log file (planner.io's limits) and summarize it."""
    return read_log(read_text(path, what="log"), fmt=fmt, source=str(path))

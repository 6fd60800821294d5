"""Pipeline schedules: the bubble, and stage imbalance.

1F1B / GPipe bubble fraction of the ideal time (Narayanan et al. 2021 §2.2):
    (p - 1) / m
interleaved 1F1B with v virtual stages per rank:
    (p - 1) / (v * m)
With unequal stages (uneven layer split, embedding on the first rank, output layer and loss on
the last), one step of 1F1B takes, with t_i the forward+backward time of one micro-batch on
stage i and t_max the slowest:
    T = (m - 1) * t_max + sum_i t_i
which is (m + p - 1) * t for equal stages, i.e. bubble (p - 1)/m. Interleaving divides the
fill/drain part by v: T = (m - 1/v) * t_max + sum_i t_i / v ... written below as
    T = m * t_max + (sum_i t_i - t_max) / v.

Schedules side by side (DeepSeek-V3 report, arXiv:2412.19437 Table 2; deepseek-ai/DualPipe
README), F a forward chunk, B a full backward chunk, W its weight-gradient part, F&B a forward
and a backward chunk run overlapped (F + B when nothing of either hides the other):
    schedule    bubble (s per step)        parameters   activations in flight (micro-batches)
    1f1b        (p-1)(F+B)                 1x           p
    interleaved (p-1)(F+B)/v               1x           p (1 + (p-1)/(p v))   (Narayanan §2.2)
    dualpipe    (p/2-1)(F&B + B - 3W)      2x           p + 1
    dualpipev   (p/2-1)(F&B + B - 3W)      1x           p + 1
DualPipe feeds micro-batches from both ends, so each rank holds two pipeline stages' copies of
its parameters; DualPipeV (the "cut-in-half" V shape of the DualPipe repository) places the
two chunks of a rank on one copy of its layers.
"""

from __future__ import annotations

from planner.layout import bubble_fraction  # defined with the layout: the rules need it too

__all__ = [
    "bubble_fraction",
    "pipeline_time",
    "SCHEDULES",
    "schedule_bubble",
    "parameter_copies",
    "activations_in_flight",
]

SCHEDULES = ("1f1b", "interleaved", "dualpipe", "dualpipev")
"""Pipeline schedules (torchtitan `pipeline_parallel_schedule` names where it has them:
1F1B, Interleaved1F1B, DualPipeV; DualPipe is deepseek-ai/DualPipe's and not in Megatron-LM)."""


def _check(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"pipeline schedule {schedule!r}: one of {', '.join(SCHEDULES)}")


def schedule_bubble(
    schedule: str, *, p: int, f: float, b: float, w: float, fb: float | None = None, v: int = 1
) -> float:
    """Idle seconds of a step on the busiest rank (arXiv:2412.19437 Table 2): (p-1)(F+B),
    /v interleaved, (p/2-1)(F&B + B - 3W) for DualPipe and DualPipeV (F&B default F+B)."""
    _check(schedule)
    if p <= 1:
        return 0.0
    if schedule == "1f1b":
        return (p - 1) * (f + b)
    if schedule == "interleaved":
        return (p - 1) * (f + b) / max(v, 1)
    both = f + b if fb is None else fb
    return max(0.0, (p / 2 - 1) * (both + b - 3 * w))


def parameter_copies(schedule: str) -> int:
    """Copies of a rank's parameters the schedule keeps: 2 for DualPipe, else 1."""
    _check(schedule)
    return 2 if schedule == "dualpipe" else 1


def activations_in_flight(schedule: str, *, p: int, v: int = 1) -> float:
    """Micro-batches of activations the first rank holds at the peak: p for 1F1B,
    p(1 + (p-1)/(p v)) interleaved, p + 1 for DualPipe / DualPipeV."""
    _check(schedule)
    if schedule == "1f1b" or p <= 1:
        return float(p)
    if schedule == "interleaved":
        return p * (1 + (p - 1) / (p * max(v, 1)))
    return float(p + 1)


def pipeline_time(stage_times: list[float] | tuple[float, ...], *, m: int, v: int = 1) -> float:
    """Time of one step through the pipeline: m*t_max + (sum t_i - t_max)/v.

    Equal stages t: m*t + (p-1)*t/v, i.e. the ideal m*t plus the bubble (p-1)/(v*m).
    """
    t_max = max(stage_times)
    return m * t_max + (sum(stage_times) - t_max) / v

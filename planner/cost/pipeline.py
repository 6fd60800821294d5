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
"""

from __future__ import annotations

from planner.layout import bubble_fraction  # defined with the layout: the rules need it too

__all__ = ["bubble_fraction", "pipeline_time"]


def pipeline_time(stage_times: list[float] | tuple[float, ...], *, m: int, v: int = 1) -> float:
    """Time of one step through the pipeline: m*t_max + (sum t_i - t_max)/v.

    Equal stages t: m*t + (p-1)*t/v, i.e. the ideal m*t plus the bubble (p-1)/(v*m).
    """
    t_max = max(stage_times)
    return m * t_max + (sum(stage_times) - t_max) / v

"""CPU-time budgets for the tests that check that hostile or large input ends quickly.

Unit tests do not assert wall-clock time: on a loaded machine (two pytest runs on two cores,
CI neighbours) the same work takes two or three times as long on the clock. They bound the
CPU time of the process doing the work instead, which load barely changes: this process's
`time.process_time()` plus the CPU of the children it has waited for
(`resource.getrusage(RUSAGE_CHILDREN)`), which counts the child the search forks
(planner.search `_collect_all`) and the planner subprocesses a test runs. A budget is a few
times what the work costs on an idle machine, and far below what unbounded work (an
exponential blow-up, a quadratic pass over 150,000 keys) would cost, so a regression to
unbounded work still fails. Speed itself is measured in benchmarks/.

Wall-clock `timeout=` arguments of subprocess calls remain as hang guards only (a blocked read
costs no CPU), set far above any loaded run.
"""

from __future__ import annotations

import resource
import time
from contextlib import contextmanager

HANG_GUARD_S = 300
"""Wall-clock timeout for a subprocess: catches a hang only, never a slow run."""


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its reaped children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class CpuUsed:
    """What a `cpu_budget` block used: `.seconds`, set when the block ends."""

    seconds: float = 0.0


@contextmanager
def cpu_budget(limit_s: float, what: str = "the work"):
    """Fail if the block uses more than `limit_s` CPU seconds (this process + reaped children).

    Checked when the block ends, so it bounds work that finishes; work that never ends is the
    hang guard's (or RLIMIT_CPU's) to stop."""
    used = CpuUsed()
    start = cpu_seconds()
    yield used
    used.seconds = cpu_seconds() - start
    assert used.seconds < limit_s, (
        f"{what} used {used.seconds:.2f} CPU seconds, over its budget of {limit_s} s"
    )

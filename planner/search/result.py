"""What a search returns: the ranked plans (`Plan`) and the whole result (`SearchResult`:
the plans, what was searched and pruned, the seven-step pick, and when nothing fits the
closest misfit, the binding constraint and the suggestions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from planner.config import Job
from planner.cost.memory import MemoryBreakdown
from planner.cost.step import StepTime
from planner.errors import Violation
from planner.layout import Layout
from planner.rules import DEFAULT_HEADROOM

if TYPE_CHECKING:
    from planner.search.suggest import Suggestion


@dataclass(frozen=True)
class Plan:
    rank: int
    layout: Layout
    memory: MemoryBreakdown
    time: StepTime
    warnings: list[Violation]
    frameworks: tuple[str, ...] | None = None  # which can run it (set by `planner plan`)


@dataclass
class SearchResult:
    job: Job
    plans: list[Plan]
    searched: int
    feasible: int
    evaluated: int  # layouts whose memory was estimated
    timed: int  # contenders ranked by their step time
    pruned: dict[str, int]
    steps: list[dict]
    pick: Plan | None = None  # the seven-step procedure's own choice
    pick_rank: int | None = None
    pick_note: str = ""
    closest: tuple[Layout, MemoryBreakdown] | None = None
    suggestions: list[str] = field(default_factory=list)  # the lines printed (binding first)
    suggested: list[Suggestion] = field(default_factory=list)  # each checked to fit
    binding: str = ""  # what stops every layout (nothing fits)
    elapsed_s: float = 0.0
    headroom: float = DEFAULT_HEADROOM
    framework: str | None = None  # `plan --framework`: only what it runs
    batch_note: str = ""  # where a default global batch came from

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

"""The search: candidates -> rules in the seven-step order -> estimate -> rank.

The space: tp (divisors of the GPU count up to --max-tp, default the NVLink domain), cp
(powers of two), pp (divisors of what is left, at most the layer count, with the uneven
first/last split where the layers do not divide), dp (the rest), ep and etp (MoE: divisors of
the experts; etp 1 or tp), vpp (divisors of the layers per rank), micro-batch 1..8, sp,
ZeRO 0..3, recompute none/selective/full. Rules prune level by level in the seven-step order,
cheapest first; `pruned` counts the layouts each rule removed (the whole subtree below the
level where it fired). Exact shortcuts keep it fast without changing the answer: memory
grows with the micro-batch, so once a micro-batch size does not fit the larger ones are
counted as pruned by memory unevaluated; with the same other knobs more recompute is
strictly slower, so only the least recompute that fits is a contender (the others count as
feasible but are not ranked); and contenders are timed in order of a lower bound on their
step time, stopping when the bound passes the K-th best (see `_rank`).

What makes each step cheap without changing a number: the leaves of one (base, vpp, sp)
share their memory pieces (`_Group`), the lower bound is kept per search on what it reads
(`_least_bound_sum`), and on two cores the processes share the (tp, cp) pairs through a
queue and rank their own contenders ahead, merged in one fixed order (`_collect_all`).

The package, by job: `space` (the options, `--fix`, the candidate degrees of each axis and
how a point of the space becomes a Layout), `walk` (the groups, subtrees and leaves, the
fitting prefixes, the contenders and their bounds, the counts of what each rule pruned),
`rank` (the contenders timed by bound, the tie-breaks, the top K, the seven-step pick),
`pool` (the two processes and their merge, the collector paused), `suggest` (when nothing
fits: the binding constraint and the suggestions, each checked by searching again) and
`result` (`Plan`, `SearchResult`). This module keeps the public API and `search` itself.
"""

from __future__ import annotations

import time as _time

from planner.config import Job
from planner.cost import cost_model
from planner.search.pool import _collect_all, _collector_paused
from planner.search.rank import _rank, _seven_step_pick, _with_train
from planner.search.result import Plan, SearchResult

# the other public names of the search, where they were before it was split
from planner.search.space import FIXABLE, RECOMPUTE, ZERO, SearchOptions, _Space, parse_fix  # noqa: F401
from planner.search.suggest import MAX_RERUNS, SUGGEST_BUDGET_S, Suggestion, _suggestions  # noqa: F401

__all__ = ["SearchOptions", "Plan", "SearchResult", "search", "FIXABLE", "parse_fix"]


def search(
    job: Job,
    opts: SearchOptions = SearchOptions(),  # noqa: B008 (frozen: never mutated)
    *,
    suggest: bool = True,
) -> SearchResult:
    """Every layout of `job`, pruned by the rules, estimated, ranked. When nothing fits and
    `suggest`, the changes that make something fit (each checked by searching again)."""
    t0 = _time.perf_counter()
    with _collector_paused():
        result = _search(job, opts, suggest)
    result.elapsed_s = _time.perf_counter() - t0
    return result


def _search(job: Job, opts: SearchOptions, suggest: bool) -> SearchResult:
    cm = cost_model(job)
    space = _Space(job, opts)
    cnt, cands, closest, known = _collect_all(job, space, cm, opts)
    plans, timed = _rank(job, cm, cands, opts, space, known)
    if opts.tokens:
        plans = [_with_train(p, job, opts.tokens) for p in plans]
    near = (closest[0][0], cm.memory(closest[0][0])) if closest and not cands else None
    result = SearchResult(
        job=job,
        plans=plans,
        searched=cnt.searched,
        feasible=cnt.feasible,
        evaluated=cnt.evaluated,
        timed=timed,
        pruned=cnt.pruned,
        steps=[],
        closest=near,
        headroom=opts.headroom,
    )
    _seven_step_pick(result, cm, opts)
    if not cands and suggest:
        _suggestions(result, opts)
    return result

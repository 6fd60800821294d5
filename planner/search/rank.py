"""Ranking the contenders: each timed at its fastest dispatcher variant (`_fastest`) in
order of its lower bound until the bound passes the K-th best step time (`_by_bound`), or
by memory first (`_rank`); the tie-breaks (numerics given up, model-parallel ranks, a fixed
order of the rest); the top K as `Plan`s with their warnings; time-to-train on them
(`_with_train`); and where the seven-step procedure's own pick ranks (`_seven_step_pick`).
"""

from __future__ import annotations

import heapq

from planner.config import Job
from planner.layout import Layout
from planner.rules import Context, check, fits
from planner.search.result import Plan, SearchResult
from planner.search.space import RECOMPUTE, SearchOptions, _Space, _variants_for
from planner.search.walk import _bound, _layout
from planner.seven_steps import pick_note, seven_steps


def _fastest(
    cand: tuple, space: _Space, cm, kth: float = float("inf")
) -> tuple[Layout | None, float]:
    """The candidate at its fastest dispatcher variant (the first of them on a tie), and its
    step time; or (None, a lower bound on it) when even the variants' pipeline times exceed
    `kth` (the step adds DP and optimizer time to them)."""
    lays = [_layout(cand, v) for v in _variants_for(space, cand[1], cand[4])]
    if space.runs_as is not None:
        # as the framework runs each (None: it refuses), and still fitting as it runs it
        ran = (space.runs_as(lay) for lay in lays)
        lays = [
            lay
            for lay in ran
            if lay is not None and fits(cm.memory_total(lay), cm.capacity, space.headroom)
        ]
        if not lays:
            return None, float("inf")
    if kth < float("inf"):
        low = min(cm.pipeline_seconds(lay) for lay in lays)
        if low > kth:
            return None, low
    best = None
    for lay in lays:
        step = cm.step_seconds(lay)
        if best is None or step < best[1]:
            best = (lay, step)
    return best


def _by_bound(
    cands: list, top: int, space: _Space, cm, known: dict | None = None
) -> tuple[list, int, dict]:
    """Time the contenders in order of their lower bound until it passes the `top`-th best
    step time found: (the `top` best as (key, layout, memory, time), how many were timed,
    {index in `cands`: (dispatcher variant, step time, memory total, lower bound)} of those
    timed here, not found in `known`, which holds the same for contenders timed elsewhere).

    A contender timed counts whether or not it enters: one whose pipeline time (`_fastest`)
    or step time is past the `top`-th best cannot, and is recorded as (None, that time,
    None, its bound) without its memory or the other dispatchers' DP time.

    Ranking a subset of `cands` alone times (at least) every one of the subset that ranking
    all of them does: its order is the subset's order in the whole (a stable sort), and
    before any candidate the subset's `top`-th best time is no better than the whole's, so
    its bound stops no earlier (and what it ruled out is ruled out in the whole). Hence
    `known` from the shares ranked alone leaves nothing to time (what is missing is timed
    here); the best of those known are estimated again (the same numbers: the estimates
    depend on the layout only)."""
    # in order of (bound, index): each contender's own bound (`_bound`) is taken when its
    # floor (`cand[0]`, no more than it) comes up, and it goes back in line at its bound, so
    # they come up in the order a sort of all their bounds gives, and when a floor passes
    # the `top`-th best every bound not yet taken does too (those timed elsewhere come with
    # their bound: no need to take it again)
    known = known or {}
    exact = space.eager_bounds  # the contenders carry their own bound, not a floor
    line = [
        (known[i][3], i, True) if i in known else (cand[0], i, exact)
        for i, cand in enumerate(cands)
    ]
    heapq.heapify(line)
    scored, done, here = [], {}, {}
    kth = float("inf")
    timed = 0
    while line:
        lb, i, exact = heapq.heappop(line)
        if lb > kth:
            break
        cand = cands[i]
        if not exact:
            heapq.heappush(line, (_bound(cand, space, cm), i, True))
            continue
        got = known.get(i)
        timed += 1
        if got is None:
            lay, step = _fastest(cand, space, cm, kth)
            if lay is None or step > kth:  # slower than the `top`-th best: it cannot
                done[i] = (None, step, None, lb)  # enter, here or (its kth no better) there
                continue
            variant = (lay.moe_token_dispatcher, lay.overlap_moe_expert_parallel_comm)
            mem = here[i] = cm.memory(lay)
            got = done[i] = (variant, step, mem.total, lb)
        elif got[1] > kth or got[1] == float("inf"):
            continue  # as above (inf: refused by `runs_as`)
        else:
            lay = _layout(cand, got[0])
            if space.runs_as is not None:
                lay = space.runs_as(lay)
        if space.runs_as is not None and any(x[2] == lay for x in scored):
            continue  # two candidates the framework runs as one layout
        if lay.dp * lay.cp == 1 and _zero_twin(scored, lay, got[1], got[2]):
            continue  # ZeRO shards over dp*cp = 1 ranks: the same plan
        scored.append(((got[1], _compromises(lay), got[2], _mp(lay)) + _tie(lay), i, lay))
        if len(scored) >= top:
            scored.sort(key=lambda x: x[0])
            del scored[top:]
            kth = scored[-1][0][0]
    best = [
        (key, lay, here[i] if i in here else cm.memory(lay), cm.time(lay)) for key, i, lay in scored
    ]
    return best, timed, done


def _zero_twin(scored: list, lay: Layout, step: float, mem: float) -> bool:
    """A plan already kept that differs from `lay` only in its ZeRO stage, with the same step
    time and memory (ZeRO shards over dp*cp ranks: at dp*cp = 1 the stage changes nothing).
    The lower stage is kept (the simpler setting): a twin with a higher one is replaced."""
    for k, (key, _i, other) in enumerate(scored):
        if (
            other.zero != lay.zero
            and other.with_(zero=lay.zero) == lay
            and key[0] == step
            and key[2] == mem
        ):
            if lay.zero < other.zero:
                scored[k] = (key[: -len(_tie(lay))] + _tie(lay), -1, lay)  # -1: its own memory
            return True
    return False


def _rank(
    job: Job, cm, cands, opts: SearchOptions, space: _Space, known: dict | None = None
) -> tuple[list[Plan], int]:
    """Sort the feasible layouts and keep the top K with their warnings.

    By time (or MFU, the same order): the contenders (the least saver of each chain that fits
    per otherwise-equal layout, with a lower bound on their step time, from `_leaves`) are
    timed, each at its fastest dispatcher variant, in order of that bound until it passes the
    K-th best time found, which leaves the top K exactly as timing all of them would
    (`known`: timings made ahead, `_ranked_ahead`). By memory: memory first, then time, for the K
    smallest.
    """
    timed = 0
    if opts.sort_by == "memory":
        with_mem = sorted(((c, cm.memory(_layout(c))) for c in cands), key=lambda c: c[1].total)
        scored = []
        if space.runs_as is not None:
            with_mem = [(c, m) for c, m in with_mem if _fastest(c, space, cm)[0] is not None]
        for cand, mem in with_mem[: max(opts.top * 4, opts.top)]:
            lay = _fastest(cand, space, cm)[0]
            tm = cm.time(lay)
            timed += 1
            scored.append(
                ((mem.total, tm.step_time_s, _compromises(lay), _mp(lay)) + _tie(lay), lay, mem, tm)
            )
    else:
        scored, timed, _ = _by_bound(cands, opts.top, space, cm, known)
    scored.sort(key=lambda x: x[0])
    plans = []
    for i, (_, lay, mem, tm) in enumerate(scored[: opts.top], start=1):
        warns = [
            v
            for v in check(
                Context(
                    model=job.model,
                    hardware=job.hardware,
                    training=job.training,
                    num_gpus=job.num_gpus,
                    layout=lay,
                    memory=mem,
                    headroom=opts.headroom,
                )
            )
            if v.severity == "warning"
        ]
        plans.append(Plan(i, lay, mem, tm, warns))
    return plans, timed


def _with_train(p: Plan, job: Job, tokens: float) -> Plan:
    from dataclasses import replace

    tr = job.training
    steps = tokens / (tr.global_batch_size * tr.seq_length)
    sec = steps * p.time.step_time_s
    train = {
        "tokens": tokens,
        "steps": steps,
        "days": sec / 86400,
        "gpu_hours": sec * p.time.num_gpus / 3600,
    }
    return replace(p, time=replace(p.time, train=train))


def _compromises(lay: Layout) -> int:
    """Numerics a layout gives up to save memory (bf16 gradient reduction, bf16 Adam moments):
    at an equal step time the layout that keeps fp32 ranks first, memory headroom next."""
    return (
        (not lay.grad_reduce_in_fp32)
        + (lay.exp_avg_dtype == "bf16")
        + (lay.exp_avg_sq_dtype == "bf16")
    )


def _mp(lay: Layout) -> int:
    """Model-parallel ranks (the last tie-break: fewer is simpler)."""
    return lay.tp * lay.cp * lay.pp * lay.ep


_REC_ORDER = {r: i for i, r in enumerate(RECOMPUTE)}


def _tie(lay: Layout) -> tuple:
    """A deterministic order among layouts equal on every measured key."""
    return (
        lay.tp,
        lay.cp,
        lay.ep,
        lay.pp,
        lay.vpp,
        lay.etp,
        lay.zero,
        lay.micro_batch_size,
        _REC_ORDER[lay.recompute],
        len(lay.recompute_modules),
        lay.recompute_num_layers or 0,
        lay.cpu_offloading_num_layers,
        not lay.grad_reduce_in_fp32,
        lay.exp_avg_dtype,
        lay.exp_avg_sq_dtype,
        lay.sp,
        lay.moe_token_dispatcher,
        lay.overlap_moe_expert_parallel_comm,
    )


def _seven_step_pick(result: SearchResult, cm, opts: SearchOptions) -> None:
    """The seven-step trace, and where its pick ranks among the plans."""
    steps, pick = seven_steps(result.job, cm, opts)
    result.steps = steps
    if pick is None:
        return
    result.pick = Plan(0, pick, cm.memory(pick), cm.time(pick), [])
    result.pick_rank = next((p.rank for p in result.plans if p.layout == pick), None)
    result.pick_note = pick_note(result.pick, result.pick_rank, result.best, len(result.plans))

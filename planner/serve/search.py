"""The serving search: every instance shape (tp x pp x ep x attention-DP) times replicas, and
prefill/decode disaggregation (worker shapes and P:D counts), at every concurrency the KV
cache allows; keep what meets the SLOs, rank by output tokens/s per GPU, and the Pareto front
of tokens/s per user against tokens/s per GPU.

Shapes that break an engine rule are never estimated (`rules.instance_errors`); a shape's
memory is computed once and its concurrencies are the powers of two up to what its KV cache
holds, plus that maximum. Each layout is ranked at its best concurrency that meets the SLOs.
Disaggregated deployments reuse the shapes' prefill rate and decode steps (computed once per
shape and concurrency); for each pair of worker shapes and concurrency only the worker counts
next to the balance of the two pools are estimated (the others have the same latency and less
throughput).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.caveats import LONG_CONTEXT_TOKENS, layer_kind_caveats
from planner.errors import Violation
from planner.serve.estimate import (
    ServeEstimate,
    aggregated,
    decode_pool,
    disaggregated_loop,
    prefill_pool,
)
from planner.serve.layout import Instance, ServeLayout
from planner.serve.memory import ServeMemory, instance_memory
from planner.serve.rules import check, instance_errors, job_errors
from planner.serve.time import ServeCost
from planner.units import divisors

__all__ = [
    "INTERACTIVE_TTFT_S",
    "INTERACTIVE_TPOT_S",
    "ServeOptions",
    "Candidate",
    "ServeSearchResult",
    "search",
    "instance_shapes",
    "concurrencies",
    "pareto_front",
]


INTERACTIVE_TPOT_S = 0.050
"""`planner serve`'s default target without an SLO (--objective interactive): 50 ms per output
token, at least 20 tokens/s per user, about the pace of reading (a stated choice, not a
measured constant; --objective throughput ranks with no SLO)."""
INTERACTIVE_TTFT_S = 3.0
"""... and the first token within 3 s."""


@dataclass(frozen=True)
class ServeOptions:
    top: int = 10
    ttft_s: float | None = None  # SLO: time to first token
    tpot_s: float | None = None  # SLO: time per output token
    max_tp: int | None = None  # default: the NVLink domain
    disaggregated: bool = True  # also search prefill/decode disaggregation
    # (job, layout) -> the engine starts it: `serve --engine E` passes E's own export
    # refusals (planner.frameworks.engines.writer.refusals); the ranking skips the others
    accepts: Callable | None = None


@dataclass(frozen=True)
class Candidate:
    layout: ServeLayout
    estimate: ServeEstimate
    meets: bool
    warnings: tuple = ()
    rank: int = 0

    @property
    def per_gpu(self) -> float:
        return self.estimate.output_tokens_per_s_per_gpu

    @property
    def per_user(self) -> float:
        return self.estimate.output_tokens_per_s_per_user


@dataclass
class ServeSearchResult:
    job: object
    options: ServeOptions
    plans: list[Candidate]
    pareto: list[Candidate]
    steps: list[dict]
    searched: int  # (layout, concurrency) points estimated
    shapes: int  # instance shapes considered
    fitting: int  # shapes whose KV cache holds one request
    meeting: int  # points meeting the SLOs
    elapsed_s: float = 0.0
    pick: Candidate | None = None  # the chapter's procedure's pick
    pick_rank: int | None = None
    pick_note: str = ""
    closest: Candidate | None = None
    pruned: dict = field(default_factory=dict)
    caveats: list = field(default_factory=list)

    @property
    def best(self) -> Candidate | None:
        return self.plans[0] if self.plans else None


def concurrencies(max_conc: int) -> list[int]:
    """1, 2, 4, ... up to max_conc, and max_conc itself."""
    out, c = [], 1
    while c < max_conc:
        out.append(c)
        c *= 2
    out.append(max_conc)
    return out


def unit_concurrencies(max_conc: int, unit: int) -> list[int]:
    """The concurrencies of an instance whose `unit` (its attention-DP) ranks each take an equal
    share: `concurrencies` of whole shares times `unit`, which is what its launch command
    sets (a per-rank batch limit) and reads back; plain `concurrencies` when one share does
    not fit."""
    if unit <= 1 or max_conc < unit:
        return concurrencies(max_conc)
    return [unit * c for c in concurrencies(max_conc // unit)]


def cp_degrees(job, max_gpus: int, *, forced: bool = False) -> list[int]:
    """The cp degrees to search: 1, and 2, 4, ... up to max_gpus only for long prompts
    (>= caveats.LONG_CONTEXT_TOKENS, where splitting a prompt pays) or when `forced` (no
    shape holds a request without CP): the search stays as fast as before for short ones."""
    if not forced and job.serving.input_length < LONG_CONTEXT_TOKENS:
        return [1]
    out, c = [1], 2
    while c <= max_gpus:
        out.append(c)
        c *= 2
    return out


def instance_shapes(
    job, *, max_gpus: int, max_tp: int, cps: tuple = (1,)
) -> tuple[list[Instance], dict]:
    """Every instance the engines accept on at most `max_gpus` GPUs with a cp of `cps`
    (counts of the rest)."""
    m = job.model
    pruned: dict[str, int] = {}
    out = []
    n = max_gpus
    for gpus in divisors(n):
        for cp in cps:
            if gpus % cp:
                continue
            _shapes_of(job, m, gpus, cp, max_tp, out, pruned)
    return out, pruned


def _shapes_of(job, m, gpus: int, cp: int, max_tp: int, out: list, pruned: dict) -> None:
    """The instances of `gpus` GPUs with context parallelism `cp` (appended to `out`)."""
    for tp in divisors(gpus // cp):
        if tp > max_tp:
            continue
        for pp in divisors(gpus // (tp * cp)):
            dp = gpus // (tp * cp * pp)
            if m.is_moe:
                variants = [(dp, dp > 1)] if dp > 1 else [(1, False)]
            else:
                variants = [(1, False)] if dp == 1 else []
            for d, adp in variants:
                group = tp * d if adp else tp
                eps = [e for e in divisors(group) if m.num_experts % e == 0] if m.is_moe else [1]
                for ep in eps:
                    inst = Instance(tp=tp, pp=pp, ep=ep, dp=d, dp_attention=adp, cp=cp)
                    errs = instance_errors(job, inst)
                    if errs:
                        pruned[errs[0].rule] = pruned.get(errs[0].rule, 0) + 1
                        continue
                    out.append(inst)


def _meets(est: ServeEstimate, opts: ServeOptions) -> bool:
    return (opts.ttft_s is None or est.ttft_s <= opts.ttft_s) and (
        opts.tpot_s is None or est.tpot_s <= opts.tpot_s
    )


def _violation(est: ServeEstimate, opts: ServeOptions) -> float:
    """How far from the SLOs: the worst ratio of estimate to target (1 = just met)."""
    r = [1.0]
    if opts.ttft_s:
        r.append(est.ttft_s / opts.ttft_s)
    if opts.tpot_s:
        r.append(est.tpot_s / opts.tpot_s)
    return max(r)


def pareto_front(points: list[Candidate]) -> list[Candidate]:
    """The points no other beats on both tokens/s per user and tokens/s per GPU, sorted by
    tokens/s per user (fastest streams first)."""
    pts = sorted(points, key=lambda c: (-c.per_user, -c.per_gpu))
    front, best_gpu = [], -1.0
    for c in pts:
        if c.per_gpu > best_gpu * (1 + 1e-9):
            front.append(c)
            best_gpu = c.per_gpu
    return front


@dataclass
class _Shape:
    inst: Instance
    mem: ServeMemory
    cost: ServeCost
    concs: list[int]
    prefill: tuple = ()
    decode: dict = field(default_factory=dict)


def search(job, opts: ServeOptions = ServeOptions()) -> ServeSearchResult:
    from planner.serve.reasoning import procedure

    t0 = time.perf_counter()
    errs = job_errors(job)
    if errs:
        from planner.errors import SpecError

        raise SpecError(errs[0].message)
    hw, N = job.hardware, job.num_gpus
    max_tp = opts.max_tp or hw.nvlink_domain_size
    cps = cp_degrees(job, N)
    insts, pruned = instance_shapes(job, max_gpus=N, max_tp=max_tp, cps=tuple(cps))
    shapes: dict[Instance, _Shape] = {}
    _fit(job, insts, shapes, pruned)
    if not shapes and cps == [1]:  # nothing holds a request without CP: try it
        more, pruned_cp = instance_shapes(
            job, max_gpus=N, max_tp=max_tp, cps=tuple(cp_degrees(job, N, forced=True)[1:])
        )
        for k, v in pruned_cp.items():
            pruned[k] = pruned.get(k, 0) + v
        _fit(job, more, shapes, pruned)
        insts += more
    points: list[Candidate] = []
    for sh in shapes.values():
        if N % sh.inst.gpus:
            continue
        layout = ServeLayout(instance=sh.inst, replicas=N // sh.inst.gpus)
        # the loop's values are bound as defaults (the lambda runs inside _sweep, in this
        # iteration, but bound they need no lint exemption)
        points += _sweep(
            sh.concs,
            opts,
            lambda c, layout=layout, sh=sh: aggregated(
                job, layout, mem=sh.mem, cost=sh.cost, conc=c
            ),
            layout,
        )
    if opts.disaggregated and job.serving.batching == "continuous":
        points += _disaggregated_points(job, shapes, opts)
    meeting = [p for p in points if p.meets]
    best_per_layout: dict = {}
    for p in meeting:
        cur = best_per_layout.get(p.layout)
        if cur is None or (p.per_gpu, -p.estimate.tpot_s) > (cur.per_gpu, -cur.estimate.tpot_s):
            best_per_layout[p.layout] = p
    ranked = sorted(
        best_per_layout.values(), key=lambda p: (-p.per_gpu, p.estimate.tpot_s, p.layout.num_gpus)
    )
    if opts.accepts is not None:
        ranked = _accepted(ranked, opts, job, pruned)
    plans = [_with_rank(p, i + 1, job) for i, p in enumerate(ranked[: opts.top])]
    result = ServeSearchResult(
        job=job,
        options=opts,
        plans=plans,
        pareto=pareto_front(points),
        steps=[],
        searched=len(points),
        shapes=len(insts),
        fitting=len(shapes),
        meeting=len(meeting),
        pruned=pruned,
    )
    if not meeting and points:
        result.closest = _with_rank(
            min(points, key=lambda p: (_violation(p.estimate, opts), -p.per_gpu)), 0, job
        )
    result.steps, pick, note = procedure(job, opts, shapes, points)
    if pick is not None:
        rank = next(
            (
                i + 1
                for i, p in enumerate(ranked)
                if p.layout == pick.layout and p.estimate.concurrency == pick.estimate.concurrency
            ),
            None,
        )
        result.pick, result.pick_rank, result.pick_note = pick, rank, note
    result.caveats = search_caveats(job)
    from planner.serve.validate import cp_caveats

    for c in [result.pick] + result.plans:
        if c is not None:
            result.caveats += [x for x in cp_caveats(job, c.layout) if x not in result.caveats]
    result.elapsed_s = time.perf_counter() - t0
    return result


def _accepted(ranked: list, opts: ServeOptions, job, pruned: dict) -> list:
    """The ranked deployments the engine starts, the first `top` of them (each checked in
    rank order until `top` are found); the others counted under `engine-refuses`."""
    out = []
    for p in ranked:
        if len(out) >= opts.top:
            break
        if opts.accepts(job, p.layout):
            out.append(p)
        else:
            pruned["engine-refuses"] = pruned.get("engine-refuses", 0) + 1
    return out


def _fit(job, insts, shapes: dict, pruned: dict) -> None:
    """The instances whose KV cache holds one request, with their memory and cost."""
    for inst in insts:
        mem = instance_memory(job, inst)
        if mem.max_concurrency < 1:
            pruned["fits-in-memory"] = pruned.get("fits-in-memory", 0) + 1
            continue
        shapes[inst] = _Shape(
            inst, mem, ServeCost(job, inst), unit_concurrencies(mem.max_concurrency, inst.dp)
        )


def search_caveats(job) -> list[str]:
    """Where the search's estimates (continuous batching at chosen concurrencies) leave the
    serving calibration's ground."""
    hw = job.hardware
    fitted = set(hw.serving_calibration.fitted_on)
    if not fitted:
        return [
            f"{hw.name} has no serving calibration: its serving parameters are defaults, "
            "so treat the estimates as rough"
        ]
    kinds = layer_kind_caveats(job.model)
    if "serving-latency" in fitted:
        return kinds
    return [
        f"TTFT and TPOT at a given concurrency are not yet checked against measured runs: "
        f"the {hw.name} parameters were fitted to {', '.join(sorted(fitted))} runs"
    ] + kinds


def _sweep(concs: list[int], opts: ServeOptions, est_of, layout) -> list[Candidate]:
    """Candidates at the powers-of-two concurrencies, and, where the SLOs are met at c but not
    at the next one, the largest concurrency between them that still meets them (latency
    grows with concurrency: bisection)."""
    out = [Candidate(layout, e, _meets(e, opts)) for e in map(est_of, concs)]
    if opts.ttft_s is None and opts.tpot_s is None:
        return out
    unit = _unit(layout.instance, concs)
    for a, b in zip(out, out[1:]):
        if a.meets and not b.meets:
            lo, hi = a.estimate.concurrency, b.estimate.concurrency
            best = None
            while hi - lo > unit:
                mid = (lo + hi) // 2 // unit * unit
                e = est_of(mid)
                if _meets(e, opts):
                    lo, best = mid, e
                else:
                    hi = mid
            if best is not None:
                out.append(Candidate(layout, best, True))
            break
    return out


def _with_rank(p: Candidate, rank: int, job) -> Candidate:
    warnings = tuple(
        v
        for v in check(
            job, p.layout, memory=p.estimate.memory, prefill_memory=p.estimate.prefill_memory
        )
        if v.severity == "warning"
    )
    return Candidate(p.layout, p.estimate, p.meets, warnings, rank)


def _front(items, cost, latency):
    """The items no other beats on both cost and latency (lower is better for both)."""
    out, best = [], float("inf")
    for it in sorted(items, key=lambda x: (cost(x), latency(x))):
        if latency(it) < best * (1 - 1e-9):
            out.append(it)
            best = latency(it)
    return out


def _disaggregated_points(job, shapes: dict, opts: ServeOptions) -> list[Candidate]:
    """Prefill x decode workers that use all GPUs. At the balance of the two pools (P prefill
    workers of gp GPUs and rate rp, D decode workers of gd GPUs and rate rd, P*rp = D*rd) the
    deployment serves N / (gp/rp + gd/rd) requests/s, TTFT is the prefill worker's and TPOT the
    decode worker's: the two sides separate. So only the prefill shapes on the front of (GPU
    seconds per request, TTFT) and the decode (shape, concurrency) points on the front of (GPU
    seconds per request, TPOT) can be best, per TP degree; each compatible pair is estimated
    at the whole worker counts next to the balance."""
    N = job.num_gpus
    osl = job.serving.output_length
    live = [s for s in shapes.values() if s.inst.gpus < N]
    for s in live:
        s.prefill = prefill_pool(job, s.cost)
    pre_front = []
    for tp in sorted({s.inst.tp for s in live}):
        pre_front += _front(
            [s for s in live if s.inst.tp == tp],
            lambda s: s.inst.gpus / s.prefill[1],
            lambda s: s.prefill[0],
        )
    dec_pts = []
    for d in live:
        for c in _decode_concurrencies(job, d, opts):
            step, per = d.decode[c]
            tpot = step.total / per
            dec_pts.append((d, c, tpot, d.inst.gpus * tpot * osl / c))
    dec_front = []
    for tp in sorted({x[0].inst.tp for x in dec_pts}):
        dec_front += _front(
            [x for x in dec_pts if x[0].inst.tp == tp], lambda x: x[3], lambda x: x[2]
        )
    if opts.ttft_s is not None:
        # a TTFT SLO couples the sides (the prefill load is the decode pool's rate over the
        # prefill pool's): a point off the (cost, TPOT) front can be the best that meets it
        dec_front = dec_pts
    out = []
    for p in pre_front:
        gp, (one, rp, chunk_s) = p.inst.gpus, p.prefill
        for d, c, tpot, _ in dec_front:
            if max(p.inst.tp, d.inst.tp) % min(p.inst.tp, d.inst.tp):
                continue
            gd, rd = d.inst.gpus, c / tpot / osl
            for P in _worker_counts(N, gp, gd, rp, rd, one, chunk_s, opts):
                layout = ServeLayout(
                    prefill=p.inst,
                    decode=d.inst,
                    prefill_workers=P,
                    decode_workers=(N - P * gp) // gd,
                )
                est = disaggregated_loop(
                    job,
                    layout,
                    pmem=p.mem,
                    dmem=d.mem,
                    dcost=d.cost,
                    prefill=p.prefill,
                    clients=c,
                    decode=d.decode[c],
                )
                out.append(Candidate(layout, est, _meets(est, opts)))
    return out


def _worker_counts(N, gp, gd, rp, rd, one, chunk_s, opts) -> list[int]:
    """The prefill worker counts worth estimating: those next to the balance P*rp = D*rd
    (the most throughput) and, with a TTFT SLO, next to the fewest prefill workers whose load
    keeps TTFT = one + load * (chunk - one) within it (spare prefill capacity buys TTFT)."""
    targets = [N * rd / (rp * gd + gp * rd)]
    if opts.ttft_s is not None and chunk_s > one:
        u = (opts.ttft_s - one) / (chunk_s - one)  # the load the SLO allows (KV aside)
        if 0 < u < 1:
            targets.append(N * rd / (u * rp * gd + gp * rd))
    out = []
    for t in targets:
        for P in range(max(1, int(t) - 2), int(t) + 4):
            rest = N - P * gp
            if rest >= gd and rest % gd == 0 and P not in out:
                out.append(P)
    return out


def _unit(inst, concs: list[int]) -> int:
    """The step of an instance's concurrencies: its attention-DP ranks when its grid is in
    whole shares (`unit_concurrencies`), else 1."""
    u = inst.dp
    return u if u > 1 and all(c % u == 0 for c in concs) else 1


def _decode_concurrencies(job, d, opts: ServeOptions) -> list[int]:
    """A decode worker's concurrencies: the powers of two up to its KV capacity and, with a
    TPOT SLO, the largest that meets it (bisection; TPOT grows with concurrency)."""

    def tpot(c):
        if c not in d.decode:
            d.decode[c] = decode_pool(job, d.cost, c)
        step, per = d.decode[c]
        return step.total / per

    concs = list(d.concs)
    unit = _unit(d.inst, concs)
    ok = [opts.tpot_s is None or tpot(c) <= opts.tpot_s for c in concs]
    if opts.tpot_s is not None:
        for i in range(len(concs) - 1):
            if ok[i] and not ok[i + 1]:
                lo, hi = concs[i], concs[i + 1]
                while hi - lo > unit:
                    mid = (lo + hi) // 2 // unit * unit
                    lo, hi = (mid, hi) if tpot(mid) <= opts.tpot_s else (lo, mid)
                if lo not in concs:
                    concs.append(lo)
                    tpot(lo)
                break
    for c in concs:
        tpot(c)
    return concs


def violations_of(job, cand: Candidate) -> list[Violation]:
    return check(
        job, cand.layout, memory=cand.estimate.memory, prefill_memory=cand.estimate.prefill_memory
    )

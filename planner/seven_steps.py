"""The seven-step procedure of the reference chapter, as an explicit, printed trace.

(1) the memory floor: model states + activations, and the smallest TP x PP x ZeRO that fits;
(2) TP up to the GPUs of one node / NVLink domain, filled first; (3) PP across nodes, sized by
the remaining memory gap, with m >= 4p; (4) the rest to DP with ZeRO-1/2 (ZeRO-3 only when
nothing else fits); (5) MoE: EP matched to the experts and the all-to-all topology; (6) long
context: CP; (7) overlap, gradient accumulation, recompute granularity. `seven_steps` returns
the trace and the layout the procedure arrives at ("the seven-step pick"); `pick_note` says
where the search ranks it and why the best differs.
"""

from __future__ import annotations

from planner.cost.params import total_params
from planner.cost.pipeline import bubble_fraction
from planner.layout import Layout
from planner.rules import (
    Context,
    check,
    fits,
    heads_divisible_by_tp,
    kv_heads_vs_tp,
    split_options,
    vpp_options,
)
from planner.units import GiB, divisors

__all__ = ["seven_steps", "pick_note"]

CP_TOKENS_PER_RANK = 16384
"""Step 6 splits sequences longer than this per rank (the chapter: CP for long contexts)."""


def _step(n: int, title: str, decision: str) -> dict:
    return {"step": n, "title": title, "decision": decision}


def _fits(job, lay: Layout, cm, headroom: float):
    """(passes every hard rule, memory breakdown, the ids of the rules it breaks)."""
    mem = cm.memory(lay)
    ctx = Context(
        model=job.model,
        hardware=job.hardware,
        training=job.training,
        num_gpus=job.num_gpus,
        layout=lay,
        memory=mem,
        headroom=headroom,
    )
    errors = [v.rule for v in check(ctx) if v.severity == "error"]
    if not fits(mem.total, mem.capacity, headroom) and "fits-in-memory" not in errors:
        errors.append("fits-in-memory")  # plan keeps the headroom (the rule allows more)
    return not errors, mem, errors


def _memory_floor(job, cm, usable: float) -> dict:
    m, tr = job.model, job.training
    P = total_params(m)
    states = P * (18 if tr.accounting == "megatron" else 16)
    one = cm.memory(Layout(tp=1, dp=1, zero=0))
    factor = max(1, -(-int(one.total) // int(usable)))
    return _step(
        1,
        "memory floor",
        f"{P / 1e9:.1f}B params: model states {states / GiB:,.0f} GiB unsharded + "
        f"activations {one.activations / GiB:,.0f} GiB per sequence-micro-batch = "
        f"{one.total / GiB:,.0f} GiB on one GPU vs {usable / GiB:.0f} GiB usable: "
        f"TP x PP x ZeRO must divide it by >= {factor}",
    )


TP_USUAL_MAX = 8
"""The chapter: TP degree usually <= 8, inside the node (beyond it GEMMs thin out; the
tp-above-8 warning). On a larger NVLink domain (NVL72) the domain is the hard bound and 8
the usual one."""


def _tensor_parallel(job, fix) -> int:
    """The largest TP within the NVLink domain (and the usual 8) that divides the GPUs, the
    heads and the sequence; a pinned tp as given."""
    m, hw, N = job.model, job.hardware, job.num_gpus
    if "tp" in fix:
        return fix["tp"]
    cap = min(hw.nvlink_domain_size, TP_USUAL_MAX)
    tps = [
        t
        for t in divisors(N)
        if t <= cap
        and m.num_attention_heads % t == 0
        and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)
        and job.training.seq_length % t == 0
    ]
    return max(tps) if tps else 1


def _tp_decision(job, tp: int, fix) -> str:
    """Step 2's sentence: why this tp, or that it is pinned (and what is wrong with it)."""
    m, hw, N = job.model, job.hardware, job.num_gpus
    link = (
        f"its per-layer all-reduces stay on NVLink ({hw.nvlink_bandwidth_gb_per_s:.0f} GB/s "
        f"vs {hw.network_bandwidth_gb_per_s:.0f} GB/s network)"
    )
    if "tp" in fix:
        text = f"tp {tp}: pinned (--fix tp={tp})"
        probe = Context(
            model=m,
            hardware=hw,
            training=job.training,
            num_gpus=N,
            layout=Layout(tp=tp, dp=max(1, N // tp)),
        )
        problems = [
            f"{rid}: {msg}"
            for rid, msg in (
                (
                    "world-size",
                    None if N % tp == 0 else f"num_gpus ({N}) must be divisible by tp ({tp})",
                ),
                ("heads-divisible-by-tp", heads_divisible_by_tp(probe)),
                ("kv-heads-vs-tp", kv_heads_vs_tp(probe)),
            )
            if msg
        ]
        if problems:
            more = (
                f" (and {len(problems) - 1} more rule{'s' if len(problems) > 2 else ''})"
                if len(problems) > 1
                else ""
            )
            return text + "; but " + problems[0] + more
        if tp > hw.nvlink_domain_size:
            return text + f"; it spans more than one {hw.nvlink_domain_size}-GPU NVLink domain"
        return text + "; " + link
    cap = min(hw.nvlink_domain_size, TP_USUAL_MAX)
    bound = (
        f"<= {cap}, the {hw.nvlink_domain_size}-GPU NVLink domain"
        if cap == hw.nvlink_domain_size
        else f"<= {cap} (the usual TP bound: beyond it GEMMs thin out) inside the "
        f"{hw.nvlink_domain_size}-GPU NVLink domain"
    )
    return (
        f"tp {tp}: the largest degree {bound}, that divides the {N} GPUs, the "
        f"{m.num_attention_heads} heads and the sequence; {link}"
    )


def _context_parallel(job, tp: int, fix) -> int:
    """Double CP while a rank holds more than CP_TOKENS_PER_RANK tokens."""
    if "cp" in fix:
        return fix["cp"]
    seq, N = job.training.seq_length, job.num_gpus
    cp = 1
    while seq // cp > CP_TOKENS_PER_RANK and (N // tp) % (cp * 2) == 0 and seq % (4 * cp) == 0:
        cp *= 2
    return cp


def _expert_parallel(job, tp: int, cp: int, fix) -> list[int]:
    """EP candidates: the largest that keeps the all-to-all inside the NVLink domain first,
    then larger ones (across the network) in case the experts do not fit."""
    m, hw, N = job.model, job.hardware, job.num_gpus
    if not m.is_moe:
        return [1]
    if "ep" in fix:
        return [fix["ep"]]
    eps = [e for e in divisors(m.num_experts) if N % e == 0]  # the expert-grid rule decides
    inside = [e for e in eps if e <= hw.nvlink_domain_size]
    first = max(inside) if inside else 1
    return [first] + [e for e in eps if e > first]


def _pipeline(job, cm, opts, tp: int, cp: int, eps: list[int]):
    """Steps 3-4: the least ZeRO (1, else 3), then the least recompute, then the smallest pp
    (preferring m >= 4p) that passes every rule; EP from `eps` in order; pinned axes as
    pinned. (layout, mem, how, {rule: layouts it refused} when none passes)."""
    m, N, gbs, L = job.model, job.num_gpus, job.training.global_batch_size, job.model.num_layers
    fix = opts.fix
    rest = N // (tp * cp) if N % (tp * cp) == 0 else 0
    pps = [p for p in divisors(rest) if p <= L and split_options(L, p)] if rest else []
    if "pp" in fix:
        pps = [p for p in pps if p == fix["pp"]]
    if "dp" in fix:
        pps = [p for p in pps if rest // p == fix["dp"]]
    etp = fix.get("etp", 1 if m.is_moe else tp)
    sp = fix.get("sp", tp > 1)
    mbs = fix.get("micro_batch_size", 1)
    refused: dict[str, int] = {}
    for zero in [fix["zero"]] if "zero" in fix else (1, 3):
        for rec in [fix["recompute"]] if "recompute" in fix else ("none", "selective", "full"):
            for ep in eps:
                fitting = []
                for pp in pps:
                    dp = N // (tp * cp * pp)
                    split = split_options(L, pp)[0]
                    lay = Layout(
                        tp=tp,
                        cp=cp,
                        ep=ep,
                        dp=dp,
                        pp=pp,
                        etp=etp,
                        sp=sp,
                        tp_comm_overlap=sp and tp > 1,
                        zero=zero,
                        recompute=rec,
                        micro_batch_size=mbs,
                        first_stage_layers=split[0],
                        last_stage_layers=split[1],
                    )
                    ok, mem, errors = _fits(job, lay, cm, opts.headroom)
                    if ok:
                        fitting.append((lay, mem))
                    for rule in errors:
                        refused[rule] = refused.get(rule, 0) + 1
                if fitting:
                    good = [
                        f
                        for f in fitting
                        if f[0].pp == 1 or f[0].num_microbatches(gbs) >= 4 * f[0].pp
                    ]
                    lay, mem = (good or fitting)[0]
                    return lay, mem, f"zero {zero}, recompute {rec}", {}
    if not pps:
        refused["layers-divisible" if rest else "world-size"] = 1
    return None, None, "", refused


def _interleave(job, cm, opts, pick: Layout) -> Layout:
    """Step 7: the virtual-stage count with the shortest step that still passes every rule."""
    if "vpp" in opts.fix:
        cand = pick.with_(vpp=opts.fix["vpp"])
        return cand if _fits(job, cand, cm, opts.headroom)[0] else pick
    best, best_t = pick, cm.time(pick).step_time_s
    for v in vpp_options(
        job.model.num_layers, pick.pp, pick.first_stage_layers, pick.last_stage_layers, opts.max_vpp
    ):
        if v == 1:
            continue
        cand = pick.with_(vpp=v)
        if _fits(job, cand, cm, opts.headroom)[0]:
            t = cm.time(cand).step_time_s
            if t < best_t:
                best, best_t = cand, t
    return best


def _pinned(fix, key: str, value) -> str:
    return f" (pinned by --fix {key}={value})" if key in fix else ""


def _trace(job, pick: Layout, mem, how: str, usable: float, fix) -> list[dict]:
    """Steps 3-7 for the pick, one line each with its numbers; pinned axes said to be."""
    m, hw, tr = job.model, job.hardware, job.training
    mb = pick.num_microbatches(tr.global_batch_size)
    span = pick.ep_span
    pp_why = (
        "pinned"
        if "pp" in fix
        else "the smallest degree that fits and keeps m >= 4p where one does"
    )
    zero_why = (
        "pinned"
        if "zero" in fix
        else "distributed optimizer: optimizer states / dp*cp, communication as plain DP"
        if pick.zero == 1
        else "ZeRO-3: only because nothing lighter fits"
    )
    return [
        _step(
            3,
            "PP across nodes",
            f"pp {pick.pp}: {pp_why} ({mem.total / GiB:.1f} of {usable / GiB:.0f} GiB, {how})"
            + (
                f"; m = {mb} micro-batches {'>=' if mb >= 4 * pick.pp else '<'} 4p = {4 * pick.pp}"
                if pick.pp > 1
                else ""
            ),
        ),
        _step(
            4,
            "DP with ZeRO",
            f"dp {pick.dp}: "
            + ("pinned" if "dp" in fix else "the remaining GPUs")
            + f"; ZeRO-{pick.zero} ({zero_why})",
        ),
        _step(
            5,
            "EP for MoE",
            f"ep {pick.ep}{_pinned(fix, 'ep', pick.ep)}, etp {pick.etp}: {m.num_experts} "
            f"experts, {m.num_experts // pick.ep} per rank; the all-to-all spans {span} GPUs "
            f"({'inside' if span <= hw.nvlink_domain_size else 'across'} the "
            f"{hw.nvlink_domain_size}-GPU NVLink domain)"
            if m.is_moe
            else "dense model: no experts, ep 1",
        ),
        _step(
            6,
            "CP for long context",
            f"cp {pick.cp}{_pinned(fix, 'cp', pick.cp)}: {tr.seq_length} tokens, "
            f"{tr.seq_length // pick.cp} per rank"
            + (
                ""
                if "cp" in fix
                else f" (CP splits sequences beyond {CP_TOKENS_PER_RANK // 1024}k tokens per rank)"
                if pick.cp > 1
                else " (short enough without CP)"
            ),
        ),
        _step(
            7,
            "overlap, accumulation, recompute",
            f"{mb} micro-batches of {pick.micro_batch_size}"
            f"{_pinned(fix, 'micro_batch_size', pick.micro_batch_size)} per step (gradient "
            f"accumulation), vpp {pick.vpp}{_pinned(fix, 'vpp', pick.vpp)} -> bubble "
            f"{bubble_fraction(pick.pp, mb, pick.vpp, pick.pipeline_schedule):.0%}; recompute "
            f"{pick.recompute}"
            f"{_pinned(fix, 'recompute', pick.recompute)}; DP reduce-scatter overlapped with "
            "backward"
            + (
                ", TP overlapped with GEMMs"
                if pick.tp > 1 and pick.sp
                else " (no TP)"
                if pick.tp == 1
                else ""
            ),
        ),
    ]


def _refusal(refused: dict[str, int], fix) -> str:
    """Step 3 when nothing passes: the rule that refused the most candidates, by name."""
    pins = ", ".join(f"{k}={v}" for k, v in fix.items())
    pinned = f" (pinned: {pins})" if pins else ""
    if not refused:
        return "no candidate layout to try" + pinned
    ranked = sorted(refused.items(), key=lambda kv: -kv[1])
    named = ", ".join(f"{rule} ({n})" for rule, n in ranked[:3])
    return (
        f"no pp with ZeRO-1 or ZeRO-3 and any recompute passes the rules{pinned}; "
        f"refused by {named}"
    )


def seven_steps(job, cm, opts) -> tuple[list[dict], Layout | None]:
    """The trace (seven {"step", "title", "decision"}) and the procedure's pick (or None)."""
    usable = job.hardware.memory_gib * GiB * (1 - opts.headroom)
    tp = _tensor_parallel(job, opts.fix)
    cp = _context_parallel(job, tp, opts.fix)
    eps = _expert_parallel(job, tp, cp, opts.fix)
    steps = [
        _memory_floor(job, cm, usable),
        _step(2, "TP inside the NVLink domain", _tp_decision(job, tp, opts.fix)),
    ]
    pick, mem, how, refused = _pipeline(job, cm, opts, tp, cp, eps)
    if pick is None:
        return steps + [
            _step(3, "PP across nodes", _refusal(refused, opts.fix)),
            _step(4, "DP with ZeRO", "-"),
            _step(
                5,
                "EP for MoE",
                f"ep {eps[0]}{_pinned(opts.fix, 'ep', eps[0])}" if job.model.is_moe else "-",
            ),
            _step(6, "CP for long context", f"cp {cp}{_pinned(opts.fix, 'cp', cp)}"),
            _step(7, "overlap, accumulation, recompute", "nothing fits: see the suggestions"),
        ], None
    pick = _interleave(job, cm, opts, pick)
    return steps + _trace(job, pick, mem, how, usable, opts.fix), pick


def pick_note(pick, rank: int | None, best, shown: int) -> str:
    """'seven-step pick: rank 3 (...), 4% slower than the best, because ...'."""
    if best is None:
        return ""
    if rank == 1:
        return f"seven-step pick: rank 1, the best layout ({pick.layout.name})"
    where = f"rank {rank}" if rank else f"outside the top {shown}"
    slower = pick.time.step_time_s / best.time.step_time_s - 1
    return (
        f"seven-step pick: {where} ({pick.layout.name}), {slower:.0%} slower than the best, "
        f"because {_why(best, pick)}"
    )


def _why(best, pick) -> str:
    b, p = best.layout, pick.layout
    diffs = [
        f"{axis} {getattr(b, axis)} instead of {getattr(p, axis)}"
        for axis in ("tp", "cp", "pp", "vpp", "ep", "micro_batch_size", "zero", "recompute")
        if getattr(b, axis) != getattr(p, axis)
    ]
    bt, pt = best.time, pick.time
    reasons = []
    for label, bv, pv in (
        ("bubble", bt.bubble_s, pt.bubble_s),
        ("exposed communication", bt.exposed_comm_s, pt.exposed_comm_s),
        ("compute", bt.compute_s, pt.compute_s),
    ):
        if abs(bv - pv) > 0.02 * pt.step_time_s:
            reasons.append(f"{label} {pv:.2f} -> {bv:.2f} s")
    what = ", ".join(diffs) or "the same degrees"
    return f"the best uses {what}" + (f" ({'; '.join(reasons)})" if reasons else "")

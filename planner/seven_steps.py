"""The seven-step procedure of the reference chapter, as an explicit, printed trace.

(1) the memory floor: model states + activations, and the smallest TP x PP x ZeRO that fits;
(2) TP up to the GPUs of one node / NVLink domain, filled first; (3) PP across nodes, sized by
the remaining memory gap, with m >= 4p; (4) the rest to DP with ZeRO-1/2 (ZeRO-3 only when
nothing else fits); (5) MoE: EP matched to the experts and the all-to-all topology; (6) long
context: CP; (7) overlap, gradient accumulation, recompute granularity. The layout the
procedure arrives at is "the seven-step pick"; `seven_steps` places it in the search's
ranking and says why the best differs.
"""

from __future__ import annotations

from planner.cost.params import total_params
from planner.layout import Layout
from planner.rules import Context, check, split_options, vpp_options
from planner.units import GiB, divisors

__all__ = ["seven_steps"]


def _valid(job, lay: Layout, cm, headroom) -> tuple[bool, object]:
    mem = cm.memory(lay)
    errs = [v for v in check(Context(model=job.model, hardware=job.hardware,
                                     training=job.training, num_gpus=job.num_gpus,
                                     layout=lay, memory=mem, headroom=headroom))
            if v.severity == "error"]
    return not errs, mem


def _step(n: int, title: str, decision: str) -> dict:
    return {"step": n, "title": title, "decision": decision}


def seven_steps(result, cm, opts) -> None:
    """Fill result.steps, result.pick, pick_rank and pick_note."""
    job = result.job
    m, hw, tr, N = job.model, job.hardware, job.training, job.num_gpus
    gbs, seq, L = tr.global_batch_size, tr.seq_length, m.num_layers
    headroom = opts.headroom
    usable = hw.memory_gib * GiB * (1 - headroom)
    steps = []

    # (1) memory floor -------------------------------------------------------------------
    P = total_params(m)
    states = P * (18 if tr.accounting == "megatron" else 16)
    one = cm.memory(Layout(tp=1, dp=1, zero=0))
    floor_tp_pp = max(1, -(-int(one.total) // int(usable)))
    steps.append(_step(1, "memory floor",
        f"{P / 1e9:.1f}B params: model states {states / GiB:,.0f} GiB unsharded + activations "
        f"{one.activations / GiB:,.0f} GiB per sequence-micro-batch = {one.total / GiB:,.0f} GiB "
        f"on one GPU vs {usable / GiB:.0f} GiB usable: TP x PP x ZeRO must divide it by "
        f">= {floor_tp_pp}"))

    # (2) TP: fill the node --------------------------------------------------------------
    node = min(hw.gpus_per_node, hw.nvlink_domain_size)
    tps = [t for t in divisors(N) if t <= node and m.num_attention_heads % t == 0
           and (m.is_mla or m.kv_heads % t == 0 or t % m.kv_heads == 0)
           and (seq % t == 0)]
    if "tp" in opts.fix:
        tps = [opts.fix["tp"]]
    tp = max(tps) if tps else 1
    steps.append(_step(2, "TP inside the node",
        f"tp {tp}: the largest degree <= {node} GPUs per NVLink node that divides the "
        f"{m.num_attention_heads} heads; its per-layer all-reduces stay on NVLink "
        f"({hw.nvlink_bandwidth_gb_per_s:.0f} GB/s vs {hw.network_bandwidth_gb_per_s:.0f} GB/s network)"))

    # (6, decided early for memory) CP for long context ------------------------------------
    cp = 1
    if "cp" in opts.fix:
        cp = opts.fix["cp"]
    else:
        while seq // cp > 16384 and (N // tp) % (cp * 2) == 0 and seq % (4 * cp) == 0:
            cp *= 2

    # (5) EP for MoE -----------------------------------------------------------------------
    ep, etp = 1, tp
    if m.is_moe:
        etp = 1
        cands = [e for e in divisors(m.num_experts) if e <= hw.nvlink_domain_size and
                 (tp * cp) * (N // (tp * cp)) % e == 0]
        ep = max(cands) if cands else 1
        if "ep" in opts.fix:
            ep = opts.fix["ep"]

    # (3) PP: the smallest that closes the memory gap with ZeRO-1 ---------------------------
    # (4) DP: the rest, ZeRO-1 (ZeRO-3 only when nothing else fits)
    # (7) vpp / recompute / micro-batch
    pick, pick_mem, how = None, None, ""
    rest = N // (tp * cp) if N % (tp * cp) == 0 else 0
    pps = [p for p in divisors(rest) if p <= L and split_options(L, p)] if rest else []
    if "pp" in opts.fix:
        pps = [p for p in pps if p == opts.fix["pp"]]
    for zero in (1, 3):
        for rec in ("none", "selective", "full"):
            fitting = []
            for pp in pps:
                dp = N // (tp * cp * pp)
                if gbs % dp:
                    continue
                split = split_options(L, pp)[0]
                lay = Layout(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, etp=etp, sp=tp > 1,
                             tp_comm_overlap=tp > 1, zero=zero, recompute=rec,
                             first_stage_layers=split[0], last_stage_layers=split[1])
                ok, mem = _valid(job, lay, cm, headroom)
                if ok:
                    fitting.append((lay, mem))
            if fitting:
                # the smallest pp that fits, preferring one that keeps m >= 4p
                good = [f for f in fitting if f[0].num_microbatches(gbs) >= 4 * f[0].pp
                        or f[0].pp == 1]
                pick, pick_mem = (good or fitting)[0]
                how = f"zero {zero}, recompute {rec}"
                break
        if pick:
            break
    if pick is None:
        steps.append(_step(3, "PP across nodes", "no pp with ZeRO-1 or ZeRO-3 and any recompute fits"))
        steps.append(_step(4, "DP with ZeRO", "-"))
        steps.append(_step(5, "EP for MoE", "-" if not m.is_moe else f"ep {ep}"))
        steps.append(_step(6, "CP for long context", f"cp {cp}"))
        steps.append(_step(7, "overlap, accumulation, recompute", "nothing fits: see the suggestions"))
        result.steps = steps
        return
    mb = pick.num_microbatches(gbs)
    steps.append(_step(3, "PP across nodes",
        f"pp {pick.pp}: the smallest degree that fits and keeps m >= 4p where one does "
        f"({pick_mem.total / GiB:.1f} of "
        f"{usable / GiB:.0f} GiB, {how})" + (f"; m = {mb} micro-batches "
        f"{'>=' if mb >= 4 * pick.pp else '<'} 4p = {4 * pick.pp}" if pick.pp > 1 else "")))
    steps.append(_step(4, "DP with ZeRO",
        f"dp {pick.dp}: the remaining GPUs; ZeRO-{pick.zero} "
        + ("(distributed optimizer: optimizer states / dp*cp, communication as plain DP)"
           if pick.zero == 1 else "(ZeRO-3: only because nothing lighter fits)")))
    steps.append(_step(5, "EP for MoE",
        f"ep {pick.ep}, etp {pick.etp}: {m.num_experts} experts, {m.num_experts // pick.ep} per "
        f"rank; the all-to-all spans {pick.ep * pick.etp} GPUs "
        f"({'inside' if pick.ep * pick.etp <= hw.nvlink_domain_size else 'across'} the NVLink domain)"
        if m.is_moe else "dense model: no experts, ep 1"))
    steps.append(_step(6, "CP for long context",
        f"cp {pick.cp}: {seq} tokens, {seq // pick.cp} per rank"
        + (" (CP splits sequences beyond 16k tokens per rank)" if pick.cp > 1 else
           " (short enough without CP)")))

    # (7) interleave to shrink the bubble, then the micro-batch
    best_lay, best_t = pick, cm.time(pick).step_time_s
    for v in vpp_options(L, pick.pp, pick.first_stage_layers, pick.last_stage_layers,
                         opts.max_vpp):
        if v == 1:
            continue
        cand = pick.with_(vpp=v)
        ok, _ = _valid(job, cand, cm, headroom)
        if ok:
            t = cm.time(cand).step_time_s
            if t < best_t:
                best_lay, best_t = cand, t
    pick = best_lay
    mb = pick.num_microbatches(gbs)
    from planner.cost.pipeline import bubble_fraction
    steps.append(_step(7, "overlap, accumulation, recompute",
        f"{mb} micro-batches of {pick.micro_batch_size} per step (gradient accumulation), vpp "
        f"{pick.vpp} -> bubble {bubble_fraction(pick.pp, mb, pick.vpp):.0%}; recompute "
        f"{pick.recompute}; DP reduce-scatter overlapped with backward, TP overlapped with GEMMs"
        + ("" if pick.tp > 1 else " (no TP)")))
    result.steps = steps

    from planner.search import Plan
    tm = cm.time(pick)
    mem = cm.memory(pick)
    result.pick = Plan(0, pick, mem, tm, [])
    _place_pick(result)


def _place_pick(result) -> None:
    pick = result.pick
    for p in result.plans:
        if p.layout == pick.layout:
            result.pick_rank = p.rank
            break
    best = result.best
    if best is None:
        return
    slower = pick.time.step_time_s / best.time.step_time_s - 1
    where = f"rank {result.pick_rank}" if result.pick_rank else f"outside the top {len(result.plans)}"
    if result.pick_rank == 1:
        result.pick_note = f"seven-step pick: rank 1, the best layout ({pick.layout.name})"
        return
    why = _why(best, pick)
    result.pick_note = (f"seven-step pick: {where} ({pick.layout.name}), {slower:.0%} slower than "
                        f"the best, because {why}")


def _why(best, pick) -> str:
    b, p = best.layout, pick.layout
    diffs = []
    for axis in ("tp", "cp", "pp", "vpp", "ep", "micro_batch_size", "zero", "recompute"):
        if getattr(b, axis) != getattr(p, axis):
            diffs.append(f"{axis} {getattr(b, axis)} instead of {getattr(p, axis)}")
    bt, pt = best.time, pick.time
    reasons = []
    if abs(bt.bubble_s - pt.bubble_s) > 0.02 * pt.step_time_s:
        reasons.append(f"bubble {pt.bubble_s:.2f} -> {bt.bubble_s:.2f} s")
    if abs(bt.exposed_comm_s - pt.exposed_comm_s) > 0.02 * pt.step_time_s:
        reasons.append(f"exposed communication {pt.exposed_comm_s:.2f} -> {bt.exposed_comm_s:.2f} s")
    if abs(bt.compute_s - pt.compute_s) > 0.02 * pt.step_time_s:
        reasons.append(f"compute {pt.compute_s:.2f} -> {bt.compute_s:.2f} s")
    what = ", ".join(diffs) or "the same degrees"
    return f"the best uses {what}" + (f" ({'; '.join(reasons)})" if reasons else "")

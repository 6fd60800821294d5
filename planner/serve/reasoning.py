"""The reference chapter's inference-side reasoning ("推理侧的并行"; the inference rows of
docs/reference-chapters.md, and docs/serving.md#inference-planner-serve) as a trace with
numbers, and the deployment it arrives at.

The chapter's rules: TP stays the main axis (it lowers each request's latency and shares the
weights) and fills the node first; PP is used only when memory forces it, because every stage
adds to each request's latency; DP becomes replicas behind a load balancer; MoE adds EP; long
prompts add CP (searched from caveats.LONG_CONTEXT_TOKENS on); prefill/decode disaggregation
is a dimension only inference has. Training
optimises throughput, inference latency: each step keeps what meets the SLOs and says what it
costs. `procedure` returns the steps, the pick and a note on where the pick ranks; one small
function per step, each returning its sentence (and the deployment it settles on).
"""

from __future__ import annotations

from planner.caveats import LONG_CONTEXT_TOKENS
from planner.serve.layout import Instance
from planner.serve.memory import kv_bytes_per_token_at, stage_weight_bytes
from planner.units import GiB

__all__ = ["procedure"]


def _ms(s: float) -> str:
    return f"{s * 1e3:,.0f} ms" if s >= 0.1 else f"{s * 1e3:.1f} ms"


def _best(points, *, meets_only=True):
    pool = [p for p in points if p.meets] if meets_only else list(points)
    if not pool:
        return None
    return max(pool, key=lambda p: (p.per_gpu, -p.estimate.tpot_s))


def _memory_floor(job, shapes) -> tuple[str, bool]:
    m, sv = job.model, job.serving
    w = sum(stage_weight_bytes(m, Instance(), sv.precision))
    n = sv.input_length + sv.output_length
    per_req = kv_bytes_per_token_at(m, sv.kv_dtype, n) * n
    text = (
        f"weights {w / GiB:,.1f} GiB in {sv.precision}, KV {per_req / 2**20:,.0f} MiB per "
        f"request of {sv.input_length + sv.output_length:,} tokens ({sv.kv_dtype}); "
    )
    fitting = sorted(shapes, key=lambda i: (i.gpus, i.pp, -i.tp))
    if not fitting:
        return (
            text + f"no instance of at most {job.num_gpus} x {job.hardware.name} holds them",
            False,
        )
    s = fitting[0]
    return text + f"the smallest instance that holds them is {s.name} ({s.gpus} GPUs)", True


def _tp_first(job, opts, agg, node):
    """TPOT of one request at each TP inside the node (pp 1, no DP, no EP); the TP that
    serves the most tokens/s per GPU there."""
    pts = [
        p
        for p in agg
        if p.layout.instance.pp == 1
        and p.layout.instance.dp == 1
        and p.layout.instance.ep == 1
        and p.layout.instance.cp == 1
        and p.layout.instance.tp <= node
    ]
    pick = _best(pts) or _best(pts, meets_only=False)
    if pick is None:
        return f"no tp <= {node} holds the model on one node", None
    lat = {p.layout.instance.tp: p.estimate for p in pts if p.estimate.concurrency == 1}
    parts = []
    for t in sorted(lat):
        step = lat[t].decode_step
        share = step.tp_comm_s / step.total if step.total else 0.0
        parts.append(
            f"tp{t} {_ms(lat[t].tpot_s)}" + (f" ({share:.0%} all-reduce)" if t > 1 else "")
        )
    slo = opts.ttft_s is not None or opts.tpot_s is not None
    within = (" within the SLOs" if pick.meets else " (none meets the SLOs)") if slo else ""
    return (
        f"TPOT of one request: {', '.join(parts) or 'no tp inside the node fits'}; "
        f"tp {pick.layout.instance.tp} serves the most tokens/s per GPU{within}: "
        f"{pick.per_gpu:,.0f} at {pick.estimate.concurrency} requests"
    ), pick


def _pp_when_forced(agg, tp_pick, node):
    if tp_pick is not None:
        return (
            f"not needed: {tp_pick.layout.instance.name} holds the weights and the KV cache; "
            "every stage would add a hop to each request's latency"
        ), tp_pick
    pts = [
        p
        for p in agg
        if p.layout.instance.dp == 1 and p.layout.instance.ep == 1 and p.layout.instance.cp == 1
    ]
    base = _best(pts) or _best(pts, meets_only=False)
    if base is None:
        return "no tp x pp instance fits", None
    i = base.layout.instance
    return (
        f"pp {i.pp} with tp {i.tp}: the weights need {i.gpus} GPUs, more than tp alone "
        f"holds inside a node of {node}; TTFT {_ms(base.estimate.prefill_s)} includes "
        f"{i.pp - 1} stage hop(s)"
    ), base


def _replicas(job, pick) -> str:
    inst = pick.layout.instance
    return (
        f"{job.num_gpus} GPUs / {inst.gpus} per instance = {pick.layout.replicas} "
        "replica(s) behind a load balancer (DP becomes replicas: each serves its own "
        "requests, nothing to sync)"
    )


def _ep_for_moe(job, agg, base):
    m = job.model
    if not m.is_moe:
        return "dense model: no experts to place", base
    pts = [
        p
        for p in agg
        if p.layout.instance.pp == base.layout.instance.pp and p.layout.instance.cp == 1
    ]
    best = _best(pts) or _best(pts, meets_only=False)
    pick = best if best is not None and best.per_gpu > base.per_gpu else base
    i = pick.layout.instance
    return (
        f"{m.num_experts} experts over ep {i.ep} ({m.num_experts // i.ep} per rank, "
        f"{i.moe_group} GPUs)"
        + (f", attention data-parallel over dp {i.dp}" if i.dp_attention else "")
        + f": {pick.per_gpu:,.0f} tokens/s per GPU"
    ), pick


def _cp_for_long_prompts(job, agg, pick):
    """Long prompts: the best layout with cp > 1 against the pick (it takes over when it
    serves more tokens/s per GPU, or meets the SLOs the pick misses); when the engine runs
    no CP, what cp 2 would have done and the rule that stops it."""
    isl = job.serving.input_length
    inst = pick.layout.instance
    if isl < LONG_CONTEXT_TOKENS:
        return (
            f"prompts of {isl:,} tokens (< {LONG_CONTEXT_TOKENS:,}): cp 1; splitting so "
            "short a prompt saves less than the K/V ring and the per-layer decode combine "
            "cost, and every cp rank holds the whole weights"
        ), pick
    one = pick.estimate.prefill_s
    cps = [p for p in agg if p.layout.instance.cp > 1]
    best = _best(cps) or _best(cps, meets_only=False)
    if best is None:
        return _cp_not_run(job, pick), pick
    b = best.layout.instance
    gain = (
        f"{b.name} prefills one prompt in {_ms(best.estimate.prefill_s)} vs {_ms(one)} on "
        f"{inst.name}"
    )
    faster = best.estimate.prefill_s < one
    if (best.meets and not pick.meets) or (
        best.meets == pick.meets and faster and best.per_gpu >= 0.95 * pick.per_gpu
    ):
        why = (
            "it meets the SLOs, the cp 1 pick does not"
            if best.meets and not pick.meets
            else f"serves {best.per_gpu:,.0f} tokens/s per GPU vs {pick.per_gpu:,.0f} "
            "(within 5%: the shorter prefill decides)"
        )
        return f"cp {b.cp}: {gain} and {why}", best
    return (
        f"cp 1: {gain}, but serves {best.per_gpu:,.0f} tokens/s per GPU vs "
        f"{pick.per_gpu:,.0f} (every cp rank holds the whole weights)"
    ), pick


def _cp_not_run(job, pick) -> str:
    """Why no cp > 1 layout was searched for a long prompt, with what cp 2 would give."""
    from dataclasses import replace

    from planner.serve.estimate import estimate
    from planner.serve.layout import ServeLayout
    from planner.serve.rules import instance_errors

    inst = pick.layout.instance
    isl = job.serving.input_length
    two = replace(inst, cp=2)
    head = f"prompts of {isl:,} tokens: prefill {_ms(pick.estimate.prefill_s)} on {inst.name}"
    errs = instance_errors(job, two)
    if job.num_gpus % two.gpus:
        return (
            head + f"; cp 2 would need {two.gpus} GPUs per instance, {job.num_gpus} do not divide"
        )
    est = estimate(job, ServeLayout(instance=two, replicas=job.num_gpus // two.gpus))
    what = f"; {two.name} would prefill it in {_ms(est.prefill_s)}"
    if errs:
        return head + what + f", but {errs[0].message}"
    return head + what + ", but holds no request in memory"


def _pd_when_it_pays(job, opts, points, pick):
    dis = [p for p in points if p.layout.disaggregated]
    best = _best(dis)
    if not dis:
        return (
            "not searched"
            if not opts.disaggregated
            else f"no prefill/decode split fits {job.num_gpus} GPUs"
        ), pick
    if best is None:
        return "no disaggregated deployment meets the SLOs", pick
    if best.per_gpu > pick.per_gpu * 1.05 or not pick.meets:
        e = best.estimate
        return (
            f"pays: {best.layout.name} serves {best.per_gpu:,.0f} tokens/s per GPU vs "
            f"{pick.per_gpu:,.0f} aggregated; KV transfer {_ms(e.kv_transfer_s)} per "
            f"request; the {e.bottleneck} pool is the bottleneck"
        ), best
    return (
        f"does not pay: the best split ({best.layout.name}) serves {best.per_gpu:,.0f} "
        f"tokens/s per GPU vs {pick.per_gpu:,.0f} aggregated"
    ), pick


def procedure(job, opts, shapes: dict, points: list):
    """(steps, pick, note) for the job; `shapes` the fitting instance shapes, `points` every
    estimated candidate of the search."""
    node = min(job.hardware.gpus_per_node, job.hardware.nvlink_domain_size, job.num_gpus)
    agg = [p for p in points if not p.layout.disaggregated]
    steps: list[dict] = []

    def add(title: str, decision: str) -> None:
        steps.append({"step": len(steps) + 1, "title": title, "decision": decision})

    text, fits = _memory_floor(job, shapes)
    add("memory floor", text)
    if not fits:
        return steps, None, "no instance fits"
    text, tp_pick = _tp_first(job, opts, agg, node)
    add("TP first, inside the node", text)
    text, pick = _pp_when_forced(agg, tp_pick, node)
    add("PP only when memory forces it", text)
    if pick is None:
        return steps, None, "no instance fits"
    ep_text, pick = _ep_for_moe(job, agg, pick)  # the instance settles before its copies
    add("replicas for the rest", _replicas(job, pick))
    add("EP for MoE", ep_text)
    text, pick = _cp_for_long_prompts(job, agg, pick)
    add("CP for long prompts", text)
    text, pick = _pd_when_it_pays(job, opts, points, pick)
    add("P/D disaggregation when it pays", text)
    return steps, pick, _note(pick, points)


def _note(pick, points) -> str:
    best = _best(points)
    name = f"{pick.layout.name} at {pick.estimate.concurrency} requests"
    if not pick.meets:
        return f"the procedure arrives at {name}, which misses the SLOs"
    if best is None or best.layout == pick.layout:
        return f"the procedure arrives at {name}: the best of the search"
    gap = 1 - pick.per_gpu / best.per_gpu
    return (
        f"the procedure arrives at {name}, {gap:.0%} below the best ({best.layout.name}): "
        "its steps fix one axis at a time"
    )

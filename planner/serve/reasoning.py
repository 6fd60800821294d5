"""The reference chapter's inference-side reasoning ("推理侧的并行", ../shared/seeds/000_*.txt)
as a trace with numbers, and the deployment it arrives at.

The chapter's rules: TP stays the main axis (it lowers each request's latency and shares the
weights) and fills the node first; PP is used only when memory forces it, because every stage
adds to each request's latency; DP becomes replicas behind a load balancer; MoE adds EP; long
prompts add CP; prefill/decode disaggregation is a dimension only inference has. Training
optimises throughput, inference latency: each step keeps what meets the SLOs and says what it
costs. `procedure` returns the steps, the pick and a note on where the pick ranks.
"""

from __future__ import annotations

from planner.caveats import LONG_CONTEXT_TOKENS
from planner.serve.layout import Instance
from planner.serve.memory import kv_bytes_per_token_model, stage_weight_bytes
from planner.units import GiB

__all__ = ["procedure"]


def _ms(s: float) -> str:
    return f"{s * 1e3:,.0f} ms" if s >= 0.1 else f"{s * 1e3:.1f} ms"


def _best(points, *, meets_only=True):
    pool = [p for p in points if p.meets] if meets_only else list(points)
    if not pool:
        return None
    return max(pool, key=lambda p: (p.per_gpu, -p.estimate.tpot_s))


def procedure(job, opts, shapes: dict, points: list):
    """(steps, pick, note) for the job; `shapes` the fitting instance shapes, `points` every
    estimated candidate of the search."""
    m, hw, sv = job.model, job.hardware, job.serving
    steps: list[dict] = []
    node = min(hw.gpus_per_node, hw.nvlink_domain_size, job.num_gpus)
    agg = [p for p in points if not p.layout.disaggregated]

    # (1) memory floor
    w = sum(stage_weight_bytes(m, Instance(), sv.precision))
    per_req = kv_bytes_per_token_model(m, sv.kv_dtype) * (sv.input_length + sv.output_length)
    fitting = sorted(shapes, key=lambda i: (i.gpus, i.pp, -i.tp))
    floor = (f"weights {w / GiB:,.1f} GiB in {sv.precision}, KV {per_req / 2**20:,.0f} MiB per "
             f"request of {sv.input_length + sv.output_length:,} tokens ({sv.kv_dtype}); ")
    if not fitting:
        floor += f"no instance of at most {job.num_gpus} x {hw.name} holds them"
        steps.append({"step": 1, "title": "memory floor", "decision": floor})
        return steps, None, "no instance fits"
    smallest = fitting[0]
    floor += f"the smallest instance that holds them is {smallest.name} ({smallest.gpus} GPUs)"
    steps.append({"step": 1, "title": "memory floor", "decision": floor})

    # (2) TP first inside the node (pp 1, no DP)
    def family(i: Instance) -> bool:
        return i.pp == 1 and i.dp == 1 and i.ep == 1

    tp_pts = [p for p in agg if family(p.layout.instance) and p.layout.instance.tp <= node]
    lat = {}
    for p in tp_pts:
        if p.estimate.concurrency == 1:
            lat[p.layout.instance.tp] = p.estimate
    pick_tp = _best(tp_pts) or _best(tp_pts, meets_only=False)
    if pick_tp is not None:
        parts = []
        for t in sorted(lat):
            e = lat[t]
            share = e.decode_step.tp_comm_s / e.decode_step.total if e.decode_step.total else 0
            parts.append(f"tp{t} {_ms(e.tpot_s)}" + (f" ({share:.0%} all-reduce)" if t > 1 else ""))
        t = pick_tp.layout.instance.tp
        slo = opts.ttft_s is not None or opts.tpot_s is not None
        text = (f"TPOT of one request: {', '.join(parts) or 'no tp inside the node fits'}; "
                f"tp {t} serves the most tokens/s per GPU"
                + ((" within the SLOs" if pick_tp.meets else " (none meets the SLOs)") if slo else "")
                + f": {pick_tp.per_gpu:,.0f} at {pick_tp.estimate.concurrency} requests")
    else:
        text = f"no tp <= {node} holds the model on one node"
    steps.append({"step": 2, "title": "TP first, inside the node", "decision": text})

    # (3) PP only when memory forces it
    if pick_tp is not None:
        pp_text = (f"not needed: {pick_tp.layout.instance.name} holds the weights and the KV "
                   "cache; every stage would add a hop to each request's latency")
        base = pick_tp
    else:
        pp_pts = [p for p in agg if p.layout.instance.dp == 1 and p.layout.instance.ep == 1]
        base = _best(pp_pts) or _best(pp_pts, meets_only=False)
        if base is None:
            pp_text = "no tp x pp instance fits"
        else:
            i = base.layout.instance
            one = base.estimate.prefill_s
            pp_text = (f"pp {i.pp} across {i.gpus // node if i.gpus >= node else 1} node(s) with "
                       f"tp {i.tp}: the weights need {i.gpus} GPUs; TTFT {_ms(one)} includes "
                       f"{i.pp - 1} stage hop(s)")
    steps.append({"step": 3, "title": "PP only when memory forces it", "decision": pp_text})
    if base is None:
        return steps, None, "no instance fits"

    # (5 before 4: the instance is settled before its replicas) EP for MoE
    pick = base
    if m.is_moe:
        i0 = base.layout.instance
        moe_pts = [p for p in agg if p.layout.instance.pp == i0.pp]
        best_moe = _best(moe_pts) or _best(moe_pts, meets_only=False)
        if best_moe is not None and best_moe.per_gpu > pick.per_gpu:
            pick = best_moe
        i = pick.layout.instance
        ep_text = (f"{m.num_experts} experts over ep {i.ep} ({m.num_experts // i.ep} per rank, "
                   f"{i.moe_group} GPUs)"
                   + (f", attention data-parallel over dp {i.dp}" if i.dp_attention else "")
                   + f": {pick.per_gpu:,.0f} tokens/s per GPU")
    else:
        ep_text = "dense model: no experts to place"
    inst = pick.layout.instance
    steps.append({"step": 4, "title": "replicas for the rest",
                  "decision": f"{job.num_gpus} GPUs / {inst.gpus} per instance = "
                              f"{pick.layout.replicas} replica(s) behind a load balancer (DP "
                              "becomes replicas: each serves its own requests, nothing to sync)"})
    steps.append({"step": 5, "title": "EP for MoE", "decision": ep_text})

    # (6) CP for long prompts
    if sv.input_length >= LONG_CONTEXT_TOKENS:
        cp = (f"prompts of {sv.input_length:,} tokens: prefill {_ms(pick.estimate.prefill_s)} on "
              f"{inst.name}; context parallelism would split it across GPUs (TRT-LLM "
              "--cp_size, vLLM --decode-context-parallel-size); planner does not search CP")
    else:
        cp = (f"prompts of {sv.input_length:,} tokens (< {LONG_CONTEXT_TOKENS:,}): no context "
              "parallelism needed")
    steps.append({"step": 6, "title": "CP for long prompts", "decision": cp})

    # (7) P/D disaggregation when it pays
    dis = [p for p in points if p.layout.disaggregated]
    best_dis = _best(dis)
    if not dis:
        pd = "not searched" if not opts.disaggregated else \
            f"no prefill/decode split fits {job.num_gpus} GPUs"
    elif best_dis is None:
        pd = "no disaggregated deployment meets the SLOs"
    elif best_dis.per_gpu > pick.per_gpu * 1.05 or not pick.meets:
        e = best_dis.estimate
        pd = (f"pays: {best_dis.layout.name} serves {best_dis.per_gpu:,.0f} tokens/s per GPU vs "
              f"{pick.per_gpu:,.0f} aggregated; KV transfer {_ms(e.kv_transfer_s)} per request; "
              f"{e.bottleneck} pool is the bottleneck")
        pick = best_dis
    else:
        pd = (f"does not pay: the best split ({best_dis.layout.name}) serves "
              f"{best_dis.per_gpu:,.0f} tokens/s per GPU vs {pick.per_gpu:,.0f} aggregated")
    steps.append({"step": 7, "title": "P/D disaggregation when it pays", "decision": pd})
    return steps, pick, _note(pick, points)


def _note(pick, points) -> str:
    meeting = [p for p in points if p.meets]
    best = _best(meeting)
    name = f"{pick.layout.name} at {pick.estimate.concurrency} requests"
    if not pick.meets:
        return f"the procedure arrives at {name}, which misses the SLOs"
    if best is None or best.layout == pick.layout:
        return f"the procedure arrives at {name}: the best of the search"
    gap = 1 - pick.per_gpu / best.per_gpu
    return (f"the procedure arrives at {name}, {gap:.0%} below the best ({best.layout.name}): "
            "its steps fix one axis at a time")

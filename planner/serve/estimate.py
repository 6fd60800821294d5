"""`estimate(job, layout, concurrency=None) -> ServeEstimate`: memory, latency and throughput
of a deployment. Composes memory.py and time.py; no formulas of its own beyond how the pieces
add up (the formulas are in time.py's docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.serve.memory import ServeMemory, instance_memory
from planner.serve.time import ServeCost, StepParts, accepted_tokens, kv_transfer_time

__all__ = ["ServeEstimate", "estimate", "requested_concurrency"]


@dataclass(frozen=True)
class ServeEstimate:
    memory: ServeMemory              # per GPU of the (decode) instance
    concurrency: int                 # requests in flight per (decode) instance, as estimated
    ttft_s: float
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float       # the whole deployment
    num_gpus: int
    decode_step: StepParts = field(default_factory=StepParts)
    prefill_s: float = 0.0           # one request's prefill (TTFT without the queue)
    kv_transfer_s: float = 0.0       # disaggregated: per request
    prefill_memory: ServeMemory | None = None
    bottleneck: str = ""             # disaggregated: prefill | decode
    layout: object = None            # the layout estimated

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.num_gpus

    @property
    def output_tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else 0.0

    def latency_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}

    def throughput_dict(self) -> dict:
        return {"output_tokens_per_s": self.output_tokens_per_s,
                "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
                "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user}


def requested_concurrency(job, mem: ServeMemory) -> int:
    """The concurrency the config asks for ("max": what the KV cache and the engine's batch
    limit allow), never above what the instance can hold."""
    c = job.serving.concurrency
    return mem.max_concurrency if c == "max" else min(int(c), mem.max_concurrency)


def _decode(cost: ServeCost, job, conc: float, *, mixed: bool) -> tuple[StepParts, float]:
    """(token interval, tokens per interval per sequence) at `conc` sequences per instance;
    `mixed`: the steps also carry the prompts of continuous batching (C*ISL/OSL tokens)."""
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    ranks = cost.inst.dp
    seqs = conc / ranks
    ctx = isl + osl / 2
    spec = sv.speculative
    k = spec.num_tokens if spec is not None else 0
    tokens = accepted_tokens(k, spec.acceptance_rate) if spec is not None else 1.0
    prefill = seqs * tokens * isl / osl if mixed else 0.0
    requests = conc * tokens / osl if mixed else 0.0     # host work: one front end per instance
    eager = None
    if mixed:   # the steps that carry the prompt chunks run eagerly, the rest from graphs
        chunks = max(1, math.ceil(seqs * isl / max(1, cost.settings.max_num_tokens)))
        eager = max(cost.eager_share(seqs, 0.0, k + 1), min(1.0, chunks * tokens / osl))
    step = cost.interval(seqs=seqs, ctx=ctx, prefill=prefill, span=isl / 2, q=k + 1,
                         requests=requests, eager=eager)
    if spec is not None:
        step = step.plus(_draft_cost(cost, job, seqs, ctx, k))
    return step, tokens


def _draft_cost(cost: ServeCost, job, seqs: float, ctx: float, k: int) -> StepParts:
    """k draft passes: the MTP layers (one transformer layer and the output layer each) or
    the draft model's own decode steps."""
    spec = job.serving.speculative
    if spec.method == "draft" and job.draft is not None:
        from planner.serve.layout import Instance
        dcost = ServeCost(job, Instance(tp=cost.inst.tp), model=job.draft)
        return dcost.interval(seqs=seqs, ctx=ctx).scaled(k)
    per_layer = cost.stage(cost.pp - 1, seqs=seqs, ctx=ctx)
    L = sum(cost.stages[-1]) or 1
    layer_part = StepParts(per_layer.weights_s / L, per_layer.compute_s / L,
                           per_layer.attention_s / L, per_layer.tp_comm_s / L,
                           per_layer.ep_comm_s / L, 0.0, per_layer.overhead_s / L)
    return layer_part.scaled(k * max(1, job.model.mtp_num_layers))


def estimate(job, layout, *, concurrency: int | None = None) -> ServeEstimate:
    """Memory, TTFT / TPOT / end-to-end latency and tokens/s of `layout` for `job`;
    `concurrency` overrides the config's (per decode instance)."""
    if layout.disaggregated:
        dmem = instance_memory(job, layout.decode)
        pcost = ServeCost(job, layout.prefill)
        return disaggregated(job, layout, pmem=instance_memory(job, layout.prefill), dmem=dmem,
                             dcost=ServeCost(job, layout.decode),
                             prefill=prefill_pool(job, pcost),
                             conc=_clamp(job, dmem, concurrency))
    mem = instance_memory(job, layout.instance)
    return aggregated(job, layout, mem=mem, cost=ServeCost(job, layout.instance),
                      conc=_clamp(job, mem, concurrency))


def _clamp(job, mem: ServeMemory, concurrency: int | None) -> int:
    conc = concurrency if concurrency is not None else requested_concurrency(job, mem)
    return max(1, min(conc, max(1, mem.max_concurrency)))


def aggregated(job, layout, *, mem: ServeMemory, cost: ServeCost, conc: int) -> ServeEstimate:
    """One aggregated instance (prefill and decode in the same engine) x replicas."""
    inst = layout.instance
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    if sv.batching == "static":
        ttft = cost.prefill_time(conc * isl / inst.dp, span=isl / 2, seqs=conc / inst.dp) \
            + conc * cost.c.request_overhead_us * 1e-6
        step, per = _decode(cost, job, conc, mixed=False)
        tpot = step.total / per
        e2e = ttft + (osl - 1) * tpot
        rate = conc * osl / e2e * layout.replicas
        return ServeEstimate(mem, conc, ttft, tpot, e2e, rate, layout.num_gpus, step,
                             prefill_s=ttft, layout=layout)
    ttft, tpot, step = closed_loop(cost, job, conc)
    e2e = ttft + (osl - 1) * tpot
    rate = conc / tpot * layout.replicas
    return ServeEstimate(mem, conc, ttft, tpot, e2e, rate, layout.num_gpus, step,
                         prefill_s=cost.prefill_time(isl, span=isl / 2), layout=layout)


PREFILL_FIRST = {"sglang"}
"""Engines whose scheduler runs a waiting prompt's prefill as a batch of its own, the running
decodes paused (SGLang's default, without --enable-mixed-chunk); vLLM V1 and TensorRT-LLM mix
prefill chunks into the decode steps (chunked prefill, the running requests first)."""


def closed_loop(cost: ServeCost, job, conc: int) -> tuple[float, float, StepParts]:
    """(TTFT, TPOT, the mean decode interval) of continuous batching at `conc` clients per
    instance in a closed loop, as benchmark tools run (genai-perf, vllm bench serve
    --max-concurrency, AIConfigurator): each client sends its next request when the last
    finishes.

    Assumptions: fixed ISL and OSL; the clients start together (the tool's first wave), so
    the C prompts of a rank arrive as one burst of C*ISL tokens, prefilled in n =
    ceil(C*ISL / max_num_tokens) chunks of g = C/n prompts; requests of the same chunk start
    decoding in the same step and, with the same OSL, finish in the same step and return
    together, so the groups persist from cycle to cycle (no arrival process to randomize
    them; prefix caching off). A new group waits on average half a step for the step
    boundary. Then, by the engine's rule (PREFILL_FIRST):
    - mixed (vLLM, TensorRT-LLM): the groups stay one chunk apart; a group's prompts go in
      the next step with the other C - g requests decoding: TTFT = step/2 + that step (or
      steps, for prompts longer than a chunk); TPOT = the mean decode interval with the
      prompts of C*ISL/OSL tokens a step mixed in (each request's prompt once per OSL
      tokens), as before.
    - prefill-first (SGLang): a group's arrival pauses decoding, prefill has priority, so
      every group of the burst waits for the chunks before it and all start decoding
      together after the last: TTFT = step/2 + (n+1)/2 chunk times (the mean over the
      groups), the decode steps carry no prompt tokens, and the prefill time the requests
      of the early chunks sit through after their first token, (n-1)/2 chunks, spreads over
      their OSL-1 tokens of TPOT.
    Not modelled: random lengths and think time (they desynchronize the groups towards a
    Poisson-like arrival), requests beyond the engine's batch limit queueing (conc is held
    to what the instance can run), prefix caching."""
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    seqs = conc / cost.inst.dp
    chunk = max(1, cost.settings.max_num_tokens)
    n = max(1, math.ceil(seqs * isl / chunk))
    g = seqs / n
    ctx = isl + osl / 2
    prefill_first = sv.engine in PREFILL_FIRST
    if prefill_first:
        step, per = _decode(cost, job, conc, mixed=False)
        group = cost.prefill_time(g * isl, span=isl / 2, seqs=g)
        tpot = (step.total + (n - 1) / 2 * group / max(1, osl - 1)) / per
        ttft = step.total / 2 + (n + 1) / 2 * group
        return ttft, tpot, step
    step, per = _decode(cost, job, conc, mixed=True)
    tpot = step.total / per
    others = max(0.0, seqs - g) / cost.pp
    group = cost.prefill_time(g * isl, span=isl / 2, seqs=g, decode_seqs=others, decode_ctx=ctx)
    ttft = step.total / 2 + max(group, step.total)
    return ttft, tpot, step


def prefill_pool(job, pcost: ServeCost) -> tuple[float, float, float]:
    """(one request's prefill seconds alone, requests per second one prefill worker completes
    when saturated with chunks of max_num_tokens, the seconds of such a chunk)."""
    isl = job.serving.input_length
    one = pcost.prefill_time(isl, span=isl / 2)
    chunk = max(isl, pcost.settings.max_num_tokens)
    batch_t = pcost.prefill_time(chunk, span=isl / 2, seqs=chunk / isl)
    return one, pcost.inst.dp * chunk / isl / batch_t, batch_t


def decode_pool(job, dcost: ServeCost, conc: int) -> tuple[StepParts, float]:
    """(token interval, tokens per interval) of a decode-only worker at `conc` requests."""
    osl = job.serving.output_length
    step, per = _decode(dcost, job, conc, mixed=False)
    step = step.plus(StepParts(overhead_s=conc * per / osl * dcost.c.request_overhead_us * 1e-6))
    return step, per


def disaggregated(job, layout, *, pmem: ServeMemory, dmem: ServeMemory, dcost: ServeCost,
                  prefill: tuple[float, float], conc: int,
                  decode: tuple[StepParts, float] | None = None) -> ServeEstimate:
    """Prefill workers hand each request's KV cache to decode workers; the deployment runs at
    the rate of the slower pool. A prefill worker at load u (the share of its capacity in use)
    takes between one prompt alone (u -> 0) and a full chunk of prompts (u = 1): TTFT =
    one + u * (chunk - one) + the KV transfer."""
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    one, per_worker, chunk_s = prefill
    prefill_rate = per_worker * layout.prefill_workers                  # requests/s
    step, per = decode if decode is not None else decode_pool(job, dcost, conc)
    tpot = step.total / per
    decode_rate = conc / tpot / osl * layout.decode_workers
    kv = kv_transfer_time(job, layout, tokens=isl)
    load = min(1.0, decode_rate / prefill_rate)
    ttft = one + load * max(0.0, chunk_s - one) + kv
    e2e = ttft + (osl - 1) * tpot
    rate = min(prefill_rate, decode_rate) * osl
    return ServeEstimate(dmem, conc, ttft, tpot, e2e, rate, layout.num_gpus, step,
                         prefill_s=one, kv_transfer_s=kv, prefill_memory=pmem,
                         bottleneck="prefill" if prefill_rate < decode_rate else "decode",
                         layout=layout)

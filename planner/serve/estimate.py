"""`estimate(job, layout, concurrency=None) -> ServeEstimate`: memory, latency and throughput
of a deployment. Composes memory.py and time.py; no formulas of its own beyond how the pieces
add up (the formulas are in time.py's docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.serve.memory import ServeMemory, instance_memory
from planner.serve.time import ServeCost, StepParts, accepted_tokens, kv_transfer_time

__all__ = [
    "ServeEstimate",
    "admission_wait",
    "arrivals_in_step",
    "decode_batch_reached",
    "decode_first_token",
    "disaggregated_loop",
    "estimate",
    "first_token_delay",
    "first_wave_ttft",
    "independent_ttft",
    "lockstep_ttft",
    "requested_concurrency",
    "turnaround_wait",
    "whole_prompt_groups",
    "with_first_wave",
]


@dataclass(frozen=True)
class ServeEstimate:
    memory: ServeMemory  # per GPU of the (decode) instance
    concurrency: int  # requests in flight per (decode) instance, as estimated
    ttft_s: float
    tpot_s: float
    e2e_s: float
    output_tokens_per_s: float  # the whole deployment
    num_gpus: int
    decode_step: StepParts = field(default_factory=StepParts)
    prefill_s: float = 0.0  # one request's prefill (TTFT without the queue)
    kv_transfer_s: float = 0.0  # disaggregated: per request
    prefill_memory: ServeMemory | None = None
    bottleneck: str = ""  # disaggregated: prefill | decode
    layout: object = None  # the layout estimated
    queue_s: float = 0.0  # in TTFT: the wait for an engine slot (admission_wait)
    clients: int = 0  # with a queue: requests in flight per (decode) instance,
    #   queued ones included (0: no queue, = concurrency)

    @property
    def output_tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.num_gpus

    @property
    def output_tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else 0.0

    def latency_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}

    def throughput_dict(self) -> dict:
        return {
            "output_tokens_per_s": self.output_tokens_per_s,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user,
        }


def requested_concurrency(job, mem: ServeMemory) -> int:
    """The concurrency the config asks for ("max": what the KV cache and the engine's batch
    limit allow), never above what the instance can hold."""
    c = job.serving.concurrency
    return mem.max_concurrency if c == "max" else min(int(c), mem.max_concurrency)


def _decode(
    cost: ServeCost, job, conc: float, *, prefill: float = 0.0, admitted: float = 0.0
) -> tuple[StepParts, float]:
    """(token interval, tokens per interval per sequence) of `conc` decoding sequences per
    instance; `prefill` prompt tokens per (DP) rank in the same step (a chunk step of
    continuous batching, run eagerly), `admitted` requests of the instance admitted and
    finished in it (host work)."""
    sv = job.serving
    isl = sv.input_length
    seqs = conc / cost.inst.dp
    ctx = isl + sv.output_length / 2
    spec = sv.speculative
    k = spec.num_tokens if spec is not None else 0
    tokens = accepted_tokens(k, spec.acceptance_rate) if spec is not None else 1.0
    step = cost.interval(
        seqs=seqs,
        ctx=ctx,
        prefill=prefill,
        span=isl / 2,
        q=k + 1,
        requests=admitted,
        eager=1.0 if prefill > 0 else None,
    )
    if spec is not None and seqs > 0:
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
    layer_part = StepParts(
        per_layer.weights_s / L,
        per_layer.compute_s / L,
        per_layer.attention_s / L,
        per_layer.tp_comm_s / L,
        per_layer.ep_comm_s / L,
        0.0,
        per_layer.overhead_s / L,
    )
    return layer_part.scaled(k * max(1, job.model.mtp_num_layers))


def estimate(job, layout, *, concurrency: int | None = None) -> ServeEstimate:
    """Memory, TTFT / TPOT / end-to-end latency and tokens/s of `layout` for `job`;
    `concurrency` overrides the config's (per decode instance). Clients beyond what the
    instance runs at once wait for a slot (admission_wait), in TTFT."""
    if layout.disaggregated:
        mem = instance_memory(job, layout.decode)
        pcost = ServeCost(job, layout.prefill)
        est = disaggregated_loop(
            job,
            layout,
            pmem=instance_memory(job, layout.prefill),
            dmem=mem,
            dcost=ServeCost(job, layout.decode),
            prefill=prefill_pool(job, pcost),
            clients=_clamp(job, mem, concurrency),
        )
    else:
        mem = instance_memory(job, layout.instance)
        est = aggregated(
            job,
            layout,
            mem=mem,
            cost=ServeCost(job, layout.instance),
            conc=_clamp(job, mem, concurrency),
        )
    clients = _clients(job, concurrency)
    if clients <= est.concurrency or job.serving.batching == "static" or mem.max_concurrency < 1:
        return est
    return queued(est, clients, osl=job.serving.output_length)


def _clients(job, concurrency: int | None) -> int:
    """Requests in flight per instance the config asks for (the closed loop's clients)."""
    if concurrency is not None:
        return concurrency
    c = job.serving.concurrency
    return 0 if c == "max" else int(c)


def admission_wait(clients: float, slots: float, residence: float) -> float:
    """Seconds a request of a closed loop waits for an engine slot.

    Assumptions: N clients, each sending its next request the moment its last one completes
    (no think time, as benchmark tools run with a fixed concurrency); an engine that runs at
    most B requests at once (vLLM max_num_seqs, SGLang max_running_requests, TensorRT-LLM
    max_batch_size, or what its KV cache holds of ISL + OSL tokens each, whichever is less);
    waiting requests admitted first come, first served as slots free; each admitted request
    holds its slot for R seconds (its prefill and its decode, the service at B running).
    N <= B: no wait. N > B: the slots never idle, so the engine completes X = B / R requests
    a second (Little's law over the slots) and each client's cycle is N / X (Little's law
    over the loop), R of it in service:

        W = N / X - R = (N - B) R / B
    """
    if clients <= slots or slots <= 0:
        return 0.0
    return (clients - slots) * residence / slots


def queued(est: ServeEstimate, clients: int, *, osl: int) -> ServeEstimate:
    """`est` (at the requests the instance runs at once) with `clients` > those in a closed
    loop: TTFT adds the slot wait (admission_wait over the running requests' e2e); TPOT and
    throughput are those of the full engine."""
    from dataclasses import replace

    wait = admission_wait(clients, est.concurrency, est.e2e_s)
    ttft = est.ttft_s + wait
    return replace(
        est, ttft_s=ttft, e2e_s=ttft + (osl - 1) * est.tpot_s, queue_s=wait, clients=clients
    )


def _clamp(job, mem: ServeMemory, concurrency: int | None) -> int:
    conc = concurrency if concurrency is not None else requested_concurrency(job, mem)
    return max(1, min(conc, max(1, mem.max_concurrency)))


def aggregated(job, layout, *, mem: ServeMemory, cost: ServeCost, conc: int) -> ServeEstimate:
    """One aggregated instance (prefill and decode in the same engine) x replicas."""
    inst = layout.instance
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    if sv.batching == "static":
        ttft = (
            cost.prefill_time(conc * isl / inst.dp, span=isl / 2, seqs=conc / inst.dp)
            + conc * cost.c.request_overhead_us * 1e-6
        )
        step, per = _decode(cost, job, conc)
        tpot = step.total / per
        e2e = ttft + (osl - 1) * tpot
        rate = conc * osl / e2e * layout.replicas
        return ServeEstimate(
            mem, conc, ttft, tpot, e2e, rate, layout.num_gpus, step, prefill_s=ttft, layout=layout
        )
    ttft, tpot, step, rate = closed_loop(cost, job, conc)
    e2e = ttft + (osl - 1) * tpot
    rate *= layout.replicas
    return ServeEstimate(
        mem,
        conc,
        ttft,
        tpot,
        e2e,
        rate,
        layout.num_gpus,
        step,
        prefill_s=cost.prefill_time(isl, span=isl / 2),
        layout=layout,
    )


PREFILL_FIRST = {"sglang"}
"""Engines whose scheduler runs a waiting prompt's prefill as a batch of its own, the running
decodes paused (SGLang's default, without --enable-mixed-chunk); vLLM V1 and TensorRT-LLM mix
prefill chunks into the decode steps (chunked prefill, the running requests first)."""


OVERLAP_SCHEDULER = {"trtllm", "sglang"}
"""Engines whose scheduler overlaps the host work of step n (sampling, stop checks, responses)
with the GPU work of step n + 1 by default: TensorRT-LLM's PyTorch backend ("Overlap
Scheduler": "introduces one extra decoding step ... Enabled by default", disable with
disable_overlap_scheduler; nvidia.github.io/TensorRT-LLM/features/overlap-scheduler.html, the
1.0-1.3 releases of the runs), SGLang's zero-overhead batch scheduler (on since v0.4, lmsys.org
blog 2024-12-04; off only with --disable-overlap-schedule, ServerArgs 0.5.x). vLLM's
--async-scheduling is opt-in (EngineArgs v0.11 and v0.12: off by default)."""


def first_token_delay(engine: str, step_s: float) -> float:
    """Seconds the first token waits after its prompt's last step: with an overlap scheduler
    (OVERLAP_SCHEDULER) the step's outputs are processed, and the first token sent, while the
    next step runs, so the response leaves when that step ends: one more step (its later tokens
    shift by the same step, so TPOT does not change). Without one: 0."""
    return step_s if engine in OVERLAP_SCHEDULER else 0.0


def arrivals_in_step(others: float, step_s: float, cycle_s: float) -> float:
    """Expected requests of the `others` (N - 1) clients of a closed loop that arrive during a
    step of `step_s` seconds, when the clients are out of step with each other (each at an
    independent, uniformly random phase of its cycle of `cycle_s` seconds, the steady state
    once random lengths or timing have mixed them): a client sends one request per cycle, so
    it sends one within a given window of t seconds with probability t / Z (Little's law: the
    loop's arrival rate is N / Z); the arrival theorem of closed networks has a request see
    the other N - 1 clients at their time averages:  k = (N - 1) t / Z, at most N - 1."""
    if others <= 0 or cycle_s <= 0:
        return 0.0
    return min(others, others * step_s / cycle_s)


def turnaround_wait(step_s: float, clients: float, *, overlap: bool = False) -> float:
    """Seconds a closed-loop client's next prompt waits for the step that runs while it turns
    around. The client sends it as soon as its last token comes back, and that token leaves
    the engine after the step that made it, by when the engine has already started the next
    step: vLLM V1's EngineCore.run_busy_loop drains the requests already queued without
    blocking (`_process_input_queue()`, it blocks only with no request in the engine), then
    runs a whole schedule-execute-update step (`_process_engine_step()`); TensorRT-LLM's
    executor loop fetches, schedules, runs, responds; SGLang's event loop receives, schedules,
    runs. So the prompt arrives during the step after its request's last one and waits all
    of it, not half of a step it lands in at random: its arrival is pinned to its own
    request's last step, whatever the other clients' phases. That step runs when other
    clients' requests are in the engine (N >= 2) or, with an overlap scheduler (`overlap`:
    OVERLAP_SCHEDULER), even when none are: the step after a request's last one was launched
    before its outputs were read ("introduces one extra decoding step", TensorRT-LLM's
    overlap-scheduler doc; SGLang's event_loop_overlap the same). Alone without one (N <= 1)
    the engine is idle when the prompt comes and schedules it at once. With t the step:

        wait = t  (N >= 2, or an overlap scheduler),  0  (otherwise)"""
    return step_s if clients > 1 or overlap else 0.0


def independent_ttft(
    step_s: float,
    chunk_s,
    *,
    clients: float,
    decode_s: float,
    delay_s: float = 0.0,
    overlap: bool = False,
    rounds: int = 50,
) -> tuple[float, float]:
    """(TTFT, k) of a request of a closed loop whose N clients are out of step (the
    opposite of closed_loop's lock-step groups), for an engine that admits the prompts
    waiting at a step boundary into the next step (vLLM V1: the running requests first,
    then the waiting prompts within max_num_batched_tokens; TensorRT-LLM's inflight batching
    within max_num_tokens; SGLang's prefill batch, decode paused).

    Assumptions: the request's client sent it when its last request's final token came
    back, so it waits out the step the engine started meanwhile, a whole step of the mean
    length t (`step_s`; turnaround_wait: t with other clients or an `overlap` scheduler, 0
    alone without one; the step's length
    is a pure decode step's, the other clients' chunk steps being rare at k << 1); the
    k = arrivals_in_step(N - 1, t, Z) other prompts that arrived in the same step share its
    chunk step; `chunk_s(p)` is that step with p prompts (with the running requests decoding
    beside them, as the engine schedules them); the cycle of a client is Z = TTFT +
    `decode_s` (its OSL - 1 later tokens); `delay_s` the first token's wait after the step
    (first_token_delay). Then

        TTFT = wait + chunk_s(1 + k) + delay,   k = (N - 1) t / (TTFT + decode_s)

    solved by fixed-point iteration from k = 0 (TTFT rises with k, k falls with TTFT: the
    iteration is a contraction for k <= N - 1)."""
    wait = turnaround_wait(step_s, clients, overlap=overlap)
    k = 0.0
    ttft = wait + chunk_s(1.0) + delay_s
    for _ in range(rounds):
        k_new = arrivals_in_step(clients - 1, step_s, ttft + decode_s)
        ttft = wait + chunk_s(1.0 + k_new) + delay_s
        if abs(k_new - k) < 1e-9:
            k = k_new
            break
        k = k_new
    return ttft, k


INDEPENDENT_ARRIVALS = {"vllm"}
"""Engines whose clients the runs show out of step in steady state (independent_ttft), not in
the lock-step groups of a burst (closed_loop). Not derived: the runs identify it. vLLM's
Llama 3.1 70B FP8 on one H200 at 4 clients measured a TTFT of 203 ms where its 4 prompts of
1,024 tokens together need 561 TFLOP, 1.4 x the H200's FP8 peak in that time (Qwen3-32B BF16
on 2 H100 at 8 clients: 1.7 x the BF16 peak): its prompts were not prefilled together; the
TensorRT-LLM and SGLang runs are 53-98 % above what out-of-step clients would see (Llama 3.1
8B on one H100 with TensorRT-LLM at 64 clients: 177 ms measured, 54 ms out of step, 180 ms in
lock-step groups of 7 prompts)."""


def lockstep_ttft(n: int, chunk_s: float, step_s: float, delay_steps: int = 0) -> float:
    """Mean steady-state TTFT of a closed loop's n lock-step groups (closed_loop) whose chunk
    steps run back to back, as they do once the clients' first wave has set them so.

    The fixed point: group i's prompt takes the step after group i - 1's (a step of `chunk_s`),
    so group i + 1, one step behind in its decode, finishes one step after group i and its
    client's next prompt comes back one step later: the order and the one-step offsets repeat
    every cycle. A returning prompt waits for the step running when it arrives, a whole step:
    its client sent it as soon as its last token (the step before) came back, and the engine
    fetches new requests before it schedules a step (TensorRT-LLM's executor loop:
    fetch, schedule, run, respond; vLLM V1's EngineCore the same). That step is the chunk step
    of the group before (i > 1) or, for the first group, a decode step of `step_s`. Then its
    own chunk step, then, with an overlap scheduler (first_token_delay: `delay_steps` = 1),
    the step during which its first token is sent: the next group's chunk step (i < n) or a
    decode step. Over the n groups (n - 1 of them have a group before, n - 1 one after):

        neighbour = ((n - 1) chunk + step) / n
        TTFT = neighbour + chunk + delay_steps x neighbour

    n = 1: step + chunk (+ step), one group alone. Large n: the prompts queue behind one
    chunk step before (and one after with the overlap scheduler) their own: (2 + d) chunks, not
    the (n + 1) / 2 of a burst all arriving at once (first_wave_ttft)."""
    neighbour = ((n - 1) * chunk_s + step_s) / max(1, n)
    return neighbour + chunk_s + delay_steps * neighbour


def first_wave_ttft(n: int, group_s: float, delay_s: float = 0.0) -> float:
    """Mean TTFT of a closed loop's first wave: the N clients start together, so N prompts
    reach an idle engine as one burst, prefilled FCFS in n chunk steps of g prompts
    (chunk_groups); group i (1..n) has its first token after i chunk steps of `group_s`:
    mean over the groups (n + 1)/2 chunk steps, + the first token's delay (first_token_delay)."""
    return (n + 1) / 2 * group_s + delay_s


def with_first_wave(steady_s: float, wave_s: float, requests_per_client: float | None) -> float:
    """Mean TTFT over a benchmark run of R = W N requests (W = requests_per_client): its
    first N requests are the first wave (first_wave_ttft), the other (W - 1) N see the
    steady state:  TTFT = steady + (wave - steady) / W  (a wave faster than the steady state,
    a single group, adds nothing). W None (no benchmark run, a server's traffic): steady."""
    if not requests_per_client:
        return steady_s
    return steady_s + max(0.0, wave_s - steady_s) / requests_per_client


def chunk_groups(seqs: float, isl: int, budget: int, q: int = 1) -> tuple[int, float]:
    """(n, g): a rank's `seqs` prompts of `isl` tokens prefilled in n = ceil(seqs * isl /
    (budget - (seqs - g) * q)) steps of g = seqs / n prompts, the step's token budget
    (max_num_tokens: vLLM max_num_batched_tokens, TensorRT-LLM max_num_tokens) shared with
    the other seqs - g requests' q decode tokens each (the running requests first; vLLM V1
    and TensorRT-LLM count decode tokens against the same budget; with pp stages the
    budget is pp x max_num_tokens, one per micro-batch in flight). Solved by iterating n up
    from the budget alone (n only grows as the decode tokens take budget away)."""
    n = max(1, math.ceil(seqs * isl / max(1, budget)))
    for _ in range(64):
        g = seqs / n
        room = budget - (seqs - g) * q
        need = max(1, math.ceil(seqs * isl / room)) if room > 0 else n + 1
        if need <= n:
            break
        n = need
    return n, seqs / n


def whole_prompt_groups(seqs: float, isl: int, budget: int, q: int = 1) -> tuple[int, float]:
    """(n, g) of chunk_groups for an engine that keeps prompts whole (serving.chunked_prefill
    false: TensorRT-LLM's MicroBatchScheduler without a context-chunking config,
    cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp, takes a context request whole
    and stops at the first whose tokens would pass max_num_tokens, `batchNumTokens +
    reqNumTokens > maxNumTokensRuntime`, the running requests' decode tokens counted
    first): a step takes the p prompts whose tokens fit the budget beside the other seqs - p
    requests' q decode tokens each, p isl + (seqs - p) q <= budget:

        p = max(1, min(seqs, floor((budget - seqs q) / (isl - q)))),  n = ceil(seqs / p)

    and g = seqs / n prompts a step on average (the last step of a burst may hold fewer; a
    prompt above the budget alone goes in a step of its own, p = 1, as the engine requires
    max_num_tokens >= ISL)."""
    room = budget - seqs * q
    p = math.floor(room / max(1, isl - q)) if room > 0 else 1
    p = max(1.0, min(seqs, float(p)))
    n = max(1, math.ceil(seqs / p - 1e-9))
    return n, seqs / n


def mixed_tpot(
    dec: float, mix: float, *, n: int, steps: float, own: int = 1
) -> tuple[float, float]:
    """(decode seconds per request, the period) of continuous batching with its prompts in n
    chunk steps per period: a request's `steps` decode steps after its first token (OSL - 1,
    over the tokens a speculative step accepts) include the m = min(steps, n - own) chunk
    steps of the other groups (`own` = the steps its own prompt spans) at `mix` seconds,
    the rest pure decode steps at `dec`:  decode = (steps - m) dec + m mix. The period of a
    group (prefill to next prefill, every group the same) holds all n chunk steps and the
    pure decode steps of its own decode: P = n mix + max(0, steps + own - n) dec."""
    m = min(steps, max(0, n - own))
    decode = (steps - m) * dec + m * mix
    period = n * mix + max(0.0, steps + own - n) * dec
    return decode, period


def closed_loop(cost: ServeCost, job, conc: int) -> tuple[float, float, StepParts, float]:
    """(TTFT, TPOT, the mean decode interval, output tokens/s of the instance) of continuous
    batching at `conc` clients per instance in a closed loop, as benchmark tools run
    (genai-perf, vllm bench serve --max-concurrency, AIConfigurator): each client sends its
    next request when the last finishes.

    Assumptions: fixed ISL and OSL; the clients start together (the tool's first wave), so
    the C prompts of a rank arrive as one burst of C*ISL tokens, prefilled in n chunk steps
    of g = C/n prompts (chunk_groups: the step budget max_num_tokens less the decode tokens
    of the running requests); requests of the same chunk start decoding in the same step
    and, with the same OSL, finish in the same step and return together, so the groups
    persist from cycle to cycle (no arrival process to randomize them; prefix caching off),
    their chunk steps back to back, each group one step behind the one before
    (lockstep_ttft). The steps are
    counted one by one, not averaged: the n chunk steps of a period carry a group's g*ISL
    prompt tokens beside the other C - g decoding requests, every other step is a pure
    decode step of C sequences (a decode step touches the experts of C tokens, not of C +
    the mean prompt tokens; a pure decode step within the engine's graph batch replays its
    CUDA graph). Then, by the engine's rule (PREFILL_FIRST):
    - mixed (vLLM, TensorRT-LLM): TTFT = lockstep_ttft: the step a returning prompt waits
      for (the previous group's chunk step), its own chunk step (with the C - g others
      decoding) and, with the overlap scheduler, the step its first token waits for (the
      next group's chunk step); TPOT = mixed_tpot: the chunk steps of the other n - 1 groups a
      request sits through while it decodes, the rest pure decode; throughput = C * OSL /
      the period (Little's law over the cycle of a group). For vLLM (INDEPENDENT_ARRIVALS:
      the runs show its clients out of step) TTFT is independent_ttft's instead: the
      pure decode step that runs while its client turns around (turnaround_wait) + a chunk
      step shared with the (C - 1) t / Z prompts that arrived in the same step (TPOT and
      throughput keep the groups' count of chunk steps: the same prompt tokens per period
      either way).
    - prefill-first (SGLang): a group's arrival pauses decoding, prefill has priority, so
      every group of the burst waits for the chunks before it and all start decoding
      together after the last (n = ceil(C*ISL / budget) chunk steps; with
      serving.chunked_prefill false, `--chunked-prefill-size -1`, whole prompts fill a
      prefill batch up to the budget, `--max-prefill-tokens`: whole_prompt_groups with no
      decode tokens beside them): TTFT = a decode step (turnaround_wait: the step the
      overlap scheduler launched after the burst's last, which the returning burst waits
      out) + (n+1)/2 chunk times (the mean over the groups), the decode steps carry no
      prompt tokens, and the prefill time the requests of the early chunks sit through
      after their first token, (n-1)/2 chunks, spreads over their OSL-1 tokens of TPOT;
      period = n chunks + the OSL-1 decode steps.
    The first token leaves one step after its prompt's last step with an overlap scheduler
    (first_token_delay: TensorRT-LLM, SGLang). A benchmark run (serving.requests_per_client
    W) also holds its first wave, the N prompts of the clients' start at an idle engine
    (first_wave_ttft: (n + 1)/2 chunk steps), 1/W of its requests: with_first_wave (the
    prefill-first TTFT above already is that wave's form, every cycle).
    Not modelled: random lengths and think time (they desynchronize the groups towards a
    Poisson-like arrival), prefix caching. Requests beyond what the engine admits at once
    wait for a slot (admission_wait, added by estimate())."""
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    seqs = conc / cost.inst.dp
    chunk = max(1, cost.settings.max_num_tokens)
    ctx = isl + osl / 2
    prefill_first = sv.engine in PREFILL_FIRST
    step, per = _decode(cost, job, conc)
    steps = max(0.0, (osl - 1) / per)
    if prefill_first:
        if sv.chunked_prefill is False:  # whole prompts, decoding paused: none beside them
            n, g = whole_prompt_groups(seqs, isl, chunk, 0)
        else:
            n = max(1, math.ceil(seqs * isl / chunk))
            g = seqs / n
        group = cost.prefill_time(g * isl, span=isl / 2, seqs=g)
        tpot = (step.total + (n - 1) / 2 * group / max(1, osl - 1)) / per
        wait = turnaround_wait(step.total, seqs, overlap=sv.engine in OVERLAP_SCHEDULER)
        ttft = wait + (n + 1) / 2 * group + first_token_delay(sv.engine, step.total)
        period = n * group + steps * step.total
        return ttft, tpot, step, conc * osl / period if period > 0 else 0.0
    k = sv.speculative.num_tokens if sv.speculative is not None else 0
    groups = whole_prompt_groups if sv.chunked_prefill is False else chunk_groups
    n, g = groups(seqs, isl, chunk * cost.pp, k + 1)  # pp micro-batches, a budget each
    others = max(0.0, seqs - g)
    own = max(1, math.ceil(isl / (chunk * cost.pp)))
    mix = (
        _decode(cost, job, others * cost.inst.dp, prefill=g * isl, admitted=g * cost.inst.dp)[0]
        if others > 0
        else None
    )
    group = cost.prefill_time(
        g * isl, span=isl / 2, seqs=g, decode_seqs=others / cost.pp, decode_ctx=ctx
    )
    mix_s = mix.total if mix is not None else group
    decode, period = mixed_tpot(step.total, mix_s, n=n, steps=steps, own=own)
    tpot = decode / max(1, osl - 1) if osl > 1 else step.total / per
    count = max(float(n), steps + own)  # steps in a period: n of them chunk steps
    delay = first_token_delay(sv.engine, step.total)
    if sv.engine in INDEPENDENT_ARRIVALS:

        def chunk_s(p: float) -> float:
            p = min(p, seqs)
            return max(
                step.total,
                cost.prefill_time(
                    p * isl,
                    span=isl / 2,
                    seqs=p,
                    decode_seqs=max(0.0, seqs - p) / cost.pp,
                    decode_ctx=ctx,
                ),
            )

        steady = independent_ttft(
            step.total,
            chunk_s,
            clients=seqs,
            decode_s=(osl - 1) * tpot,
            delay_s=delay,
            overlap=sv.engine in OVERLAP_SCHEDULER,
        )[0]
    else:
        steady = lockstep_ttft(n, max(group, step.total), step.total, 1 if delay > 0 else 0)
    wave_n, wave_g = groups(seqs, isl, chunk * cost.pp)
    wave = first_wave_ttft(
        wave_n, cost.prefill_time(wave_g * isl, span=isl / 2, seqs=wave_g), delay
    )
    ttft = with_first_wave(steady, wave, sv.requests_per_client)
    mean_step = step if mix is None else step.scaled(1 - n / count).plus(mix.scaled(n / count))
    return ttft, tpot, mean_step, conc * osl / period if period > 0 else conc / step.total


def prefill_pool(job, pcost: ServeCost) -> tuple[float, float, float]:
    """(one request's prefill seconds alone, requests per second one prefill worker completes
    when saturated with chunks of max_num_tokens, the seconds of such a chunk).

    One prompt alone on a worker with attention DP is on one of its dp ranks: the others have
    nothing to run and take an empty pass so that the MoE layers' collectives stay in step
    (vLLM's DPEngineCoreProc.run_busy_loop: "We are in a running state and so must execute a
    dummy pass if the model didn't execute any ready requests", `execute_dummy_batch`, one
    token), so its MoE layers see that rank's ISL tokens (ranks = 1; the dummy tokens, dp - 1,
    are left out), not dp x ISL as when every rank has a prompt. The saturated chunk keeps
    every rank's."""
    isl = job.serving.input_length
    one = pcost.prefill_time(isl, span=isl / 2, ranks=1)
    chunk = max(isl, pcost.settings.max_num_tokens)
    batch_t = pcost.prefill_time(chunk, span=isl / 2, seqs=chunk / isl)
    return one, pcost.inst.dp * chunk / isl / batch_t, batch_t


def decode_pool(job, dcost: ServeCost, conc: int) -> tuple[StepParts, float]:
    """(token interval, tokens per interval) of a decode-only worker at `conc` requests."""
    osl = job.serving.output_length
    step, per = _decode(dcost, job, conc)
    step = step.plus(StepParts(overhead_s=conc * per / osl * dcost.c.request_overhead_us * 1e-6))
    return step, per


def disaggregated(
    job,
    layout,
    *,
    pmem: ServeMemory,
    dmem: ServeMemory,
    dcost: ServeCost,
    prefill: tuple[float, float],
    conc: int,
    decode: tuple[StepParts, float] | None = None,
) -> ServeEstimate:
    """Prefill workers hand each request's KV cache to decode workers; the deployment runs at
    the rate of the slower pool. A prefill worker at load u (the share of its capacity in use)
    takes between one prompt alone (u -> 0) and a full chunk of prompts (u = 1); the first
    token then leaves the decode worker (decode_first_token: the step boundary it waits for,
    the KV transfer, and with vLLM the step that recomputes the last prompt token): TTFT =
    one + u * (chunk - one) + decode_first_token(engine, decode step, KV transfer)."""
    sv = job.serving
    isl, osl = sv.input_length, sv.output_length
    one, per_worker, chunk_s = prefill
    prefill_rate = per_worker * layout.prefill_workers  # requests/s
    step, per = decode if decode is not None else decode_pool(job, dcost, conc)
    tpot = step.total / per
    decode_rate = conc / tpot / osl * layout.decode_workers
    kv = kv_transfer_time(job, layout, tokens=isl)
    load = min(1.0, decode_rate / prefill_rate)
    ttft = one + load * max(0.0, chunk_s - one) + decode_first_token(sv.engine, step.total, kv)
    e2e = ttft + (osl - 1) * tpot
    rate = min(prefill_rate, decode_rate) * osl
    return ServeEstimate(
        dmem,
        conc,
        ttft,
        tpot,
        e2e,
        rate,
        layout.num_gpus,
        step,
        prefill_s=one,
        kv_transfer_s=kv,
        prefill_memory=pmem,
        bottleneck="prefill" if prefill_rate < decode_rate else "decode",
        layout=layout,
    )


RECOMPUTES_LAST_PROMPT_TOKEN = {"vllm"}
"""Engines whose disaggregated decode worker computes the first token itself from the
transferred KV cache: vLLM's scheduler, once the NixlConnector reports the KV received
(`finished_recving`, from the previous step's `update_from_output`), caches the blocks and,
when they hold every prompt token, steps `num_computed_tokens` back by one
(`Scheduler._update_waiting_for_remote_kv`: `if num_computed_tokens == request.num_tokens:
num_computed_tokens -= 1`), so a step recomputes the last prompt token and samples the first
output. SGLang's decode worker streams the token the prefill worker computed and sent with
the KV (`process_batch_result_prebuilt`: no forward pass, "Logprobs should be handled on the
prefill engine")."""


def decode_first_token(engine: str, step_s: float, kv_s: float) -> float:
    """Seconds from the end of a request's prefill on a prefill worker to its first token
    leaving the disaggregated decode worker, the KV transfer included. The client's tokens
    stream from the decode worker (Dynamo's disaggregated flow: the prefill worker returns the
    transfer metadata to the router, the decode worker pulls the KV over NIXL and "Decode -->>
    Frontend: Stream tokens", ai-dynamo/dynamo docs/design_docs/disagg_serving.md), which is
    running steps of its other requests: the request reaches it at a random point of a step
    of t seconds and is taken up at the next step boundary, t/2 on average. Then:
    - vLLM (RECOMPUTES_LAST_PROMPT_TOKEN): the NixlConnector loads the KV "asynchronously
      (between scheduler steps)" and reports it received in the output of the step during
      which the load ends, max(t, kv) after it started; the next step recomputes the last
      prompt token and samples the first output, t:  t/2 + max(t, kv) + t.
    - SGLang (and TensorRT-LLM, whose context server returns the first token with the KV):
      the prefill worker's token is streamed once the transfer ends:  t/2 + kv."""
    wait = step_s / 2
    if engine in RECOMPUTES_LAST_PROMPT_TOKEN:
        return wait + max(step_s, kv_s) + step_s
    return wait + kv_s


def decode_batch_reached(clients: float, ttft_s: float, decode_s: float) -> float:
    """Requests a disaggregated decode worker holds on average when `clients` requests of a
    closed loop are in flight per decode worker: each spends TTFT (its prefill on a prefill
    worker, the KV transfer) away from it and `decode_s` = (OSL - 1) TPOT on it. Little's law
    over the loop gives each worker X = N / (TTFT + D) requests a second, and over the decode
    worker L = X D:

        B = N D / (TTFT + D)

    (AIConfigurator's silicon runs give the concurrency of the whole deployment, the clients,
    not the decode batch: those in prefill are among them.)"""
    if clients <= 0 or decode_s <= 0:
        return float(clients)
    return clients * decode_s / (ttft_s + decode_s)


def disaggregated_loop(
    job,
    layout,
    *,
    pmem: ServeMemory,
    dmem: ServeMemory,
    dcost: ServeCost,
    prefill: tuple[float, float, float],
    clients: int,
    decode: tuple[StepParts, float] | None = None,
    rounds: int = 40,
) -> ServeEstimate:
    """`disaggregated` for a closed loop of `clients` requests in flight per decode worker:
    the decode step is taken at the batch the decode worker reaches (decode_batch_reached),
    solved with TPOT and TTFT by fixed-point iteration from B = N (the batch falls as TTFT
    grows, TPOT falls with the batch: the iteration settles within a few rounds). The
    estimate keeps `concurrency` = the clients (the requests in flight, prefill included);
    `decode`: the decode pool at B = N when already computed (the search's)."""
    from dataclasses import replace

    osl = job.serving.output_length
    b = float(clients)
    est = None
    for _ in range(rounds):
        est = disaggregated(
            job,
            layout,
            pmem=pmem,
            dmem=dmem,
            dcost=dcost,
            prefill=prefill,
            conc=b,
            decode=decode if decode is not None and b == clients else decode_pool(job, dcost, b),
        )
        nb = decode_batch_reached(clients, est.ttft_s, (osl - 1) * est.tpot_s)
        if abs(nb - b) <= 1e-6 * clients:
            break
        b = nb
    return replace(est, concurrency=clients)

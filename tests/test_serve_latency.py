"""Serving latency from first principles: the bytes and FLOPs of a decode step counted by
hand on small models, the routed experts a batch touches, DeepSeek-V3 at concurrency 1 on
8 H200 against its roofline derivation, and the closed-loop latency at a concurrency."""

from __future__ import annotations

import pytest

from planner.config import resolve_hardware
from planner.cost.comm import all_reduce_time
from planner.serve.estimate import estimate
from planner.serve.layout import Instance, ServeLayout
from planner.serve.specs import ServeJob, ServingSpec
from planner.serve.time import ServeCost, touched_experts
from planner.specs import ModelSpec, ServingCalibration

H100 = resolve_hardware("h100-sxm")
H200 = resolve_hardware("h200")

# A model of our own, small enough to count by hand: 2 MoE layers, h 64, 4 heads of 16 (MHA),
# 8 experts of ffn 32 (SwiGLU: 3 x 64 x 32 = 6,144 params each), top-2, no shared expert,
# vocab 128. Attention q, k, v, o: 4 x 64 x 64 = 16,384 params per layer.
TINY_MOE = dict(
    name="tiny-moe",
    num_layers=2,
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=4,
    num_kv_heads=4,
    vocab_size=128,
    activation="swiglu",
    num_experts=8,
    moe_top_k=2,
    moe_ffn_hidden_size=32,
    num_shared_experts=0,
    num_dense_layers=0,
    tied_embeddings=False,
)
ATTN, EXPERT = 4 * 64 * 64, 3 * 64 * 32
# The routed activations of one token-expert pair through HBM (time.routed_activation_bytes):
# the permute writes its h = 64 row, the SwiGLU activation reads 2 x 32 and writes 32, the
# combine reads the 64-wide expert output back, in bf16: 2 x (64 + 64 + 32 + 64) = 448 bytes
PAIR = 2 * (64 + 2 * 32 + 32 + 64)


def _cal(hw, **kw):
    base = dict(
        hbm_efficiency=1,
        gemm_efficiency=1,
        gemm_half_tokens=0,
        moe_efficiency=1,
        attention_efficiency=1,
        layer_overhead_us=0,
        step_overhead_us=0,
        sequence_overhead_us=0,
        request_overhead_us=0,
        link_efficiency=1,
        allreduce_latency_us=0,
        graph_layer_overhead_us=0,
    )
    base.update(kw)
    return hw.model_copy(update={"serving_calibration": ServingCalibration(**base)})


def _job(model, hw, **sv):
    spec = dict(precision="bf16", kv_cache_dtype="bf16", input_length=1024, output_length=256)
    spec.update(sv)
    return ServeJob(model, hw, 8, ServingSpec(**spec))


@pytest.mark.parametrize(
    "E, k, tokens, expected",
    [
        pytest.param(8, 2, 1, 2.0, id="one-token-hits-k"),
        pytest.param(8, 2, 3, 8 * (1 - (6 / 8) ** 3), id="three-tokens"),  # 4.625
        pytest.param(256, 8, 1, 8.0, id="deepseek-one-token"),
        pytest.param(256, 8, 64, 256 * (1 - (248 / 256) ** 64), id="deepseek-64"),  # ~222
        pytest.param(8, 2, 0, 0.0, id="no-tokens"),
    ],
)
def test_touched_experts_is_the_expected_distinct_count(E, k, tokens, expected):
    # each expert is missed by one token's k picks with probability 1 - k/E (uniform routing)
    assert touched_experts(E, k, tokens) == pytest.approx(expected)


@pytest.mark.parametrize("tokens", [1, 3, 16])
def test_decode_weights_are_attention_plus_the_touched_experts(tokens):
    # One GPU (tp 1), bf16, every efficiency 1, no fixed costs: the weight stream of a decode
    # step of `tokens` sequences is, by hand,
    #   2 layers x (attention 16,384 + touched x 6,144) + the output layer 128 x 64, x 2 bytes
    # over the HBM bandwidth (the norms and the router, 640 params a layer, are not streamed
    # as GEMM weights), plus the routed activations: 2 layers x tokens x top-2 x 448 bytes.
    hw = _cal(H100)
    job = _job(ModelSpec(**TINY_MOE), hw)
    step = ServeCost(job, Instance()).stage(0, seqs=tokens, ctx=0)
    touched = 8 * (1 - (1 - 2 / 8) ** tokens)
    w = (2 * (ATTN + touched * EXPERT) + 128 * 64) * 2 + 2 * tokens * 2 * PAIR
    assert step.weights_s == pytest.approx(w / (H100.hbm_bandwidth_gb_per_s * 1e9))


def test_expert_gemm_efficiency_is_sized_on_tokens_per_touched_expert():
    # 16 tokens x top-2 = 32 routings over the touched 8 (1 - (3/4)^16) = 7.920 experts:
    # n = 4.04 tokens each (averaging over all 8 experts would say 4.0; at one token it is
    # 1 per touched expert, not 2/8). With gemm_half_tokens h = 64 and moe_efficiency m = 0.5
    # the grouped efficiency is g m n / (n + m h); the experts' FLOPs are 2 x 6,144 per
    # routing and layer; with HBM made infinite, the step's GEMM time is all compute:
    #   attention GEMMs 2 x 16,384 x 16 / (P g 16/(16+64)) per layer, experts as above,
    #   output layer 2 x 128 x 64 x 16 / (P g 16/(16+64)).
    hw = _cal(H100, gemm_half_tokens=64, moe_efficiency=0.5)
    hw = hw.model_copy(update={"hbm_bandwidth_gb_per_s": 1e12})
    job = _job(ModelSpec(**TINY_MOE), hw)
    P = hw.peak_flops("bf16")
    T = 16
    touched = 8 * (1 - 0.75**T)
    n = T * 2 / touched
    n_dense = 1 / (1 / 64 + 1 / T)  # TP 1: 1/n = tp/h + 1/T
    e_dense = n_dense / (n_dense + 64)
    n_e = 1 / (1 / 64 + 1 / n)  # one expert rank of 1 GPU: 1/n = etp/h + 1/n_e
    e_moe = 0.5 * n_e / (n_e + 0.5 * 64)
    hand = 2 * (
        2 * ATTN * T / (P * e_dense) + 2 * EXPERT * 2 * T / (P * e_moe)
    ) + 2 * 128 * 64 * T / (P * T / (T + 64))
    step = ServeCost(job, Instance()).stage(0, seqs=T, ctx=0)
    assert step.weights_s + step.compute_s == pytest.approx(hand, rel=1e-3)


def test_attention_dp_experts_see_every_ranks_tokens_and_pay_dispatch_and_combine():
    # tp 1 x dp 4 with attention DP, ep 4: each rank decodes 2 sequences; the routed experts
    # (2 per GPU) see the 8 tokens of all ranks: 8 (1 - (3/4)^8) = 7.2 of the 8 experts are
    # touched, so this GPU streams that share of its 2 experts. Weights per GPU, bf16:
    #   2 layers x (attention 16,384 + 7.2/8 x 2 x 6,144) + the output layer 128 x 64.
    # Dispatch and combine per MoE layer: each of the rank's 2 tokens goes to the ranks holding
    # its 2 experts, 4 (1 - (3/4)^2) = 1.75 ranks on average, h = 64 values each, dispatched
    # in the GEMM precision (bf16 here, 2 bytes) and combined in bf16 (comm.all_to_all_time
    # over the ep group's link).
    from planner.cost.comm import all_to_all_time

    hw = _cal(H100)
    job = _job(ModelSpec(**TINY_MOE), hw)
    inst = Instance(tp=1, dp=4, dp_attention=True, ep=4)
    cost = ServeCost(job, inst)
    step = cost.stage(0, seqs=2, ctx=0)
    touched = 8 * (1 - 0.75**8)
    # + the routed activations of this rank's quarter of the group's 8 x 2 pairs, 2 layers
    w = (2 * (ATTN + touched / 8 * 2 * EXPERT) + 128 * 64) * 2 + 2 * 8 * 2 * PAIR / 4
    assert step.weights_s == pytest.approx(w / (H100.hbm_bandwidth_gb_per_s * 1e9))
    fan = 4 * (1 - 0.75**2)
    a2a = all_to_all_time(2 * 64 * fan * 2, 4, cost.ep_link)
    assert step.ep_comm_s == pytest.approx(2 * (a2a + a2a))
    assert step.tp_comm_s == 0.0  # attention TP 1: no all-reduce


def test_one_prompt_alone_on_an_attention_dp_rank_routes_its_own_tokens_only():
    # The same tp 1 x dp 4 instance (ep 4, 2 experts per GPU) prefilling one prompt of 3
    # tokens alone on one rank (ranks=1: the other ranks take an empty pass, vLLM's
    # DPEngineCoreProc "must execute a dummy pass"): the routed experts see those 3 tokens,
    # 8 (1 - (3/4)^3) = 4.625 of the 8 experts touched, this GPU's share of its 2 experts
    # streamed, and the routed activations of this GPU's quarter of the 3 x 2 pairs; with every
    # rank prefilling as many (the default) they see 4 x 3 = 12 tokens, 8 (1 - (3/4)^12) =
    # 7.66 touched, and 12 x 2 pairs. All efficiencies 1, no overheads: the weight stream is
    # the whole GEMM time at these sizes (h 64: 2 FLOP x 64 x 3 tokens a parameter row, far
    # below the H100's ridge).
    hw = _cal(H100)
    job = _job(ModelSpec(**TINY_MOE), hw)
    cost = ServeCost(job, Instance(tp=1, dp=4, dp_attention=True, ep=4))
    bw = H100.hbm_bandwidth_gb_per_s * 1e9

    def weights(tokens_seen):
        touched = 8 * (1 - 0.75**tokens_seen)
        w = (2 * (ATTN + touched / 8 * 2 * EXPERT) + 128 * 64) * 2
        return (w + 2 * tokens_seen * 2 * PAIR / 4) / bw

    alone = cost.stage(0, seqs=0, ctx=0, prefill=3, span=1.5, last_logits=1, ranks=1)
    every = cost.stage(0, seqs=0, ctx=0, prefill=3, span=1.5, last_logits=1)
    assert alone.weights_s == pytest.approx(weights(3))
    assert every.weights_s == pytest.approx(weights(12))
    assert alone.total < every.total


def test_a_prefill_workers_prompt_alone_is_one_ranks_prefill():
    # prefill_pool's "one request alone" on a worker with attention DP is prefill_time with
    # ranks = 1 (its MoE layers route that prompt's ISL tokens, not dp x ISL); the saturated
    # chunk keeps every rank's. Without attention DP the two are the same.
    from planner.serve.estimate import prefill_pool

    hw = _cal(H100)
    job = _job(ModelSpec(**TINY_MOE), hw, input_length=512)
    dp = ServeCost(job, Instance(tp=1, dp=4, dp_attention=True, ep=4))
    one, _, _ = prefill_pool(job, dp)
    assert one == pytest.approx(dp.prefill_time(512, span=256, ranks=1))
    assert one < dp.prefill_time(512, span=256)
    plain = ServeCost(job, Instance(tp=1, ep=1))
    assert prefill_pool(job, plain)[0] == pytest.approx(plain.prefill_time(512, span=256))


# DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): h 7168, 61 layers of which the first 3
# dense (ffn 18432), 58 MoE with 256 routed experts of ffn 2048, top-8, one shared expert;
# MLA: q_lora_rank 1536, kv_lora_rank 512, 128 heads, qk_nope 128 + qk_rope 64, v 128;
# vocab 129280.
_H = 7168
MLA_PARAMS = (
    _H * 1536 + 1536 * 128 * 192 + _H * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * _H
)  # 187,105,280 per layer
EXPERT_PARAMS = 3 * _H * 2048  # 44,040,192 (routed or shared)
DENSE_MLP = 3 * _H * 18432


def test_deepseek_v3_decode_at_concurrency_1_is_its_roofline_derivation():
    # 8 H200, SGLang, tp 8, FP8 weights and KV, one request at context 2048 + 256. Per GPU:
    #   weights  61 x 187.1 M (MLA) / 8 + 3 x 396.4 M (dense MLP) / 8 + 58 x 44.0 M (shared)
    #            / 8 + 58 x 8 touched experts x 44.0 M / 8 (each expert TP-split over 8),
    #            1 byte each; the output layer 129,280 x 7,168 / 8 in bf16
    #   KV       the MLA latent (512 + 64) x 1 byte x 61 layers x 2,304 tokens (replicated)
    #   routed   58 layers x 8 token-expert pairs x 2 x (2 x 7,168 + 3 x 2,048 / 8) bytes (the
    #            permute, activation and combine kernels' bf16 rows: time.routed_activation_bytes)
    #   over HBM: bandwidth x the profile's hbm_efficiency
    #   comm     2 all-reduces of 7,168 x 2 bytes per layer over the tp 8 NVLink group
    #   fixed    61 x graph_layer_overhead_us (a decode step of 1 sequence replays SGLang's CUDA
    #            graph: at most 512 at tp 8) + step_overhead_us + 1 x sequence_overhead_us
    #            + 58 x moe_layer_overhead_us (the MoE layers' own kernels)
    # The model's step must be within 25 % of that sum (the issue's bar); before the touched-
    # expert fix the expert GEMMs alone took 68 ms (efficiency sized on k/E tokens per expert).
    from tests.test_serve import _model

    job = ServeJob(
        _model("deepseek-v3"),
        H200,
        8,
        ServingSpec(
            precision="fp8", input_length=2048, output_length=512, engine="sglang", concurrency=1
        ),
    )
    cost = ServeCost(job, Instance(tp=8))
    c = H200.serving_calibration
    ctx = 2048 + 256
    weights = (
        61 * MLA_PARAMS + 3 * DENSE_MLP + 58 * EXPERT_PARAMS + 58 * 8 * EXPERT_PARAMS
    ) / 8 + 129280 * _H / 8 * 2
    kv = (512 + 64) * 61 * ctx
    routed = 58 * 8 * 2 * (2 * _H + 3 * 2048 / 8)
    hbm = (weights + kv + routed) / (H200.hbm_bandwidth_gb_per_s * 1e9 * c.hbm_efficiency)
    comm = 61 * 2 * all_reduce_time(_H * 2, 8, cost.tp_link)
    fixed = (
        61 * c.graph_layer_overhead_us
        + 58 * c.moe_layer_overhead_us
        + c.step_overhead_us
        + c.sequence_overhead_us
    ) * 1e-6
    derivation = hbm + comm + fixed
    step = cost.interval(seqs=1, ctx=ctx).total
    assert step == pytest.approx(derivation, rel=0.25)
    est = estimate(job, ServeLayout(instance=Instance(tp=8)), concurrency=1)
    assert est.tpot_s < 0.030  # what `planner serve ... --tpot-ms 30` asks


def test_planner_serve_deepseek_v3_on_8_h200_meets_tpot_30_ms(runner):
    from planner.cli import app

    result = runner.invoke(
        app,
        [
            "serve",
            "--model",
            "deepseek-v3",
            "--gpus",
            "8",
            "--hardware",
            "h200",
            "--engine",
            "sglang",
            "--tpot-ms",
            "30",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------- closed loop at a concurrency


def _llama8b_job(engine, conc, hw=None, **sv):
    from tests.test_serve import _model

    return ServeJob(
        _model("llama3-8b"),
        hw or _cal(H100, layer_overhead_us=40, graph_layer_overhead_us=4),
        1,
        ServingSpec(
            precision="fp8",
            input_length=1024,
            output_length=128,
            engine=engine,
            concurrency=conc,
            **sv,
        ),
    )


@pytest.mark.parametrize(
    "seqs, isl, budget, q, n",
    [
        # 8 x 1024 = 8,192 tokens, one group of 8: no one else decodes, the whole budget is theirs
        pytest.param(8, 1024, 8192, 1, 1, id="c8-one-chunk"),
        # 64 x 1024 = 65,536 tokens: 8 chunks by the budget alone, but each chunk step also carries
        # the other 64 - 8 = 56 decode tokens: 8192 - 56 = 8136 of room, ceil(65536 / 8136) = 9;
        # with 9 groups of 7.11 the others are 56.9 tokens, 8135.1 of room, still 9
        pytest.param(64, 1024, 8192, 1, 9, id="c64-decode-takes-budget"),
        # speculative decoding: 4 tokens per decoding request: 8192 - 4 x 56 = 7968 -> 9 groups
        pytest.param(64, 1024, 8192, 4, 9, id="c64-mtp3"),
        # a 20,000-token prompt alone: ceil(20000 / 8192) = 3 steps of a third of it each
        pytest.param(1, 20000, 8192, 1, 3, id="long-prompt"),
    ],
)
def test_chunk_groups_share_the_step_budget_with_the_decode_tokens(seqs, isl, budget, q, n):
    from planner.serve.estimate import chunk_groups

    got_n, g = chunk_groups(seqs, isl, budget, q)
    assert got_n == n and g == pytest.approx(seqs / n)


@pytest.mark.parametrize(
    "seqs, isl, budget, q, n",
    [
        # 64 prompts of 1,024 tokens kept whole in a budget of 2,588 (AIConfigurator's 64 +
        # 1,024 + 1,500): p 1024 + (64 - p) <= 2588 -> p <= (2588 - 64) / 1023 = 2.47, so 2
        # prompts a step, ceil(64 / 2) = 32 steps (split prompts: ceil(65536 / 2526.5) = 26)
        pytest.param(64, 1024, 2588, 1, 32, id="c64-two-whole-prompts"),
        # Qwen3-235B's 512-token prompts in 64 + 512 + 1,500 = 2,076: (2076 - 64) / 511 = 3.94
        # -> 3 a step, ceil(64 / 3) = 22 steps
        pytest.param(64, 512, 2076, 1, 22, id="c64-three-whole-prompts"),
        # 8 clients, 8 + 1,024 + 1,500 = 2,532: (2532 - 8) / 1023 = 2.47 -> 2, 4 steps
        pytest.param(8, 1024, 2532, 1, 4, id="c8"),
        # everything fits: 8 x 1024 = 8,192 in 8,192 with no one decoding, one step
        pytest.param(8, 1024, 8192, 1, 1, id="one-step"),
        # the decode tokens leave room for less than one prompt: one prompt a step anyway
        pytest.param(1629, 1000, 3584, 1, 1629, id="one-at-least"),
    ],
)
def test_whole_prompts_fill_a_step_with_the_prompts_that_fit_beside_the_decodes(
    seqs, isl, budget, q, n
):
    from planner.serve.estimate import whole_prompt_groups

    got_n, g = whole_prompt_groups(seqs, isl, budget, q)
    assert got_n == n and g == pytest.approx(seqs / n)


def test_closed_loop_keeps_prompts_whole_when_chunked_prefill_is_off():
    # TensorRT-LLM with enable_chunked_prefill false (serving.chunked_prefill false): 64
    # clients of 1,024 tokens, budget 2,588: 32 chunk steps of 2 whole prompts instead of 26
    # of 2.46 split ones; the lock-step TTFT and the TPOT take those groups (the
    # closed-loop test above derives both formulas).
    split = _llama8b_job("trtllm", 64, max_num_tokens=2588)
    whole = _llama8b_job("trtllm", 64, max_num_tokens=2588, chunked_prefill=False)
    cost = ServeCost(whole, Instance())
    est = estimate(whole, ServeLayout(instance=Instance()))
    n, g, ctx = 32, 2.0, 1024 + 64
    dec = cost.interval(seqs=64, ctx=ctx).total
    chunk = cost.prefill_time(g * 1024, span=512, seqs=g, decode_seqs=64 - g, decode_ctx=ctx)
    mix = cost.interval(seqs=64 - g, ctx=ctx, prefill=g * 1024, span=512, requests=g, eager=1.0)
    c = max(chunk, dec)
    assert est.ttft_s == pytest.approx(2 * ((n - 1) * c + dec) / n + c)
    assert est.tpot_s == pytest.approx(((127 - (n - 1)) * dec + (n - 1) * mix.total) / 127)
    # smaller chunk steps: a returning prompt waits out less prefill than with split prompts
    assert est.ttft_s < estimate(split, ServeLayout(instance=Instance())).ttft_s


def test_mixed_tpot_counts_the_chunk_steps_one_by_one():
    # 4 groups, a request decodes 10 steps after its first token; 3 of them carry the other
    # groups' chunks (30 ms each), 7 are pure decode steps (10 ms): 7 x 10 + 3 x 30 = 160 ms;
    # a group's period: the 4 chunk steps + its 10 + 1 - 4 = 7 pure decode steps = 190 ms
    from planner.serve.estimate import mixed_tpot

    decode, period = mixed_tpot(0.010, 0.030, n=4, steps=10)
    assert decode == pytest.approx(0.160) and period == pytest.approx(0.190)
    # more chunk steps than decode steps (long prompts, short outputs): every decode step
    # is a chunk step, and the period is the n chunk steps: the prefill queue sets the pace
    decode, period = mixed_tpot(0.010, 0.030, n=12, steps=10)
    assert decode == pytest.approx(0.300) and period == pytest.approx(0.360)


@pytest.mark.parametrize(
    "conc, groups",
    [
        pytest.param(8, 1, id="c8-one-chunk"),
        pytest.param(64, 9, id="c64-nine-chunks"),  # chunk_groups above
    ],
)
def test_closed_loop_mixed_engine_counts_chunk_steps_and_pure_decode_steps(conc, groups):
    # TensorRT-LLM mixes prompts into decode steps. C clients start together: the burst of C
    # x 1024 prompt tokens goes in n chunk steps of g = C/n prompts, the C - g others decoding
    # beside them; every other step is a pure decode step of C sequences. A request's 127
    # later tokens sit through the n - 1 chunk steps of the other groups: TPOT = ((127 - (n -
    # 1)) dec + (n - 1) mix) / 127; a group's period is its n chunk steps + 128 - n decode
    # steps, the mean step period / 128; TTFT (lockstep_ttft: the groups' chunk steps back to
    # back) = the step a returning prompt waits for (the previous group's chunk step, a decode
    # step for the first group) + its own chunk step + the step its first token waits for
    # (TensorRT-LLM's overlap scheduler: the next group's chunk step, a decode step for the
    # last group): over the n groups 2 x ((n - 1) chunk + dec) / n + chunk; throughput = C x
    # 128 / period.
    job = _llama8b_job("trtllm", conc, max_num_tokens=8192)
    est = estimate(job, ServeLayout(instance=Instance()))
    cost = ServeCost(job, Instance())
    n, g = groups, conc / groups
    ctx = 1024 + 64
    dec = cost.interval(seqs=conc, ctx=ctx).total
    chunk = cost.prefill_time(g * 1024, span=512, seqs=g, decode_seqs=conc - g, decode_ctx=ctx)
    if conc > g:
        mix = cost.interval(
            seqs=conc - g, ctx=ctx, prefill=g * 1024, span=512, requests=g, eager=1.0
        ).total
    else:
        mix = chunk
    period = n * mix + (128 - n) * dec
    assert est.tpot_s == pytest.approx(((127 - (n - 1)) * dec + (n - 1) * mix) / 127)
    c = max(chunk, dec)
    assert est.ttft_s == pytest.approx(2 * ((n - 1) * c + dec) / n + c)
    assert est.output_tokens_per_s == pytest.approx(conc * 128 / period)
    assert est.e2e_s == pytest.approx(est.ttft_s + 127 * est.tpot_s)


def test_a_moe_decode_step_touches_the_experts_of_its_decode_tokens_not_of_the_mean_prompt():
    # A MoE of 128 experts, top-8, at 4 clients of 512/128 in one group: the averaged step of
    # before carried 4 x 512 / 128 = 16 prompt tokens, 20 tokens touching 1 - (1 - 8/128)^20
    # = 72 % of the experts; the pure decode steps (all 127 a request sits through, one
    # group: no other group's chunk step) touch 1 - (1 - 8/128)^4 = 23 %. Expert weight
    # stream = experts_w x touched share / bandwidth per MoE layer (the rest: attention and
    # output layer, the same in both; the routed activations of the T x 8 pairs, GELU:
    # 2 x (2 x 1,024 + 2 x 256) = 5,120 bytes a pair, grow with the step's tokens).
    m = ModelSpec(
        name="moe",
        num_layers=4,
        hidden_size=1024,
        ffn_hidden_size=4096,
        num_attention_heads=8,
        num_kv_heads=2,
        vocab_size=1000,
        num_experts=128,
        moe_top_k=8,
        moe_ffn_hidden_size=256,
    )
    job = ServeJob(
        m,
        _cal(H100),
        1,
        ServingSpec(
            precision="fp8", input_length=512, output_length=128, engine="trtllm", concurrency=4
        ),
    )
    est = estimate(job, ServeLayout(instance=Instance()))
    cost = ServeCost(job, Instance())
    bw = H100.hbm_bandwidth_gb_per_s * 1e9
    rest = (4 * cost.moe_w + cost.lm_w) / bw
    w4 = cost.stage(0, seqs=4, ctx=576).weights_s
    w20 = cost.stage(0, seqs=4, ctx=576, prefill=16, span=256).weights_s

    def routed(T):
        return 4 * T * 8 * 2 * (2 * 1024 + 2 * 256) / bw

    assert w4 - rest - routed(4) == pytest.approx(
        4 * cost.experts_w * (1 - (1 - 8 / 128) ** 4) / bw
    )
    assert w20 - rest - routed(20) == pytest.approx(
        4 * cost.experts_w * (1 - (1 - 8 / 128) ** 20) / bw
    )
    assert est.tpot_s == pytest.approx(cost.interval(seqs=4, ctx=576).total)


def test_closed_loop_sglang_prefills_first_and_the_burst_waits_for_its_chunks():
    # SGLang runs a waiting prompt as a prefill batch of its own, decodes paused: 64 clients of
    # 1024 tokens with chunks of 8192 are n = 8 groups of 8; each group waits for the chunks
    # before it, the mean over the groups (n + 1)/2 = 4.5 chunk times; the decode steps carry
    # no prompts, and the (n - 1)/2 chunks an early request sits through after its first
    # token spread over its 127 later tokens. The returning burst waits out the decode step
    # the overlap scheduler launched after its last one (turnaround_wait), and the overlap
    # scheduler sends the first token one decode step later (first_token_delay).
    job = _llama8b_job("sglang", 64, max_num_tokens=8192)
    est = estimate(job, ServeLayout(instance=Instance()))
    cost = ServeCost(job, Instance())
    decode = cost.interval(seqs=64, ctx=1024 + 64).total
    group = cost.prefill_time(8 * 1024, span=512, seqs=8)
    assert est.ttft_s == pytest.approx(decode + 4.5 * group + decode)
    assert est.tpot_s == pytest.approx(decode + 3.5 * group / 127)


@pytest.mark.parametrize(
    "engine, delay",
    [
        # TensorRT-LLM's PyTorch backend and SGLang overlap step n's host work with step n + 1
        # (on by default): a 12 ms step delays the first token by that step; vLLM's
        # --async-scheduling is opt-in: no delay
        pytest.param("trtllm", 0.012, id="trtllm-overlap"),
        pytest.param("sglang", 0.012, id="sglang-overlap"),
        pytest.param("vllm", 0.0, id="vllm-sync"),
    ],
)
def test_first_token_delay_is_one_step_with_an_overlap_scheduler(engine, delay):
    from planner.serve.estimate import first_token_delay

    assert first_token_delay(engine, 0.012) == pytest.approx(delay)


@pytest.mark.parametrize(
    "clients, slots, residence, wait",
    [
        pytest.param(8, 16, 10.0, 0.0, id="fewer-clients-than-slots"),
        pytest.param(16, 16, 10.0, 0.0, id="exactly-full"),
        # 32 clients, 16 slots held 10 s each: the engine finishes 1.6 requests/s, a client's
        # cycle is 32 / 1.6 = 20 s, 10 of it in service: 10 s waiting = (32 - 16) x 10 / 16
        pytest.param(32, 16, 10.0, 10.0, id="twice-the-slots"),
        # the Qwen3-32B FP4 GB200 run's figures: 144 clients, TPOT 48 ms over 999 tokens (a 48 s
        # residence): a 17.3 s wait would mean 144 x 48 / (48 + 17.3) = 106 requests running
        pytest.param(144, 106, 48.0, 38 * 48.0 / 106, id="144-over-106"),
    ],
)
def test_admission_wait_is_littles_law_over_the_slots(clients, slots, residence, wait):
    from planner.serve.estimate import admission_wait

    assert admission_wait(clients, slots, residence) == pytest.approx(wait)


def test_clients_beyond_the_engines_batch_wait_for_a_slot_in_ttft():
    # max_batch_size 8 and 24 clients: 8 run (TPOT, throughput at 8), 16 wait; each slot is
    # held for the e2e of a running request, so the wait is (24 - 8) / 8 = 2 e2e's
    running = estimate(_llama8b_job("vllm", 8, max_batch_size=8), ServeLayout(instance=Instance()))
    est = estimate(_llama8b_job("vllm", 24, max_batch_size=8), ServeLayout(instance=Instance()))
    assert est.concurrency == 8 and est.clients == 24
    assert est.tpot_s == pytest.approx(running.tpot_s)
    assert est.output_tokens_per_s == pytest.approx(running.output_tokens_per_s)
    assert est.queue_s == pytest.approx(2 * running.e2e_s)
    assert est.ttft_s == pytest.approx(running.ttft_s + 2 * running.e2e_s)
    assert est.e2e_s == pytest.approx(est.ttft_s + 127 * est.tpot_s)


def test_validate_reports_the_slot_wait_of_clients_beyond_the_batch(runner, tmp_path):
    # 600 clients, max_batch_size 128: exit 0 (a warning, not an error), the wait named
    from planner.cli import app

    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "model: llama3-8b\nhardware: h100-sxm\nnum_gpus: 1\nserving:\n"
        "  precision: fp8\n  input_length: 1024\n  output_length: 128\n"
        "  engine: vllm\n  concurrency: 600\n  max_batch_size: 128\n"
        "parallel:\n  tp: 1\n"
    )
    result = runner.invoke(app, ["validate", str(cfg)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # the console wraps long lines
    assert "concurrency-above-capacity" in out
    assert "600 clients: TTFT includes" in out and "of the 128 slots" in out


@pytest.mark.parametrize(
    "engine, seqs, prefill, graph",
    [
        pytest.param("vllm", 1, 0, True, id="vllm-decode-1"),
        pytest.param("vllm", 512, 0, True, id="vllm-decode-512"),
        pytest.param("vllm", 513, 0, False, id="vllm-decode-513"),
        pytest.param("vllm", 1, 256, False, id="vllm-mixed"),
        pytest.param("sglang", 256, 0, True, id="sglang-tp1-256"),  # H100: 256 below tp 4
        pytest.param("sglang", 257, 0, False, id="sglang-tp1-257"),
        pytest.param("trtllm", 128, 0, True, id="trtllm-128"),
        pytest.param("trtllm", 129, 0, False, id="trtllm-129"),
    ],
)
def test_decode_steps_within_the_engines_graph_batch_pay_the_graph_overhead(
    engine, seqs, prefill, graph
):
    # 32 layers x (graph 4 us | eager 40 us); the output layer's per-sequence cost is 0 here
    job = _llama8b_job(engine, 1)
    step = ServeCost(job, Instance()).stage(0, seqs=seqs, ctx=1024, prefill=prefill, span=128)
    assert step.overhead_s == pytest.approx(32 * (4 if graph else 40) * 1e-6)


# ------------------------------------------------------------------------------ accuracy


def _latency_rows():
    from benchmarks.serve_accuracy import evaluate, infeasible, load_latency_cases

    rows = evaluate(load_latency_cases())
    bad = {r["id"] for r in infeasible(rows)}
    return rows, bad


def _median(rows, cls, metric):
    import statistics

    return statistics.median(
        abs(r["error"]) for r in rows if r["class"] == cls and r["metric"] == metric
    )


def test_latency_accuracy_on_the_measured_runs():
    # inference-latency.yaml (AIConfigurator's silicon runs: vLLM, SGLang, TensorRT-LLM under
    # Dynamo) with each profile's serving_calibration (benchmarks/serve_calibrate.py) and the
    # engine limits AIC's generator wrote into the runs (serve_accuracy.aic_engine_limits).
    # The figures of docs/serving.md, as bars a regression crosses: aggregated TPOT median
    # 9.6 % (8.6 under the engines' default step budgets of 8,192 tokens, which the runs did
    # not have), TTFT median 18.7 % (26.6 before a lock-step group's wait counted the chunk
    # steps of the groups beside it, lockstep_ttft: TensorRT-LLM 41.8 -> 19.8 %, bias -35 ->
    # +0.5 %; 21.2 -> 21.0 % with a returning prompt's whole-step wait, turnaround_wait;
    # 18.7 % with the first wave refitted to W = 6.5; docs/serving.md), disaggregated TPOT
    # 40.8 % (48.6 before the decode batch the loop leaves, 39.8 before one prompt alone on an
    # attention-DP prefill rank, whose shorter TTFT leaves more requests on the decode
    # worker), TTFT 15.3 % (46.3 before the prefill workers' budget of one prompt, 22.1 before
    # one prompt alone on an attention-DP prefill rank routed its own tokens only, 19.4 before
    # the first token's wait on the decode worker, decode_first_token).
    # The one run planner calls infeasible cannot run as written: Qwen3-235B-A22B in FP8 is
    # 235 GB of weights, on one 141 GB H200.
    import math

    rows, bad = _latency_rows()
    assert len({r["id"] for r in rows}) == 36
    assert not any(math.isnan(r["error"]) for r in rows)
    assert len(bad) == 1 and "h200_sxm_vllm_agg_2000x100_c5_tp1" in next(iter(bad))
    rows = [r for r in rows if r["id"] not in bad]
    assert _median(rows, "serving-latency", "tpot_s") <= 0.10  # the issue's bar
    assert _median(rows, "serving-latency", "ttft_s") <= 0.20
    assert _median(rows, "disagg", "tpot_s") <= 0.41
    assert _median(rows, "disagg", "ttft_s") <= 0.16


def test_calibration_file_medians_stay_within_the_issues_bars():
    # issue 18: inference-calibration.yaml stays within offline 6.0 % and static 5.7 %.
    # Measured 5.7 % offline and 4.6 % static (6.3 % before the ROCm blog's offline MI300X
    # runs were read under the dev-docker throughput command, every prompt admitted, and
    # MI300X refitted on them: its static batches 7.9 -> 4.0 %, H100's 4.9 % unchanged;
    # docs/serving.md, "The ROCm blog's MI300X runs").
    from benchmarks.serve_accuracy import evaluate, load_cases

    rows = evaluate(load_cases())
    assert _median(rows, "offline-throughput", "output_tokens_per_s") <= 0.060
    assert _median(rows, "static-latency", "e2e_s") <= 0.057


@pytest.mark.xfail(
    strict=True,
    reason="measured 59.6 %: Qwen3-32B BF16 on 2 GB200 at 32 clients a replica (TPOT 38 ms where the "
    "same deployment at 1 client measured 8.1 ms; no step mechanism explains it, "
    "docs/serving.md), and the GB200 FP4 run at 144 clients -35 %",
)
def test_latency_tpot_max_meets_the_issues_bar():
    rows, bad = _latency_rows()
    agg = [r for r in rows if r["class"] == "serving-latency" and r["id"] not in bad]
    assert max(abs(r["error"]) for r in agg if r["metric"] == "tpot_s") <= 0.30


def test_latency_ttft_median_meets_the_issues_bar():
    # measured 18.7 % (vLLM 17.4 %, TensorRT-LLM 19.8 %, SGLang 22.3 %) with the first wave at
    # the refitted W = 6.5 requests per client (serve_accuracy.AIC_REQUESTS_PER_CLIENT,
    # serve_arrivals.py --fit) and a returning prompt's whole-step wait (turnaround_wait);
    # 21.0 % at the W = 6 fitted before lockstep_ttft. The median of 32 sits between runs
    # near 20 %: a regression of one run crosses it.
    rows, bad = _latency_rows()
    rows = [r for r in rows if r["id"] not in bad]
    assert _median(rows, "serving-latency", "ttft_s") <= 0.20


@pytest.mark.xfail(
    strict=True,
    reason="measured TPOT 40.8 % on 3 runs whose worker counts the collection guessed "
    "('often blank in source'): vLLM's decode workers ran at 25-43 us a layer beyond their "
    "HBM-bound bytes where the same engine on the same GPU aggregated ran at 80-92 us "
    "(Qwen3-32B at 107 requests: 8.75 ms, 1.22 x its pure HBM bound), SGLang's at 2.1 x its "
    "FP8 weight stream (docs/serving.md)",
)
def test_disaggregated_tpot_meets_the_issues_bar():
    rows, bad = _latency_rows()
    assert _median(rows, "disagg", "tpot_s") <= 0.10


def test_disaggregated_ttft_median_meets_the_issues_bar():
    # measured 15.3 % (vLLM's Qwen3-235B -15.3 %, Qwen3-32B -10.9 %, SGLang's Qwen3-32B
    # -50.4 %) with one prompt alone on an attention-DP prefill rank routing its own tokens
    # (prefill_pool, ranks = 1; 22.1 % before) and the first token's wait on the decode
    # worker (decode_first_token; 19.4 % before). The median of 3 is one run's error.
    rows, bad = _latency_rows()
    assert _median(rows, "disagg", "ttft_s") <= 0.20


@pytest.mark.parametrize(
    "n, delay_steps, ttft",
    [
        # 4 lock-step groups, chunk steps of 50 ms back to back, decode steps of 10 ms, with
        # the overlap scheduler: group 1 waits for a decode step (10), its chunk (50), then the
        # step its first token waits for, group 2's chunk (50): 110 ms; groups 2 and 3 sit
        # between two other chunks: 50 + 50 + 50 = 150; group 4 has group 3's chunk before and
        # a decode step after: 110. Mean (110 + 150 + 150 + 110) / 4 = 130 ms.
        pytest.param(4, 1, 0.130, id="four-groups-overlap"),
        # without the overlap scheduler, no step after: 60, 100, 100, 100 -> 90 ms
        pytest.param(4, 0, 0.090, id="four-groups"),
        # one group alone: a decode step, its chunk, a decode step: 70 ms
        pytest.param(1, 1, 0.070, id="one-group"),
    ],
)
def test_lockstep_ttft_counts_the_neighbouring_groups_chunk_steps(n, delay_steps, ttft):
    from planner.serve.estimate import lockstep_ttft

    assert lockstep_ttft(n, 0.050, 0.010, delay_steps) == pytest.approx(ttft)


@pytest.mark.parametrize(
    "others, step, cycle, k",
    [
        # 10 other clients, a 10 ms step, a 1 s cycle: each sends one request per second, so one
        # falls in a given 10 ms window with probability 0.01: 10 x 0.01 = 0.1 of them
        pytest.param(10, 0.010, 1.0, 0.1, id="ten-others"),
        pytest.param(0, 0.010, 1.0, 0.0, id="alone"),
        # a step as long as the cycle: every other client's request falls in it, not more
        pytest.param(3, 2.0, 1.0, 3.0, id="capped-at-the-others"),
    ],
)
def test_arrivals_in_step_is_littles_law_per_client(others, step, cycle, k):
    from planner.serve.estimate import arrivals_in_step

    assert arrivals_in_step(others, step, cycle) == pytest.approx(k)


@pytest.mark.parametrize(
    "clients, overlap, wait",
    [
        # other clients decode: the step started while this client turned around runs whole
        pytest.param(8, False, 0.010, id="others-running"),
        pytest.param(2, False, 0.010, id="one-other"),
        # alone, no overlap scheduler (vLLM): the engine is idle, the prompt goes at once
        pytest.param(1, False, 0.0, id="alone"),
        # alone with an overlap scheduler: the step after its last was already launched
        pytest.param(1, True, 0.010, id="alone-overlap"),
    ],
)
def test_turnaround_wait_is_the_whole_step_the_engine_started(clients, overlap, wait):
    from planner.serve.estimate import turnaround_wait

    assert turnaround_wait(0.010, clients, overlap=overlap) == pytest.approx(wait)


def test_independent_ttft_solves_the_fixed_point_by_hand():
    # 11 clients out of step, a 10 ms mean step, a chunk step of 30 ms per prompt, 1 s of
    # decode after the first token, no overlap delay; the prompt waits out the whole step
    # that started while its client turned around (turnaround_wait: 10 ms):
    #   x = TTFT = 0.010 + 0.030 (1 + k),  k = 10 x 0.010 / (x + 1)
    #   => x = 0.040 + 0.003 / (x + 1) => x^2 + x - 0.040 x - 0.040 - 0.003 = 0
    #   => x^2 + 0.960 x - 0.043 = 0
    #   => x = (-0.960 + sqrt(0.960^2 + 4 x 0.043)) / 2 = 0.0428767 s, k = 0.1 / 1.0428767
    from planner.serve.estimate import independent_ttft

    ttft, k = independent_ttft(0.010, lambda p: 0.030 * p, clients=11, decode_s=1.0)
    x = (-0.960 + (0.960**2 + 4 * 0.043) ** 0.5) / 2
    assert ttft == pytest.approx(x, rel=1e-6)
    assert k == pytest.approx(0.1 / (1 + x), rel=1e-6)
    # one client: nobody to share a step with and an idle engine, TTFT = its own chunk +
    # delay; with an overlap scheduler it first waits out the step launched after its last
    ttft, k = independent_ttft(0.010, lambda p: 0.030 * p, clients=1, decode_s=1.0, delay_s=0.010)
    assert (ttft, k) == (pytest.approx(0.040), 0.0)
    ttft, _ = independent_ttft(
        0.010, lambda p: 0.030 * p, clients=1, decode_s=1.0, delay_s=0.010, overlap=True
    )
    assert ttft == pytest.approx(0.050)


def test_first_wave_is_the_mean_over_the_bursts_chunk_steps():
    # 64 clients of 1,024 tokens start together at an idle engine with a budget of 8,192:
    # 8 chunk steps of 8 prompts, group i served after i of them: (1 + ... + 8) / 8 = 4.5
    # steps of 0.2 s = 0.9 s, + a 20 ms overlap delay
    from planner.serve.estimate import first_wave_ttft

    assert first_wave_ttft(8, 0.2, 0.020) == pytest.approx(0.92)
    assert first_wave_ttft(1, 0.2) == pytest.approx(0.2)  # one group: one step


@pytest.mark.parametrize(
    "steady, wave, per_client, ttft",
    [
        # a run of 6 requests per client: 1/6 of its TTFTs are the first wave's
        # 0.1 + (0.7 - 0.1) / 6 = 0.2 s
        pytest.param(0.1, 0.7, 6.0, 0.2, id="six-waves"),
        pytest.param(0.1, 0.7, 1.0, 0.7, id="only-the-first-wave"),
        pytest.param(0.1, 0.7, None, 0.1, id="a-server-steady-state"),
        # a wave no slower than the steady state (one group) adds nothing
        pytest.param(0.3, 0.2, 6.0, 0.3, id="wave-faster"),
    ],
)
def test_with_first_wave_weighs_the_wave_by_its_share_of_the_run(steady, wave, per_client, ttft):
    from planner.serve.estimate import with_first_wave

    assert with_first_wave(steady, wave, per_client) == pytest.approx(ttft)


def test_vllm_clients_out_of_step_and_the_first_wave_compose_in_ttft():
    # vLLM (INDEPENDENT_ARRIVALS): 8 clients of 1,024/128; the steady state is independent_ttft
    # over the pure decode step t (C = 8) with chunk steps of p prompts beside the 8 - p
    # others decoding; the first wave is 8 x 1,024 = 8,192 tokens, one chunk step (n = 1);
    # with 6 requests per client TTFT = steady + (wave - steady) / 6. vLLM has no overlap
    # delay (its --async-scheduling is opt-in).
    from planner.serve.estimate import first_wave_ttft, independent_ttft

    steady_job = _llama8b_job("vllm", 8, max_num_tokens=8192)
    est = estimate(steady_job, ServeLayout(instance=Instance()))
    cost = ServeCost(steady_job, Instance())
    ctx = 1024 + 64
    t = cost.interval(seqs=8, ctx=ctx).total

    def chunk(p):
        return max(
            t, cost.prefill_time(p * 1024, span=512, seqs=p, decode_seqs=8 - p, decode_ctx=ctx)
        )

    steady, _ = independent_ttft(t, chunk, clients=8, decode_s=127 * est.tpot_s)
    assert est.ttft_s == pytest.approx(steady)
    wave = first_wave_ttft(1, cost.prefill_time(8 * 1024, span=512, seqs=8))
    run = estimate(
        _llama8b_job("vllm", 8, max_num_tokens=8192, requests_per_client=6),
        ServeLayout(instance=Instance()),
    )
    assert run.ttft_s == pytest.approx(steady + (wave - steady) / 6)
    assert run.tpot_s == pytest.approx(est.tpot_s)  # TPOT does not move


@pytest.mark.parametrize(
    "h, f_e, gated, expected",
    [
        # permute writes h, the activation reads 2 f_e (gated) or f_e and writes f_e, the
        # combine reads h, 2 bytes each: Qwen3-235B's expert (h 4096, f_e 1536, SwiGLU)
        pytest.param(4096, 1536, True, 2 * (2 * 4096 + 3 * 1536), id="qwen3-235b"),  # 25,600
        pytest.param(64, 32, True, 448, id="tiny-swiglu"),
        pytest.param(1024, 256, False, 2 * (2 * 1024 + 2 * 256), id="gelu"),  # 5,120
        # DeepSeek-V3's expert TP-split over 8 GPUs: f_e 2048 / 8
        pytest.param(7168, 256, True, 2 * (2 * 7168 + 3 * 256), id="deepseek-v3-etp8"),
    ],
)
def test_routed_activation_bytes_per_token_expert_pair(h, f_e, gated, expected):
    from planner.serve.time import routed_activation_bytes

    assert routed_activation_bytes(h, f_e, gated) == pytest.approx(expected)


@pytest.mark.parametrize("us", [0.0, 25.0, 80.0])
def test_moe_layers_pay_their_fixed_cost_per_step_dense_layers_do_not(us):
    # TINY_MOE has 2 MoE layers: the step's fixed cost grows by 2 x moe_layer_overhead_us, in
    # a CUDA-graph decode step and an eager chunk step alike; a dense model pays none of it
    base = ServeCost(_job(ModelSpec(**TINY_MOE), _cal(H100)), Instance())
    moe = ServeCost(_job(ModelSpec(**TINY_MOE), _cal(H100, moe_layer_overhead_us=us)), Instance())
    for kw in (dict(seqs=4, ctx=128), dict(seqs=4, ctx=128, prefill=256, span=128)):
        extra = moe.stage(0, **kw).overhead_s - base.stage(0, **kw).overhead_s
        assert extra == pytest.approx(2 * us * 1e-6)
    dense = {
        k: v
        for k, v in TINY_MOE.items()
        if k not in ("num_experts", "moe_top_k", "moe_ffn_hidden_size", "num_shared_experts")
    }
    d0 = ServeCost(_job(ModelSpec(**dense), _cal(H100)), Instance()).stage(0, seqs=4, ctx=128)
    d1 = ServeCost(
        _job(ModelSpec(**dense), _cal(H100, moe_layer_overhead_us=us)), Instance()
    ).stage(0, seqs=4, ctx=128)
    assert d1.overhead_s == d0.overhead_s


@pytest.mark.parametrize(
    "norm, expected",
    [
        # two runs of one class outside the soft bar's classes, errors +10 % and -50 %:
        # l2 averages the squared log errors, l1 the absolute ones; a run 5-fold off counts
        # as e-fold (1) either way
        pytest.param("l2", (0.0953102**2 + 0.6931472**2 + 1.0) / 3, id="l2"),
        pytest.param("l1", (0.0953102 + 0.6931472 + 1.0) / 3, id="l1"),
    ],
)
def test_serving_loss_norms(norm, expected):
    from planner.serve.calibrate import rows_loss

    rows = [
        {"id": "a", "class": "serving-latency", "metric": "tpot_s", "error": 0.1},
        {"id": "b", "class": "serving-latency", "metric": "tpot_s", "error": -0.5},
        {"id": "c", "class": "serving-latency", "metric": "tpot_s", "error": 4.0},
    ]
    assert rows_loss(rows, "run", (), norm) == pytest.approx(expected, rel=1e-6)


# ------------------------------------------------------------------ disaggregated closed loop


@pytest.mark.parametrize(
    "clients, ttft, decode, batch",
    [
        # 10 clients, 1 s of TTFT and 9 s of decode per cycle: each is on the decode worker 9/10
        # of its cycle, so the worker holds 10 x 9 / (1 + 9) = 9 of them (Little's law)
        pytest.param(10, 1.0, 9.0, 9.0, id="nine-of-ten"),
        # TTFT as long as the decode: half of them are in prefill at any time
        pytest.param(48, 2.0, 2.0, 24.0, id="half"),
        pytest.param(8, 0.0, 5.0, 8.0, id="no-prefill-time"),
        pytest.param(8, 1.0, 0.0, 8.0, id="one-token-output"),  # nothing to decode: clients kept
    ],
)
def test_decode_batch_reached_is_littles_law_over_the_loop(clients, ttft, decode, batch):
    from planner.serve.estimate import decode_batch_reached

    assert decode_batch_reached(clients, ttft, decode) == pytest.approx(batch)


def test_a_disaggregated_decode_worker_runs_the_batch_its_clients_leave_it():
    # Llama 3 8B FP8, ISL 1,024 OSL 128 on H100s: one prefill worker (tp 1) and one decode
    # worker (tp 1), 32 clients. The estimate's decode step is decode_pool's at the batch
    # b = 32 D / (TTFT + D), D = 127 TPOT, solved together with TTFT and TPOT: at the fixed
    # point b, TPOT and TTFT satisfy that equation, and the step is the pool's at b.
    from planner.serve.estimate import decode_pool

    job = _llama8b_job("vllm", 32)
    lay = ServeLayout(prefill=Instance(), decode=Instance(), prefill_workers=1, decode_workers=1)
    est = estimate(job, lay)
    d = 127 * est.tpot_s
    b = 32 * d / (est.ttft_s + d)
    assert 1 < b < 32 and est.concurrency == 32
    step, per = decode_pool(job, ServeCost(job, Instance()), b)
    assert est.tpot_s == pytest.approx(step.total / per, rel=1e-5)
    # the same deployment with every client counted as decoding is slower per token
    all_in = decode_pool(job, ServeCost(job, Instance()), 32)
    assert est.tpot_s < all_in[0].total / all_in[1]


@pytest.mark.parametrize(
    "engine, step, kv, wait",
    [
        # vLLM: the request reaches the decode worker mid-step, 5 ms to the next boundary; the
        # NixlConnector's load (4 ms) ends within the next 10 ms step, reported in its output;
        # the step after recomputes the last prompt token and samples the first: 5 + 10 + 10
        pytest.param("vllm", 0.010, 0.004, 0.025, id="vllm-load-within-a-step"),
        # a 30 ms load spans three steps' worth; reported with the step it ends in: 5 + 30 + 10
        pytest.param("vllm", 0.010, 0.030, 0.045, id="vllm-load-longer-than-a-step"),
        # SGLang streams the prefill worker's token once the KV is in: 5 + 4
        pytest.param("sglang", 0.010, 0.004, 0.009, id="sglang-prebuilt"),
        pytest.param("trtllm", 0.010, 0.004, 0.009, id="trtllm-context-token"),
    ],
)
def test_decode_first_token_is_the_boundary_the_transfer_and_vllms_recompute(
    engine, step, kv, wait
):
    from planner.serve.estimate import decode_first_token

    assert decode_first_token(engine, step, kv) == pytest.approx(wait)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_disaggregated_ttft_ends_when_the_decode_worker_streams_the_first_token(engine):
    # Llama 3 8B FP8, one prefill and one decode worker (tp 1), 32 clients: TTFT = the prefill
    # worker's prompt at its load u + decode_first_token at the decode worker's step (the
    # pool's at the batch the loop leaves) and the KV transfer; u = the decode pool's request
    # rate over the prefill pool's, both at that batch (disaggregated's docstring).
    from planner.serve.estimate import decode_first_token, decode_pool, prefill_pool
    from planner.serve.time import kv_transfer_time

    job = _llama8b_job(engine, 32)
    lay = ServeLayout(prefill=Instance(), decode=Instance(), prefill_workers=1, decode_workers=1)
    est = estimate(job, lay)
    one, rate, chunk_s = prefill_pool(job, ServeCost(job, Instance()))
    d = 127 * est.tpot_s
    b = 32 * d / (est.ttft_s + d)
    step, per = decode_pool(job, ServeCost(job, Instance()), b)
    u = min(1.0, b / (step.total / per) / 128 / rate)
    kv = kv_transfer_time(job, lay, tokens=1024)
    first = decode_first_token(engine, step.total, kv)
    assert est.ttft_s == pytest.approx(one + u * (chunk_s - one) + first, rel=1e-4)
    assert first >= step.total / 2 + kv


@pytest.mark.parametrize(
    "parallel, conc, isl, expected, engine",
    [
        # aggregated, 64 clients over 2 replicas: a batch of 32 per instance, and a step budget
        # of the 32 decode tokens + one 2,000-token prompt + AIC's 1,500 tokens of slack
        pytest.param(
            {"tp": 2, "replicas": 2},
            64,
            2000,
            (32, 32 + 2000 + 1500),
            "trtllm",
            id="agg-two-replicas",
        ),
        pytest.param({"tp": 1}, 8, 1024, (8, 8 + 1024 + 1500), "vllm", id="agg-one"),
        # SGLang: max_prefill_tokens = ISL + 1500, its prefill batch (decodes run apart)
        pytest.param({"tp": 1}, 8, 1024, (8, 1024 + 1500), "sglang", id="agg-sglang"),
        # disaggregated, 224 clients over 2 decode workers: 112 each; the prefill workers'
        # budget is one 4,000-token prompt + 1,500 (their batch of one prompt a step)
        pytest.param(
            {"prefill": {"tp": 1, "workers": 8}, "decode": {"tp": 4, "workers": 2}},
            224,
            4000,
            (112, 4000 + 1500),
            "vllm",
            id="disagg",
        ),
    ],
)
def test_the_harness_gives_aic_runs_the_limits_aics_generator_writes(
    parallel, conc, isl, expected, engine
):
    # ai-dynamo/aiconfigurator generator/rule_plugin/benchmark/trtllm.rule (and vllm.rule):
    # `agg max_num_tokens = max_batch_size + SlaConfig.isl + 1500`, `prefill max_num_tokens =
    # SlaConfig.isl + 1500`, concurrency = workers x max_batch_size; sglang.rule
    # `max_prefill_tokens = SlaConfig.isl + 1500`
    from benchmarks.serve_accuracy import harness

    case = {
        "class": "disagg" if "decode" in parallel else "serving-latency",
        "model": "llama3-8b",
        "hardware": "h100-sxm",
        "num_gpus": 16,
        "serving": {
            "engine": engine,
            "precision": "fp8",
            "input_length": isl,
            "output_length": 128,
            "concurrency": conc,
        },
        "parallel": parallel,
        "notes": "",
    }
    sv = harness(case)["serving"]
    assert (sv["max_batch_size"], sv["max_num_tokens"]) == expected


def test_sglang_without_chunking_prefills_whole_prompts_up_to_the_budget():
    # SGLang with --chunked-prefill-size -1 (serving.chunked_prefill false) fills a prefill
    # batch with whole prompts up to --max-prefill-tokens: 64 clients of 1,024 tokens in a
    # budget of 3,000 are floor(3000 / 1024) = 2 prompts a batch, n = 32 batches (chunked:
    # ceil(64 x 1024 / 3000) = 22 of 2.9 prompts); then the prefill-first formula of the test
    # above: TTFT = decode + (n + 1)/2 batches + decode, TPOT = decode + (n - 1)/2 batches / 127
    job = _llama8b_job("sglang", 64, max_num_tokens=3000, chunked_prefill=False)
    est = estimate(job, ServeLayout(instance=Instance()))
    cost = ServeCost(job, Instance())
    decode = cost.interval(seqs=64, ctx=1024 + 64).total
    group = cost.prefill_time(2 * 1024, span=512, seqs=2)
    assert est.ttft_s == pytest.approx(decode + 33 / 2 * group + decode)
    assert est.tpot_s == pytest.approx(decode + 31 / 2 * group / 127)
    split = estimate(
        _llama8b_job("sglang", 64, max_num_tokens=3000), ServeLayout(instance=Instance())
    )
    assert split.ttft_s != pytest.approx(est.ttft_s)


def _export_read_back(runner, tmp_path, engine, **sv):
    import json

    from planner.cli import app
    from planner.frameworks.engines.writer import export
    from planner.frameworks.loading import load_any

    job = _llama8b_job(engine, 16, **sv)
    layout = ServeLayout(instance=Instance())
    text = export(job, layout, engine, estimate=estimate(job, layout))
    path = tmp_path / f"{engine}.sh"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["valid"] is True
    return text, load_any(path)


@pytest.mark.parametrize(
    "engine, flag",
    [
        # vLLM's boolean flag (its SchedulerConfig keeps a prompt whole without it: a waiting
        # request whose tokens pass the step budget is skipped, not split)
        pytest.param("vllm", "--no-enable-chunked-prefill", id="vllm"),
        # SGLang: -1 turns chunking off, the budget is then --max-prefill-tokens
        pytest.param(
            "sglang", "--chunked-prefill-size -1 \\\n  --max-prefill-tokens 8192", id="sglang"
        ),
        # TensorRT-LLM: the LLM API's enable_chunked_prefill in the options file
        pytest.param("trtllm", "enable_chunked_prefill: false", id="trtllm"),
    ],
)
def test_chunked_prefill_off_is_exported_and_read_back(runner, tmp_path, engine, flag):
    text, got = _export_read_back(
        runner, tmp_path, engine, chunked_prefill=False, max_num_tokens=8192
    )
    assert flag in text
    assert got.job.serving.chunked_prefill is False
    assert got.job.serving.max_num_tokens == 8192
    assert not [v for v in got.violations if "chunked" in v.message or "prefill" in v.message]


def test_trtllm_export_says_chunked_prefill_where_the_estimate_split_prompts(runner, tmp_path):
    # unset, planner's estimate splits prompts at max_num_tokens; TensorRT-LLM's own default is
    # enable_chunked_prefill false, so the export turns it on to run what was estimated
    text, got = _export_read_back(runner, tmp_path, "trtllm")
    assert "enable_chunked_prefill: true" in text
    assert got.job.serving.chunked_prefill is True


def test_vllm_without_chunking_needs_a_step_budget_of_the_model_length():
    # vLLM's SchedulerConfig refuses max_num_batched_tokens < max_model_len with chunked
    # prefill off: 1,024 + 128 = 1,152 tokens against a budget of 1,000
    from planner.errors import InfeasibleError
    from planner.frameworks.engines.writer import export

    job = _llama8b_job("vllm", 16, chunked_prefill=False, max_num_tokens=1000)
    with pytest.raises(InfeasibleError, match="max-num-batched-tokens.*1152"):
        export(job, ServeLayout(instance=Instance()), "vllm")


@pytest.mark.parametrize(
    "chunk, max_prefill, chunked, want",
    [
        # a prefill batch is bounded by both --chunked-prefill-size and --max-prefill-tokens
        pytest.param(8192, 4096, None, {"max_num_tokens": 4096}, id="the-smaller"),
        pytest.param(8192, None, None, {"max_num_tokens": 8192}, id="chunk-only"),
        # chunking off: whole prompts up to --max-prefill-tokens, 16,384 unless given
        pytest.param(None, None, False, {"max_num_tokens": 16384}, id="off-default"),
        pytest.param(None, 32768, False, {"max_num_tokens": 32768}, id="off-given"),
        # --max-prefill-tokens alone: the engine's chunk size stands (and a warning says so)
        pytest.param(None, 4096, None, {}, id="max-prefill-alone"),
    ],
)
def test_sglang_step_budget_from_its_two_flags(chunk, max_prefill, chunked, want):
    from planner.frameworks.engines.reader import _sglang_budget

    assert _sglang_budget(chunk, max_prefill, chunked) == want


def test_sglang_max_prefill_tokens_alone_is_a_warning(tmp_path):
    from planner.frameworks.loading import load_any

    path = tmp_path / "sglang.sh"
    path.write_text(
        "# planner serve: model=llama3-8b hardware=h100-sxm isl=1024 osl=128\n"
        "python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B-Instruct "
        "--max-prefill-tokens 4096\n"
    )
    got = load_any(path)
    assert got.job.serving.max_num_tokens is None
    assert [v.rule for v in got.violations] == ["sglang-max-prefill-not-modelled"]


def test_each_transcription_replaces_a_value_its_own_case_contradicts():
    # benchmarks/data/corrections.yaml `transcriptions`: a value the collection copied wrong,
    # replaced with what the case itself says; the file stays as collected
    import re
    from pathlib import Path

    import yaml

    from benchmarks.accuracy import corrected, transcriptions
    from benchmarks.serve_accuracy import LATENCY

    cases = {c["id"]: c for c in yaml.safe_load(Path(LATENCY).read_text())["cases"]}
    fixes = transcriptions()
    assert fixes
    for cid, fix in fixes.items():
        assert cid in cases and fix["source"] and fix["why"]
        for dotted, value in fix["set"].items():
            section, key = dotted.split(".", 1)
            assert cases[cid][section][key] != value  # a value replaced, not a gap filled
            assert corrected(cases[cid], fix)[section][key] == value
            assert cases[cid][section][key] != value  # the collected case is untouched
    # the AIConfigurator row ids carry the deployment's concurrency (..._c64_...): with the
    # transcriptions, every case that has one in its id has it as its concurrency
    with_id = 0
    for cid, case in cases.items():
        m = re.search(r"_c(\d+)_", cid)
        if m:
            with_id += 1
            conc = corrected(case, fixes.get(cid))["serving"]["concurrency"]
            assert conc == int(m.group(1)), cid
    assert with_id >= 30

"""The bytes each production-recipe setting changes, counted by hand on models small enough to
list every tensor (each setting's byte counts derived from first principles, tensor by
tensor).

Each test compares two estimates that differ in one setting only and asserts the difference
that the derivation in its comments gives. The derivations follow Megatron-Core with
Transformer Engine (the TE layer spec that every recipe uses), Korthikanti et al. 2022
(arXiv:2205.05198) Table 2 for what a layer keeps for its backward pass, and Megatron's
`--recompute-modules` semantics (megatron/core/transformer/transformer_layer.py, moe_layer.py,
experts.py, multi_latent_attention.py). Where the model's bytes differ from that count, the test
keeps the derived number and is marked xfail(strict=True) with the reason: the derivation is
the specification and memory.py is what needs to change.

The counting rules, applied the same way in every test:
- bf16 activations (2 B an element), flash attention, dropout 0, tp = cp = 1, no sequence
  parallelism, so "per token" means per token of one micro-batch.
- A tensor saved by several ops is counted once (they share its storage).
- Per-token norm statistics (RMSNorm's fp32 rstd, 4 B a token per norm) are left out of both the
  model's count and ours: the model counts none of them anywhere (they are 0.3% of this model's
  layer and 0.01% of an h = 4096 one).
- The fp32 logits (4V per token) and the router state (8E per token) are taken as the model
  counts them: no setting here changes how they are stored.
- Model states: the distributed optimizer (zero 1) over dp = 8 ranks. Megatron pads its
  buffers to a multiple of lcm(dp, 128) elements; the model does not count that padding and
  neither do we (at most 127 elements per bucket).

The dense model (Llama-shaped: SwiGLU, RMSNorm, RoPE, GQA, no biases, untied embeddings):
L = 2 layers, h = 64, f = 256, a = 4 query heads, g = 2 KV heads, d = h/a = 16, V = 1024,
sequence 256. V is large on purpose: the loss backward frees the fp32 logits (4V = 4 KiB a
token) before any layer recomputes, and 4V exceeds what any recompute regenerates on this
model, so on a single-stage pipeline the peak is the end of the forward pass and the difference
of two estimates is exactly the stored bytes a setting adds or frees.
"""

from __future__ import annotations

import pytest

from planner.config import config_from_data
from planner.cost import cost_model, estimate

# ------------------------------------------------------------------------- the dense model

L, H, F, A, G, D, V = 2, 64, 256, 4, 2, 16, 1024
S = 256  # tokens per micro-batch (seq 256 x micro-batch 1)
DP = 8  # data-parallel ranks (8 GPUs, tp = pp = cp = 1)
DENSE = dict(
    name="tiny",
    num_layers=L,
    hidden_size=H,
    ffn_hidden_size=F,
    num_attention_heads=A,
    num_kv_heads=G,
    vocab_size=V,
    activation="swiglu",
)

# Parameters of one layer.
QKV_W = H * (A * D + 2 * G * D)  # linear_qkv: 64 x (64 + 2*2*16) = 64 x 128 = 8,192
PROJ_W = A * D * H  # linear_proj: 64 x 64 = 4,096
FC1_W = H * 2 * F  # linear_fc1 (gate and up): 64 x 512 = 32,768
FC2_W = F * H  # linear_fc2: 256 x 64 = 16,384
NORM_W = 2 * H  # the two RMSNorm weights (fused into linear_qkv, linear_fc1)
LINEAR_PER_LAYER = QKV_W + PROJ_W + FC1_W + FC2_W  # 61,440: what FP8 quantizes
LAYER_PARAMS = LINEAR_PER_LAYER + NORM_W  # 61,568
EMBED = V * H  # 65,536 (1024 is a multiple of 128*tp: no vocabulary padding)
OUTPUT = V * H  # 65,536 (untied output layer)
FINAL_NORM = H  # 64
PARAMS = L * LAYER_PARAMS + EMBED + OUTPUT + FINAL_NORM  # 254,272 on the one pipeline stage
LINEAR = L * LINEAR_PER_LAYER  # 122,880

# Bytes one layer keeps for its backward pass, per token (Korthikanti Table 2 re-derived for
# the TE layer spec: its 34sbh with dropout masks gone, flash attention instead of the s x s
# scores, GQA, a gated MLP, and the norms fused into the next GEMM).
RESIDUAL_IN = 2 * H  # layer input: the input norm (in TELayerNormColumnParallelLinear) keeps it
QKV_NORM_OUT = 2 * H  # its output, linear_qkv's GEMM input (for the weight gradient)
QKV = 2 * (A * D + 2 * G * D)  # Q, K, V after RoPE, kept by flash attention: 2 x 128 = 256
ATTN_OUT = 2 * A * D  # flash attention's output O = linear_proj's input (one tensor) = 128
LSE = 4 * A  # flash attention's softmax log-sum-exp, fp32 per head = 16
RESIDUAL_MID = 2 * H  # x + attention: the pre-MLP norm (in linear_fc1) keeps it
MLP_NORM_OUT = 2 * H  # its output, fc1's GEMM input
FC1_OUT = 2 * 2 * F  # gate and up outputs, kept by SwiGLU's backward = 1,024
ACT_OUT = 2 * F  # SwiGLU output, fc2's GEMM input = 512
LAYER = (
    RESIDUAL_IN
    + QKV_NORM_OUT
    + QKV
    + ATTN_OUT
    + LSE
    + RESIDUAL_MID
    + MLP_NORM_OUT
    + FC1_OUT
    + ACT_OUT
)  # 2,448 bytes per token
LOGITS = 4 * V + 2 * H  # last stage: fp32 logits + the final norm's output = 4,224


def _job_layout(model=None, *, num_gpus=DP, hardware="h100-sxm", training=None, **parallel):
    data = dict(
        model=model or DENSE,
        hardware=hardware,
        num_gpus=num_gpus,
        training=dict(dict(seq_length=S, global_batch_size=4 * DP), **(training or {})),
        parallel=dict(dict(micro_batch_size=1, vpp=1), **parallel),
    )
    return config_from_data(data)


def _memory(model=None, **kw):
    """The most loaded rank's MemoryBreakdown (`planner.cost.estimate(job, layout).memory`)."""
    job, layout = _job_layout(model, **kw)
    return estimate(job, layout).memory


def _ranks(model=None, **kw):
    """Every pipeline rank's MemoryBreakdown, rank 0 first."""
    job, layout = _job_layout(model, **kw)
    return cost_model(job).memory_by_rank(layout)


def _only(before, after, field: str, expected: float):
    """`after` - `before` is `expected` bytes in `field` and nothing in the other tensors."""
    for name in ("weights", "gradients", "optimizer", "activations"):
        got = getattr(after, name) - getattr(before, name)
        want = expected if name == field else 0.0
        assert got == pytest.approx(want, rel=1e-12, abs=1e-6), name


def test_the_dense_model_is_counted_as_derived():
    # Not a setting: the baseline every test below differs from, counted the same way.
    m = _memory()
    assert m.weights == 2 * PARAMS  # bf16 parameters
    assert m.gradients == 4 * PARAMS  # fp32 main-gradient buffer
    assert m.optimizer == pytest.approx(12 * PARAMS / DP)  # fp32 master + Adam m, v; sharded
    # pp 1: one micro-batch in flight, both layers and the loss on this rank
    assert m.activations == S * (L * LAYER + LOGITS)


# ------------------------------------------------------------------------- the loss


def test_torchtitans_eager_loss_holds_three_fp32_logits_buffers():
    # torchtitan's loss is cross_entropy(pred.flatten(0, 1).float(), labels) in eager mode
    # (torchtitan/components/loss.py). Forward: the fp32 copy of the bf16 logits (4V a token)
    # is freed once log_softmax has written its fp32 output (4V, saved for backward). At the
    # start of backward nll_loss's fp32 gradient (4V) and log_softmax's fp32 input gradient
    # (4V) are alive beside that saved output: 12V a token. Megatron's vocab-parallel loss
    # (fused or not) works in place on its one fp32 copy: 4V. The peak is on the last stage
    # at the end of the forward pass (nothing recomputes), so the difference is (12 - 4)V per
    # token of the micro-batch, in the activations only.
    before = _memory()
    after = _memory(training=dict(cross_entropy="pytorch_fp32"))
    _only(before, after, "activations", S * (12 - 4) * V)  # 2,097,152 bytes
    assert after.activations == S * (L * LAYER + 12 * V + 2 * H)


def test_a_gathered_loss_holds_the_whole_vocabulary_on_every_tp_rank():
    # tp 2 with sequence parallelism: the output layer's logits are split over the vocabulary
    # (V/2 = 512 entries a rank for every token of the micro-batch). torchtitan's
    # disable_loss_parallel gathers them first: each rank holds all V. The loss's 12 B per
    # entry then cover V instead of V/2: 12 * S * V/2 more bytes, nothing else changes.
    # (V = 1024 is a multiple of 128 * tp: no vocabulary padding.)
    tt = dict(cross_entropy="pytorch_fp32")
    before = _memory(num_gpus=DP, tp=2, training=dict(tt, loss_parallel=True))
    after = _memory(num_gpus=DP, tp=2, training=dict(tt, loss_parallel=False))
    _only(before, after, "activations", 12 * S * (V - V // 2))  # 1,572,864 bytes


# ------------------------------------------------------------------------- torchtitan's op SAC

# torchtitan's op-level selective activation checkpointing (selective_ac_option = "op",
# torchtitan/distributed/activation_checkpoint.py): inside each checkpointed layer it counts
# the aten.mm calls and saves the output of the odd ones (the policy recomputes every second
# mm), saves flash attention's output and log-sum-exp, and recomputes everything else from the
# layer input. The layer's matmuls in order: wq (h -> a*d), wk (h -> g*d), wv (h -> g*d),
# wo (a*d -> h), w1 (h -> f), w3 (h -> f), w2 (f -> h): saved wq, wv, w1, w2.
OP_SAC_LAYER = (
    2 * H  # the layer input (the checkpoint's own input)
    + 2 * A * D  # wq's output           (saved: 1st mm)
    + 2 * G * D  # wv's output           (saved: 3rd mm)
    + 2 * F  # w1's output           (saved: 5th mm)
    + 2 * H  # w2's output           (saved: 7th mm)
    + 2 * A * D  # flash attention's output
    + 4 * A
)  # and its fp32 log-sum-exp                  = 1,104 bytes a token


def test_torchtitans_op_sac_keeps_every_other_matmul_output():
    # pp 1: one micro-batch, both layers and Megatron's loss on the one rank
    m = _memory(recompute="selective", recompute_modules=["torchtitan_op"])
    assert m.activations == S * (L * OP_SAC_LAYER + LOGITS)


def test_torchtitans_op_sac_reruns_the_matmuls_it_did_not_save():
    # Recompute = the even matmuls' forward, 2*in*out FLOPs a token each: wk (h x g*d), wo
    # (a*d x h), w3 (h x f), plus the element-wise work that regenerates the freed bytes
    # (LAYER - OP_SAC_LAYER at the profile's c_ew bytes per byte). Flash attention's output is
    # saved: the attention core does not rerun.
    from planner.cost.compute import layer_times
    from planner.cost.shape import model_shape

    job, _ = _job_layout()
    shape = model_shape(job.model)
    rate, hbm, ew = 1e12, 1e12, 3.0
    kw = dict(
        moe=False,
        tokens=S,
        seq=S,
        tp=1,
        recompute="selective",
        gemm_flops_per_s=rate,
        attn_flops_per_s=rate,
        hbm_bytes_per_s=hbm,
        ew_factor=ew,
        act_bytes_fwd=S * LAYER,
        modules=("torchtitan_op",),
        freed_bytes=S * (LAYER - OP_SAC_LAYER),
    )
    rerun = 2 * (H * G * D + A * D * H + H * F) * S / rate  # 2 x 22,528 x 256 FLOPs
    regen = ew * S * (LAYER - OP_SAC_LAYER) / hbm
    assert layer_times(shape, **kw).recompute == pytest.approx(rerun + regen, rel=1e-12)


# ------------------------------------------------------------------------- model states


def test_grad_reduce_in_bf16_halves_the_gradient_buffer():
    # --grad-reduce-in-bf16 (ddp grad_reduce_in_fp32 false): the DDP main-gradient buffer holds
    # every parameter's gradient in bf16 (2 B) instead of fp32 (4 B). With the distributed
    # optimizer (zero 1) that buffer is not sharded: every rank holds all of it.
    # (The optimizer step casts its 1/dp shard to fp32 -- 4 * PARAMS / DP bytes -- after the
    # backward pass has freed the activations, so it is not part of the peak.)
    before = _memory(grad_reduce_in_fp32=True)
    after = _memory(grad_reduce_in_fp32=False)
    _only(before, after, "gradients", -(4 - 2) * PARAMS)  # -508,544 bytes
    assert after.gradients == 2 * PARAMS


@pytest.mark.parametrize(
    "recipe,hardware",
    [
        ("delayed", "h100-sxm"),
        ("tensorwise", "h100-sxm"),
        ("blockwise", "h100-sxm"),
        ("mxfp8", "b200"),
    ],
)
def test_fp8_param_gather_drops_the_bf16_weight_copy(recipe, hardware):
    # FP8 linear layers (attention and MLP projections, not the embedding, output layer or norms)
    # keep the FP8 weight Transformer Engine casts for the GEMMs, in both layouts (row-wise data
    # and its transpose on Hopper, row- and column-wise MXFP8 on Blackwell), from the forward
    # pass to the backward. Without --fp8-param-gather the parameter itself is bf16 (2 B) beside
    # those copies; with it the parameter *is* the FP8 tensor (TE's fp8_model_init): the bf16
    # copy, 2 B per linear parameter, is gone. Gradients (fp32 main grads) and the optimizer
    # (fp32 master weights) do not change.
    fp8 = dict(precision="fp8", fp8_recipe=recipe)
    before = _memory(hardware=hardware, training=dict(fp8, fp8_param_gather=False))
    after = _memory(hardware=hardware, training=dict(fp8, fp8_param_gather=True))
    _only(before, after, "weights", -2 * LINEAR)  # -245,760 bytes
    if recipe in ("delayed", "tensorwise"):
        # per-tensor scaling: the FP8 weight and its transpose are 1 B each (one fp32 scale a
        # tensor); everything else stays bf16
        assert after.weights == 2 * (PARAMS - LINEAR) + (1 + 1) * LINEAR


@pytest.mark.parametrize(
    "exp_avg,exp_avg_sq", [("bf16", "fp32"), ("fp32", "bf16"), ("bf16", "bf16")]
)
def test_bf16_adam_moments_shard_over_dp(exp_avg, exp_avg_sq):
    # The precision-aware optimizer (--exp-avg-dtype / --exp-avg-sq-dtype bf16) stores each
    # moment in 2 B instead of 4; the fp32 master weights stay. The distributed optimizer holds
    # 1/dp of every state: each bf16 moment saves 2 * PARAMS / DP bytes.
    before = _memory()
    after = _memory(exp_avg_dtype=exp_avg, exp_avg_sq_dtype=exp_avg_sq)
    n_bf16 = (exp_avg, exp_avg_sq).count("bf16")
    _only(before, after, "optimizer", -n_bf16 * (4 - 2) * PARAMS / DP)  # -63,568 each


# ------------------------------------------------------------------------- recompute modules


def _selective_freed(model, modules) -> float:
    """Activation bytes `recompute selective` with these modules frees against no recompute."""
    before = _memory(model)
    after = _memory(model, recompute="selective", recompute_modules=list(modules))
    for name in ("weights", "gradients", "optimizer"):
        assert getattr(after, name) == getattr(before, name), name
    return before.activations - after.activations


def test_core_attn_frees_the_softmax_statistics():
    # core_attn: tensor_parallel.checkpoint around the core attention. The checkpoint keeps its
    # inputs Q, K, V (flash attention kept those anyway); the output O stays as linear_proj's
    # input. Freed: the fp32 log-sum-exp, 4a bytes a token. (Korthikanti's selective recompute
    # freed the 5as score bytes; flash attention never stores those.)
    assert _selective_freed(DENSE, ["core_attn"]) == S * L * LSE  # 8,192


def test_mlp_frees_the_norm_output_fc1_and_activation_outputs():
    # mlp: tensor_parallel.checkpoint(self.mlp, False, pre_mlp_layernorm_output). In the TE spec
    # a dense layer's pre_mlp_layernorm is IdentityOp (TELayerNormColumnParallelLinear does the
    # norm), so that "output" is the residual x + attention itself: the checkpoint keeps the
    # residual (kept anyway) and the whole block -- norm, fc1, SwiGLU, fc2 -- runs again in
    # backward. Freed: the norm output 2h, the fc1 outputs 4f and the SwiGLU output 2f.
    assert _selective_freed(DENSE, ["mlp"]) == S * L * (MLP_NORM_OUT + FC1_OUT + ACT_OUT)


def test_layernorm_frees_nothing_when_the_norms_are_fused():
    # layernorm: CheckpointWithoutOutput around input_layernorm and pre_mlp_layernorm, "if not
    # isinstance(self.input_layernorm, IdentityOp)" (and the same for the pre-MLP norm). With
    # the TE spec both are IdentityOp in a dense layer: the norm outputs are saved inside the
    # fused LayerNormLinear modules and nothing is recomputed.
    assert _selective_freed(DENSE, ["layernorm"]) == 0


# The MoE model: the dense model with every layer's MLP replaced by E = 4 routed experts of
# width f_e = 128, top-k = 2 (capacity factor 1: each token is copied to 2 experts).
E, K, FE, FS = 4, 2, 128, 128
MOE = dict(DENSE, num_experts=E, moe_top_k=K, moe_ffn_hidden_size=FE)
MOE_SHARED = dict(MOE, num_shared_experts=1)  # + one shared expert of width f_s = 128
ROUTER = 8 * E  # router logits and probabilities, fp32 (the model's count)
PERMUTED = 2 * H  # a routed copy of the token: the experts' fc1 GEMM input
EXPERT_FC1_OUT = 2 * 2 * FE  # gate and up of one routed copy = 512
EXPERT_ACT_OUT = 2 * FE  # the activation (probabilities applied inside) = 256
SHARED = 2 * 2 * FS + 2 * FS  # shared expert: fc1 outputs + activation output = 768


def test_moe_act_frees_the_expert_activation_outputs():
    # moe_act: CheckpointWithoutOutput around the experts' activation (TEGroupedMLP); its
    # output, fc2's input, is discarded after fc2 and recomputed from the fc1 output (kept).
    # Freed: 2 f_e per routed copy, k copies a token.
    assert _selective_freed(MOE, ["moe_act"]) == S * L * K * EXPERT_ACT_OUT  # 262,144


def test_moe_frees_the_router_state_and_every_routed_copy():
    # moe: tensor_parallel.checkpoint(custom_forward, False, hidden_states) around the whole MoE
    # layer; its input (the pre-MLP norm output, the router's input) is kept. Freed: the router
    # state, and per routed copy its fc1 input, fc1 outputs and activation output.
    freed = ROUTER + K * (PERMUTED + EXPERT_FC1_OUT + EXPERT_ACT_OUT)  # 1,824
    assert _selective_freed(MOE, ["moe"]) == S * L * freed


def test_moe_also_frees_the_shared_experts():
    freed = ROUTER + K * (PERMUTED + EXPERT_FC1_OUT + EXPERT_ACT_OUT) + SHARED  # 2,592
    assert _selective_freed(MOE_SHARED, ["moe"]) == S * L * freed


def test_shared_experts_frees_the_shared_expert_mlp():
    # shared_experts: tensor_parallel.checkpoint(self.shared_experts, False, residual): the input
    # (the pre-MLP norm output) is kept by the router anyway. Freed: fc1 outputs 4 f_s and the
    # activation output 2 f_s.
    assert _selective_freed(MOE_SHARED, ["shared_experts"]) == S * L * SHARED  # 393,216


def test_layernorm_in_an_moe_layer_frees_the_pre_mlp_norm_output():
    # The router, the token dispatcher and (when present) the shared expert read the pre-MLP
    # norm's output; CheckpointWithoutOutput discards it after the MoE layer and recomputes it
    # in backward. Freed: 2h a token.
    assert _selective_freed(MOE, ["layernorm"]) == S * L * MLP_NORM_OUT  # 65,536


# The MLA model: the dense model with multi-latent attention (DeepSeek-V3's, shrunk): q_lora 32,
# kv_lora 32, qk_head_dim 16 + qk_pos_emb_head_dim 8 = 24 per query/key head, v_head_dim 16.
QL, KVL, QK, ROPE, VD = 32, 32, 16, 8, 16
MLA = dict(
    DENSE, q_lora_rank=QL, kv_lora_rank=KVL, qk_head_dim=QK, qk_pos_emb_head_dim=ROPE, v_head_dim=VD
)
MLA_QKV = 2 * (A * (QK + ROPE) + A * (QK + ROPE) + A * VD)  # query, key, value: 2 x 256 = 512
NORMED_LATENTS = 2 * (QL + KVL)  # q and kv latents after their norms = 128


def test_mla_up_proj_frees_query_key_value_and_the_normed_latents():
    # mla_up_proj: CheckpointWithoutOutput(qkv_up_proj_and_rope_apply, q_compressed,
    # kv_compressed, k_pos_emb, ...): the inputs (the down-projection outputs, before the latent
    # norms) are kept; query, key and value (made contiguous, then kept by flash attention) are
    # discarded after the core attention, and so is everything the up-projections saved.
    # Freed: Q, K (a x 24 each) and V (a x 16), 2 B each, and the two normed latents.
    assert _selective_freed(MLA, ["mla_up_proj"]) == S * L * (MLA_QKV + NORMED_LATENTS)


def test_layernorm_in_an_mla_layer_frees_the_input_norm_output():
    assert _selective_freed(MLA, ["layernorm"]) == S * L * QKV_NORM_OUT  # 65,536


# ------------------------------------------------------------------------- full recompute

DENSE8 = dict(DENSE, num_layers=8)


def test_recompute_num_layers_counts_per_virtual_stage():
    # --recompute-granularity full --recompute-method block --recompute-num-layers N: in every
    # virtual stage (model chunk) the first N layers keep only their input (2h a token), the
    # others everything (LAYER). 8 layers, pp 2, vpp 2: a chunk is 2 layers, and rank 0 holds
    # 2(p - r - 1) + (v - 1)p + 1 = 2 + 2 + 1 = 5 chunk-micro-batches when its first backward
    # starts (Megatron's interleaved warm-up plus one steady-state forward; m = 4 >= 3).
    # Rank 0 has no logits, so the peak is at that first backward:
    #   N = 1: each chunk keeps 2h + LAYER; the first backward runs the kept layer first, and its
    #          freed bytes cover the recomputed layer's working set:   5 x (2h + LAYER)
    #   N = 2: each chunk keeps 2 x 2h, and the first backward recomputes one layer on top:
    #          5 x 4h + LAYER
    kw = dict(num_gpus=8, pp=2, vpp=2, recompute="full")  # dp 4, m = 32 / 4 = 8
    n1 = _ranks(DENSE8, recompute_num_layers=1, **kw)[0]
    n2 = _ranks(DENSE8, recompute_num_layers=2, **kw)[0]
    assert n1.activations == S * 5 * (RESIDUAL_IN + LAYER)
    assert n2.activations == S * (5 * 2 * RESIDUAL_IN + LAYER)
    _only(n1, n2, "activations", S * (5 * 2 * RESIDUAL_IN + LAYER - 5 * (RESIDUAL_IN + LAYER)))


def test_the_recompute_working_set_comes_after_the_logits_are_freed():
    # pp 1, both layers and the loss on one rank. Peak over the step:
    #   N = 1: end of forward: layer 1's input 2h, layer 2's LAYER, the logits; layer 2's
    #          backward frees LAYER before layer 1 recomputes one:   2h + LAYER + LOGITS
    #   N = 2: end of forward: 2 x 2h + LOGITS; the loss backward frees LOGITS, then layer 2
    #          recomputes LAYER:                                      2 x 2h + max(LOGITS, LAYER)
    n1 = _memory(recompute="full", recompute_num_layers=1)
    n2 = _memory(recompute="full", recompute_num_layers=2)
    assert n1.activations == S * (RESIDUAL_IN + LAYER + LOGITS)
    assert n2.activations == S * (2 * RESIDUAL_IN + max(LOGITS, LAYER))


def test_selective_recompute_adds_one_layers_recomputed_module_on_a_first_stage():
    # pp 2, rank 0 (one layer, no logits), 1F1B: it holds min(m, p) = 2 micro-batches of its
    # layer when its first backward starts; that backward begins with the MLP, whose checkpoint
    # regenerates the norm output, fc1 and SwiGLU outputs of one layer before anything is freed.
    kept = LAYER - (MLP_NORM_OUT + FC1_OUT + ACT_OUT)  # 784
    rank0 = _ranks(num_gpus=8, pp=2, recompute="selective", recompute_modules=["mlp"])[0]
    assert rank0.activations == S * (2 * kept + MLP_NORM_OUT + FC1_OUT + ACT_OUT)


# ------------------------------------------------------------------------- CPU offloading

DENSE4 = dict(DENSE, num_layers=4)


def test_cpu_offloading_removes_the_offloaded_layers():
    # --cpu-offloading-num-layers N (Megatron: pp 1, no recompute, N < num_layers): the tensors
    # the first N layers save for backward go to host memory. 4 layers, N = 2: the rank keeps
    # the activations of L - N = 2 layers (and the logits); freed: 2 x LAYER a token.
    before = _memory(DENSE4)
    after = _memory(DENSE4, cpu_offloading_num_layers=2)
    _only(before, after, "activations", -S * 2 * LAYER)  # -1,253,376


# ------------------------------------------------------------------------- multi-token prediction

# One MTP layer (DeepSeek-V3 sec. 2.2; Megatron's MultiTokenPredictionLayer): enorm and hnorm
# (RMSNorm, h each), eh_proj (2h -> h), a transformer layer, and its own final_layernorm (h);
# the embedding and output layer are the main model's (shared).
MTP_PARAMS = LAYER_PARAMS + H + H + 2 * H * H + H  # 61,568 + 8,384 = 69,952


def test_an_mtp_layer_adds_its_parameters():
    before = _memory()
    after = _memory(dict(DENSE, mtp_num_layers=1))
    assert after.weights - before.weights == 2 * MTP_PARAMS  # bf16
    assert after.gradients - before.gradients == 4 * MTP_PARAMS  # fp32 main grads
    assert after.optimizer - before.optimizer == pytest.approx(12 * MTP_PARAMS / DP)


def test_mtp_on_a_later_stage_needs_its_own_embedding():
    # pp 2 (dp 4): the last rank holds layer 2, the MTP layer and the output layer; with MTP it
    # also holds a copy of the word embedding for the MTP layer's shifted tokens.
    kw = dict(num_gpus=8, pp=2)
    before = _ranks(**kw)[-1]
    after = _ranks(dict(DENSE, mtp_num_layers=1), **kw)[-1]
    assert after.weights - before.weights == 2 * (MTP_PARAMS + EMBED)


def test_an_mtp_layer_adds_its_activations():
    # Per token, beside its transformer layer (LAYER; its input, eh_proj's output, is that
    # layer's residual):
    #   enorm input (the embedding of the shifted tokens)           2h
    #   hnorm input (the main model's output)  -- shared with the main final norm / output layer
    #   enorm, hnorm outputs  -- consumed by the concatenation, not saved
    #   eh_proj input: concat(enorm out, hnorm out)                 4h
    #   final_layernorm input (the layer's output)                  2h
    #   final_layernorm output (the output layer's input)           2h
    #   its own fp32 logits, kept by its own loss                   4V
    before = _memory()
    after = _memory(dict(DENSE, mtp_num_layers=1))
    extra = LAYER + 2 * H + 4 * H + 2 * H + 2 * H + 4 * V  # 7,184
    assert after.activations - before.activations == S * extra


# ------------------------------------------------------------------------- pipeline layout


@pytest.mark.parametrize("layout,first,last", [("Et|tL", 1, 1), ("Ett|L", 2, 0)])
def test_pipeline_layout_sets_each_stages_layers(layout, first, last):
    # --pipeline-model-parallel-layout: stage i (in the order written) runs on rank i % pp;
    # E the embedding, t a decoder layer, L the loss (the output layer and the final norm).
    # pp 2, dp 4, m = 32/4 = 8 micro-batches; 1F1B: rank r holds min(m, p - r) micro-batches.
    rank0, rank1 = _ranks(num_gpus=8, pp=2, pipeline_model_parallel_layout=layout)
    p0 = EMBED + first * LAYER_PARAMS
    p1 = last * LAYER_PARAMS + OUTPUT + FINAL_NORM
    for rank, params in ((rank0, p0), (rank1, p1)):
        assert rank.weights == 2 * params
        assert rank.gradients == 4 * params
        assert rank.optimizer == pytest.approx(12 * params / 4)  # dp 4
    assert rank0.activations == S * 2 * first * LAYER  # 2 micro-batches in flight


def test_pipeline_layout_moves_a_layer_between_stages():
    # The same two layouts: moving layer 2 from rank 1 to rank 0 moves its parameters and its
    # activations (rank 0 holds 2 micro-batches of it, rank 1 held 1); the loss stays on rank 1.
    even = _ranks(num_gpus=8, pp=2, pipeline_model_parallel_layout="Et|tL")
    front = _ranks(num_gpus=8, pp=2, pipeline_model_parallel_layout="Ett|L")
    assert front[0].weights - even[0].weights == 2 * LAYER_PARAMS
    assert front[1].weights - even[1].weights == -2 * LAYER_PARAMS
    assert front[0].activations - even[0].activations == S * 2 * LAYER
    assert front[1].activations - even[1].activations == -S * 1 * LAYER


def test_interleaved_layout_assigns_virtual_stages_round_robin():
    # 4 layers, pp 2, four stages -> vpp 2: rank 0 runs stages 0 and 2, rank 1 stages 1 and 3.
    #   "Et|t|t|tL":  rank 0 = E + t + t,  rank 1 = t + t + L
    #   "Ett|t|t|L":  rank 0 = E + tt + t, rank 1 = t + L
    for layout, n0, n1 in (("Et|t|t|tL", 2, 2), ("Ett|t|t|L", 3, 1)):
        rank0, rank1 = _ranks(DENSE4, num_gpus=8, pp=2, pipeline_model_parallel_layout=layout)
        assert rank0.weights == 2 * (EMBED + n0 * LAYER_PARAMS), layout
        assert rank1.weights == 2 * (n1 * LAYER_PARAMS + OUTPUT + FINAL_NORM), layout


# ------------------------------------------------------------------------- low-precision caching
# DeepSeek-V3 report (arXiv:2412.19437) sec. 3.3.3, "Low-Precision Activation": the input of
# the SwiGLU in the MoE is cached in FP8 and its output recomputed in the backward; the input
# of the Linear after attention (the attention output, which the attention backward reads too)
# is cached once in a customized E5M6 format with 1x128 power-of-two-scaled tiles.
# Megatron-Core's `activation_func_fp8_input_store` (TransformerConfig) does the first:
# `bias_swiglu_impl` saves `input.to(torch.float8_e4m3fn)`, 1 byte an element, no scale.
FC1_OUT_FP8 = 1 * 2 * F  # gate and up in FP8: 512 instead of FC1_OUT = 1,024
E5M6 = 12 / 8 + 4 / 128  # 12 bits an element + a fp32 scale per 128 = 1.53125 B
BLOCKWISE = 1 + 4 / 128  # a blockwise FP8 GEMM input: 1 B + a fp32 scale per 128


def _stored(model=None, parallel=None, **store):
    """(before, after) MemoryBreakdowns: the layout without and with the storage fields."""
    parallel = parallel or {}
    return _memory(model, **parallel), _memory(model, **dict(parallel, **store))


def test_fp8_input_store_halves_the_dense_swiglu_input():
    before, after = _stored(activation_func_fp8_input_store=True)
    _only(before, after, "activations", -S * L * (FC1_OUT - FC1_OUT_FP8))  # -262,144


def test_fp8_input_store_halves_every_swiglu_input_of_an_moe_layer():
    # per token: k routed copies' fc1 outputs 2*2f_e -> 1*2f_e, the shared expert's 2*2f_s ->
    # 1*2f_s; the router, the copies' fc1 inputs and the activation outputs do not change
    freed = K * (EXPERT_FC1_OUT - 2 * FE) + (2 * 2 * FS - 2 * FS)  # 768
    before, after = _stored(MOE_SHARED, activation_func_fp8_input_store=True)
    _only(before, after, "activations", -S * L * freed)


def test_under_megatrons_moe_act_checkpoint_the_fp8_store_does_nothing():
    # moe_act wraps the experts' activation in CheckpointWithoutOutput, whose forward runs it
    # under torch.no_grad() and saves its arguments (ctx.save_for_backward(*args)): the fc1
    # output as fc1 wrote it, bf16. The FP8 store inside the activation saves nothing there.
    sel = dict(recompute="selective", recompute_modules=["moe_act"])
    before, after = _stored(MOE, sel, activation_func_fp8_input_store=True)
    _only(before, after, "activations", 0.0)


def test_deepseeks_caching_recomputes_the_swiglu_from_its_fp8_input():
    # DeepSeek-V3's combination (sec. 3.3.3): the SwiGLU input cached "in FP8 with our
    # fine-grained quantization method" (1x128 tiles, a scale each: BLOCKWISE bytes an
    # element) and its output recomputed: per routed copy BLOCKWISE*2f_e kept where no
    # recompute keeps 2*2f_e + 2f_e; the attention output, a*d a token, once in E5M6 instead
    # of bf16 (2)
    sel = dict(recompute="selective", recompute_modules=["moe_act"])
    none, _ = _stored(MOE)
    _, after = _stored(MOE, sel, activation_func_fp8_input_store=True, activation_cache="deepseek")
    freed = K * (EXPERT_FC1_OUT + EXPERT_ACT_OUT - BLOCKWISE * 2 * FE) + (2 - E5M6) * A * D
    assert freed == 2 * (512 + 256 - 264) + 0.46875 * 64  # 1,038
    _only(none, after, "activations", -S * L * freed)


# DeepSeek-V3 sec. 3.2.3: "We recompute all RMSNorm operations and MLA up-projections during
# back-propagation, thereby eliminating the need to persistently store their output
# activations"; sec. 3.3.3: the Wgrad runs in FP8 and activations are cached "in FP8 format for
# the backward pass of the Linear operator". The FP8 copy a Linear caches of its input is, after
# a norm, that norm's output: by the report's words it is not kept, it is regenerated in the
# backward (the norm rerun from the residual it keeps, the output quantized again). Megatron-Core
# with Transformer Engine (cache te) does not: TE's FP8 Linear saves the quantized input it made
# for the forward GEMM, outside what `layernorm`'s CheckpointWithoutOutput discards (it
# discards the bf16 norm output only). The routed copies' fc1 input (the dispatched FP8 tokens,
# PERMUTED) stays in both: only a second dispatch could regenerate it.
FP8 = dict(precision="fp8", fp8_recipe="blockwise")
MLA_MOE = dict(MOE_SHARED, **{k: MLA[k] for k in MLA if k not in DENSE})


@pytest.mark.parametrize(
    "model,training,cache,freed",
    [
        # MLA's input norm is its own TENorm: `layernorm` drops its bf16 output, but q/kv-down's
        # FP8 copy (BLOCKWISE*h) stays; the pre-MLP norm's bf16 output (the router's input, 2h)
        # goes, the shared fc1's FP8 copy (BLOCKWISE*h) stays
        (MLA_MOE, FP8, "te", MLP_NORM_OUT),
        # DeepSeek's framework: the two FP8 copies are regenerated too, and so are the latent
        # norms' outputs (the up-projections' FP8 inputs; TE's LayerNormLinear keeps them)
        (MLA_MOE, FP8, "deepseek", MLP_NORM_OUT + 2 * BLOCKWISE * H + BLOCKWISE * (QL + KVL)),
        # bf16: the down-projection's input is the norm's bf16 output, freed in both
        (MLA_MOE, None, "te", QKV_NORM_OUT + MLP_NORM_OUT),
        (MLA_MOE, None, "deepseek", QKV_NORM_OUT + MLP_NORM_OUT + NORMED_LATENTS),
        # a dense layer: TE fuses both norms into linear_qkv / linear_fc1, which keep their
        # inputs (nothing recomputes); DeepSeek reruns every RMSNorm and regenerates both inputs
        (DENSE, FP8, "te", 0.0),
        (DENSE, FP8, "deepseek", 2 * BLOCKWISE * H),
        (DENSE, None, "te", 0.0),
        (DENSE, None, "deepseek", QKV_NORM_OUT + MLP_NORM_OUT),
    ],
    ids=[
        "mla-moe-fp8-te",
        "mla-moe-fp8-deepseek",
        "mla-moe-bf16-te",
        "mla-moe-bf16-deepseek",
        "dense-fp8-te",
        "dense-fp8-deepseek",
        "dense-bf16-te",
        "dense-bf16-deepseek",
    ],
)
def test_deepseeks_norm_recompute_regenerates_the_linears_fp8_inputs(model, training, cache, freed):
    # `layernorm` against no recompute, in the same cache mode: per token and layer
    before = _memory(model, training=training, activation_cache=cache)
    after = _memory(
        model,
        training=training,
        activation_cache=cache,
        recompute="selective",
        recompute_modules=["layernorm"],
    )
    _only(before, after, "activations", -S * L * freed)


def test_fp8_input_store_leaves_a_gelu_mlp_alone():
    gelu = dict(DENSE, activation="gelu")
    before, after = _stored(gelu, activation_func_fp8_input_store=True)
    _only(before, after, "activations", 0.0)


@pytest.mark.parametrize(
    "training,kept",
    [
        (None, 2.0),  # bf16: O, shared with linear_proj
        (
            dict(precision="fp8", fp8_recipe="blockwise"),
            2.0 + BLOCKWISE,
        ),  # + linear_proj's FP8 copy
    ],
    ids=["bf16", "fp8-blockwise"],
)
def test_deepseeks_caching_keeps_one_e5m6_copy_of_the_attention_output(training, kept):
    # the attention output a*d a token: `kept` bytes an element before, E5M6 after (the dense
    # model's MLP is not touched: no FP8 input store)
    before = _memory(training=training)
    after = _memory(training=training, activation_cache="deepseek")
    _only(before, after, "activations", -S * L * (kept - E5M6) * A * D)

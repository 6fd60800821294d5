"""The optimizer step's time, counted by hand on a model small enough to list every parameter.

The update is a fused Adam(W) (Transformer Engine's / Apex's FusedAdam, PyTorch's fused AdamW):
one pass over the parameters the rank's optimizer owns, each tensor read or written once, so its
time is the bytes it moves over the HBM bandwidth it streams at. Gradient clipping is Megatron-
Core's `clip_grad_norm_fp32` (megatron/core/optimizer/clip_grads.py): `multi_tensor_l2norm`
reads every owned gradient once, then `multi_tensor_scale_tensor` scales them in place (a read
and a write) every step, the clamped coefficient never leaving the device. The stream rate is
STREAM_HBM_EFFICIENCY = 0.9 of the datasheet bandwidth (a GH200's coalesced reads measured at
3,614.6 of 4,000 GB/s, planner/cost/step.py). The per-step overhead (`step_overhead_ms`, the
profile's fitted host time) is added as its own term.
"""

from __future__ import annotations

import pytest

from planner.config import config_from_data
from planner.cost import cost_model, estimate
from planner.cost.step import (
    STREAM_HBM_EFFICIENCY,
    adam_update_bytes,
    grad_clip_bytes,
    optimizer_times,
)

# The model (Llama-shaped: SwiGLU, RMSNorm, GQA, no biases, untied embeddings): L = 2 layers,
# h = 64, f = 256, a = 4 query heads, g = 2 KV heads, d = 16, V = 1024.
L, H, F, A, G, D, V = 2, 64, 256, 4, 2, 16, 1024
TINY = dict(
    name="tiny",
    num_layers=L,
    hidden_size=H,
    ffn_hidden_size=F,
    num_attention_heads=A,
    num_kv_heads=G,
    vocab_size=V,
    activation="swiglu",
)
LAYER = H * (A * D + 2 * G * D) + A * D * H + H * 2 * F + F * H + 2 * H  # 61,568
PARAMS = L * LAYER + V * H + V * H + H  # + embedding, output layer, final norm = 254,272
DP = 8
HBM = 3350e9  # h100-sxm's datasheet HBM3 bandwidth, bytes/s
RATE = HBM * 0.9


def _time(num_gpus=DP, model=None, hardware="h100-sxm", **parallel):
    data = dict(
        model=model or TINY,
        hardware=hardware,
        num_gpus=num_gpus,
        training=dict(seq_length=256, global_batch_size=4 * num_gpus),
        parallel=dict(dict(micro_batch_size=1, vpp=1), **parallel),
    )
    job, layout = config_from_data(data)
    return job, estimate(job, layout).time


def test_the_tiny_model_has_the_parameters_listed():
    assert PARAMS == 254_272
    job, _ = _time()
    assert job.hardware.hbm_bandwidth_gb_per_s * 1e9 == HBM
    assert STREAM_HBM_EFFICIENCY == 0.9


@pytest.mark.parametrize(
    "kw,bytes_",
    [
        # read master 4, grad 4, m 4, v 4; write master 4, m 4, v 4, the bf16 weight 2
        ({}, 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2),
        # bf16 moments: m and v 2 bytes each way
        (dict(exp_avg=2.0, exp_avg_sq=2.0), 4 + 4 + 2 + 2 + 4 + 2 + 2 + 2),
        # bf16 gradients (`--grad-reduce-in-bf16`): the gradient read is 2 bytes
        (dict(grad=2.0), 4 + 2 + 4 + 4 + 4 + 4 + 4 + 2),
    ],
    ids=["fp32-moments", "bf16-moments", "bf16-grads"],
)
def test_adam_moves_each_state_once(kw, bytes_):
    assert adam_update_bytes(**kw) == bytes_


def test_clipping_reads_the_gradients_twice_and_writes_them_once():
    # the norm reads 4 B, the in-place scale reads 4 B and writes 4 B
    assert grad_clip_bytes() == 4 + 4 + 4
    assert grad_clip_bytes(grad=2.0) == 2 + 2 + 2


def test_the_times_are_the_bytes_over_the_stream_rate():
    update, clip = optimizer_times(params=1e9, hbm_bytes_per_s=HBM)
    assert update == pytest.approx(30e9 / RATE, rel=1e-12)
    assert clip == pytest.approx(12e9 / RATE, rel=1e-12)
    assert optimizer_times(params=1e9, hbm_bytes_per_s=HBM, clip=False)[1] == 0.0


@pytest.mark.parametrize(
    "parallel,owned,adam,grad",
    [
        # the distributed optimizer (zero 1) over dp = 8: each rank owns 1/8 of the parameters
        (dict(zero_stage=1), PARAMS / DP, 30, 4),
        # no distributed optimizer: every rank updates all of them
        (dict(zero_stage=0), PARAMS, 30, 4),
        # FSDP (zero 3) shards them over dp as well
        (dict(zero_stage=3), PARAMS / DP, 30, 4),
        # bf16 moments: 22 B an owned parameter
        (dict(zero_stage=1, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"), PARAMS / DP, 22, 4),
        # bf16 gradient buffer: 28 B, and the clipping passes move 2 B each
        (dict(zero_stage=1, grad_reduce_in_fp32=False), PARAMS / DP, 28, 2),
    ],
    ids=["zero1", "zero0", "zero3", "bf16-moments", "bf16-grads"],
)
def test_the_rank_updates_the_parameters_its_optimizer_owns(parallel, owned, adam, grad):
    job, tm = _time(**parallel)
    assert tm.optimizer_update_s == pytest.approx(owned * adam / RATE, rel=1e-12)
    assert tm.grad_clip_s == pytest.approx(owned * 3 * grad / RATE, rel=1e-12)
    assert tm.step_overhead_s == pytest.approx(job.hardware.calibration.step_overhead_ms * 1e-3)


def test_tensor_parallel_ranks_own_their_share_of_the_linear_layers():
    # tp 2 on 8 GPUs: dp 4. A rank holds half of each layer's linear weights and all of its
    # norms (2h), all of the final norm, half of the embedding and of the output layer
    # (vocabulary-parallel); the distributed optimizer owns a quarter of that
    linear = LAYER - 2 * H
    on_rank = L * (linear / 2 + 2 * H) + (V * H) / 2 + (V * H) / 2 + H
    _, tm = _time(tp=2, zero_stage=1)
    assert tm.optimizer_update_s == pytest.approx(on_rank / 4 * 30 / RATE, rel=1e-12)


def test_the_optimizer_step_is_its_three_terms_and_the_step_adds_up():
    _, tm = _time(zero_stage=1)
    assert tm.optimizer_s == pytest.approx(
        tm.optimizer_update_s + tm.grad_clip_s + tm.step_overhead_s, rel=1e-12
    )
    parts = (
        tm.compute_s
        + tm.bubble_s
        + tm.tp_comm_s
        + tm.pp_comm_s
        + tm.ep_comm_s
        + tm.cp_comm_s
        + tm.dp_comm_s
        + tm.optimizer_s
    )
    assert parts == pytest.approx(tm.step_time_s, rel=1e-12)
    assert sum(v for _, v in tm.parts()) == pytest.approx(tm.step_time_s, rel=1e-12)
    d = tm.as_dict()
    for key in ("optimizer_s", "optimizer_update_s", "grad_clip_s", "step_overhead_s"):
        assert d[key] == getattr(tm, key)


def test_the_search_prices_the_same_step():
    job, layout = config_from_data(
        dict(
            model=TINY,
            hardware="h100-sxm",
            num_gpus=DP,
            training=dict(seq_length=256, global_batch_size=4 * DP),
            parallel=dict(micro_batch_size=1, vpp=1, zero_stage=1),
        )
    )
    cm = cost_model(job)
    assert cm.step_seconds(layout) == pytest.approx(cm.time(layout).step_time_s, rel=1e-12)

"""Host time of a layer: the kernels MLA and shared experts add, FP8 quantization launched from
C++, and the one DP bucket an overlapped collective can never hide (planner/cost/launch.py,
planner/cost/step.py). Every number is derived in the test's docstring."""

import pytest

from planner.cost.comm import Link, reduce_scatter_time
from planner.cost.launch import (
    ATTENTION_KERNELS,
    CPP_LAUNCH_US,
    EXPERT_BLOCK_KERNELS,
    MLA_EXTRA_KERNELS,
    MLP_KERNELS,
    SHARED_EXPERT_KERNELS,
    attention_kernels,
    gemm_inputs,
    host_parts,
)
from planner.cost.step import dp_buckets, dp_exposed, overlapped


def test_the_constants_the_derivations_below_use():
    assert (ATTENTION_KERNELS, MLP_KERNELS, EXPERT_BLOCK_KERNELS) == (20, 6, 30)
    assert (MLA_EXTRA_KERNELS, SHARED_EXPERT_KERNELS, CPP_LAUNCH_US) == (4, 6, 5.0)


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(), 20),
        (dict(mla=True), 24),
        (dict(mla=True, tp=2), 25),
        (dict(mla=True, q_lora=True), 26),
        (dict(q_lora=True, tp=8), 20),
    ],
    ids=["gqa", "mla", "mla-tp2", "mla-q-lora", "gqa-ignores-mla-keys"],
)
def test_attention_kernels(kw, expected):
    """GQA: 20. MLA (Megatron-Core MLASelfAttention): linear_q_proj, linear_kv_down_proj,
    linear_kv_up_proj for one linear_qkv (+2), kv_layernorm (+1), RoPE on the query and the
    rope key apart (+1): 24; its rope key all-gathered under TP 2 with SP: 25; a q_lora_rank
    splits linear_q_proj into linear_q_down_proj + q_layernorm + linear_q_up_proj (+2): 26."""
    assert attention_kernels(**kw) == expected


def test_gemm_inputs():
    """Quantization passes: the attention block's 4; MLA's two more GEMMs 1 each (6), with
    q_lora 7; a dense MLP's fc1 and fc2 add 2."""
    assert gemm_inputs() == 4
    assert gemm_inputs(mla=True) == 6
    assert gemm_inputs(mla=True, q_lora=True) == 7
    assert gemm_inputs(mlp=True) == 6


def test_moonlight_layer_host_time_in_bf16():
    """Moonlight-16B-A3B on TP 2, EP 8 (8 local experts, 2 shared), BF16, eager, launch 36 us.
    Attention block: 20 + 4 (MLA) + 1 (TP) = 25 launches = 900 us. Expert block: 30 + 2*8 = 46
    routed-expert launches + 6 for the shared experts = 52 = 1,872 us. Without the MLA and
    shared-expert kernels it was 20 and 46: 720 and 1,656 us."""
    got = host_parts(
        moe=True,
        cuda_graphs="none",
        launch_us=36.0,
        local_experts=8,
        mla=True,
        tp=2,
        shared=True,
    )
    assert got == pytest.approx((900e-6, 1872e-6))
    assert host_parts(moe=True, cuda_graphs="none", launch_us=36.0, local_experts=8) == (
        pytest.approx((720e-6, 1656e-6))
    )


def test_fp8_quantization_is_launched_from_cpp():
    """Qwen3-30B-A3B on EP 16 (8 local experts), tensorwise FP8 (current scaling: 2 kernels per
    GEMM input), eager, launch 36 us. Attention block: 20 op launches (720 us) + 4 inputs x 2 =
    8 quantization launches x 5 us (40 us) = 760 us. Expert block: 30 + 2*8 = 46 op launches
    (1,656 us) + 2*8 inputs x 2 = 32 quantization launches (160 us) = 1,816 us. Counted as op
    launches the quantization alone would add (8 + 32) x 36 us = 1,440 us a layer's forward."""
    got = host_parts(
        moe=True, cuda_graphs="none", launch_us=36.0, local_experts=8, recipe="tensorwise"
    )
    assert got == pytest.approx((760e-6, 1816e-6))


def test_a_dense_fp8_layer_quantizes_its_mlp_inputs_too():
    """A dense layer, MXFP8 (1 kernel per GEMM input), eager, launch 10 us: 20 + 6 = 26 op
    launches (260 us) + 6 inputs x 1 x 5 us (30 us) = 290 us; no expert block."""
    got = host_parts(moe=False, cuda_graphs="none", launch_us=10.0, recipe="mxfp8")
    assert got == pytest.approx((290e-6, 0.0))


def test_full_graphs_leave_no_host_time():
    assert host_parts(
        moe=True, cuda_graphs="full", launch_us=36.0, local_experts=8, recipe="tensorwise"
    ) == (0.0, 0.0)


def test_one_bucket_is_never_hidden():
    """A collective of 10 ms sent as 4 buckets behind a 100 ms window at 0.8: 10 - 80 < 0, but
    the last bucket (the first layers' gradients, ready when the backward ends) is exposed:
    10 / 4 = 2.5 ms. Behind a 5 ms window: max(2.5, 10 - 4) = 6 ms. One bucket: all 10 ms."""
    assert overlapped(10e-3, 4, 100e-3, 0.8) == pytest.approx(2.5e-3)
    assert overlapped(10e-3, 4, 5e-3, 0.8) == pytest.approx(6e-3)
    assert overlapped(10e-3, 1, 100e-3, 0.8) == pytest.approx(10e-3)


def test_a_single_micro_batch_step_exposes_one_bucket_of_each_collective():
    """ZeRO-1, 80M dense parameters over DP 4 on a link of 100 GB/s and 0 latency, fp32
    gradients, bf16 parameters, long compute windows. Buckets: max(40M, 4M) -> 2. The
    reduce-scatter moves 3/4 x 320 MB = 240 MB: 2.4 ms, one bucket 1.2 ms; the all-gather
    3/4 x 160 MB = 120 MB: 1.2 ms, one bucket 0.6 ms. Exposed: 1.2 + 0.6 = 1.8 ms (the window
    law alone said 0)."""
    link = Link(
        bandwidth=100e9,
        latency=0.0,
        crosses_network=False,
        local_ranks=4,
        nvlink_bandwidth=100e9,
        network_bandwidth=100e9,
    )
    assert dp_buckets(80e6, 4) == 2
    assert reduce_scatter_time(320e6, 4, link) == pytest.approx(2.4e-3)
    got = dp_exposed(
        zero=1,
        m=1,
        dense_params=80e6,
        expert_params=0.0,
        dp_link=link,
        dp_size=4,
        edp_link=link,
        edp_size=1,
        grad_bytes=4.0,
        window_fwd=1.0,
        window_bwd=2.0,
        hide=0.8,
    )
    assert got == pytest.approx(1.8e-3)

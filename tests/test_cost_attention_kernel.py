"""The attention kernel family (training.attention_kernel, cost.compute.attention_kernel_share):
FlashAttention-2 on Hopper against the generation's fused kernel, from the published rates."""

from __future__ import annotations

import pytest

from planner.config import config_from_data
from planner.cost import estimate
from planner.cost.compute import FLASH2_SHARE, attention_kernel_share
from planner.cost.shape import model_shape
from planner.frameworks.writing import header_lines


def test_the_share_is_the_published_rates_weighted_by_the_work():
    # forward: PyTorch SDPA's flash backend 329.483 TFLOPS against cuDNN's 631.338 on H100
    # (pytorch/pytorch#142132); backward: FlashAttention-3 is 1.5-1.75x FlashAttention-2
    # (arXiv:2407.08608), the middle 1.625; the backward does 2.5x the forward's work, so the
    # time of a forward and its backward at FA2's rates over the fused ones is
    #   (1/r_f + 2.5/r_b) / 3.5,   r_f = 0.5219, r_b = 0.6154
    r_f, r_b = 329.483 / 631.338, 1 / 1.625
    assert FLASH2_SHARE == pytest.approx(3.5 / (1 / r_f + 2.5 / r_b), rel=1e-12)
    assert FLASH2_SHARE == pytest.approx(0.585, abs=0.001)


@pytest.mark.parametrize(
    "kernel,arch,share",
    [
        ("fused", "hopper", 1.0),
        ("flash2", "hopper", FLASH2_SHARE),
        ("flash2", "blackwell", FLASH2_SHARE),  # the same SM80 code; Hopper's share
        ("flash2", "ampere", 1.0),  # FlashAttention-2 is Ampere's own kernel
        ("flash2", "cdna3", 1.0),
    ],
)
def test_share_by_generation(kernel, arch, share):
    assert attention_kernel_share(kernel, arch) == share


def _job(kernel: str, hardware: str = "h100-sxm"):
    return config_from_data(
        {
            "model": "8b",
            "hardware": hardware,
            "num_gpus": 8,
            "training": {"seq_length": 8192, "global_batch_size": 8, "attention_kernel": kernel},
            "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1},
        }
    )


def test_flash2_slows_only_the_attention_core_by_its_share():
    # one micro-batch of 8,192 tokens a GPU, no recompute: the attention core's forward is
    # L x attn_core(s) x T FLOPs, its backward 2.5x that, at peak x attention_efficiency
    # (x share with flash2); the step grows by exactly that core's time at the slower rate
    #   delta = 3.5 x core x (1 / (r x share) - 1 / r)
    job, lay = _job("fused")
    fused = estimate(job, lay).time
    slow = estimate(*_job("flash2")).time
    s = model_shape(job.model)
    core = s.L * s.attn_core(8192) * 8192
    r = job.hardware.peak_flops("bf16") * job.hardware.calibration.attention_efficiency
    delta = 3.5 * core * (1 / (r * FLASH2_SHARE) - 1 / r)
    assert slow.compute_s - fused.compute_s == pytest.approx(delta, rel=1e-9)
    assert slow.step_time_s - fused.step_time_s == pytest.approx(delta, rel=1e-9)
    # on Ampere FlashAttention-2 is the fused kernel: nothing moves
    a = estimate(*_job("fused", "a100-80g")).time.step_time_s
    assert estimate(*_job("flash2", "a100-80g")).time.step_time_s == pytest.approx(a, rel=1e-12)


def test_an_export_says_the_plan_counted_flash2():
    job, lay = _job("flash2")
    assert any("FlashAttention-2" in line for line in header_lines(job, lay, "test"))
    job, lay = _job("fused")
    assert not any("FlashAttention-2" in line for line in header_lines(job, lay, "test"))

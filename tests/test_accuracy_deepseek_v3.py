"""DeepSeek-V3's published pre-training recipe (examples/deepseek-v3-2048xh800.yaml) against the
report's cost: DeepSeek-V3 report (arXiv:2412.19437) Table 1 / §1, 180K H800 GPU-hours per
trillion training tokens, on 2,048 H800 with PP 16 DualPipe, one MTP layer (§4.2), EP 64
over 8 nodes (at most 4 nodes a token), FP8 blockwise, recompute of RMSNorm and the MLA
up-projections (§3.2.3; the FP8 inputs of the Linears after a norm regenerated in the
backward), the SwiGLU output
recomputed from its FP8-cached input and the attention output cached in E5M6 (§3.3.3), BF16
AdamW moments (§3.3.3), 4,096-token sequences and batches of 15,360 (§4.2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.calibration.intervals import memory_interval
from planner.config import load_config
from planner.cost import estimate

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "deepseek-v3-2048xh800.yaml"


def _estimate():
    job, lay = load_config(EXAMPLE)[:2]
    return job, lay, estimate(job, lay)


def test_the_example_is_the_published_recipe():
    job, lay, _ = _estimate()
    assert job.num_gpus == 2048 and job.hardware.name == "h800"
    assert (lay.tp, lay.pp, lay.ep, lay.dp) == (1, 16, 64, 128)
    assert lay.pipeline_schedule == "dualpipe" and lay.moe_token_dispatcher == "deepep"
    assert (job.model.moe_router_num_groups, job.model.moe_router_group_topk) == (8, 4)
    assert job.model.mtp_num_layers == 1  # §4.2: MTP depth D = 1
    assert job.training.recipe == "blockwise"
    assert (job.training.seq_length, job.training.global_batch_size) == (4096, 15360)
    assert (lay.exp_avg_dtype, lay.exp_avg_sq_dtype) == ("bf16", "bf16")
    assert set(lay.selective_modules) == {"layernorm", "mla_up_proj", "moe_act"}


@pytest.mark.xfail(
    strict=True,
    reason=(
        "16.5 s against 19.9 s (-17%): h800 takes h100-sxm's FP8 share, which h100-sxm's runs do "
        "not identify, at DeepGEMM's cited rate (0.68 of the FP8 peak, benchmarks/calibrate.py "
        "PRIOR) where the stale 0.45 bound gave 22.1 s (+11%). The pass rested on the bound; "
        "what the 2,048-GPU run spends beyond the model (14.0 s of compute, 1.2 s of exposed "
        "all-to-all, 0.6 s of DualPipe bubble) is not identified by any run of the data, none "
        "of which is on H800 or at this scale. The target itself is the cluster's wall-clock "
        "(180K GPU-hours per trillion tokens = 3.7 days on 2,048 H800, §1: checkpoints, "
        "evaluations and restarts in it, which a step time leaves out); the report gives no "
        "goodput, and at 90% the step it implies would be 17.9 s, -8% from this estimate"
    ),
)
def test_step_time_within_15_percent_of_the_reported_gpu_hours():
    # 180,000 GPU-hours per 1e12 tokens; a step is 15,360 x 4,096 = 62.9M tokens on 2,048
    # GPUs: 180e3 * 3600 s * 62.9e6 / 1e12 / 2048 = 19.9 s a step
    job, lay, est = _estimate()
    tokens = 15360 * 4096
    reported = 180e3 * 3600 * tokens / 1e12 / 2048
    assert reported == pytest.approx(19.9, abs=0.05)
    assert est.time.step_time_s == pytest.approx(reported, rel=0.15)


def test_the_example_caches_as_the_report_says():
    # §3.3.3 "Low-Precision Activation": the SwiGLU inputs in FP8 (outputs recomputed:
    # moe_act) and the input of the Linear after attention once in E5M6
    _, lay, _ = _estimate()
    assert lay.activation_func_fp8_input_store and lay.activation_cache == "deepseek"
    assert "moe_act" in lay.selective_modules


def test_the_low_precision_caches_shrink_only_the_activations():
    # the two storage fields against the same recipe without them, on the middle ranks (4 MoE
    # layers a stage, pp + 1 = 17 micro-batches of them in flight under DualPipe: 68 layer-
    # micro-batches of 4,096 tokens). Per token and layer (h 7168, a*d = 128*128, k 8 routed
    # copies of f_e 2048, one shared expert of f_s 2048; blockwise x = 1 + 4/128, which is
    # also DeepSeek's fine-grained FP8 store, 1x128 tiles with a scale each):
    #   attention output: 2 + x -> 1.5 + 4/128 bytes an element: 1.5 * 16,384 = 24,576
    #   SwiGLU inputs, 2 x 2 bytes -> 2 x (1 + 4/128) an element (the routed ones kept as fc1
    #     wrote them under Megatron's moe_act checkpoint): (8 + 1) * (4 - 2.0625) * 2048 = 35,712
    #   the FP8 copies of the recomputed RMSNorm outputs, q/kv-down's and the shared fc1's
    #     inputs, regenerated in the backward (§3.2.3): 2 * x * 7168 = 14,784
    job, lay, est = _estimate()
    plain = estimate(
        job, lay.with_(activation_func_fp8_input_store=False, activation_cache="te")
    ).memory
    mem = est.memory
    assert (mem.stage, plain.stage) == ("middle", "middle")
    for name in ("weights", "gradients", "optimizer"):
        assert getattr(mem, name) == getattr(plain, name), name
    x = 1 + 4 / 128
    per_token = 1.5 * 128 * 128 + 9 * (4 - 2 * x) * 2048 + 2 * x * 7168
    assert per_token == 75072
    assert plain.activations - mem.activations == pytest.approx(per_token * 4096 * 4 * 17, rel=1e-9)


def test_the_recipe_fits_in_80_gb():
    # The middle ranks hold 77.0 GiB of the H800's 79.1 usable (42.0 GiB of activations, with
    # the up-projections' Q, K, V that the first backward regenerates on top; 29.9 of model
    # states, 5.1 other): it fits by 2.1 GiB, 2.7%, well inside the estimate's 80% memory
    # interval (its top x1.23, the moe runs' widened off their calibrated ground): near the
    # edge, inside the model's own uncertainty. With Transformer Engine's caches instead
    # (activation_cache te: the attention output in bf16 plus its FP8 copy, the routed fc1
    # outputs in bf16 under moe_act, the FP8 copies of the norm outputs kept) it would not
    # fit (96.3 GiB).
    job, lay, est = _estimate()
    mem = est.memory
    assert mem.stage == "middle"
    assert mem.total <= mem.capacity < mem.total * memory_interval(job, lay).hi

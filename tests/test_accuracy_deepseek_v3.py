"""DeepSeek-V3's published pre-training recipe (examples/deepseek-v3-2048xh800.yaml) against the
report's cost: DeepSeek-V3 report (arXiv:2412.19437) Table 1 / §1, 180K H800 GPU-hours per
trillion training tokens, on 2,048 H800 with PP 16 DualPipe, EP 64 over 8 nodes (at most 4
nodes a token), FP8 blockwise, recompute of RMSNorm and the MLA up-projections (§3.2.3), the
SwiGLU output recomputed from its cached input (§3.3.3), BF16 AdamW moments (§3.3.3),
4,096-token sequences and batches of 15,360 (§4.2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
    assert job.training.recipe == "blockwise"
    assert (job.training.seq_length, job.training.global_batch_size) == (4096, 15360)
    assert (lay.exp_avg_dtype, lay.exp_avg_sq_dtype) == ("bf16", "bf16")
    assert set(lay.selective_modules) == {"layernorm", "mla_up_proj", "moe_act"}


def test_step_time_within_15_percent_of_the_reported_gpu_hours():
    # 180,000 GPU-hours per 1e12 tokens; a step is 15,360 x 4,096 = 62.9M tokens on 2,048
    # GPUs: 180e3 * 3600 s * 62.9e6 / 1e12 / 2048 = 19.9 s a step
    job, lay, est = _estimate()
    tokens = 15360 * 4096
    reported = 180e3 * 3600 * tokens / 1e12 / 2048
    assert reported == pytest.approx(19.9, abs=0.05)
    assert est.time.step_time_s == pytest.approx(reported, rel=0.15)


@pytest.mark.xfail(strict=True, reason=(
    "the recipe trains on 80 GB H800s, but the model keeps the MoE layers' cached activations "
    "in BF16 where DeepSeek-V3 caches them in FP8 (§3.3.3: the inputs of the Linear after "
    "attention and of the SwiGLU in FP8) and does not model its further memory savings (EMA "
    "on the CPU, shared embedding and output head with the MTP module, §3.2.3): ~97 GiB of "
    "79 on the middle ranks, 61 of them activations"))
def test_the_recipe_fits_in_80_gb():
    _, _, est = _estimate()
    assert est.memory.total <= est.memory.capacity

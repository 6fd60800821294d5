"""MoE and FP8 compute the fit used to absorb (issue 17): the transposed FP8 copy Transformer
Engine writes on Hopper, the router GEMM, the grouped GEMM's tile padding; and the fit's
prediction of a run keeping the micro-batch size the run states.

Every number is derived in the test (written out) or published (cited where used)."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.cost.compute import layer_times
from planner.cost.moe import GEMM_TILE_M, router_flops, tile_padded_tokens
from planner.cost.precision import QUANTIZE_BYTES, quantize_bytes
from planner.cost.shape import model_shape

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------ FP8 quantization bytes per element
# Transformer Engine docs, "Performance Considerations: Handling transposes": on Hopper a
# column-wise FP8 operand must be physically transposed; Blackwell reads it natively.
# Per element of a BF16 tensor quantized for the forward GEMM and the backward's wgrad:
#   delayed    read 2 (amax from the history) + write 1 (row-wise) [+ 1 transposed on Hopper]
#   tensorwise read 2 for the amax + read 2 + write 1 [+ 1 transposed on Hopper]
#   mxfp8      read 2 + two copies of 1 + 1/32 (E8M0 scale per 32): both layouts on any GPU
#   blockwise  read 2 twice (amax per block, then the cast) + write 1: 5, both layouts already
@pytest.mark.parametrize(
    "recipe, arch, expected",
    [
        ("delayed", "hopper", 2 + 1 + 1),
        ("delayed", "blackwell", 2 + 1),
        ("tensorwise", "hopper", 2 + 2 + 1 + 1),
        ("tensorwise", "blackwell", 2 + 2 + 1),
        ("mxfp8", "blackwell", 2 + 2 * (1 + 1 / 32)),
        ("mxfp8", "hopper", 2 + 2 * (1 + 1 / 32)),
        ("blockwise", "hopper", 2 + 2 + 1),
        ("tensorwise", None, 2 + 2 + 1),
    ],
    ids=lambda v: str(v),
)
def test_quantize_bytes_per_element(recipe, arch, expected):
    assert quantize_bytes(recipe, arch) == pytest.approx(expected)
    assert quantize_bytes(recipe, arch) >= QUANTIZE_BYTES[recipe]


# ------------------------------------------------------------------------- tile padding
@pytest.mark.parametrize("n", [128, 300, 2048, 5000], ids=lambda n: f"n{n}")
def test_tile_padding_is_the_mean_over_a_full_set_of_remainders(n):
    """Expert token counts N over 128 consecutive values centred on n (every remainder mod 128
    once, mean n - 0.5 + 0.5 = n): the mean of ceil(N/128)*128 is n + 127/2."""
    t = GEMM_TILE_M
    window = range(n - t // 2, n + t // 2)  # 128 values, mean n - 0.5
    mean_n = sum(window) / t
    mean_padded = sum(math.ceil(v / t) * t for v in window) / t
    assert mean_padded - mean_n == pytest.approx((t - 1) / 2)
    assert tile_padded_tokens(mean_n) == pytest.approx(mean_padded)


@pytest.mark.parametrize(
    "n, expected",
    [
        (1, 128.0),  # one token: a whole tile
        (64, 128.0),  # below (128 + 1)/2 = 64.5: one tile
        (2048, 2048 + 63.5),  # Qwen3-30B-A3B, 4,096 tokens x EP 8 x top-8 / 128 experts
        (0, 0.0),
    ],
    ids=["one", "half-tile", "qwen3-30b", "none"],
)
def test_tile_padded_tokens(n, expected):
    assert tile_padded_tokens(n) == pytest.approx(expected)


def test_tile_padding_slows_qwen3_30b_experts_by_the_padded_share():
    """Qwen3-30B-A3B on 8 B200 (EP 8, micro-batch 1 of 4,096 tokens): a local expert gets
    4096 * 8 * 8 / 128 = 2,048 tokens, so its GEMMs compute 2,111.5 rows: the expert rate is
    2048 / 2111.5 = 0.970 of the unpadded one."""
    from benchmarks.accuracy import load_all
    from planner.cost.model import CostModel

    case = next(
        c
        for c in load_all()
        if c.id == "mb-26.02-qwen3-30b-a3b-b200-8g-fp8mx-gbs512-mbs1-tp1pp1ep8"
    )
    cm = CostModel(case.job)
    lin, expert, _ = cm._rates(case.layout, 4096.0)
    s = cm.shape
    n_e = 4096 * 8 * 8 / 128
    size = 1 / (1 / s.f_e + 1 / n_e)  # etp 1
    half = cm.cal.matmul_half_size
    unpadded = lin / (1 / (1 / s.h + 1 / 4096.0)) * (1 / (1 / s.h + 1 / 4096.0) + half)
    # lin is the projection rate (with its size factor); undo it to the large-GEMM rate
    assert expert == pytest.approx(unpadded * size / (size + half) * 2048 / 2111.5)


# ------------------------------------------------------------------------------ router GEMM
def test_router_flops_qwen3_30b():
    """Qwen3-30B-A3B's router is hidden 2,048 x 128 experts: 2 * 2048 * 128 = 524,288 FLOPs a
    token forward."""
    assert router_flops(2048, 128) == 524_288
    assert router_flops(2048, 0) == 0.0


def test_router_time_adds_to_the_expert_block():
    """With no host time (host_mode ahead, no launches) and everything else zero-cost but a
    given GEMM rate, the router's r seconds add r to the forward and 2r to the backward."""
    from planner.presets import get_preset

    shape = model_shape(get_preset("qwen3-235b-a22b"))
    kw = dict(
        moe=True,
        tokens=4096.0,
        seq=4096,
        tp=1,
        recompute="none",
        gemm_flops_per_s=1e15,
        attn_flops_per_s=1e15,
        hbm_bytes_per_s=1e12,
        ew_factor=0.0,
        act_bytes_fwd=0.0,
    )
    base = layer_times(shape, **kw)
    r = 4096 * router_flops(shape.h, shape.E) / 5e14  # 4,096 tokens at 500 TFLOP/s
    with_router = layer_times(shape, router_s=r, **kw)
    assert with_router.fwd - base.fwd == pytest.approx(r)
    assert with_router.bwd - base.bwd == pytest.approx(2 * r)


# ----------------------------------------------------- the fit keeps a run's stated micro-batch
def test_fit_predicts_a_run_at_its_stated_micro_batch():
    """A run that states micro-batch 4 and leaves vpp to planner (Layout.auto = ('vpp',)) is
    predicted at micro-batch 4 under a refitted profile too: only the knobs it left out are
    chosen again (the fit used to reset the micro-batch to 1 as well)."""
    from benchmarks.accuracy import load_all
    from planner.calibration.fit import predict, with_values
    from planner.cost import estimate

    case = next(
        c
        for c in load_all()
        if c.id == "mb-26.04-qwen3-30b-a3b-b200-8g-fp8mx-gbs512-mbs4-tp1pp1ep8"
    )
    assert case.layout.micro_batch_size == 4 and "micro_batch_size" not in case.layout.auto
    hw = case.job.hardware
    same = with_values(hw, {"matmul_efficiency": hw.calibration.matmul_efficiency})
    direct = estimate(replace(case.job, hardware=same), case.layout).time.step_time_s
    assert predict(case, {hw.name: same}) == pytest.approx(direct)


def test_fp8_prior_is_the_cited_kernel_rate_inside_its_bounds():
    """The FP8 share a root profile takes where its runs do not identify it: DeepGEMM's
    1,350 TFLOPS (deepseek-ai/DeepGEMM README) of the H800's / H100 SXM's 1,979 dense FP8
    peak is 0.682, inside the fit's physical range."""
    from benchmarks.calibrate import BOUNDS, PRIOR

    value, _ = PRIOR["fp8_matmul_efficiency"]
    assert value == pytest.approx(1350 / 1979, abs=0.005)
    lo, hi = BOUNDS["fp8_matmul_efficiency"]
    assert lo < value < hi

"""FP8 recipes: which GEMMs run in FP8, at what rate, and the quantization work they add.

Transformer Engine (Megatron-LM, NeMo, Megatron-Bridge) and torchao (torchtitan) run the
linear layers' GEMMs (QKV, attention output, MLP or expert fc1/fc2, shared experts) at the
FP8 tensor-core peak; the attention core, the router and the output layer stay in BF16
(Megatron keeps the output layer unquantized; `--fp8-dot-product-attention` is not modelled).

Rate: a large FP8 GEMM reaches `fp8_matmul_efficiency` of the FP8 peak (a profile's fitted
parameter, like `matmul_efficiency` for BF16), times the recipe's factor:
    delayed, tensorwise  1.0   one scale per tensor: the plain FP8 GEMM
    mxfp8                1.0   Blackwell's block-scaled MMA runs at the FP8 rate
    blockwise            0.6   per-row / 1x128 scales: the scales are applied around the MMA
                               (DeepGEMM-style promotion, torchao rowwise); torchtitan's
                               Llama 3 70B runs (calibration-modern.yaml) get no speed-up
                               over BF16 from it while tensorwise gets 1.4x
Quantization traffic (HBM bytes per element quantized): reading the BF16 source (2) and
writing FP8 (1): delayed 3 (the amax comes from the previous step's history, fused in the
cast); tensorwise 5 (current scaling reads the tensor once more for its amax); mxfp8
2 + 2*(1 + 1/32) (row- and column-wise copies with their E8M0 scales in one pass); blockwise
5 (an amax per block, then both layouts). On Hopper a delayed or tensorwise FP8
tensor cannot be read column-wise by the tensor cores, so the cast also writes a transposed
FP8 copy for the backward GEMMs (wgrad reads the input and the output gradient column-wise,
dgrad the weight): +1 byte per element, delayed 4 and tensorwise 6 (`quantize_bytes`);
Blackwell reads FP8 column-wise natively and needs no transpose (Transformer Engine docs,
"Performance Considerations: Handling transposes": "Hopper: cannot efficiently access
elements in columnwise fashion, so columnwise tensors need to be physically transposed in
memory ... Blackwell: supports columnwise access natively, so no transpose is needed").
Quantized per layer and token: every linear
layer's input in forward and its output gradient in backward (weights are cast once per
step and cached, or kept in FP8 with fp8_param_gather).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.cost.shape import ModelShape

if TYPE_CHECKING:
    from planner.specs import HardwareSpec

__all__ = [
    "RECIPE_GEMM_FACTOR",
    "QUANTIZE_BYTES",
    "TRANSPOSE_ARCHITECTURES",
    "quantize_bytes",
    "linear_peak",
    "quantized_elements",
]

RECIPE_GEMM_FACTOR = {"delayed": 1.0, "tensorwise": 1.0, "mxfp8": 1.0, "blockwise": 0.6}
QUANTIZE_BYTES = {
    "delayed": 3.0,
    "tensorwise": 5.0,
    "mxfp8": 2.0 + 2.0 * (1 + 1 / 32),
    "blockwise": 5.0,
}
TRANSPOSE_ARCHITECTURES = ("hopper",)
"""GPU generations whose FP8 tensor cores read only row-wise (TN) operands: Transformer
Engine writes a transposed FP8 copy of each per-tensor-scaled tensor for the backward GEMMs."""


def quantize_bytes(recipe: str, architecture: str | None) -> float:
    """HBM bytes per element quantized: QUANTIZE_BYTES, plus the transposed 1-byte copy a
    delayed or tensorwise cast writes on Hopper (mxfp8 and blockwise already write
    both layouts)."""
    extra = recipe in ("delayed", "tensorwise") and architecture in TRANSPOSE_ARCHITECTURES
    return QUANTIZE_BYTES[recipe] + (1.0 if extra else 0.0)


def linear_peak(hw: HardwareSpec, recipe: str | None) -> float:
    """FLOP/s a large linear-layer GEMM reaches before its size factor: the BF16 (FP16) peak
    x matmul_efficiency, or the FP8 peak x fp8_matmul_efficiency x the recipe's factor."""
    cal = hw.calibration
    if recipe is None:
        return hw.peak_flops("bf16") * cal.matmul_efficiency
    return hw.peak_flops("fp8") * cal.fp8_matmul_efficiency * RECIPE_GEMM_FACTOR[recipe]


def quantized_elements(
    shape: ModelShape, *, moe: bool, etp: int = 1
) -> tuple[float, float, float, float]:
    """Elements quantized per token of one layer: (forward, backward) on the TP-sharded
    projections (divide by tp) and (forward, backward) on the routed expert copies (per token
    a rank holds, i.e. divide by tp only with SP). Forward: the inputs of QKV (h), the
    attention output projection (a*d), fc1 (h) and fc2 (f); backward their output gradients
    (the QKV width, h, the fc1 width, h). MoE layers: k*cf routed copies of h (all-gathered
    over etp) and f_e and their gradients; shared experts like a dense MLP."""
    h, q = shape.h, shape.attn_out
    qkv_out = shape.act_qkv / 2 if not shape.mla else 3 * q
    fc1 = 2 if shape.gated else 1
    fwd, bwd = float(h + q), float(qkv_out + h)
    if not moe:
        return fwd + h + shape.f, bwd + fc1 * shape.f + h, 0.0, 0.0
    if shape.f_s:
        fwd += h + shape.f_s
        bwd += fc1 * shape.f_s + h
    copies = shape.k * shape.capacity_factor
    return fwd, bwd, copies * (etp * h + shape.f_e), copies * (fc1 * shape.f_e + etp * h)

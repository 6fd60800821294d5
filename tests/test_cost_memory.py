"""The memory model against the published figures: ZeRO's model states,
Megatron's weight+optimizer formula, Korthikanti's activation ratios and their re-derivation
for flash attention, GQA and SwiGLU, and the pipeline's in-flight micro-batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.config import Job, default_training, resolve_hardware
from planner.cost import shape_of
from planner.cost.memory import (
    in_flight_layers,
    korthikanti_layer_bytes,
    layer_activation_bytes,
    megatron_weight_optimizer_bytes,
    state_bytes_per_param,
)
from planner.cost.model import CostModel
from planner.cost.params import padded_vocab
from planner.layout import Layout
from planner.presets import get_preset
from planner.specs import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION = ROOT / "benchmarks" / "data" / "calibration.yaml"
GiB = 2**30


# ------------------------------------------------------------------------------ model states


@pytest.mark.parametrize(
    "zero, gb",
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
    ids=["baseline", "zero1", "zero2", "zero3"],
)
def test_zero_figure_1(zero, gb):
    # Rajbhandari et al. 2020 (arXiv:1910.02054) Fig. 1: Psi = 7.5B, N_d = 64, K = 12,
    # fp16 weights + fp16 grads + 12-byte Adam states: (2+2+K)Psi = 120, 2Psi + 2Psi + K*Psi/N_d
    # = 31.4, 2Psi + (2+K)Psi/N_d = 16.6, (2+2+K)Psi/N_d = 1.9 GB (GB = 1e9 bytes).
    per_param = sum(state_bytes_per_param(zero=zero, shard=64, accounting="deepspeed"))
    assert per_param * 7.5e9 / 1e9 == pytest.approx(gb, abs=0.1)


def _model_states_cases():
    data = yaml.safe_load(CALIBRATION.read_text())
    return [pytest.param(c, id=c["id"]) for c in data["model_states"]]


@pytest.mark.parametrize("case", _model_states_cases())
def test_calibration_model_states(case):
    # benchmarks/data/calibration.yaml `model_states` (ZeRO Fig. 1 points, as published;
    # docs/reference/formulas.md#f1a-zero-stages)
    assert "deepspeed" in case["accounting"]
    per_param = sum(
        state_bytes_per_param(zero=case["zero_stage"], shard=case["dp"], accounting="deepspeed")
    )
    assert per_param * case["params"] / 1e9 == pytest.approx(case["expected_gb"], abs=0.1)


@pytest.mark.parametrize(
    "zero, d, want",
    [
        # docs/reference/formulas.md#f1b-megatron-lm-accounting (Megatron distributed-optimizer
        # docs): 18 bytes/param, or 6 + 12/d
        (0, 8, (2.0, 4.0, 12.0)),
        (1, 8, (2.0, 4.0, 1.5)),
        (2, 8, (2.0, 0.5, 1.5)),
        (3, 8, (0.25, 0.5, 1.5)),
    ],
    ids=["zero0", "zero1", "zero2", "zero3"],
)
def test_megatron_bytes_per_param(zero, d, want):
    assert state_bytes_per_param(zero=zero, shard=d, accounting="megatron") == pytest.approx(want)


# ------------------------------------------------------------------ Megatron weight+optimizer


def _llama3_70b_megatron_shard(tp: int, pp: int) -> float:
    """Params on the most loaded shard as Megatron's compute_weight_and_optimizer_memory
    counts them (theoretical_memory_usage.py): h 8192, L 80, a 64, g 8, q = 8192, f 28672,
    SwiGLU (x 3/2), LayerNorm counted 2h per norm (2 per layer) and 2h for the final norm:
      transformer = 2*L*h^2*[(1 + g/a)*(q/h) + (f/h)*3/2 + 2/h + 1/(L*h)]
                  = 2*80*8192^2*[1.125 + 5.25 + 2/8192 + 1/655360] = 68,453,679,104
      embedding   = h*V_padded, V padded to a multiple of 128*tp: 128256 -> 128512 (tp 4)
                  = 8192*128512 = 1,052,770,304
      shard       = (transformer/pp + embedding)/tp"""
    h, L, a, g, q, f = 8192, 80, 64, 8, 8192, 28672
    transformer = 2 * L * h * h * ((1 + g / a) * (q / h) + (f / h) * 1.5 + 2 / h + 1 / (L * h))
    embedding = h * padded_vocab(128256, tp)
    return (transformer / pp + embedding) / tp


def test_megatron_weight_and_optimizer_formula_llama3_70b():
    # Llama-3-70B, TP4 PP4 VP5 CP2 on 64 GPUs: dp = 64/(4*4*2) = 2. Megatron's formula shards
    # the optimizer over dp only: 6 + 12/2 = 12 bytes/param.
    # shard = (68,453,679,104/4 + 1,052,770,304)/4 = 4,541,547,520 params
    # x 12 bytes = 54,498,570,240 B = 50.76 GiB
    shard = _llama3_70b_megatron_shard(tp=4, pp=4)
    assert shard == pytest.approx(4_541_547_520, rel=1e-9)
    got = megatron_weight_optimizer_bytes(params_on_rank=shard, dp=2)
    assert got / GiB == pytest.approx(50.76, abs=0.005)
    assert megatron_weight_optimizer_bytes(
        params_on_rank=shard, dp=2, distributed_optimizer=False
    ) == pytest.approx(18 * shard)


def test_planner_shards_the_optimizer_over_dp_times_cp():
    # What planner reports for that layout (ZeRO-1 = the distributed optimizer): Megatron's
    # code shards the optimizer over the dp*cp group (4 ranks here), not dp (2), so
    # 6 + 12/4 = 9 bytes/param, not 12.
    # Planner's own count of the first stage's shard (20 layers + embedding):
    #   attention h*(q + 2dg) + q*h = 8192*10240 + 8192^2 = 150,994,944  (/tp)
    #   MLP 3*h*f = 704,643,072                                         (/tp)
    #   RMSNorm h per norm, 2 per layer, replicated on every TP rank     (not /tp)
    #   embedding 128512*8192                                            (/tp)
    # Megatron counts LayerNorm's 2h per norm, divided by tp like the rest: 20*4h/4 = 163,840
    # params on this shard instead of planner's 20*2h = 327,680 (+0.004%), and the final norm
    # spread over every stage; both far below 1%.
    m = get_preset("llama3-70b")
    job = Job(
        model=m,
        hardware=resolve_hardware("h100-sxm"),
        num_gpus=64,
        training=default_training(m, seq_length=8192, global_batch_size=128),
    )
    lay = Layout(tp=4, cp=2, dp=2, pp=4, vpp=5, etp=4, sp=True, tp_comm_overlap=True, zero=1)
    assert lay.world_size == 64 and lay.optimizer_shard == 4
    mem = CostModel(job).memory(lay)
    states = mem.weights + mem.gradients + mem.optimizer
    h, q, d, g, f = 8192, 8192, 128, 8, 28672
    planner_shard = 20 * ((h * (q + 2 * d * g) + q * h + 3 * h * f) / 4 + 2 * h) + 128512 * h / 4
    assert states == pytest.approx((6 + 12 / 4) * planner_shard, rel=0.01)
    megatron_shard = _llama3_70b_megatron_shard(tp=4, pp=4)
    assert planner_shard == pytest.approx(megatron_shard, rel=1e-4)
    # 9/12 of Megatron's formula: about 38.07 GiB instead of 50.76 GiB
    assert states / GiB == pytest.approx(38.07, abs=0.01)
    assert states < megatron_weight_optimizer_bytes(params_on_rank=megatron_shard, dp=2)


# ------------------------------------------------------------------------------ activations


@pytest.mark.parametrize(
    "sp, recompute, percent",
    [
        (True, "none", 62),
        (False, "selective", 57),
        (True, "selective", 18),
        (False, "full", 9),
    ],
    ids=["tp+sp", "tp+selective", "tp+sp+selective", "full"],
)
def test_korthikanti_figure_7_ratios(sp, recompute, percent):
    # Korthikanti et al. 2022 (arXiv:2205.05198) Fig. 7, GPT-3 175B, t = 8, s = 2048, a = 96,
    # h = 12288: activation memory per layer as % of tensor parallelism alone. From Table 2:
    # TP alone sbh(10 + 24/8 + 5*96*2048/(12288*8)) = 23 sbh; TP+SP 14.25 sbh (62%);
    # TP+selective 13 sbh (57%); TP+SP+selective 4.25 sbh (18%); full 2 sbh (9%).
    kw = dict(s=2048, b=1, h=12288, a=96, t=8)
    base = korthikanti_layer_bytes(sp=False, recompute="none", **kw)
    assert base == pytest.approx(23 * 2048 * 12288)
    ratio = korthikanti_layer_bytes(sp=sp, recompute=recompute, **kw) / base
    assert 100 * ratio == pytest.approx(percent, abs=1.5)


def _mha_gelu() -> ModelSpec:
    """GPT-3 175B's layer shape (Brown et al. 2020 Table 2.1): MHA, 4h GELU MLP."""
    return get_preset("gpt3-175b")


def test_mha_gelu_without_flash_matches_korthikanti_within_the_softmax_stats():
    # Korthikanti Table 2, no parallelism: sbh(34 + 5as/h), of which 2 sbh are the two 1-byte
    # dropout masks planner leaves out (memory.py: dropout 0): (34 - 2)sbh + 5as^2b.
    # planner per token: 8h (2 norm inputs + 2 GEMM inputs) + 6h (Q, K, V) + 2h (attention
    # output) + 4a (fp32 softmax stats) + 16h (GELU in and out, 2*4h each) + 5as = 32h + 4a + 5as.
    # The 4a stats are what flash attention keeps; they are 4a/(32h) = 1/(8d) = 0.1% (d = 128).
    shape = shape_of(_mha_gelu())
    h, a, s, b = shape.h, shape.a, 2048, 1
    got = layer_activation_bytes(
        shape, tokens=s * b, seq=s, t=1, sp=False, recompute="none", flash=False, moe=False
    )
    korthikanti = (34 - 2) * s * b * h + 5 * a * s * s * b
    assert got == pytest.approx(korthikanti, rel=1 / (8 * 128))
    assert got >= korthikanti


def test_mha_gelu_without_flash_equals_korthikanti_minus_dropout_masks():
    # The exact identity the docstring claims: (34 - 2)sbh + 5as^2b.
    shape = shape_of(_mha_gelu())
    h, a, s, b = shape.h, shape.a, 2048, 2
    got = layer_activation_bytes(
        shape, tokens=s * b, seq=s, t=1, sp=False, recompute="none", flash=False, moe=False
    )
    assert got == (34 - 2) * s * b * h + 5 * a * s * s * b


@pytest.mark.parametrize("s, b", [(2048, 1), (4096, 2), (8192, 1)], ids=["s2k", "s4k-b2", "s8k"])
def test_flash_attention_drops_exactly_the_score_term(s, b):
    # With flash attention the s x s scores, softmax and dropout (5as per token) are never
    # stored; everything else is the same.
    # stored; flash attention keeps instead its fp32 softmax statistics (4a bytes per token).
    shape = shape_of(_mha_gelu())
    kw = dict(tokens=s * b, seq=s, t=1, sp=False, recompute="none", moe=False)
    no_flash = layer_activation_bytes(shape, flash=False, **kw)
    flash = layer_activation_bytes(shape, flash=True, **kw)
    assert no_flash - flash == pytest.approx(
        5 * shape.a * s * s * b - 4 * shape.a * s * b, rel=1e-12
    )


@pytest.mark.parametrize("key", ["gpt3-175b", "llama3-70b", "llama3-405b"])
@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("flash", [True, False], ids=["flash", "no-flash"])
def test_sequence_parallel_divides_everything_by_t(key, t, flash):
    # Korthikanti Table 2: with TP + SP every term of sbh(34/t + 5as/(ht)) is divided by t.
    shape = shape_of(get_preset(key))
    s = 4096
    kw = dict(tokens=s, seq=s, recompute="none", flash=flash, moe=False)
    alone = layer_activation_bytes(shape, t=1, sp=False, **kw)
    assert layer_activation_bytes(shape, t=t, sp=True, **kw) == pytest.approx(alone / t, rel=1e-12)
    # without SP the 8h outside the TP region (norm and GEMM inputs) stays whole
    no_sp = layer_activation_bytes(shape, t=t, sp=False, **kw)
    assert no_sp == pytest.approx(alone / t + 8 * shape.h * s * (1 - 1 / t), rel=1e-12)


def test_gqa_swiglu_rederivation_llama3_70b():
    # Re-derived per token (docs/reference/formulas.md#f3a-bytes-per-layer: the 34 has to be
    # worked out again for GQA and SwiGLU), flash, 16-bit, Llama-3-70B: h 8192, a 64, g 8,
    # d 128, q 8192, f 28672:
    #   norm inputs 2*2h + QKV and fc1 inputs 2*2h         = 8h        =  65,536
    #   Q 2q, K and V 2*2gd                                 = 2*10240   =  20,480
    #   attention output 2q                                 =              16,384
    #   softmax stats 4a (fp32)                             =                 256
    #   gate and up 2*2f, SiLU*up 2f                        = 6f        = 172,032
    #   total                                                           = 274,688 bytes/token
    shape = shape_of(get_preset("llama3-70b"))
    got = layer_activation_bytes(
        shape, tokens=8192, seq=8192, t=1, sp=False, recompute="none", flash=True, moe=False
    )
    assert got == pytest.approx(274_688 * 8192, rel=1e-12)
    # selective recompute drops the attention core's saved state (the stats); full keeps 2h
    sel = layer_activation_bytes(
        shape, tokens=8192, seq=8192, t=1, sp=False, recompute="selective", flash=True, moe=False
    )
    assert sel == pytest.approx((274_688 - 256) * 8192, rel=1e-12)
    full = layer_activation_bytes(
        shape, tokens=8192, seq=8192, t=8, sp=True, recompute="full", flash=True, moe=False
    )
    assert full == pytest.approx(2 * 8192 * 8192 / 8, rel=1e-12)


# ------------------------------------------------------------------------------ pipeline


@pytest.mark.parametrize(
    "p, m",
    [(4, 4), (4, 64), (8, 4), (16, 16), (16, 8), (1, 32)],
    ids=["p4-m4", "p4-m64", "p8-m4", "p16-m16", "p16-m8", "p1"],
)
def test_1f1b_first_stage_holds_min_m_p_micro_batches(p, m):
    # docs/reference/formulas.md#f3b-micro-batches-in-flight: 1F1B's first stage holds
    # min(p, m) micro-batches in flight, each of L/p layers: about L layers' worth of one
    # micro-batch when m >= p.
    L = 80 if p != 16 else 128
    per_stage = L / p
    assert in_flight_layers(layers=1, p=p, v=1, m=m, rank=0) == min(m, p)
    assert in_flight_layers(layers=per_stage, p=p, v=1, m=m, rank=0) == pytest.approx(
        per_stage * min(m, p)
    )
    if m >= p:
        assert in_flight_layers(layers=per_stage, p=p, v=1, m=m, rank=0) == pytest.approx(L)


@pytest.mark.parametrize(
    "L, p, v",
    [(80, 4, 5), (96, 8, 4), (128, 16, 8), (32, 2, 2)],
    ids=["L80-p4-v5", "L96-p8-v4", "L128-p16-v8", "L32-p2-v2"],
)
def test_interleaved_first_rank_uses_megatrons_factor(L, p, v):
    # Megatron theoretical_memory_usage.py: interleaved schedule penalty 1 + (p-1)/(p*v) on
    # L layers' worth of activations for the first rank (with m large enough: m >= p).
    got = in_flight_layers(layers=L / p, p=p, v=v, m=4 * p, rank=0)
    assert got == pytest.approx(L * (1 + (p - 1) / (p * v)), rel=1e-12)
    # the last rank holds (v-1)p + 1 chunks of L/(p*v) layers
    last = in_flight_layers(layers=L / p, p=p, v=v, m=4 * p, rank=p - 1)
    assert last == pytest.approx(L / (p * v) * ((v - 1) * p + 1), rel=1e-12)

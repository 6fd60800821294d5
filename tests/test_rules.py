"""Every rule (error and warning) against a case that triggers it and one that does not.

Contexts are built directly (Job, Layout, Context), so each case states exactly the degrees it
means; the expected messages name the values and the fix. Defaults: Llama 3 70B (80 layers,
64 heads, 8 KV heads) on h100-sxm (8-GPU NVLink domain), 64 GPUs, seq 8192, global batch 1024.
"""

from __future__ import annotations

import re

import pytest

from planner.config import Job, default_training, resolve_hardware
from planner.cost.memory import MemoryBreakdown
from planner.layout import Layout
from planner.presets import get_preset
from planner.rules import DEFAULT_HEADROOM, RULES, WARNINGS, Context, check, rule_ids
from planner.specs import ModelSpec
from planner.units import GiB

ERROR_IDS = {rid for rid, _ in RULES}
WARNING_IDS = {rid for rid, _ in WARNINGS}

# 12 heads, 4 KV heads: tp 6 divides the heads but neither divides the other with the KV heads
GQA_12_4 = ModelSpec(
    name="gqa-12-4",
    num_layers=12,
    hidden_size=768,
    num_attention_heads=12,
    num_kv_heads=4,
    vocab_size=32000,
    activation="swiglu",
)


def _memory(weights, gradients, optimizer, activations, other, capacity, stage="first"):
    """A MemoryBreakdown from GiB figures."""
    return MemoryBreakdown(
        weights * GiB,
        gradients * GiB,
        optimizer * GiB,
        activations * GiB,
        other * GiB,
        capacity * GiB,
        stage,
    )


def make_context(
    *,
    model="llama3-70b",
    hardware="h100-sxm",
    num_gpus=64,
    seq_length=8192,
    global_batch_size=1024,
    precision="bf16",
    memory=None,
    headroom=DEFAULT_HEADROOM,
    fp8_recipe=None,
    fp8_param_gather=False,
    cross_entropy="vocab_parallel",
    loss_parallel=True,
    **layout,
) -> Context:
    """Job from the keyword arguments; every other keyword is a Layout field. dp defaults to
    num_gpus // (tp*cp*pp) (floored, as layout_from_spec does)."""
    m = get_preset(model) if isinstance(model, str) else model
    job = Job(
        model=m,
        hardware=resolve_hardware(hardware),
        num_gpus=num_gpus,
        training=default_training(
            m,
            seq_length=seq_length,
            global_batch_size=global_batch_size,
            precision=precision,
            fp8_recipe=fp8_recipe,
            fp8_param_gather=fp8_param_gather,
            cross_entropy=cross_entropy,
            loss_parallel=loss_parallel,
        ),
    )
    mp = layout.get("tp", 1) * layout.get("cp", 1) * layout.get("pp", 1)
    layout.setdefault("dp", max(1, num_gpus // mp))
    return Context(
        model=job.model,
        hardware=job.hardware,
        training=job.training,
        num_gpus=job.num_gpus,
        layout=Layout(**layout),
        memory=memory,
        headroom=headroom,
    )


# (rule id, context keywords, substrings the message must contain)
TRIGGERED = [
    # ---- production recipe settings (Megatron's TransformerConfig and arguments checks)
    pytest.param(
        "pipeline-layout",
        dict(tp=8, pp=4, pipeline_model_parallel_layout="Et*20|t*20|t*20|t*19L"),
        ["has 79 decoder layers (t), but num_layers is 80"],
        id="layout/79-layers",
    ),
    pytest.param(
        "pipeline-layout",
        dict(tp=8, pp=4, pipeline_model_parallel_layout="Et*40|t*40L"),
        ["has 2 stages, which pp (4) does not divide"],
        id="layout/2-stages-pp4",
    ),
    pytest.param(
        "pipeline-layout",
        dict(tp=8, pp=2, vpp=1, pipeline_model_parallel_layout="Et*20|t*20|t*20|t*20L"),
        ["has 4 stages = pp 2 x vpp 2, but vpp is 1"],
        id="layout/vpp-mismatch",
    ),
    pytest.param(
        "pipeline-layout",
        dict(tp=8, pp=2, pipeline_model_parallel_layout="Et*40|(t*40L"),
        ["unbalanced", "use E (embedding)"],
        id="layout/unbalanced",
    ),
    pytest.param(
        "fp8-settings",
        dict(tp=8, fp8_recipe="tensorwise"),
        ["fp8_recipe need precision fp8 (precision is bf16)"],
        id="fp8/recipe-on-bf16",
    ),
    pytest.param(
        "fp8-settings",
        dict(tp=8, precision="fp8", fp8_recipe="mxfp8"),
        ["fp8_recipe mxfp8 needs Blackwell tensor cores (h100-sxm is hopper)"],
        id="fp8/mxfp8-on-h100",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="selective", recompute_modules=("torchtitan_op", "mlp")),
        [
            "torchtitan_op (torchtitan's op-level checkpointing) is a policy of its own",
            "not a module to combine with mlp",
        ],
        id="recompute/op-sac-with-mlp",
    ),
    pytest.param(
        "loss-settings",
        dict(tp=8, loss_parallel=False),
        ["loss_parallel false needs cross_entropy pytorch_fp32"],
        id="loss/gathered-megatron-loss",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="full", recompute_modules=("mlp",)),
        ["recompute_modules (mlp) need recompute selective (recompute is full)"],
        id="recompute/modules-with-full",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="selective", recompute_num_layers=2),
        ["recompute_num_layers (2) needs recompute full"],
        id="recompute/layers-with-selective",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="selective", recompute_modules=("mla_up_proj",)),
        ["mla_up_proj needs multi-latent attention"],
        id="recompute/mla-on-gqa",
    ),
    pytest.param(
        "cpu-offloading",
        dict(tp=8, pp=2, cpu_offloading_num_layers=4),
        ["cpu_offloading_num_layers (4) does not work with pp > 1"],
        id="offload/pp2",
    ),
    pytest.param(
        "cpu-offloading",
        dict(tp=8, cpu_offloading_num_layers=80),
        ["must be below num_layers (80); try 79"],
        id="offload/all-layers",
    ),
    pytest.param(
        "moe-comm-overlap",
        dict(
            model="mixtral-8x7b",
            tp=1,
            ep=8,
            overlap_moe_expert_parallel_comm=True,
            moe_token_dispatcher="allgather",
        ),
        ["allgather cannot overlap"],
        id="moe-overlap/allgather",
    ),
    pytest.param(
        "moe-comm-overlap",
        dict(
            model="mixtral-8x7b",
            tp=1,
            ep=1,
            overlap_moe_expert_parallel_comm=True,
            moe_token_dispatcher="alltoall",
        ),
        ["ep > 1 (ep is 1)"],
        id="moe-overlap/ep1",
    ),
    pytest.param(
        "moe-pad-capacity",
        dict(
            model="mixtral-8x7b",
            tp=1,
            ep=8,
            moe_pad_expert_input_to_capacity=True,
            moe_token_dispatcher="deepep",
        ),
        ["needs the alltoall dispatcher (moe_token_dispatcher is deepep)"],
        id="moe-pad/deepep",
    ),
    pytest.param(
        "moe-pad-capacity",
        dict(tp=8, moe_pad_expert_input_to_capacity=True, moe_token_dispatcher="alltoall"),
        ["needs a MoE model"],
        id="moe-pad/dense",
    ),
    # ---- errors
    pytest.param(
        "world-size",
        dict(tp=8, pp=3),
        ["num_gpus (64) must be divisible by tp*pp*cp (8*3*1 = 24)", "try pp 1, 2, 4 or 8"],
        id="world-size/pp-3-on-64",
    ),
    # docs/reference/framework-rules.md#real-configurations: NeMo 2's Llama 3 70B recipe
    # (TP4 PP4 VP5 CP2) on one node of 8 GPUs is invalid
    pytest.param(
        "world-size",
        dict(num_gpus=8, tp=4, pp=4, vpp=5, cp=2),
        ["num_gpus (8) must be divisible by tp*pp*cp (4*4*2 = 32)"],
        id="world-size/nemo2-70b-on-8",
    ),
    pytest.param(
        "world-size",
        dict(tp=8, dp=4),
        ["dp (4) must equal num_gpus / (tp*pp*cp) = 64 / 8 = 8", "set dp 8"],
        id="world-size/dp-mismatch",
    ),
    pytest.param(
        "heads-divisible-by-tp",
        dict(tp=3),
        ["num_attention_heads (64) must be divisible by tp (3); try tp 1, 2, 4, 8, 16, 32 or 64"],
        id="heads/tp-3",
    ),
    # divisors of 12 that 4 divides or that divide 4: 1, 2, 4, 12
    pytest.param(
        "kv-heads-vs-tp",
        dict(model=GQA_12_4, num_gpus=6, tp=6),
        ["num_kv_heads (4) and tp (6) must divide one another; try tp 1, 2, 4 or 12"],
        id="kv/4-vs-6",
    ),
    pytest.param(
        "precision-supported",
        dict(hardware="a100-80g", precision="fp8", tp=8),
        ["precision fp8", "a100-80g", "use precision bf16"],
        id="precision/fp8-on-a100",
    ),
    # 27 + 26 + 27 = 80
    pytest.param(
        "layers-divisible",
        dict(tp=8, pp=3, num_gpus=48),
        [
            "num_layers (80) must be divisible by pp (3)",
            "first_stage_layers 27, last_stage_layers 27",
        ],
        id="layers/80-over-pp3",
    ),
    # 80/4 = 20 layers per rank; divisors of 20 up to 16
    pytest.param(
        "layers-divisible",
        dict(tp=8, pp=4, vpp=3, num_gpus=32),
        [
            "layers per pipeline rank (20 = 80/4) must be divisible by vpp (3); try vpp 1, 2, 4, 5 or 10"
        ],
        id="layers/vpp-3",
    ),
    # 126 - 7 - 8 = 111 over 8 middle ranks = 13.875; hint 15 + 8*12 + 15 = 126
    pytest.param(
        "layers-divisible",
        dict(
            model="llama3-405b", num_gpus=80, tp=8, pp=10, first_stage_layers=7, last_stage_layers=8
        ),
        [
            "num_layers (126) does not split as first 7 + 8 x middle + last 8",
            "first_stage_layers 15, last_stage_layers 15",
        ],
        id="layers/uneven-not-whole",
    ),
    pytest.param(
        "layers-divisible",
        dict(tp=8, first_stage_layers=4),
        ["first_stage_layers/last_stage_layers need pp > 1"],
        id="layers/uneven-without-pp",
    ),
    # pp 2 has no middle rank: first + last must be all 80 layers
    pytest.param(
        "layers-divisible",
        dict(tp=8, pp=2, first_stage_layers=30, last_stage_layers=30),
        [
            "first_stage_layers (30) + last_stage_layers (30) must equal num_layers (80) with pp 2",
            "first_stage_layers 40, last_stage_layers 40",
        ],
        id="layers/uneven-pp2-short",
    ),
    # 7 + 14x8 + 7 with the embedding and the loss as layers: (126 + 2) % (16*3) != 0
    pytest.param(
        "layers-divisible",
        dict(
            model="llama3-405b",
            num_gpus=128,
            tp=8,
            pp=16,
            vpp=3,
            first_stage_layers=7,
            last_stage_layers=7,
        ),
        ["num_layers + 2 (128", "pp*vpp (16*3)"],
        id="layers/accounted-vpp",
    ),
    # 6 + 14x8 + 8 is not the accounting form: each rank's count must split into vpp chunks
    pytest.param(
        "layers-divisible",
        dict(
            model="llama3-405b",
            num_gpus=128,
            tp=8,
            pp=16,
            vpp=4,
            first_stage_layers=6,
            last_stage_layers=8,
        ),
        ["first_stage_layers (6) must be divisible by vpp (4)"],
        id="layers/uneven-vpp",
    ),
    pytest.param("vpp-needs-pp", dict(tp=8, vpp=2), ["vpp (2) needs pp > 1"], id="vpp/pp-1"),
    # 1000 = 15*64 + 40: the neighbours are 960 and 1024
    pytest.param(
        "batch-divisible",
        dict(num_gpus=512, tp=8, global_batch_size=1000),
        [
            "global_batch_size (1000) must be a multiple of micro_batch_size*dp (1*64 = 64); "
            "try global_batch_size 960 or 1024"
        ],
        id="batch/1000-over-64",
    ),
    pytest.param(
        "batch-divisible",
        dict(num_gpus=512, tp=8, micro_batch_size=2, global_batch_size=64),
        [
            "global_batch_size (64) must be a multiple of micro_batch_size*dp (2*64 = 128); "
            "try global_batch_size 128"
        ],
        id="batch/below-one-microbatch",
    ),
    # m = 6 / (1*2) = 3 < pp 4
    pytest.param(
        "vpp-needs-microbatches",
        dict(tp=8, pp=4, vpp=5, global_batch_size=6),
        ["interleaved schedule (vpp 5) needs num_microbatches (3) >= pp (4)"],
        id="vpp/3-microbatches",
    ),
    # 8190 = 2 * 4095 = 2 * 3^2 * 5 * 7 * 13: cp 3 gives 8190 % 6 == 0
    pytest.param(
        "seq-divisible-by-cp",
        dict(tp=8, cp=2, seq_length=8190),
        ["seq_length (8190) must be divisible by 2*cp (4)", "try cp 1, 3, 5, 7, 9"],
        id="cp/seq-8190",
    ),
    # an odd length splits for no cp > 1
    pytest.param(
        "seq-divisible-by-cp",
        dict(tp=8, cp=2, seq_length=8191),
        ["seq_length (8191) must be divisible by 2*cp (4); try cp 1"],
        id="cp/odd-seq",
    ),
    # Gemma 3's 1,024-token windows on five of six layers, cp 2 on the p2p ring: Transformer
    # Engine's context-parallel attention asserts the window needs a2a or all_gather
    pytest.param(
        "cp-sliding-window",
        dict(model="gemma-3-12b", tp=2, cp=2, seq_length=32768, global_batch_size=64),
        ["cp 2 with cp_comm_type p2p and 1024-token sliding-window layers", "set cp_comm_type a2a"],
        id="cp/window-p2p",
    ),
    # DeepSeek-V3.2's DSA layers with cp 2 on the ring: Megatron-Core's DSAttention asserts
    # cp_comm_type allgather
    pytest.param(
        "cp-dsa",
        dict(model="deepseek-v3.2", tp=8, cp=2, seq_length=32768, global_batch_size=64),
        ["cp 2 with cp_comm_type p2p and DSA layers", "set cp_comm_type allgather"],
        id="cp/dsa-p2p",
    ),
    pytest.param(
        "seq-divisible-by-tp",
        dict(tp=8, sp=True, seq_length=8190),
        ["seq_length/cp (8190/1) must be divisible by tp (8) with sequence_parallel"],
        id="sp/seq-8190",
    ),
    pytest.param(
        "overlap-flags",
        dict(tp=8, sp=False, tp_comm_overlap=True),
        ["tp_comm_overlap needs sequence_parallel"],
        id="overlap/tp-comm-without-sp",
    ),
    pytest.param(
        "overlap-flags",
        dict(tp=8, sp=True, overlap_grad_reduce=False),
        ["overlap_param_gather needs overlap_grad_reduce"],
        id="overlap/param-gather-without-grad",
    ),
    pytest.param(
        "experts-divisible-by-ep",
        dict(model="mixtral-8x7b", tp=2, sp=True, ep=3),
        ["num_experts (8) must be divisible by ep (3); try ep 1, 2, 4 or 8"],
        id="ep/8-experts-ep-3",
    ),
    pytest.param(
        "experts-divisible-by-ep",
        dict(tp=8, ep=2),
        ["ep (2) > 1 needs an MoE model (Llama 3 70B has no experts); set ep 1"],
        id="ep/dense-model",
    ),
    # etp*ep*pp = 4*8*1 = 32 does not divide 48
    pytest.param(
        "expert-grid",
        dict(model="mixtral-8x7b", num_gpus=48, tp=4, sp=True, ep=8, etp=4),
        ["num_gpus (48) must be divisible by etp*ep*pp (4*8*1 = 32)"],
        id="grid/48-gpus",
    ),
    pytest.param(
        "moe-needs-sp",
        dict(model="mixtral-8x7b", tp=2, ep=2, sp=False),
        ["MoE with ep (2) > 1 and tp (2) > 1 needs sequence_parallel"],
        id="moe-sp/off",
    ),
    # 10+20+30+25+5 = 90 GiB against 80*(1+0.10) = 88 GiB: beyond the estimate's uncertainty
    pytest.param(
        "fits-in-memory",
        dict(tp=8, memory=_memory(10, 20, 30, 25, 5, 80)),
        [
            "memory per GPU (90.0 GiB on the first pipeline rank, 112%) exceeds the 80.0 GiB the "
            "GPU has by 10.0 GiB, beyond the estimate's 10% uncertainty"
        ],
        id="memory/over-by-10",
    ),
    # ---- warnings
    # 10+20+30+15+5 = 80 GiB against 80*(1-0.05) = 76 GiB: at the edge
    pytest.param(
        "memory-near-capacity",
        dict(tp=8, memory=_memory(10, 20, 30, 15, 5, 80)),
        [
            "memory per GPU (80.0 GiB on the first pipeline rank) is 100% of the 80.0 GiB the GPU "
            "has, within it and inside the 5% headroom (76.0 GiB) by 4.0 GiB",
            "may not fit",
        ],
        id="memory/edge-by-4",
    ),
    # 73 GiB against 80*(1-0.10) = 72 GiB
    pytest.param(
        "memory-near-capacity",
        dict(tp=8, headroom=0.10, memory=_memory(10, 20, 30, 8, 5, 80, "last")),
        ["(73.0 GiB on the last pipeline rank)", "10% headroom (72.0 GiB) by 1.0 GiB"],
        id="memory/headroom-10pct",
    ),
    pytest.param("sp-needs-tp", dict(tp=1, sp=True), ["sequence_parallel with tp 1"], id="sp/tp-1"),
    pytest.param(
        "tp-crosses-node",
        dict(tp=16),
        ["tp (16) spans more than one NVLink domain (8 GPUs on h100-sxm)", "keep tp <= 8"],
        id="tp/16-on-h100",
    ),
    pytest.param(
        "tp-above-8", dict(hardware="gb200-nvl72", tp=16), ["tp (16) > 8"], id="tp/16-on-nvl72"
    ),
    # m = 30 / 2 = 15 < 4*4
    pytest.param(
        "microbatches-below-4p",
        dict(tp=8, pp=4, global_batch_size=30),
        ["num_microbatches (15) < 4*pp (16)"],
        id="m/15-for-pp4",
    ),
    # deepseek-ai/DualPipe DualPipe.step: num_chunks % 2 == 0 and num_chunks >= num_ranks * 2;
    # pp 8 at dp 1 with a batch of 14: m = 14 < 16
    pytest.param(
        "dualpipe-shape",
        dict(tp=8, pp=8, pipeline_schedule="dualpipe", global_batch_size=14),
        ["pipeline_schedule dualpipe", "at least 2*pp = 16 (m 14)"],
        id="dualpipe/m-14-on-pp-8",
    ),
    # (4-1)/(1*14) = 21.4%
    pytest.param(
        "bubble-above-20pct",
        dict(tp=8, pp=4, global_batch_size=28),
        ["(pp-1)/(vpp*m) = (4-1)/(1*14) = 21%"],
        id="bubble/m-14",
    ),
    # DualPipe's own closed form (layout.bubble_fraction): (8-2)/(3*8) = 25%; 1F1B's (8-1)/8
    # would be 88%
    pytest.param(
        "bubble-above-20pct",
        dict(tp=8, pp=8, pipeline_schedule="dualpipe", global_batch_size=8),
        ["(pp-2)/(3m) = (8-2)/(3*8) = 25%"],
        id="bubble/dualpipe-m-8",
    ),
    pytest.param(
        "zero3-with-tp-pp", dict(tp=8, zero=3), ["zero_stage 3 with tp 8 / pp 1"], id="zero3/tp-8"
    ),
    pytest.param(
        "ep-crosses-node",
        dict(model="mixtral-8x7b", tp=2, sp=True, ep=8, etp=2),
        ["ep*etp (8*2 = 16) spans beyond one NVLink domain (8)"],
        id="ep/16-on-h100",
    ),
    pytest.param(
        "cp-short-sequence",
        dict(tp=8, cp=2, seq_length=4096),
        ["cp (2) on a 4096-token sequence leaves 2048 tokens per rank"],
        id="cp/4k-over-2",
    ),
    # 4096 * 8192 = 33,554,432 tokens > 2**24
    pytest.param(
        "batch-beyond-usual",
        dict(num_gpus=512, tp=8, global_batch_size=4096),
        ["global batch of 33.6M tokens is beyond the usual <= 16M"],
        id="batch/33.6M",
    ),
    # dp 4096 * 1 * 8192 = 33.6M tokens before any accumulation
    pytest.param(
        "batch-beyond-usual",
        dict(num_gpus=4096, global_batch_size=4096),
        ["dp (4096) x micro_batch_size x seq_length forces at least 33.6M tokens per step"],
        id="batch/dp-floor",
    ),
]

# (rule id, context keywords): the nearest case on the passing side
CLEAN = [
    # Megatron's docs example shape on a small model: 80 layers, pp 4, vpp 2 = 8 stages of 10
    pytest.param(
        "pipeline-layout",
        dict(tp=8, pp=4, vpp=2, pipeline_model_parallel_layout="Et*10|(t*10|)*6t*10L"),
        id="layout/8-stages",
    ),
    pytest.param(
        "fp8-settings",
        dict(tp=8, precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True),
        id="fp8/tensorwise-on-h100",
    ),
    pytest.param(
        "fp8-settings",
        dict(hardware="b200", tp=8, precision="fp8", fp8_recipe="mxfp8"),
        id="fp8/mxfp8-on-b200",
    ),
    pytest.param(
        "loss-settings",
        dict(tp=8, cross_entropy="pytorch_fp32", loss_parallel=False),
        id="loss/torchtitan-gathered",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="full", recompute_num_layers=2),
        id="recompute/block-2",
    ),
    pytest.param(
        "recompute-settings",
        dict(tp=8, recompute="selective", recompute_modules=("core_attn", "mlp", "layernorm")),
        id="recompute/modules",
    ),
    pytest.param("cpu-offloading", dict(tp=8, cpu_offloading_num_layers=40), id="offload/40"),
    pytest.param(
        "moe-comm-overlap",
        dict(
            model="mixtral-8x7b",
            tp=1,
            ep=8,
            overlap_moe_expert_parallel_comm=True,
            moe_token_dispatcher="alltoall",
        ),
        id="moe-overlap/a2a",
    ),
    pytest.param(
        "moe-pad-capacity",
        dict(
            model="mixtral-8x7b",
            tp=1,
            ep=8,
            moe_pad_expert_input_to_capacity=True,
            moe_token_dispatcher="alltoall",
        ),
        id="moe-pad/a2a",
    ),
    pytest.param("world-size", dict(tp=8, pp=4), id="world-size/tp8-pp4-dp2"),
    pytest.param("heads-divisible-by-tp", dict(tp=8), id="heads/tp-8"),
    pytest.param("kv-heads-vs-tp", dict(model=GQA_12_4, num_gpus=2, tp=2), id="kv/tp-divides-g"),
    pytest.param("kv-heads-vs-tp", dict(num_gpus=64, tp=16), id="kv/g-divides-tp"),
    pytest.param("precision-supported", dict(precision="fp8", tp=8), id="precision/fp8-on-h100"),
    # NeMo launcher Llama 3 70B: PP4 VP5, 80/4 = 20 = 4*5
    pytest.param("layers-divisible", dict(tp=8, pp=4, vpp=5, num_gpus=32), id="layers/pp4-vpp5"),
    # Llama 3 paper (arXiv:2407.21783) §3.3.2: PP 16 with one layer fewer on the first and last
    # stage: 7 + 14*8 + 7 = 126
    pytest.param(
        "layers-divisible",
        dict(
            model="llama3-405b",
            num_gpus=128,
            tp=8,
            pp=16,
            first_stage_layers=7,
            last_stage_layers=7,
        ),
        id="layers/llama3-405b-uneven",
    ),
    pytest.param(
        "layers-divisible",
        dict(tp=8, pp=2, first_stage_layers=39, last_stage_layers=41),
        id="layers/uneven-pp2",
    ),
    pytest.param("vpp-needs-pp", dict(tp=8, pp=2, vpp=2), id="vpp/pp-2"),
    pytest.param(
        "batch-divisible", dict(num_gpus=512, tp=8, global_batch_size=1024), id="batch/1024"
    ),
    pytest.param(
        "vpp-needs-microbatches", dict(tp=8, pp=4, vpp=5, global_batch_size=8), id="vpp/m-equals-pp"
    ),
    pytest.param("seq-divisible-by-cp", dict(tp=8, cp=2, seq_length=8192), id="cp/seq-8192"),
    pytest.param(
        "cp-sliding-window",
        dict(
            model="gemma-3-12b",
            tp=2,
            cp=2,
            cp_comm_type="a2a",
            seq_length=32768,
            global_batch_size=64,
        ),
        id="cp/window-a2a",
    ),
    pytest.param(
        "cp-dsa",
        dict(
            model="deepseek-v3.2",
            tp=8,
            cp=2,
            cp_comm_type="allgather",
            seq_length=32768,
            global_batch_size=64,
        ),
        id="cp/dsa-allgather",
    ),
    pytest.param("seq-divisible-by-tp", dict(tp=8, sp=False, seq_length=8190), id="sp/off"),
    pytest.param("overlap-flags", dict(tp=8, sp=True, tp_comm_overlap=True), id="overlap/with-sp"),
    pytest.param(
        "overlap-flags",
        dict(tp=8, overlap_grad_reduce=False, overlap_param_gather=False),
        id="overlap/both-off",
    ),
    pytest.param("experts-divisible-by-ep", dict(model="mixtral-8x7b", tp=1, ep=8), id="ep/8-of-8"),
    pytest.param(
        "expert-grid", dict(model="mixtral-8x7b", tp=4, sp=True, ep=8, etp=4), id="grid/64-gpus"
    ),
    # a dense model with a broken world size: world-size reports it, the expert grid stays quiet
    pytest.param("expert-grid", dict(tp=3, etp=3), id="grid/dense-tp-3"),
    pytest.param("moe-needs-sp", dict(model="mixtral-8x7b", tp=2, ep=2, sp=True), id="moe-sp/on"),
    # 88 GiB = 80*(1+0.10): exactly the uncertainty above capacity is not yet an error
    pytest.param(
        "fits-in-memory", dict(tp=8, memory=_memory(10, 20, 30, 23, 5, 80)), id="memory/at-limit"
    ),
    pytest.param("fits-in-memory", dict(tp=8, memory=None), id="memory/not-computed"),
    # 10+20+30+11+5 = 76 GiB: exactly the 95% limit keeps the headroom
    pytest.param(
        "memory-near-capacity",
        dict(tp=8, memory=_memory(10, 20, 30, 11, 5, 80)),
        id="memory/at-headroom",
    ),
    # beyond the uncertainty it is an error, not a warning
    pytest.param(
        "memory-near-capacity",
        dict(tp=8, memory=_memory(10, 20, 30, 25, 5, 80)),
        id="memory/error-not-warning",
    ),
    pytest.param("sp-needs-tp", dict(tp=1, sp=False), id="sp/off-at-tp-1"),
    pytest.param("tp-crosses-node", dict(tp=8), id="tp/8-on-h100"),
    pytest.param("tp-crosses-node", dict(hardware="gb200-nvl72", tp=16), id="tp/16-on-nvl72"),
    pytest.param("tp-above-8", dict(hardware="gb200-nvl72", tp=8), id="tp/8-on-nvl72"),
    pytest.param("tp-above-8", dict(tp=16), id="tp/16-on-h100-is-crosses-node"),
    pytest.param(
        "microbatches-below-4p", dict(tp=8, pp=4, global_batch_size=32), id="m/16-for-pp4"
    ),
    # (4-1)/(1*15) = 20% exactly: not above
    pytest.param("bubble-above-20pct", dict(tp=8, pp=4, global_batch_size=30), id="bubble/m-15"),
    # m = 16 = 2*pp, even: what DualPipe.step accepts; a 1f1b layout is not its business
    pytest.param(
        "dualpipe-shape",
        dict(tp=8, pp=8, pipeline_schedule="dualpipe", global_batch_size=16),
        id="dualpipe/m-16-on-pp-8",
    ),
    pytest.param("dualpipe-shape", dict(tp=8, pp=8, global_batch_size=14), id="dualpipe/1f1b"),
    # DualPipe at m 14: (8-2)/(3*14) = 14%, where 1F1B's (8-1)/14 = 50% would fire
    pytest.param(
        "bubble-above-20pct",
        dict(tp=8, pp=8, pipeline_schedule="dualpipe", global_batch_size=14),
        id="bubble/dualpipe-m-14",
    ),
    # (4-1)/(2*8) = 18.75%
    pytest.param(
        "bubble-above-20pct", dict(tp=8, pp=4, vpp=2, global_batch_size=16), id="bubble/vpp-2"
    ),
    pytest.param("zero3-with-tp-pp", dict(tp=1, zero=3), id="zero3/pure-dp"),
    pytest.param("zero3-with-tp-pp", dict(tp=8, zero=1), id="zero3/zero-1"),
    pytest.param(
        "ep-crosses-node", dict(model="mixtral-8x7b", tp=2, sp=True, ep=8, etp=1), id="ep/8-on-h100"
    ),
    # NeMo launcher Llama 3 70B: CP2 at 8192, 4096 tokens per rank
    pytest.param("cp-short-sequence", dict(tp=8, cp=2, seq_length=8192), id="cp/8k-over-2"),
    # 2048 * 8192 = 2**24 exactly; Llama 3 paper §3.4.1 trains 405B at 16M-token batches
    pytest.param(
        "batch-beyond-usual", dict(num_gpus=512, tp=8, global_batch_size=2048), id="batch/16.8M"
    ),
]


def _ids(params) -> set[str]:
    return {p.values[0] for p in params}


def test_every_rule_has_a_triggering_and_a_clean_case():
    assert _ids(TRIGGERED) == set(rule_ids())
    assert _ids(CLEAN) == set(rule_ids())


@pytest.mark.parametrize("rule, kwargs, expected", TRIGGERED)
def test_rule_triggers_and_names_the_values(rule, kwargs, expected):
    found = {v.rule: v for v in check(make_context(**kwargs))}
    assert rule in found, f"{rule} did not fire; got {sorted(found)}"
    v = found[rule]
    assert v.severity == ("error" if rule in ERROR_IDS else "warning")
    for part in expected:
        assert part in v.message


@pytest.mark.parametrize("rule, kwargs", CLEAN)
def test_rule_does_not_trigger(rule, kwargs):
    found = {v.rule: v.message for v in check(make_context(**kwargs))}
    assert rule not in found, found.get(rule)


def test_odd_sequence_suggests_no_cp_above_1():
    # 8191 is odd, so 8191 % (2*cp) != 0 for every cp > 1 (e.g. cp 3: 8191 = 6*1365 + 1)
    msg = {v.rule: v.message for v in check(make_context(tp=8, cp=2, seq_length=8191))}
    assert msg["seq-divisible-by-cp"].endswith("try cp 1")


def test_rule_ids_are_unique_kebab_case():
    ids = rule_ids()
    assert len(ids) == len(set(ids))
    assert not ERROR_IDS & WARNING_IDS
    for rid in ids:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rid), rid


def test_check_lists_errors_in_rule_order_then_warnings():
    # tp 3 on 64 GPUs breaks world-size, heads and kv heads (errors); zero 3 with tp adds a warning
    out = check(make_context(tp=3, zero=3))
    severities = [v.severity for v in out]
    assert severities == sorted(severities, key=["error", "warning"].index)
    order = rule_ids()
    assert [v.rule for v in out] == sorted((v.rule for v in out), key=order.index)
    assert {"world-size", "heads-divisible-by-tp", "kv-heads-vs-tp", "zero3-with-tp-pp"} <= {
        v.rule for v in out
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        # docs/reference/framework-rules.md#real-configurations: NeMo launcher Llama 3 70B,
        # 128 nodes x 8, TP4 PP4 VP5 CP2 (DP 32), MBS 1, GBS 2048, seq 8192, SP: valid
        pytest.param(
            dict(num_gpus=1024, tp=4, pp=4, vpp=5, cp=2, sp=True, global_batch_size=2048),
            id="nemo-llama3-70b",
        ),
        # docs/reference/framework-rules.md#real-configurations: NeMo launcher Llama 3.1 405B,
        # 576 nodes x 8, TP8 PP9 VP7 CP2 (DP 32), MBS 1, GBS 2016, seq 8192: valid (126/9 = 14
        # layers per rank = 2*7)
        pytest.param(
            dict(
                model="llama3-405b",
                num_gpus=4608,
                tp=8,
                pp=9,
                vpp=7,
                cp=2,
                sp=True,
                global_batch_size=2016,
            ),
            id="nemo-llama3.1-405b",
        ),
    ],
)
def test_published_valid_layouts_break_no_rule(kwargs):
    ctx = make_context(**kwargs)
    assert ctx.layout.dp == 32
    assert [v for v in check(ctx) if v.severity == "error"] == []

"""DeepSpeed: a `ds_config.json` and the Megatron-DeepSpeed launch that uses it.

Output format (two parts in one text, split with `split_output` or at the first line that
is exactly `}`):

1. `ds_config.json`: JSON whose first key `"_comment"` carries the header (planner version,
   job, layout, the estimate when given); DeepSpeed ignores top-level keys it does not know.
2. A separator line `# ---- Megatron-DeepSpeed launch (the JSON above is ds_config.json) ----`,
   then a bash snippet: the header as comments, the environment, and `torchrun ...
   pretrain_gpt.py \\` with one Megatron-DeepSpeed flag per line.

The batch keys are kept equal by construction: train_batch_size (= --global-batch-size) ==
train_micro_batch_size_per_gpu * gradient_accumulation_steps * DP, DP = world / (tp*pp*cp)
(CP is DeepSpeed-Ulysses, `--ds-sequence-parallel-size`). Flags use Megatron-DeepSpeed's
spellings where they differ from Megatron-LM's (its examples_deepspeed/ scripts):
`--num-key-value-heads`, `--normalization rmsnorm`, `--use-rotary-position-embeddings`,
`--topk`, `--create-moe-param-group` (ZeRO wants the experts in their own optimizer
group), `--moe-expert-parallel-size`, `--enable-expert-tensor-parallelism`,
`--use-flash-attn-v2`. `--no-pipeline-parallel` is emitted whenever pp == 1 (ZeRO-2/3 needs
it; with ZeRO-0/1 it only skips a one-stage pipeline engine).

DeepSpeed's pipeline engine places the layers itself (Megatron-DeepSpeed's GPTModelPipe uses
`partition_method='type:transformer'`): an even split, or the uneven split its partitioner
gives (`partition_split`: 70 layers on pp 12 is 6 per stage and 4 on the last), is exported as
it is; any other first/last_stage_layers is refused. With bf16, ZeRO stage 0 runs DeepSpeed's
BF16 optimizer, which shards the fp32 states like ZeRO-1: the export says so (the plan, which
counted them unsharded, is an upper bound). DeepSpeed-MoE dispatches tokens with all-to-all
whatever the planned dispatcher (said in the header when it differs).

Refused with an InfeasibleError naming the values and the fix: ZeRO-2/3 with pp > 1
(DeepSpeed's pipeline engine takes ZeRO 0 or 1), and what Megatron-DeepSpeed cannot express:
multi-latent attention, shared experts, leading dense layers, virtual pipeline stages, an
uneven split other than its own, expert TP other than 1 or tp, EP not dividing DP, FP8 (and
its recipes and FP8 weights), attention heads per TP rank not divisible by the Ulysses degree,
and the production-recipe keys it has no flag for: recompute_modules other than the attention
core, partial full recompute (recompute_num_layers), CPU offloading of activations, bf16
gradient reduction, bf16 Adam moments, the deepep/hybridep dispatchers, EP-communication
overlap, CUDA graphs, a pipeline layout string and multi-token prediction. A config that
leaves vpp to the planner gets vpp 1 (`planner.frameworks.export.prepare`). The RoPE base is not a flag
every Megatron-DeepSpeed version spells the same way: the header names it. The flag spellings
come from Megatron-DeepSpeed's examples, not from a flag list we test against (only
Megatron-LM's is in the reference).

"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from planner.errors import InfeasibleError
from planner.frameworks.megatron.writer import (
    Flag,
    continued,
    flag_lines,
    launcher_lines,
    pre_blackwell,
    precision_flags,
    whole,
)
from planner.frameworks.writing import (
    gemma_layer_problems,
    header_lines,
    nodes_and_devices,
    shape_tail_flags,
    store_problems,
)
from planner.layout import Layout
from planner.specs import ModelSpec

__all__ = [
    "render",
    "ds_config",
    "deepspeed_flags",
    "split_output",
    "SEPARATOR",
    "check_supported",
    "refusals",
    "runs_as",
    "stage_layers",
    "partition_split",
    "DeepSpeedSplit",
]

SEPARATOR = "# ---- Megatron-DeepSpeed launch (the JSON above is ds_config.json) ----"


def stage_layers(
    num_layers: int, pp: int, *, method: str = "type:transformer", tied: bool = False
) -> tuple[int, ...]:
    """Transformer layers on each pipeline stage as DeepSpeed's partition_balanced places them
    with binary weights: the smallest bottleneck B = ceil(weight / pp), then each stage in
    order takes up to B (leaving one item for each later stage). The weights are the
    transformer layers, plus the embedding (and, tied, the output embedding) when the method
    counts it (`type:transformer|embedding`, BLOOM's). DeepSpeed's newer dynamic-programming
    partitioner may put the lighter stages elsewhere; the first stage and the bottleneck match."""
    embedding = "embed" in method.lower()
    items = (
        ([False] if embedding else [])
        + [True] * num_layers
        + ([False] if embedding and tied else [])
    )
    bottleneck = -(-len(items) // pp)
    counts, k = [], 0
    for stage in range(pp):
        take = max(0, min(bottleneck, len(items) - k - (pp - stage - 1)))
        counts.append(sum(items[k : k + take]))
        k += take
    counts[-1] += sum(items[k:])
    return tuple(counts)


@dataclass(frozen=True)
class DeepSpeedSplit:
    """DeepSpeed's stage counts as our first/last_stage_layers (None, None: even); `note`
    says where three numbers do not describe the counts exactly."""

    counts: tuple[int, ...]
    first: int | None
    last: int | None
    note: str | None = None


@lru_cache(maxsize=256)  # pure; the search's DeepSpeed filter asks for every layout it ranks
def partition_split(
    num_layers: int, pp: int, *, method: str = "type:transformer", tied: bool = False
) -> DeepSpeedSplit:
    counts = stage_layers(num_layers, pp, method=method, tied=tied)
    if len(set(counts)) == 1 or pp == 1:
        return DeepSpeedSplit(counts, None, None)
    if pp == 2 or len(set(counts[1:-1])) == 1:
        return DeepSpeedSplit(counts, counts[0], counts[-1])
    middle = max(counts[1:-1])
    first, last = counts[0], num_layers - counts[0] - middle * (pp - 2)
    shown = ", ".join(str(c) for c in counts)
    return DeepSpeedSplit(
        counts,
        first,
        last,
        f"DeepSpeed's partitioner ({method}) places the {num_layers} layers on "
        f"the {pp} stages as {shown}; planner models {first} on the first "
        f"stage, {middle} on each middle one and {last} on the last (the "
        "first and the busiest stage are exact)",
    )


def refusals(job, layout: Layout) -> list[str]:
    """Why DeepSpeed or Megatron-DeepSpeed cannot run this layout, one message each (values
    and fix); empty when it runs. The export (`check_supported`) and the search filter
    (`planner plan --framework deepspeed`) both read this list."""
    m, tr = job.model, job.training
    out = []
    if layout.zero >= 2 and layout.pp > 1:
        out.append(
            f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only: zero_stage {layout.zero} "
            f"with pp {layout.pp}; set zero_stage 1, or pp 1 (exported with --no-pipeline-parallel)"
        )
    own = partition_split(m.num_layers, layout.pp)
    problems = (
        gemma_layer_problems(m, "Megatron-DeepSpeed")
        + [
            (
                layout.pipeline_schedule in ("dualpipe", "dualpipev", "interleaved"),
                f"pipeline_schedule {layout.pipeline_schedule}: DeepSpeed's pipeline engine runs 1F1B "
                "only; set pipeline_schedule 1f1b",
            ),
            (
                m.is_mla,
                f"{m.name} uses multi-latent attention, which Megatron-DeepSpeed lacks; "
                "export megatron instead",
            ),
            (
                m.num_shared_experts > 0,
                "shared experts are not in Megatron-DeepSpeed; export megatron",
            ),
            (
                m.is_moe and m.num_dense_layers > 0,
                f"num_dense_layers {m.num_dense_layers}: "
                "Megatron-DeepSpeed has no leading dense layers; export megatron",
            ),
            (
                m.is_moe and m.moe_layer_freq is not None and not all(m.moe_layers),
                "moe_layer_freq: Megatron-DeepSpeed's MoE layers are not placed by a pattern; export "
                "megatron",
            ),
            (
                set(m.attention_kinds) != {"full"} or m.attention_sinks or m.attention_output_gate,
                f"layer kinds {'/'.join(sorted(set(m.attention_kinds)))}"
                f"{' with attention sinks' if m.attention_sinks else ''}: Megatron-DeepSpeed attends "
                "with full causal attention only; export megatron where it can",
            ),
            (
                m.norm_zero_centered,
                "norm_zero_centered ((1 + w) norm weights): Megatron-DeepSpeed has no "
                "--apply-layernorm-1p; export megatron",
            ),
            (
                m.moe_shared_expert_gate,
                "moe_shared_expert_gate: Megatron-DeepSpeed's MoE has no shared experts to gate; "
                "export megatron",
            ),
            (
                layout.vpp > 1,
                f"vpp {layout.vpp}: DeepSpeed's pipeline engine has no interleaved "
                "schedule; set vpp 1",
            ),
            (
                layout.uneven
                and (layout.first_stage_layers, layout.last_stage_layers) != (own.first, own.last),
                "first_stage_layers/last_stage_layers: DeepSpeed balances pipeline stages itself "
                f"({', '.join(map(str, own.counts))} layers per stage); remove them"
                + (f" or set them to {own.first}/{own.last}" if own.first is not None else ""),
            ),
            (
                m.is_moe and layout.etp not in (1, layout.tp),
                f"etp {layout.etp}: Megatron-DeepSpeed shards experts over 1 or tp ({layout.tp}) ranks; "
                f"set etp 1 or {layout.tp}",
            ),
            (
                m.is_moe and layout.dp % layout.ep,
                f"DeepSpeed forms expert-parallel groups inside data parallelism: ep ({layout.ep}) "
                f"must divide dp ({layout.dp}); lower ep",
            ),
            (
                tr.precision == "fp8",
                "precision fp8: Megatron-DeepSpeed has no FP8 recipe; set "
                "precision bf16 or export megatron",
            ),
            (
                m.activation == "squared_relu",
                "activation squared_relu is not in Megatron-DeepSpeed",
            ),
            (
                m.is_moe
                and (
                    m.moe_router_score != "softmax"
                    or m.moe_router_scaling is not None
                    or m.moe_router_expert_bias
                    or m.moe_router_pre_softmax
                ),
                f"{m.name}'s router (score {m.moe_router_score}, scaling "
                f"{m.moe_router_scaling or 1:g}, expert bias "
                f"{'on' if m.moe_router_expert_bias else 'off'}): DeepSpeed MoE's gate is a "
                "softmax top-k router, unscaled, without a bias; export megatron or "
                "megatron-bridge",
            ),
            (
                m.qkv_bias_only,
                f"add_qkv_bias ({m.name}'s query / key / value biases without the others'): "
                "planner's Megatron-DeepSpeed export has no flag for those biases alone; export "
                "megatron or megatron-bridge",
            ),
            (
                m.qk_norm != "none",
                f"qk_norm {m.qk_norm} ({m.name}'s query / key norm): Megatron-DeepSpeed's "
                "attention has none; use --framework megatron or megatron-bridge",
            ),
            (
                m.activation in ("geglu", "reglu", "quick_geglu", "relu"),
                f"activation {m.activation} is not in Megatron-DeepSpeed (its --swiglu is "
                "SiLU's, else GELU); use --framework megatron-bridge"
                + {"quick_geglu": " or megatron", "relu": ""}.get(m.activation, " or nemo"),
            ),
            (
                m.position_embedding == "none",
                "position_embedding_type none is not in Megatron-DeepSpeed",
            ),
            (
                layout.cp > 1 and (m.num_attention_heads // layout.tp) % layout.cp,
                f"DeepSpeed-Ulysses (cp {layout.cp}) needs attention heads per TP rank "
                f"({m.num_attention_heads}/{layout.tp}) divisible by cp; lower cp or tp",
            ),
        ]
        + _recipe_problems(m, layout)
        + store_problems(layout, "Megatron-DeepSpeed")
    )
    return out + [f"cannot export to DeepSpeed: {msg}" for broken, msg in problems if broken]


def runs_as(job, layout: Layout) -> Layout:
    """The layout as this export runs it (what reading it back gives): with bf16, ZeRO 0 is
    DeepSpeed's BF16 optimizer, which shards like ZeRO-1; overlap_comm overlaps the gradient
    reduction (and ZeRO-3's gathers); no TP communication overlap; DeepSpeed-Ulysses (a2a)
    for cp > 1."""
    zero = 1 if layout.zero == 0 and job.training.precision == "bf16" else layout.zero
    return layout.with_(
        zero=zero,
        tp_comm_overlap=False,
        overlap_param_gather=layout.overlap_grad_reduce and zero == 3,
        cp_comm_type="a2a" if layout.cp > 1 else "p2p",
    )


def check_supported(job, layout: Layout) -> None:
    """Refuse what DeepSpeed or Megatron-DeepSpeed cannot run (one message, values and fix)."""
    found = refusals(job, layout)
    if found and found[0].startswith("DeepSpeed's pipeline engine runs ZeRO"):
        raise InfeasibleError(found[0], field="zero_stage", value=layout.zero)
    if found:
        raise InfeasibleError(found[0])


def _recipe_problems(m: ModelSpec, layout: Layout) -> list[tuple[bool, str]]:
    """The production-recipe keys Megatron-DeepSpeed has no flag for."""
    modules = [x for x in layout.recompute_modules if x != "core_attn"]
    return [
        (
            bool(modules),
            f"recompute_modules {', '.join(modules)}: Megatron-DeepSpeed's selective "
            "recompute covers the attention core only; export megatron",
        ),
        (
            layout.recompute == "full" and layout.recompute_num_layers is not None,
            f"recompute_num_layers {layout.recompute_num_layers}: DeepSpeed's pipeline engine "
            "checkpoints every layer; drop it (full recompute) or export megatron",
        ),
        (
            layout.cpu_offloading_num_layers > 0,
            f"cpu_offloading_num_layers {layout.cpu_offloading_num_layers}: Megatron-DeepSpeed "
            "does not offload layer activations; export megatron",
        ),
        (
            not layout.grad_reduce_in_fp32,
            "grad_reduce_in_fp32 false: DeepSpeed keeps its own "
            "gradient dtypes, which planner does not map; export "
            "megatron",
        ),
        (
            (layout.exp_avg_dtype, layout.exp_avg_sq_dtype) != ("fp32", "fp32"),
            "bf16 Adam moments (exp_avg_dtype/exp_avg_sq_dtype): DeepSpeed's optimizer keeps them "
            "in fp32; export megatron",
        ),
        (
            m.is_moe and layout.moe_token_dispatcher in ("deepep", "hybridep"),
            f"moe_token_dispatcher {layout.moe_token_dispatcher}: DeepSpeed-MoE dispatches with "
            "all-to-all; export megatron",
        ),
        (
            m.is_moe and layout.overlap_moe_expert_parallel_comm,
            "overlap_moe_expert_parallel_comm: DeepSpeed-MoE does not overlap its dispatch; export "
            "megatron",
        ),
        (
            m.is_moe and layout.moe_pad_expert_input_to_capacity,
            "moe_pad_expert_input_to_capacity: Megatron-DeepSpeed has no flag for Megatron-Core's "
            "drop-and-pad dispatch (DeepSpeed-MoE's gating sets its own capacity); turn it off "
            "or export megatron",
        ),
        (
            layout.cuda_graphs != "none",
            f"cuda_graphs {layout.cuda_graphs}: Megatron-DeepSpeed "
            "has no CUDA-graph capture; set cuda_graphs none",
        ),
        (
            layout.pipeline_model_parallel_layout is not None,
            "pipeline_model_parallel_layout: DeepSpeed balances pipeline stages itself; remove it",
        ),
        (
            m.mtp_num_layers > 0,
            f"mtp_num_layers {m.mtp_num_layers}: Megatron-DeepSpeed has no "
            "multi-token prediction; export megatron",
        ),
    ]


def ds_config(job, layout: Layout, *, estimate=None) -> dict:
    """The ds_config.json mapping (batch keys consistent with the flags)."""
    tr = job.training
    gas = layout.num_microbatches(tr.global_batch_size)
    cfg: dict = {
        "_comment": header_lines(
            job, layout, "DeepSpeed ds_config.json for Megatron-DeepSpeed", estimate=estimate
        ),
        "train_batch_size": tr.global_batch_size,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": gas,
    }
    if tr.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    else:
        cfg["bf16"] = {"enabled": True}
    cfg["zero_optimization"] = {
        "stage": layout.zero,
        "overlap_comm": layout.overlap_grad_reduce,
        "contiguous_gradients": True,
    }
    if layout.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
    return cfg


def _model_flags(m: ModelSpec, *, seq_length: int) -> list[Flag]:
    ffn = m.expert_ffn if m.is_moe else m.ffn  # every layer is MoE (dense layers refused)
    flags: list[Flag] = [
        ("--num-layers", str(m.num_layers)),
        ("--hidden-size", str(m.hidden_size)),
        ("--ffn-hidden-size", str(ffn)),
        ("--num-attention-heads", str(m.num_attention_heads)),
    ]
    if m.kv_channels:
        flags.append(("--kv-channels", str(m.kv_channels)))
    if m.kv_heads != m.num_attention_heads:
        flags.append(("--num-key-value-heads", str(m.kv_heads)))
    if m.gated:
        flags.append(("--swiglu", None))
    if m.norm == "RMSNorm":
        flags.append(("--normalization", "rmsnorm"))
    if m.position_embedding == "rope":
        flags.append(("--use-rotary-position-embeddings", None))
    flags += shape_tail_flags(m, seq_length)
    if m.is_moe:
        # ZeRO needs the expert parameters in their own optimizer group
        flags += [
            ("--num-experts", str(m.num_experts)),
            ("--topk", str(m.moe_top_k)),
            ("--create-moe-param-group", None),
        ]
        if m.moe_capacity_factor != 1.0:  # DeepSpeed-MoE's capacity at training (default 1.0)
            flags.append(("--moe-train-capacity-factor", f"{m.moe_capacity_factor:g}"))
    return flags


def _parallel_flags(m: ModelSpec, layout: Layout) -> list[Flag]:
    flags: list[Flag] = [
        ("--tensor-model-parallel-size", str(layout.tp)),
        ("--pipeline-model-parallel-size", str(layout.pp)),
    ]
    if layout.pp == 1:
        flags.append(("--no-pipeline-parallel", None))
    if layout.cp > 1:
        flags.append(("--ds-sequence-parallel-size", str(layout.cp)))
    if m.is_moe and layout.ep > 1:
        flags.append(("--moe-expert-parallel-size", str(layout.ep)))
    if m.is_moe and layout.etp == layout.tp > 1:
        flags.append(("--enable-expert-tensor-parallelism", None))
    if layout.sp and layout.tp > 1:
        flags.append(("--sequence-parallel", None))
    return flags


def _recompute_flags(layout: Layout) -> list[Flag]:
    if layout.recompute == "none":
        return []
    flags: list[Flag] = [("--recompute-granularity", layout.recompute)]
    if layout.recompute == "full":
        flags += [("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return flags + [("--deepspeed-activation-checkpointing", None)]


def deepspeed_flags(job, layout: Layout, *, config_path: str = "ds_config.json") -> list[Flag]:
    """Every Megatron-DeepSpeed `pretrain_gpt.py` flag of the export, in order."""
    m, tr = job.model, job.training
    flags = _model_flags(m, seq_length=tr.seq_length)
    flags += [("--attention-dropout", "0"), ("--hidden-dropout", "0")]
    if tr.flash_attention:
        flags.append(("--use-flash-attn-v2", None))
    flags += _parallel_flags(m, layout) + _recompute_flags(layout)
    flags += [
        ("--micro-batch-size", str(layout.micro_batch_size)),
        ("--global-batch-size", str(tr.global_batch_size)),
    ]
    flags += precision_flags(tr.precision)
    flags += [
        ("--deepspeed", None),
        ("--deepspeed_config", config_path),
        ("--zero-stage", str(layout.zero)),
        ("--data-path", '"${DATA_PATH:?set DATA_PATH, your Megatron dataset prefix}"'),
        ("--tokenizer-type", "GPTSentencePieceTokenizer"),
        ("--tokenizer-model", '"${TOKENIZER_MODEL:?set TOKENIZER_MODEL}"'),
        ("--train-iters", '"${TRAIN_ITERS:?set TRAIN_ITERS, the run length in steps}"'),
        ("--lr", '"${LR:?set LR, the peak learning rate}"'),
    ]
    return flags


def _launch(job, layout: Layout, *, estimate=None) -> list[str]:
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    needs_env = (layout.tp > 1 or layout.cp > 1) and pre_blackwell(job.hardware)
    head = header_lines(job, layout, "Megatron-DeepSpeed pretrain_gpt.py launch", estimate=estimate)
    head += [
        "",
        "Save the JSON above as ds_config.json beside pretrain_gpt.py of a Megatron-DeepSpeed checkout;",
        f"run this on each of the {nodes} node(s) ({per_node} GPUs each) with NODE_RANK and MASTER_ADDR set.",
        f"DP {layout.dp} = {job.num_gpus} / (tp {layout.tp} * pp {layout.pp} * cp {layout.cp}); "
        f"train_batch_size {job.training.global_batch_size} = {layout.micro_batch_size} * "
        f"{layout.num_microbatches(job.training.global_batch_size)} * {layout.dp}.",
        f"The vocabulary ({job.model.vocab_size}) comes from the tokenizer: use the model's own.",
        "Set DATA_PATH, TOKENIZER_MODEL, TRAIN_ITERS and LR (the plan does not decide them).",
    ]
    if layout.cp > 1 and layout.cp_comm_type != "a2a":
        head.append(
            f"cp runs as DeepSpeed-Ulysses (all-to-all), not the planned {layout.cp_comm_type} "
            "exchange: the step-time estimate assumed the latter."
        )
    head += _notes(job, layout)
    out = [f"# {line}".rstrip() for line in head] + ["set -euo pipefail", ""]
    if needs_env:  # Megatron's TP/CP kernels order their streams with one connection
        out += ["export CUDA_DEVICE_MAX_CONNECTIONS=1", ""]
    words = launcher_lines(job) + ["pretrain_gpt.py"] + flag_lines(deepspeed_flags(job, layout))
    return out + continued(words)


def _notes(job, layout: Layout) -> list[str]:
    """Where DeepSpeed runs the plan differently from how planner estimated it."""
    m, notes = job.model, []
    if layout.zero == 0 and job.training.precision != "fp16":
        notes.append(
            "ZeRO stage 0 with bf16 runs DeepSpeed's BF16 optimizer, which shards the "
            "fp32 states over DP like ZeRO-1: less memory than the plan counted."
        )
    if m.is_moe and layout.moe_token_dispatcher != "alltoall":
        notes.append(
            f"DeepSpeed-MoE dispatches tokens with all-to-all, not the planned "
            f"{layout.moe_token_dispatcher}: the step-time estimate assumed the latter."
        )
    if layout.uneven:
        notes.append(
            f"DeepSpeed places the layers itself: {layout.first_stage_layers} on the "
            f"first stage and {layout.last_stage_layers} on the last, as planned."
        )
    if m.position_embedding == "rope" and m.rotary_base is not None:
        notes.append(
            f"RoPE base {whole(m.rotary_base) or m.rotary_base}: set it as your Megatron-DeepSpeed version "
            "spells it (it changes neither memory nor time)."
        )
    return notes


def render(job, layout: Layout, *, estimate=None) -> str:
    check_supported(job, layout)
    text = json.dumps(ds_config(job, layout, estimate=estimate), indent=2)
    return "\n".join([text, SEPARATOR] + _launch(job, layout, estimate=estimate)) + "\n"


def split_output(text: str) -> tuple[str, str]:
    """(ds_config.json text, launch script text) of a DeepSpeed export."""
    head, sep, tail = text.partition("\n" + SEPARATOR + "\n")
    if not sep:
        raise ValueError("not a planner DeepSpeed export: the separator line is missing")
    return head + "\n", "#!/usr/bin/env bash\n" + tail

"""Megatron-LM: a bash snippet that launches `pretrain_gpt.py` with the planned layout.

Output: a header comment (planner version, job, layout, the estimate when given), the
environment (`export CUDA_DEVICE_MAX_CONNECTIONS=1` where Megatron asserts it), then
`torchrun ... pretrain_gpt.py \\` and one flag per line with ` \\` continuations.

Every flag is a real `pretrain_gpt.py` flag (planner/frameworks/megatron/megatron_flags.txt,
from NVIDIA/Megatron-LM megatron/training/arguments.py, copied to tests/data/ and checked by the
tests; docs/reference/framework-rules.md#megatron-lm-flags) and the values satisfy Megatron's
rules (docs/reference/framework-rules.md#megatron-lm). Mappings worth knowing:

- DP has no flag: Megatron derives it as world / (tp*pp*cp).
- zero 1 = `--use-distributed-optimizer`; zero 2/3 = Megatron-FSDP (`--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads|optim_grads_params`), kept with
  `--use-distributed-optimizer` as Megatron-FSDP's documentation asks. Megatron-FSDP wants
  CUDA_DEVICE_MAX_CONNECTIONS *not* 1, so the variable is left unset there (Megatron only
  warns about TP/CP with FSDP).
- Uneven pipeline splits: first == last == middle - 1 is Megatron's "embedding and loss
  each take a layer's place" (`--account-for-*-in-pipeline-split`); anything else is
  `--decoder-first/last-pipeline-num-layers`.
- Dropout is set to 0: the memory estimate stores no dropout masks (every modern recipe).
- The production-recipe keys, in Megatron's terms: `--fp8-format hybrid --fp8-recipe R`
  (`--fp8-param-gather`), `--recompute-granularity selective --recompute-modules ...`,
  `--recompute-method block --recompute-num-layers N` (recompute_num_layers; else uniform 1),
  `--cpu-offloading-num-layers N`, `--grad-reduce-in-bf16` (grad_reduce_in_fp32 false; with
  fp16, true is `--accumulate-allreduce-grads-in-fp32`), `--use-precision-aware-optimizer
  --exp-avg-dtype --exp-avg-sq-dtype`, `--moe-token-dispatcher-type alltoall|allgather` or
  `flex --moe-flex-dispatcher-backend deepep|hybridep`, `--overlap-moe-expert-parallel-comm`,
  CUDA graphs `--cuda-graph-impl transformer_engine` (partial) or `local --cuda-graph-scope
  full_iteration --no-check-for-nan-in-loss-and-grad` (full), `--pipeline-model-parallel-layout`
  (instead of the vpp and first/last flags), `--mtp-num-layers`, `--rotary-base` (an integer:
  Megatron's argparse type). Megatron-FSDP adds `--ckpt-format fsdp_dtensor`, which it asserts.
- Refused with a reason where Megatron itself raises: CPU offloading with pp > 1, recompute or
  CUDA graphs; per-layer CUDA graphs with full recompute; `fp8_param_gather` without the
  distributed optimizer; EP-communication overlap with the allgather dispatcher; a RoPE base
  that is not a whole number.
- A run needs data, a tokenizer, a length and a learning rate, none of which the plan
  decides: `--mock-data` and the NullTokenizer stand in for the first two (NullTokenizer adds
  an end-of-document token, so `--vocab-size` is V - 1 to give the model's V), and
  TRAIN_ITERS / LR must be set in the environment (the script stops with a message if not).

Left to the user: rope scaling, initialisation, optimizer hyper-parameters, checkpointing,
logging.
"""

from __future__ import annotations

import shlex

from planner.errors import InfeasibleError
from planner.fields import framework_names
from planner.frameworks.writing import (
    gemma_layer_problems,
    header_lines,
    nodes_and_devices,
    pipeline_split,
    shape_tail_flags,
    store_problems,
)
from planner.layout import Layout
from planner.specs import HardwareSpec, ModelSpec

__all__ = [
    "render",
    "megatron_flags",
    "environment",
    "pre_blackwell",
    "model_flags",
    "mla_flags",
    "moe_flags",
    "moe_layer_freq",
    "parallel_flags",
    "precision_flags",
    "fp8_flags",
    "recipe_flags",
    "check_supported",
    "refusals",
    "runs_as",
    "flag_lines",
    "continued",
    "launcher_lines",
    "whole",
    "Flag",
]

Flag = tuple[str, "str | list[str] | None"]
"""(flag, value): None for a switch, a list for a flag taking several values."""


def pre_blackwell(hardware: HardwareSpec) -> bool:
    """The profile's GPU is older than Blackwell (Megatron's CUDA_DEVICE_MAX_CONNECTIONS rule,
    `get_device_arch_version() < 10`): ampere, hopper, cdna3, and an unknown architecture
    (setting the variable there is harmless, leaving it out is not)."""
    return hardware.architecture != "blackwell"


def whole(value: float) -> str | None:
    """A number as Megatron's int-typed flags take it ("1000000", not "1e6"); None if not
    whole."""
    return str(int(value)) if float(value).is_integer() else None


def refusals(job, layout: Layout, *, bridge: bool = False) -> list[str]:
    """Why Megatron-LM (Megatron-Core) would refuse this layout, one message each (the values
    and the fix); empty when it runs. The export (`check_supported`) and the search filter
    (`planner plan --framework megatron`) both read this list. `bridge`: Megatron-Bridge, the
    same Megatron-Core, whose provider takes a float rotary_base."""
    m, tr = job.model, job.training
    offload = layout.cpu_offloading_num_layers
    problems = (
        gemma_layer_problems(m, "Megatron-Bridge" if bridge else "Megatron-LM")
        + [
            (
                "torchtitan_op" in layout.selective_modules,
                "recompute_modules [torchtitan_op]: torchtitan's op-level checkpointing; Megatron's "
                "selective recompute is by module: use recompute_modules core_attn (and mlp, "
                "layernorm ...) or recompute full",
            ),
            (
                not bridge
                and m.position_embedding == "rope"
                and m.rotary_base is not None
                and whole(m.rotary_base) is None,
                f"rotary_base {m.rotary_base}: Megatron's --rotary-base takes a whole number",
            ),
            (
                offload and layout.pp > 1,
                f"cpu_offloading_num_layers {offload} with pp {layout.pp}: "
                "Megatron has no CPU offloading with pipeline parallelism",
            ),
            (
                offload and layout.recompute != "none",
                f"cpu_offloading_num_layers {offload} with recompute {layout.recompute}: Megatron's "
                "CPU offloading does not work with recompute",
            ),
            (
                offload and layout.cuda_graphs != "none",
                f"cpu_offloading_num_layers {offload} with cuda_graphs {layout.cuda_graphs}: Megatron's "
                "CPU offloading does not work with CUDA graphs",
            ),
            (
                layout.cuda_graphs == "partial" and layout.recompute == "full",
                "cuda_graphs partial with recompute full: Megatron asserts full recompute is not used "
                "with per-layer CUDA graphs; use recompute selective or cuda_graphs full",
            ),
            (
                tr.fp8_param_gather and tr.precision == "fp8" and layout.zero == 0,
                "fp8_param_gather with zero_stage 0: Megatron's --fp8-param-gather needs the "
                "distributed optimizer (zero_stage 1) or FSDP",
            ),
            (
                layout.pipeline_schedule in ("dualpipe", "dualpipev"),
                f"pipeline_schedule {layout.pipeline_schedule}: DualPipe is not in Megatron-LM (it is "
                "deepseek-ai/DualPipe's own schedule); use 1f1b (interleaved with vpp > 1)",
            ),
            (
                m.is_moe
                and layout.overlap_moe_expert_parallel_comm
                and layout.moe_token_dispatcher == "allgather",
                "overlap_moe_expert_parallel_comm with moe_token_dispatcher allgather: Megatron needs "
                "the alltoall or flex dispatcher for it",
            ),
            (
                m.is_moe
                and layout.moe_pad_expert_input_to_capacity
                and layout.moe_token_dispatcher != "alltoall",
                f"moe_pad_expert_input_to_capacity with moe_token_dispatcher "
                f"{layout.moe_token_dispatcher}: Megatron pads expert inputs to the capacity only "
                "with the alltoall dispatcher; set moe_token_dispatcher alltoall",
            ),
            (
                m.activation == "geglu" and not bridge,
                "activation geglu (Gemma's tanh-GELU gated MLP): Megatron-LM has no flag for it "
                "(--swiglu is SiLU's, --quick-geglu gpt-oss's quick-GELU); use --framework "
                "megatron-bridge (activation_func fast_gelu) or nemo (fast-geglu)",
            ),
            (
                m.qk_norm == "layer",
                "qk_norm layer (one RMSNorm over all query / key heads, MiniMax-M2's per_layer): "
                + (
                    "Megatron-Bridge normalizes per head (qk_layernorm) or with an L2 norm "
                    "(qk_l2_norm) only"
                    if bridge
                    else "Megatron-LM normalizes per head (--qk-layernorm) or with an L2 norm "
                    "(--qk-l2-norm) only"
                )
                + "; no export writes it",
            ),
            (
                m.activation in ("reglu", "relu") and not bridge,
                f"activation {m.activation} (ReLU{' gated' if m.gated else ''} MLP): Megatron-LM "
                "has no flag for it (--swiglu, --quick-geglu, --squared-relu, else GELU); use "
                "--framework megatron-bridge (activation_func relu)"
                + (" or nemo (fast-reglu)" if m.gated else ""),
            ),
        ]
        + layer_kind_problems(m, layout)
        + store_problems(
            layout, "Megatron-Bridge" if bridge else "Megatron-LM", config_fields=bridge
        )
    )
    return [msg for broken, msg in problems if broken]


def check_supported(job, layout: Layout) -> None:
    """Refuse what Megatron-LM itself rejects (one message: the values and the fix)."""
    found = refusals(job, layout)
    if found:
        raise InfeasibleError(f"cannot export to Megatron-LM: {found[0]}")


def runs_as(job, layout: Layout) -> Layout:
    """The layout as this export runs it (what reading it back gives, for what the estimate
    reads): --overlap-param-gather goes with --overlap-grad-reduce and the distributed
    optimizer only; the CP communication type means nothing at cp 1."""
    return layout.with_(
        overlap_param_gather=layout.overlap_param_gather
        and layout.overlap_grad_reduce
        and layout.zero >= 1,
        cp_comm_type=layout.cp_comm_type if layout.cp > 1 else "p2p",
    )


def environment(job, layout: Layout) -> tuple[dict[str, str], list[str]]:
    """(variables to export, comment lines explaining a choice)."""
    if not (layout.tp > 1 or layout.cp > 1) or not pre_blackwell(job.hardware):
        return {}, []
    if layout.zero >= 2:
        return {}, [
            "CUDA_DEVICE_MAX_CONNECTIONS is left unset: Megatron-FSDP (zero 2/3) wants it "
            "unset or above 1, although TP/CP prefer 1 (Megatron warns about the mix)."
        ]
    if layout.overlap_moe_expert_parallel_comm and job.model.is_moe:
        return {}, [
            "CUDA_DEVICE_MAX_CONNECTIONS is left unset: EP-communication overlap wants "
            "more than one connection, although TP/CP prefer 1 (Megatron warns)."
        ]
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, []


def model_flags(m: ModelSpec, *, seq_length: int) -> list[Flag]:
    """Shape flags shared by every Megatron-based exporter (Megatron-LM spellings)."""
    flags: list[Flag] = [
        ("--num-layers", str(m.num_layers)),
        ("--hidden-size", str(m.hidden_size)),
        ("--ffn-hidden-size", str(m.ffn)),
        ("--num-attention-heads", str(m.num_attention_heads)),
    ]
    if m.kv_channels:
        flags.append(("--kv-channels", str(m.kv_channels)))
    if m.kv_heads != m.num_attention_heads and not m.is_mla:
        flags += [("--group-query-attention", None), ("--num-query-groups", str(m.kv_heads))]
    if m.activation == "swiglu":
        flags.append(("--swiglu", None))
    elif m.activation == "quick_geglu":
        flags.append(("--quick-geglu", None))
    elif m.activation == "squared_relu":
        flags.append(("--squared-relu", None))
    if m.glu_linear_offset:
        flags.append(("--glu-linear-offset", f"{m.glu_linear_offset:g}"))
    if m.activation_clamp is not None:
        flags.append(("--activation-func-clamp-value", f"{m.activation_clamp:g}"))
    if m.norm == "RMSNorm":
        flags += [("--normalization", "RMSNorm")]
    if m.norm_zero_centered:
        flags.append(("--apply-layernorm-1p", None))
    if m.qkv_bias_only:
        flags.append(("--add-qkv-bias", None))
    if m.qk_norm == "head":
        flags.append(("--qk-layernorm", None))
    elif m.qk_norm == "l2":
        flags.append(("--qk-l2-norm", None))
    if m.position_embedding != "learned_absolute":
        flags.append(("--position-embedding-type", m.position_embedding))
    if m.position_embedding == "rope" and m.rotary_base is not None and whole(m.rotary_base):
        flags.append(("--rotary-base", whole(m.rotary_base)))
    if m.position_embedding == "rope" and m.rotary_percent != 1.0:
        flags.append(("--rotary-percent", f"{m.rotary_percent:g}"))
    flags += attention_flags(m)
    flags += shape_tail_flags(m, seq_length)
    return flags


def mla_flags(m: ModelSpec) -> list[Flag]:
    if not m.is_mla:
        return []
    flags: list[Flag] = [("--multi-latent-attention", None)]
    if m.q_lora_rank:
        flags.append(("--q-lora-rank", str(m.q_lora_rank)))
    rope = m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64
    flags += [
        ("--kv-lora-rank", str(m.kv_lora_rank)),
        ("--qk-head-dim", str(m.qk_head_dim)),
        ("--qk-pos-emb-head-dim", str(rope)),
        ("--v-head-dim", str(m.v_head_dim)),
    ]
    return flags


def pattern_expr(pattern: list[int] | tuple[int, ...]) -> str:
    """A 0/1 list as Megatron's python-list expression, run-length encoded over its shortest
    period: [0,0,0,1,1] -> ([0]*3+[1]*2), [0,1]*24 -> ([0]*1+[1]*1)*24."""
    n = len(pattern)
    period = next(
        p for p in range(1, n + 1) if n % p == 0 and list(pattern[:p]) * (n // p) == list(pattern)
    )
    runs: list[list[int]] = []
    for x in pattern[:period]:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    body = "+".join(f"[{x}]*{k}" for x, k in runs)
    return f"({body})" + (f"*{n // period}" if n // period > 1 else "")


def moe_layer_freq(m: ModelSpec) -> str:
    """Megatron's python-list pattern: 0 = dense layer, 1 = MoE layer."""
    if m.interleaved:
        return pattern_expr([int(x) for x in m.moe_layers])
    return f"([0]*{m.num_layers - m.num_moe_layers}+[1]*{m.num_moe_layers})"


def attention_flags(m: ModelSpec) -> list[Flag]:
    """Sliding windows (`--window-size W,0`, and `--window-attn-skip-freq` with 1 for a window
    layer and 0 for a full one when not every layer has a window) and attention sinks
    (`--softmax-type learnable`); `check_supported` refuses the kinds Megatron-LM lacks."""
    kinds = m.attention_kinds
    flags: list[Flag] = []
    if "sliding" in kinds:
        flags.append(("--window-size", f"{m.window_size},0"))
        if set(kinds) != {"sliding"}:
            flags.append(
                ("--window-attn-skip-freq", pattern_expr([int(k == "sliding") for k in kinds]))
            )
    if m.attention_sinks:
        flags.append(("--softmax-type", "learnable"))
    for key, value in variant_keys(m).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append((flag, None))
        elif isinstance(value, list):
            flags.append((flag, pattern_expr(value)))
        else:
            flags.append((flag, str(value)))
    return flags


def variant_keys(m: ModelSpec) -> dict:
    """Megatron-Core's experimental attention variants as TransformerConfig keys (Megatron-LM
    writes each as its flag; experimental_attention_variant_module_specs builds the layers):
    Gated DeltaNet layers (`experimental_attention_variant: gated_delta_net`, its pattern
    `linear_attention_freq` a 0/1 list, 1 a linear layer, 0 a full one, and the `linear_*`
    dims), DSA (`dsa`: every layer, the indexer's heads, head dim and top-k), and the gated
    attention output (`attention_output_gate`, Qwen3-Next's)."""
    kinds = m.attention_kinds
    out: dict = {}
    if "linear" in kinds:
        out.update(
            experimental_attention_variant="gated_delta_net",
            linear_attention_freq=[int(k == "linear") for k in kinds],
            linear_num_key_heads=m.linear_num_key_heads,
            linear_num_value_heads=m.linear_num_value_heads,
            linear_key_head_dim=m.linear_key_head_dim,
            linear_value_head_dim=m.linear_value_head_dim,
            linear_conv_kernel_dim=m.linear_conv_kernel_dim,
        )
    elif "dsa" in kinds:
        out.update(
            experimental_attention_variant="dsa",
            dsa_indexer_n_heads=m.dsa_index_heads,
            dsa_indexer_head_dim=m.dsa_index_head_dim,
            dsa_indexer_topk=m.dsa_index_topk,
        )
    if m.attention_output_gate:
        out["attention_output_gate"] = True
    return out


def layer_kind_problems(m: ModelSpec, layout: Layout | None = None) -> list[tuple[bool, str]]:
    """The layer kinds a Megatron-Core GPT model cannot express (Megatron-LM's flags and the
    TransformerConfig keys are the same): chunked attention, and the experimental variants
    beyond what experimental_attention_variant_module_specs builds (one variant a model,
    Gated DeltaNet beside full attention only, DSA on every layer and with MLA only, the
    linear heads divisible by tp x cp: TransformerConfig's checks)."""
    kinds = set(m.attention_kinds)
    split = layout.tp * layout.cp if layout is not None else 1
    return [
        (
            "chunked" in kinds,
            f"layer_types has chunked-local layers ({m.attention_chunk_size}-token "
            "chunks, Llama 4's iRoPE): Megatron-Core's GPT model has no chunked "
            "attention; plan it with full layers or train it elsewhere",
        ),
        (
            "linear" in kinds and not kinds <= {"linear", "full"},
            "layer_types mixes Gated DeltaNet layers with "
            f"{', '.join(sorted(kinds - {'linear', 'full'}))} ones: Megatron-Core builds "
            "the linear layers beside full attention only",
        ),
        (
            "dsa" in kinds and kinds != {"dsa"},
            "layer_types has DSA layers beside others: Megatron-Core's dsa variant runs on "
            "every layer",
        ),
        (
            "dsa" in kinds and not m.is_mla,
            "DSA layers without multi-latent attention: Megatron-Core's DSA is MLA's only "
            "(get_dsa_module_spec_for_backend)",
        ),
        (
            "linear" in kinds
            and split > 1
            and ((m.linear_num_key_heads or 1) % split or (m.linear_num_value_heads or 1) % split),
            f"linear_num_key_heads {m.linear_num_key_heads} / linear_num_value_heads "
            f"{m.linear_num_value_heads} with tp x cp = {split}: Megatron-Core splits the "
            "Gated DeltaNet heads over tp x cp and needs both divisible; choose tp x cp "
            "dividing them",
        ),
        (
            m.mtp_dedicated_embeddings,
            "mtp_dedicated_embeddings: Megatron-Core's MTP layers share "
            "the word embedding (no flag gives them their own); set it "
            "false",
        ),
    ]


def moe_flags(m: ModelSpec, layout: Layout | None = None) -> list[Flag]:
    """Experts, router, dense-layer pattern, and the layout's token dispatcher."""
    if not m.is_moe:
        return []
    flags: list[Flag] = [
        ("--num-experts", str(m.num_experts)),
        ("--moe-router-topk", str(m.moe_top_k)),
        ("--moe-ffn-hidden-size", str(m.expert_ffn)),
    ]
    if m.num_shared_experts:
        flags.append(
            ("--moe-shared-expert-intermediate-size", str(m.num_shared_experts * m.expert_ffn))
        )
    if m.moe_shared_expert_gate:
        flags.append(("--moe-shared-expert-gate", None))
    if m.num_moe_layers != m.num_layers:
        flags.append(("--moe-layer-freq", moe_layer_freq(m)))
    if m.moe_router_num_groups and m.moe_router_group_topk:  # group-limited routing
        flags += [
            ("--moe-router-num-groups", str(m.moe_router_num_groups)),
            ("--moe-router-group-topk", str(m.moe_router_group_topk)),
        ]
    if m.moe_router_score != "softmax":
        flags.append(("--moe-router-score-function", m.moe_router_score))
    if m.moe_router_scaling is not None:
        flags.append(("--moe-router-topk-scaling-factor", f"{m.moe_router_scaling:g}"))
    if m.moe_router_expert_bias:
        flags.append(("--moe-router-enable-expert-bias", None))
    if m.moe_router_pre_softmax:
        flags.append(("--moe-router-pre-softmax", None))
    padded = layout is not None and layout.moe_pad_expert_input_to_capacity
    if m.moe_capacity_factor != 1.0 or padded:  # token dropping at this capacity (Megatron-Core's
        # default: dropless); drop-and-pad needs the factor written, 1.0 included
        flags.append(("--moe-expert-capacity-factor", f"{m.moe_capacity_factor:g}"))
    if padded:
        flags.append(("--moe-pad-expert-input-to-capacity", None))
    dispatcher = layout.moe_token_dispatcher if layout is not None else "alltoall"
    if dispatcher in ("deepep", "hybridep"):
        flags += [
            ("--moe-token-dispatcher-type", "flex"),
            ("--moe-flex-dispatcher-backend", dispatcher),
        ]
    else:
        flags.append(("--moe-token-dispatcher-type", dispatcher))
    if layout is not None and layout.overlap_moe_expert_parallel_comm:
        flags.append(("--overlap-moe-expert-parallel-comm", None))
    return flags + [("--moe-grouped-gemm", None)]


def _pipeline_flags(m: ModelSpec, layout: Layout) -> list[Flag]:
    if layout.pipeline_model_parallel_layout:
        return [("--pipeline-model-parallel-layout", layout.pipeline_model_parallel_layout)]
    flags: list[Flag] = []
    if layout.vpp > 1:
        flags.append(("--num-virtual-stages-per-pipeline-rank", str(layout.vpp)))
    split = pipeline_split(m.num_layers, layout)
    if split.kind == "accounted":
        flags += [
            ("--account-for-embedding-in-pipeline-split", None),
            ("--account-for-loss-in-pipeline-split", None),
        ]
    elif split.kind == "explicit":
        if layout.first_stage_layers is not None:
            flags.append(("--decoder-first-pipeline-num-layers", str(layout.first_stage_layers)))
        if layout.last_stage_layers is not None:
            flags.append(("--decoder-last-pipeline-num-layers", str(layout.last_stage_layers)))
    return flags


def _optimizer_flags(layout: Layout, precision: str) -> list[Flag]:
    flags: list[Flag] = []
    if layout.zero >= 1:
        flags.append(("--use-distributed-optimizer", None))
    if layout.zero >= 2:
        strategy = "optim_grads" if layout.zero == 2 else "optim_grads_params"
        flags += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", strategy),
            ("--ckpt-format", "fsdp_dtensor"),
        ]
    if precision == "fp16" and layout.grad_reduce_in_fp32:
        flags.append(("--accumulate-allreduce-grads-in-fp32", None))
    elif precision != "fp16" and not layout.grad_reduce_in_fp32:
        flags.append(("--grad-reduce-in-bf16", None))
    if (layout.exp_avg_dtype, layout.exp_avg_sq_dtype) != ("fp32", "fp32"):
        flags += [
            ("--use-precision-aware-optimizer", None),
            ("--exp-avg-dtype", layout.exp_avg_dtype),
            ("--exp-avg-sq-dtype", layout.exp_avg_sq_dtype),
        ]
    if layout.overlap_grad_reduce:
        flags.append(("--overlap-grad-reduce", None))
        if layout.overlap_param_gather and layout.zero >= 1:
            flags.append(("--overlap-param-gather", None))
    return flags


def _recompute_flags(layout: Layout) -> list[Flag]:
    if layout.recompute == "selective":
        flags: list[Flag] = [("--recompute-granularity", "selective")]
        if layout.recompute_modules:
            flags.append(("--recompute-modules", list(layout.recompute_modules)))
        return flags
    if layout.recompute == "full" and layout.recompute_num_layers is not None:
        return [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "block"),
            ("--recompute-num-layers", str(layout.recompute_num_layers)),
        ]
    if layout.recompute == "full":
        return [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", "1"),
        ]
    return []


def recipe_flags(layout: Layout) -> list[Flag]:
    """CPU offloading and CUDA graphs."""
    flags: list[Flag] = []
    if layout.cpu_offloading_num_layers:
        flags.append(("--cpu-offloading-num-layers", str(layout.cpu_offloading_num_layers)))
    if layout.cuda_graphs == "partial":
        flags.append(("--cuda-graph-impl", "transformer_engine"))
    elif layout.cuda_graphs == "full":  # Megatron asserts the NaN check is off with it
        flags += [
            ("--cuda-graph-impl", "local"),
            ("--cuda-graph-scope", "full_iteration"),
            ("--no-check-for-nan-in-loss-and-grad", None),
        ]
    return flags


FLAG = framework_names(Layout, "megatron")
"""{layout field: its Megatron-LM flag}, from the layout table (planner/layout.py)."""


def parallel_flags(m: ModelSpec, layout: Layout, *, precision: str = "bf16") -> list[Flag]:
    """TP/PP/CP/EP, SP, pipeline split, optimizer sharding, overlap (Megatron-LM spellings)."""
    flags: list[Flag] = [(FLAG["tp"], str(layout.tp)), (FLAG["pp"], str(layout.pp))]
    if layout.cp > 1:
        flags += [(FLAG["cp"], str(layout.cp)), (FLAG["cp_comm_type"], layout.cp_comm_type)]
    if m.is_moe and (layout.ep > 1 or layout.etp != layout.tp):
        flags += [(FLAG["ep"], str(layout.ep)), (FLAG["etp"], str(layout.etp))]
    flags += _pipeline_flags(m, layout)
    if layout.sp and layout.tp > 1:
        flags.append((FLAG["sp"], None))
        if layout.tp_comm_overlap:
            flags.append((FLAG["tp_comm_overlap"], None))
    return (
        flags
        + _optimizer_flags(layout, precision)
        + _recompute_flags(layout)
        + recipe_flags(layout)
    )


def precision_flags(precision: str) -> list[Flag]:
    if precision == "fp16":
        return [("--fp16", None)]
    if precision == "fp8":
        return [("--bf16", None), ("--fp8-format", "hybrid")]
    return [("--bf16", None)]


def fp8_flags(training) -> list[Flag]:
    """The FP8 recipe (written out, Megatron's default included) and FP8 weight copies."""
    if training.precision != "fp8":
        return []
    flags: list[Flag] = [("--fp8-recipe", training.recipe)]
    if training.fp8_param_gather:
        flags.append(("--fp8-param-gather", None))
    return flags


def megatron_flags(job, layout: Layout) -> list[Flag]:
    """Every `pretrain_gpt.py` flag of the export, in order (values as strings)."""
    m, tr = job.model, job.training
    flags = model_flags(m, seq_length=tr.seq_length) + mla_flags(m) + moe_flags(m, layout)
    if m.mtp_num_layers:
        flags.append(("--mtp-num-layers", str(m.mtp_num_layers)))
    flags += [("--attention-dropout", "0"), ("--hidden-dropout", "0")]
    if not tr.flash_attention:
        flags.append(("--attention-backend", "unfused"))
    flags += parallel_flags(m, layout, precision=tr.precision)
    flags += [
        ("--micro-batch-size", str(layout.micro_batch_size)),
        ("--global-batch-size", str(tr.global_batch_size)),
    ]
    flags += precision_flags(tr.precision) + fp8_flags(tr)
    flags += [
        ("--mock-data", None),
        ("--tokenizer-type", "NullTokenizer"),
        ("--vocab-size", str(m.vocab_size - 1)),
        ("--train-iters", '"${TRAIN_ITERS:?set TRAIN_ITERS, the run length in steps}"'),
        ("--lr", '"${LR:?set LR, the peak learning rate}"'),
    ]
    return flags


def _quote(value: str) -> str:
    return value if value.startswith('"${') else shlex.quote(value)


def continued(lines: list[str], indent: str = "    ") -> list[str]:
    """Join command words one per line with ` \\` continuations (the first unindented)."""
    out = []
    for i, line in enumerate(lines):
        tail = " \\" if i < len(lines) - 1 else ""
        out.append((indent if i else "") + line + tail)
    return out


def flag_lines(flags: list[Flag]) -> list[str]:
    out = []
    for name, value in flags:
        if value is None:
            out.append(name)
        elif isinstance(value, list):
            out.append(" ".join([name] + [_quote(v) for v in value]))
        else:
            out.append(f"{name} {_quote(value)}")
    return out


def launcher_lines(job) -> list[str]:
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    return [
        "torchrun",
        f"--nnodes {nodes}",
        f"--nproc-per-node {per_node}",
        '--node-rank "${NODE_RANK:-0}"',
        '--master-addr "${MASTER_ADDR:-localhost}"',
        '--master-port "${MASTER_PORT:-6000}"',
    ]


def render(job, layout: Layout, *, estimate=None) -> str:
    """The whole snippet (see the module docstring)."""
    check_supported(job, layout)
    nodes, per_node = nodes_and_devices(job.num_gpus, job.hardware.gpus_per_node)
    env, env_notes = environment(job, layout)
    mp = layout.tp * layout.pp * layout.cp
    head = header_lines(job, layout, "Megatron-LM pretrain_gpt.py launch", estimate=estimate)
    head += [
        "",
        f"Run on each of the {nodes} node(s) ({per_node} GPUs each) from a Megatron-LM checkout, "
        "with NODE_RANK and MASTER_ADDR set per node.",
        f"Data-parallel size {layout.dp} = {job.num_gpus} / (tp {layout.tp} * pp {layout.pp} * "
        f"cp {layout.cp} = {mp}): Megatron derives it; there is no flag.",
        "--mock-data and NullTokenizer stand in for your data and tokenizer: replace them with "
        "--data-path, --tokenizer-type and --tokenizer-model.",
        "Set TRAIN_ITERS and LR (the plan does not decide the run length or learning rate).",
    ] + env_notes
    out = ["#!/usr/bin/env bash"] + [f"# {line}".rstrip() for line in head]
    out += ["set -euo pipefail", ""]
    if env:
        out += [f"export {k}={v}" for k, v in env.items()] + [""]
    words = launcher_lines(job) + ["pretrain_gpt.py"] + flag_lines(megatron_flags(job, layout))
    out += continued(words)
    return "\n".join(out) + "\n"

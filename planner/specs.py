"""Pydantic specs for what the user gives us (files are read by `planner.io`).

`ModelSpec`, `HardwareSpec`, `TrainingSpec`, `ParallelSpec` and `ConfigSpec` are frozen and
forbid unknown keys; their field docstrings are the help text (README lists them). Validation
errors become one `SpecError` line naming the field, the value and the fix (`spec_error`).
"""

from __future__ import annotations

import difflib
import functools
import math
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from planner.errors import SpecError, short
from planner.fields import (
    MAX_BATCH,
    MAX_DIM,
    CudaGraphs,
    Dispatcher,
    Recompute,
    RecomputeModule,
    RouterScore,
    StateDtype,
)
from planner.io import (
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_FILE_BYTES,
    MAX_NAME_CHARS,
    MAX_NODES,
    READ_BUDGET_S,
    check_text,
    check_tree,
    load_json,
    load_yaml,
    read_budget,
    read_text,
    read_yaml,
    ref_path,
    safe_exists,
    safe_is_dir,
    safe_is_file,
)

__all__ = [
    "ModelSpec",
    "HardwareSpec",
    "PeakTflops",
    "Calibration",
    "TrainingSpec",
    "ParallelSpec",
    "ConfigSpec",
    "JobLike",
    "field_help",
    "ref_path",
    "read_text",
    "read_yaml",
    "load_yaml",
    "load_json",
    "check_text",
    "check_tree",
    "read_budget",
    "safe_exists",
    "safe_is_file",
    "safe_is_dir",
    "parse_spec",
    "spec_error",
    "Precision",
    "Recompute",
    "MAX_FILE_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_DIGITS",
    "MAX_NAME_CHARS",
    "READ_BUDGET_S",
    "MAX_GPUS",
    "Fp8Recipe",
    "RecomputeModule",
    "Dispatcher",
    "CudaGraphs",
    "StateDtype",
    "Architecture",
    "CaseClass",
    "ServingCalibration",
    "ServeCaseClass",
    "IntraNodeLink",
    "LAYER_KINDS",
    "moe_pattern_of",
    "kinds_of",
    "pattern_list",
]

Precision = Literal["bf16", "fp16", "fp8"]
Fp8Recipe = Literal["delayed", "tensorwise", "mxfp8", "blockwise"]
CrossEntropy = Literal["vocab_parallel", "pytorch_fp32"]
AttentionKernel = Literal["fused", "flash2"]
Architecture = Literal["ampere", "hopper", "blackwell", "cdna3"]
CaseClass = Literal["dense-bf16", "dense-fp8", "moe", "fsdp", "long-context"]
ServeCaseClass = Literal["offline-throughput", "static-latency", "serving-latency", "disagg"]
IntraNodeLink = Literal["nvlink", "xgmi", "pcie"]

_MAX_DIM = MAX_DIM  # no real model or cluster is larger; anything above is a typo
MAX_GPUS = _MAX_DIM  # num_gpus, --gpus and --nodes x GPUs per node


class _Spec(BaseModel):
    # The docstring under each field is its help text (README lists them). Pydantic's
    # use_attribute_docstrings would re-read this source at every start (~40 ms of the ~1 s a
    # plan may take); `field_help()` reads them on demand instead.
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """YAML `true`/`false` is not a number (pydantic's lax mode would read `num_gpus: true` as 1)."""
        if isinstance(value, bool) and info.field_name:
            ann = cls.model_fields[info.field_name].annotation
            if ann in (int, float) or (
                get_args(ann) and set(get_args(ann)) <= {int, float, type(None)}
            ):
                raise ValueError(f"must be a number, got {str(value).lower()}")
        return value


GATED_ACTIVATIONS = ("swiglu", "geglu", "reglu", "quick_geglu")
"""ModelSpec.activation values of a gated (3-matrix) MLP."""


class ModelSpec(_Spec):
    """A decoder-only transformer, in Megatron-LM's vocabulary."""

    name: str = Field(default="custom", max_length=255)
    """Display name."""
    num_layers: int = Field(ge=1, le=10_000)
    """Transformer layers (Megatron `--num-layers`)."""
    hidden_size: int = Field(ge=1, le=1_000_000)
    """Model width h (`--hidden-size`)."""
    ffn_hidden_size: int | None = Field(default=None, ge=1, le=_MAX_DIM)
    """MLP width f (`--ffn-hidden-size`); default 4h, or int(8h/3/64)*64 for swiglu (Megatron's default)."""
    num_attention_heads: int = Field(ge=1, le=100_000)
    """Query heads a (`--num-attention-heads`)."""
    num_kv_heads: int | None = Field(default=None, ge=1, le=100_000)
    """Key/value heads g (`--num-query-groups`); default = num_attention_heads (MHA)."""
    kv_channels: int | None = Field(default=None, ge=1, le=100_000)
    """Head dim d (`--kv-channels`); default hidden_size / num_attention_heads."""
    vocab_size: int = Field(ge=1, le=_MAX_DIM)
    """Vocabulary size before Megatron's padding to a multiple of 128*tp."""
    activation: Literal[
        "swiglu", "geglu", "reglu", "quick_geglu", "gelu", "relu", "squared_relu"
    ] = "gelu"
    """MLP activation. Gated 3-matrix MLPs (`gated`): swiglu (SiLU), geglu (tanh-GELU,
    Gemma's), reglu (ReLU; NeMo's reglu), quick_geglu (x * sigmoid(1.702 x), Megatron's
    --quick-geglu, gpt-oss's). Two-matrix MLPs: gelu (Megatron's default), relu, squared_relu.
    The gated ones cost the same, as do the ungated ones: the activation is one elementwise
    kernel; the name is what the exports write."""
    glu_linear_offset: float = Field(default=0.0, ge=-1e3, le=1e3)
    """A constant added to the linear half of a gated MLP before the product (gpt-oss: 1.0,
    `(up + 1) * glu`; Megatron `--glu-linear-offset`); no cost, written by the exports."""
    activation_clamp: float | None = Field(default=None, gt=0, le=1e6)
    """The gated MLP's inputs clamped to this magnitude (gpt-oss: swiglu_limit 7.0; Megatron
    `--activation-func-clamp-value`); no cost, written by the exports."""
    qk_norm: Literal["none", "head", "l2", "layer"] = "none"
    """A norm on the queries and keys before RoPE and attention: head (an RMSNorm per head, over
    its head dim: Qwen3, Qwen3-Next / 3.5, Gemma 3, GLM-4.5; Megatron `--qk-layernorm`), l2
    (a weightless L2 norm: Llama 4's use_qk_norm; Megatron `--qk-l2-norm`) or layer (one
    RMSNorm over all heads: MiniMax-M2's qk_norm_type per_layer). Written by the exports;
    not counted (its saved inputs, about (a + g) d x 2 bytes a token and layer, and one
    elementwise pass)."""
    norm_placement: Literal["pre", "sandwich"] = "pre"
    """Where a layer's RMSNorms sit: pre (an input norm before attention and before the MLP:
    Llama and every other family planner reads), or sandwich (Gemma 3: a second norm on each
    sublayer's output before its residual add, transformers' post_attention_layernorm and
    post_feedforward_layernorm). In planner sandwich stands for Gemma 3's layer, the one
    Megatron-Bridge builds with its Gemma3ModelProvider (which also brings Gemma's
    zero-centred (1 + w) norm weights and the sqrt(h) embedding scale); Megatron-LM, NeMo 1
    and Megatron-DeepSpeed have no such layer and their exports refuse it, and torchtitan's
    export says what the model definition you name must build. Counted:
    the two extra norms keep their inputs, the sublayer outputs, 4h bytes a token and layer
    (÷ tp with SP); their 2h weights a layer are not."""
    norm_zero_centered: bool = False
    """The norms scale by (1 + w) with w initialised to zero (Gemma 3, Qwen3-Next, Qwen3.5:
    transformers' RMSNorm `x * (1 + weight)`; Megatron `--apply-layernorm-1p`, Megatron-Core
    `layernorm_zero_centered_gamma`), where the others scale by w initialised to one. The
    same function at initialisation; weight decay pulls w, so the trained model differs. No
    cost; written by the exports, refused by those without it."""
    rotary_base_local: float | None = Field(default=None, gt=0, le=1e12)
    """The RoPE base of the sliding-window layers where it is not rotary_base's (Gemma 3:
    10,000 against its global layers' 1,000,000; HF `rope_local_base_freq`; Megatron-Bridge's
    Gemma3ModelProvider `rotary_base: [local, global]`). No cost; written by the
    Megatron-Bridge export, refused by the exports with one base."""
    softmax_scale: float | None = Field(default=None, gt=0, le=10.0)
    """The attention logits' scale where it is not 1/sqrt(head dim) (Gemma 3 27B: 1/sqrt(168)
    with 128-wide heads, HF `query_pre_attn_scalar`; Megatron-Core `softmax_scale`). No cost;
    written by the Megatron-Bridge export, refused by the exports that have no such knob."""
    tied_embeddings: bool = False
    """Input embedding and output layer share one matrix."""
    normalization: Literal["RMSNorm", "LayerNorm"] | None = None
    """Default RMSNorm for swiglu models, LayerNorm (with bias) otherwise."""
    add_bias_linear: bool | None = None
    """Biases in the linear layers; default false for swiglu models, true otherwise (GPT)."""
    add_qkv_bias: bool = False
    """Biases on the query, key and value projections alone (Qwen2, GLM-4.5's attention_bias;
    Megatron `--add-qkv-bias`), where the other linear layers have none. Written by the
    exports; its (a + 2g) d parameters a layer are not counted."""
    position_embedding_type: Literal["rope", "learned_absolute", "none"] | None = None
    """Default rope for swiglu models, learned_absolute (GPT) otherwise."""
    seq_length: int | None = Field(default=None, ge=1, le=100_000_000)
    """Training sequence length the model was trained at (the default for `plan`)."""
    rotary_base: float | None = Field(default=None, gt=0, le=1e12)
    """RoPE base theta (Megatron `--rotary-base`, HF `rope_theta`): 500000 for Llama 3, 1e6
    for Qwen and Mixtral; unset = the framework's default (10000)."""
    rotary_percent: float = Field(default=1.0, gt=0, le=1)
    """Share of each head's dimensions RoPE rotates (Megatron `--rotary-percent`, NeMo
    `rotary_percent` / NeMo 1 `rotary_percentage`, HF `partial_rotary_factor`): 0.5 for
    GLM-4.5, 0.25 for Qwen3-Next and Qwen3.5. It changes no memory or time (RoPE has no
    parameters and runs among the elementwise kernels); it is read and written so that an
    export builds the same model."""
    num_experts: int | None = Field(default=None, ge=1, le=100_000)
    """Routed experts per MoE layer (`--num-experts`); unset for a dense model."""
    moe_top_k: int = Field(default=2, ge=1, le=1_000)
    """Experts each token is routed to (`--moe-router-topk`)."""
    moe_ffn_hidden_size: int | None = Field(default=None, ge=1, le=_MAX_DIM)
    """Routed expert MLP width (`--moe-ffn-hidden-size`); default ffn_hidden_size."""
    num_shared_experts: int = Field(default=0, ge=0, le=1_000)
    """Shared experts, each moe_ffn_hidden_size wide (`--moe-shared-expert-intermediate-size` = n*f_e)."""
    moe_shared_expert_gate: bool = False
    """A sigmoid gate (one h-wide weight vector) on the shared experts' output (Qwen2-MoE,
    Qwen3-Next, Qwen3.5: transformers' shared_expert_gate; Megatron
    `--moe-shared-expert-gate`). Needs shared experts; its h weights a layer and one GEMV a
    token are not counted; written by the exports, refused by those without it."""
    num_dense_layers: int = Field(default=0, ge=0, le=10_000)
    """Leading dense layers before the MoE layers (DeepSeek's first_k_dense_replace)."""
    moe_capacity_factor: float = Field(default=1.0, ge=0.1, le=100.0)
    """Tokens an expert rank holds relative to perfect balance (memory and all-to-all load)."""
    moe_router_num_groups: int | None = Field(default=None, ge=1, le=100_000)
    """Group-limited routing: the groups the experts are split into (Megatron
    `--moe-router-num-groups`, HF `n_group`; DeepSeek-V3: 8, one per node of EP 64)."""
    moe_router_group_topk: int | None = Field(default=None, ge=1, le=100_000)
    """Group-limited routing: the groups each token's experts may come from (Megatron
    `--moe-router-group-topk`, HF `topk_group`; DeepSeek-V3: 4, so at most 4 nodes)."""
    moe_router_score: RouterScore = "softmax"
    """How the router scores the experts: softmax (Mixtral, Qwen3-MoE, gpt-oss) or sigmoid
    (DeepSeek-V3, Kimi K2, GLM-4.5, MiniMax-M2, Llama 4; Megatron
    `--moe-router-score-function`). No cost (one elementwise pass either way); written by the
    exports."""
    moe_router_scaling: float | None = Field(default=None, gt=0, le=1e4)
    """The factor the routed experts' weights are scaled by (HF `routed_scaling_factor`:
    DeepSeek-V3 2.5, Kimi K2 2.827; Megatron `--moe-router-topk-scaling-factor`); unset = 1."""
    moe_router_expert_bias: bool = False
    """Auxiliary-loss-free balancing: a per-expert bias added to the scores for the top-k choice
    (DeepSeek-V3's noaux_tc, GLM-4.5's and MiniMax-M2's e_score_correction_bias; Megatron
    `--moe-router-enable-expert-bias`, which needs the sigmoid score)."""
    moe_router_pre_softmax: bool = False
    """A softmax router's probabilities taken over all E experts before the top-k, not
    renormalised over the k chosen (HF `norm_topk_prob: false`: DeepSeek-V2, Qwen1.5 / Qwen2-MoE;
    Megatron `--moe-router-pre-softmax`); the default renormalises (Mixtral, Qwen3-MoE,
    gpt-oss). No cost; written by the exports."""
    q_lora_rank: int | None = Field(default=None, ge=1, le=_MAX_DIM)
    """MLA query low-rank size (`--q-lora-rank`); unset = full-rank queries."""
    kv_lora_rank: int | None = Field(default=None, ge=1, le=_MAX_DIM)
    """MLA key/value low-rank size (`--kv-lora-rank`); set = multi-latent attention."""
    qk_head_dim: int | None = Field(default=None, ge=1, le=100_000)
    """MLA non-rotary query/key head dim (`--qk-head-dim`)."""
    qk_pos_emb_head_dim: int | None = Field(default=None, ge=0, le=100_000)
    """MLA rotary query/key head dim (`--qk-pos-emb-head-dim`)."""
    v_head_dim: int | None = Field(default=None, ge=1, le=100_000)
    """MLA value head dim (`--v-head-dim`)."""
    mtp_num_layers: int = Field(default=0, ge=0, le=100)
    """Multi-token-prediction layers after the last layer (DeepSeek-V3: 1; Megatron
    `--mtp-num-layers`): each is a transformer layer plus two norms and a 2h x h projection,
    with its own activations and FLOPs, on the last pipeline stage."""
    mtp_dedicated_embeddings: bool = False
    """Each MTP layer has a word embedding of its own (Qwen3.5's config.json
    `mtp_use_dedicated_embeddings`); default false: it shares the model's (DeepSeek-V3 §2.2,
    Megatron-Core's MTP). True adds vocab x hidden parameters per MTP layer on the last stage."""
    # Per-layer pattern (docs/config.md "Layer pattern") -----------------------------------
    moe_layer_freq: int | str | tuple[int, ...] | None = None
    """Which layers are MoE, as Megatron's `--moe-layer-freq`: an int N (layer i is MoE when
    i % N == 0), a 0/1 list, or a list expression such as "[0]*3+[1]*58" or "([0]+[1]*1)*24".
    Unset: the layers after `num_dense_layers` (its shorthand "[0]*n+[1]*(L-n)")."""
    layer_types: str | tuple[str, ...] | None = None
    """Attention kind per layer, a list or a list expression such as
    "(['sliding']+['full'])*18": full (causal), sliding (window_size), chunked
    (attention_chunk_size), dsa (top-k sparse, dsa_*), linear (Gated DeltaNet, linear_*).
    Unset: every layer full, or dsa when dsa_index_topk is set."""
    window_size: int | None = Field(default=None, ge=1, le=100_000_000)
    """Sliding-window layers attend to the last W tokens (Megatron `--window-size W,0`)."""
    attention_chunk_size: int | None = Field(default=None, ge=1, le=100_000_000)
    """Chunked local layers attend within fixed chunks of this many tokens (Llama 4 iRoPE)."""
    dsa_index_topk: int | None = Field(default=None, ge=1, le=100_000_000)
    """DSA layers (DeepSeek-V3.2): keys each query attends to, picked by the indexer."""
    dsa_index_heads: int | None = Field(default=None, ge=1, le=100_000)
    """DSA lightning-indexer heads (DeepSeek-V3.2: 64)."""
    dsa_index_head_dim: int | None = Field(default=None, ge=1, le=100_000)
    """DSA lightning-indexer head dim (DeepSeek-V3.2: 128)."""
    linear_num_key_heads: int | None = Field(default=None, ge=1, le=100_000)
    """Linear-attention (Gated DeltaNet) query/key heads."""
    linear_num_value_heads: int | None = Field(default=None, ge=1, le=100_000)
    """Linear-attention value heads (one d_k x d_v state each)."""
    linear_key_head_dim: int | None = Field(default=None, ge=1, le=100_000)
    """Linear-attention key head dim d_k."""
    linear_value_head_dim: int | None = Field(default=None, ge=1, le=100_000)
    """Linear-attention value head dim d_v."""
    linear_conv_kernel_dim: int = Field(default=4, ge=1, le=1_000)
    """Linear-attention short causal convolution width (Qwen3-Next: 4)."""
    attention_output_gate: bool = False
    """Full-attention layers gate their output by a sigmoid of a second query-width
    projection (Qwen3-Next gated attention: q_proj twice as wide)."""
    attention_sinks: bool = False
    """A learned sink logit per head in every attention layer (gpt-oss): a parameters a layer
    and one more softmax column; no KV entry."""
    expert_precision: Literal["bf16", "fp8", "mxfp4"] | None = None
    """Precision the routed experts are published in (gpt-oss: mxfp4): serving stores them so
    unless the serving precision is smaller; training keeps its own precision."""

    @model_validator(mode="after")
    def _shape(self) -> ModelSpec:
        a, g = self.num_attention_heads, self.kv_heads
        if a % g:
            raise ValueError(
                f"num_kv_heads ({g}) must divide num_attention_heads ({a}); "
                f"try one of {_divisor_list(a)}"
            )
        if self.kv_channels is None and not self.is_mla and self.hidden_size % a:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({a}) "
                "when kv_channels is unset; set kv_channels (the head dim)"
            )
        if self.num_experts is not None:
            if self.moe_top_k > self.num_experts:
                raise ValueError(
                    f"moe_top_k ({self.moe_top_k}) must be <= num_experts ({self.num_experts})"
                )
            ng, gk = self.moe_router_num_groups, self.moe_router_group_topk
            if (ng is None) != (gk is None):
                raise ValueError(
                    "moe_router_num_groups and moe_router_group_topk go together "
                    "(group-limited routing); set both or neither"
                )
            if ng is not None and gk is not None and (self.num_experts % ng or gk > ng):
                raise ValueError(
                    f"moe_router_num_groups ({ng}) must divide num_experts ({self.num_experts}) "
                    f"and moe_router_group_topk ({gk}) be <= it"
                )
            if self.num_dense_layers >= self.num_layers:
                raise ValueError(
                    f"num_dense_layers ({self.num_dense_layers}) must be < num_layers "
                    f"({self.num_layers}) for an MoE model"
                )
        if self.ffn == 0:  # Megatron's swiglu default int(4h * 2/3 / 64) * 64 is 0 for h < 96
            raise ValueError(
                f"ffn_hidden_size is unset and Megatron's swiglu default int(4 * hidden_size * "
                f"2/3 / 64) * 64 is 0 for hidden_size {self.hidden_size}; set ffn_hidden_size"
            )
        if self.is_mla and (self.qk_head_dim is None or self.v_head_dim is None):
            raise ValueError(
                "multi-latent attention (kv_lora_rank set) also needs qk_head_dim "
                "and v_head_dim (qk_pos_emb_head_dim defaults to 64)"
            )
        routed = (
            self.moe_router_score != "softmax"
            or self.moe_router_scaling is not None
            or self.moe_router_expert_bias
            or self.moe_router_pre_softmax
        )
        if routed and not self.is_moe:
            raise ValueError(
                "moe_router_score, moe_router_scaling, moe_router_expert_bias and "
                "moe_router_pre_softmax describe an MoE router; set num_experts or drop them"
            )
        if self.moe_router_pre_softmax and self.moe_router_score != "softmax":
            raise ValueError(
                "moe_router_pre_softmax is a softmax router's (over all experts before the "
                "top-k); a sigmoid router's top-k weights are renormalised (Megatron-Core); "
                "drop it"
            )
        if self.moe_router_expert_bias and self.moe_router_score != "sigmoid":
            raise ValueError(
                "moe_router_expert_bias (auxiliary-loss-free balancing) needs moe_router_score "
                "sigmoid, as Megatron-Core requires; set it or drop the bias"
            )
        if not self.gated and (self.glu_linear_offset or self.activation_clamp is not None):
            raise ValueError(
                f"glu_linear_offset and activation_clamp shape a gated MLP; activation "
                f"{self.activation} has none: use a gated one ({', '.join(GATED_ACTIVATIONS)}) "
                "or drop them"
            )
        self._check_pattern()
        return self

    def _check_pattern(self) -> None:
        L = self.num_layers
        if self.moe_layer_freq is not None:
            if not self.is_moe:
                raise ValueError(
                    f"moe_layer_freq ({short(self.moe_layer_freq)}) needs num_experts; "
                    "set num_experts or drop moe_layer_freq"
                )
            pat = moe_pattern_of(self.moe_layer_freq, L, field="moe_layer_freq")
            if not any(pat):
                raise ValueError("moe_layer_freq makes no layer MoE; give at least one 1")
            if self.num_dense_layers and pat != tuple(
                [False] * self.num_dense_layers + [True] * (L - self.num_dense_layers)
            ):
                raise ValueError(
                    f"num_dense_layers ({self.num_dense_layers}) contradicts "
                    f"moe_layer_freq ({short(self.moe_layer_freq)}); give one of them"
                )
        kinds = set(self.attention_kinds)
        need = {
            "sliding": ("window_size",),
            "chunked": ("attention_chunk_size",),
            "dsa": ("dsa_index_topk", "dsa_index_heads", "dsa_index_head_dim"),
            "linear": (
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
            ),
        }
        if self.moe_shared_expert_gate and not (self.is_moe and self.num_shared_experts):
            raise ValueError(
                "moe_shared_expert_gate gates the shared experts and the model has none; set "
                "num_shared_experts or drop it"
            )
        if self.rotary_base_local is not None and "sliding" not in kinds:
            raise ValueError(
                f"rotary_base_local ({self.rotary_base_local:g}) is the RoPE base of the "
                "sliding-window layers and layer_types has none; drop it or give the windows"
            )
        for kind in sorted(kinds):
            missing = [k for k in need.get(kind, ()) if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"layer_types has {kind} layers, which need {', '.join(missing)}; set them"
                )
        if "linear" in kinds and (self.linear_num_value_heads or 1) % (
            self.linear_num_key_heads or 1
        ):
            raise ValueError(
                f"linear_num_key_heads ({self.linear_num_key_heads}) must divide "
                f"linear_num_value_heads ({self.linear_num_value_heads})"
            )

    @property
    def moe_layers(self) -> tuple[bool, ...]:
        """Per layer: True for an MoE layer (moe_layer_freq, else num_dense_layers first)."""
        if not self.is_moe:
            return (False,) * self.num_layers
        if self.moe_layer_freq is not None:
            return moe_pattern_of(self.moe_layer_freq, self.num_layers, field="moe_layer_freq")
        n = self.num_dense_layers
        return (False,) * n + (True,) * (self.num_layers - n)

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """Per layer: full, sliding, chunked, dsa or linear (layer_types)."""
        if self.layer_types is None:
            return (("dsa" if self.dsa_index_topk else "full"),) * self.num_layers
        return kinds_of(self.layer_types, self.num_layers)

    @property
    def interleaved(self) -> bool:
        """MoE layers are not simply the last ones (a dense layer follows an MoE layer)."""
        pat = self.moe_layers
        return any(a and not b for a, b in zip(pat, pat[1:]))

    # Derived sizes (Megatron's defaults) ------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        if self.kv_channels:
            return self.kv_channels
        return self.hidden_size // self.num_attention_heads

    @property
    def ffn(self) -> int:
        if self.ffn_hidden_size:
            return self.ffn_hidden_size
        if self.gated:
            return int(4 * self.hidden_size * 2 / 3 / 64) * 64
        return 4 * self.hidden_size

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn

    @property
    def num_moe_layers(self) -> int:
        if self.moe_layer_freq is not None and self.is_moe:
            return sum(self.moe_layers)
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def gated(self) -> bool:
        """A gated MLP (two input projections and the output one): swiglu, geglu, reglu or
        quick_geglu; they cost the same (the activation is one elementwise kernel either way)."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def norm(self) -> str:
        return self.normalization or ("RMSNorm" if self.gated else "LayerNorm")

    @property
    def bias(self) -> bool:
        return self.add_bias_linear if self.add_bias_linear is not None else not self.gated

    @property
    def qkv_bias_only(self) -> bool:
        """Biases on the query, key and value projections and on no other linear layer: what
        the exports write as --add-qkv-bias / add_qkv_bias beside no linear biases."""
        return self.add_qkv_bias and not self.bias

    @property
    def position_embedding(self) -> str:
        return self.position_embedding_type or ("rope" if self.gated else "learned_absolute")


class PeakTflops(_Spec):
    """Dense (no sparsity) peak tensor-core throughput per GPU, TFLOP/s."""

    bf16: float = Field(gt=0, le=1e6)
    fp16: float = Field(gt=0, le=1e6)
    fp8: float | None = Field(default=None, gt=0, le=1e6)
    """Unset where the GPU has no FP8 tensor cores."""
    fp4: float | None = Field(default=None, gt=0, le=1e6)
    """Dense FP4 (NVFP4 / MXFP4) peak; unset where the GPU has no FP4 tensor cores (before
    Blackwell)."""


class Calibration(_Spec):
    """The few efficiency parameters the time model fits per GPU type (benchmarks/calibrate.py)."""

    matmul_efficiency: float = Field(default=0.75, gt=0, le=1)
    """Fraction of peak a large bf16 GEMM reaches."""
    fp8_matmul_efficiency: float = Field(default=0.65, gt=0, le=1)
    """Fraction of the FP8 peak a large per-tensor-scaled FP8 GEMM reaches (cost/precision.py
    scales it per recipe)."""
    matmul_half_size: float = Field(default=256.0, ge=0, le=1e6)
    """GEMM inner size (h/tp-ish) at which efficiency halves: eff = max * n / (n + half)."""
    attention_efficiency: float = Field(default=0.5, gt=0, le=1)
    """Fraction of peak the fused (flash) attention kernels reach."""
    elementwise_bytes_per_activation: float = Field(default=4.0, ge=0, le=100)
    """HBM bytes moved by non-GEMM kernels per byte of stored activation (norms, activations, rope)."""
    layer_overhead_us: float = Field(default=0.0, ge=0, le=1e5)
    """Fixed device time per layer per micro-batch forward (small kernels, syncs); backward
    costs twice this."""
    launch_overhead_us: float = Field(default=5.0, ge=0, le=1e4)
    """Host time to issue one kernel (PyTorch op dispatch + launch, cost/launch.py): hidden
    while the host runs ahead of the GPU, exposed after a host sync; CUDA graphs remove it."""
    nvlink_efficiency: float = Field(default=0.75, gt=0, le=1)
    """Achieved fraction of NVLink bandwidth for large collectives (bus bandwidth)."""
    network_efficiency: float = Field(default=0.75, gt=0, le=1)
    """Achieved fraction of the per-GPU network bandwidth for large collectives."""
    overlap_efficiency: float = Field(default=0.9, ge=0, le=1)
    """Fraction of overlappable communication (DP, CP ring) actually hidden behind compute."""
    ep_overlap_efficiency: float = Field(default=0.6, ge=0, le=1)
    """Fraction of an MoE layer's dispatch and combine that the all-to-all overlap
    (`overlap_moe_expert_parallel_comm`) hides behind the other micro-batch (cost/moe.py)."""
    step_overhead_ms: float = Field(default=0.0, ge=0, le=1e5)
    """Fixed time per optimizer step besides the model's work (the optimizer's and the
    gradient norm's kernel launches, loss bookkeeping, data loading): it matters for
    sub-second steps."""
    fitted_on: tuple[CaseClass, ...] = ()
    """The classes of published runs on this GPU the parameters were fitted to
    (benchmarks/calibrate.py): dense-bf16, dense-fp8, moe, fsdp, long-context. Empty: not
    fitted here (the values are another profile's); estimates then carry a caveat."""
    fitted_recipes: tuple[Fp8Recipe, ...] = ()
    """The FP8 recipes among those runs; an FP8 job with another recipe carries a caveat."""


class ServingCalibration(_Spec):
    """The few physical parameters the serving time model (planner/serve/time.py) fits per GPU
    type (benchmarks/serve_calibrate.py), each within physical bounds, never per case."""

    hbm_efficiency: float = Field(default=0.8, gt=0, le=1)
    """Achieved fraction of the HBM bandwidth when decode streams the weights and the KV cache."""
    gemm_efficiency: float = Field(default=0.6, gt=0, le=1)
    """Fraction of the serving precision's dense peak (fp4 / fp8 / bf16) a large GEMM reaches."""
    gemm_half_tokens: float = Field(default=256.0, ge=0, le=1e5)
    """Tokens in a step at which the GEMMs reach half their efficiency (short GEMMs of small
    batches run far below peak): eff = gemm_efficiency * n / (n + gemm_half_tokens)."""
    moe_efficiency: float = Field(default=0.7, gt=0, le=1)
    """Grouped (MoE expert) GEMM efficiency relative to a dense GEMM with as many tokens."""
    attention_efficiency: float = Field(default=0.5, gt=0, le=1)
    """Fraction of the bf16 peak the prefill (flash) attention kernels reach."""
    layer_overhead_us: float = Field(default=20.0, ge=0, le=1e4)
    """Fixed time per transformer layer per forward step (kernel launches, norms, rope, small
    kernels), microseconds; what dominates decode at small batches with the all-reduces."""
    step_overhead_us: float = Field(default=500.0, ge=0, le=1e6)
    """Fixed time per engine step (scheduling, input preparation, host-device sync, sampling
    launch), microseconds."""
    graph_layer_overhead_us: float = Field(default=5.0, ge=0, le=1e4)
    """Fixed time per layer of a decode step replayed from a CUDA graph (decode-only, at
    most the engine's graph batch size; planner/serve/engines.py), microseconds: the gaps
    between back-to-back kernels and the small ones; layer_overhead_us is then the eager
    steps' (mixed prefill chunks, larger batches)."""
    sequence_overhead_us: float = Field(default=1.0, ge=0, le=1e4)
    """Time per sequence in the batch per engine step (sampling, logits processing, the
    scheduler's per-request bookkeeping), microseconds."""
    request_overhead_us: float = Field(default=0.0, ge=0, le=1e6)
    """Host time per request (admitting it, building its state, returning its response),
    microseconds: in steady state C/OSL requests start and finish per step, so short requests
    are capped near 1/request_overhead requests per second whatever the GPUs."""
    moe_layer_overhead_us: float = Field(default=0.0, ge=0, le=1e4)
    """Fixed time per MoE layer per step beyond its weight stream and FLOPs, microseconds: the
    kernels a routed-expert layer runs that a dense MLP does not (router GEMM, top-k, the
    token sort / block alignment, activation quantization, the combine) and the latency-bound
    grouped GEMMs of a few tokens per expert (planner/serve/time.py moe_fixed_time)."""
    link_efficiency: float = Field(default=0.75, gt=0, le=1)
    """Achieved fraction of the scale-up link bandwidth (nvlink_bandwidth_gb_per_s) for the
    serving collectives (TP all-reduce, EP all-to-all, PP sends); on PCIe servers it is set by
    the topology (switches, the CPU root complexes), not by the x16 link rate."""
    allreduce_latency_us: float = Field(default=3.0, ge=0, le=1e4)
    """Per-step latency alpha of the small decode all-reduces (ring: 2(n-1) alpha; the custom
    one-shot kernels of the engines on NVLink, NCCL over PCIe), microseconds."""
    fitted_on: tuple[ServeCaseClass, ...] = ()
    """The classes of measured serving runs the parameters were fitted to
    (benchmarks/serve_calibrate.py): offline-throughput, static-latency, serving-latency,
    disagg. Empty: not fitted on this GPU (estimates carry a caveat)."""


class HardwareSpec(_Spec):
    """One GPU system: the GPU, its node, and the network between nodes."""

    name: str = Field(max_length=255)
    """Profile name, e.g. h100-sxm."""
    description: str = ""
    memory_gib: float = Field(gt=0, le=100_000)
    """HBM per GPU usable by PyTorch, GiB."""
    peak_tflops: PeakTflops
    """Dense peak TFLOP/s per precision."""
    hbm_bandwidth_gb_per_s: float = Field(gt=0, le=1e6)
    """HBM bandwidth per GPU, GB/s."""
    architecture: Architecture | None = None
    """GPU generation: ampere | hopper | blackwell | cdna3 (MXFP8 and FP4 need blackwell;
    Megatron's CUDA_DEVICE_MAX_CONNECTIONS rule is for GPUs before it); unset = unknown."""
    gpus_per_node: int = Field(ge=1, le=100_000)
    """GPUs in one server (one host)."""
    nvlink_domain_size: int = Field(ge=1, le=100_000)
    """GPUs that reach each other over the scale-up link (NVLink: 8 in a DGX, 72 in a GB200
    NVL72 rack; Infinity Fabric on MI300X; PCIe inside a PCIe-only server, see
    intra_node_link)."""
    nvlink_bandwidth_gb_per_s: float = Field(gt=0, le=1e6)
    """Scale-up link bandwidth per GPU, one direction, GB/s (NVLink; on a PCIe-only server
    the PCIe bandwidth between two GPUs)."""
    intra_node_link: IntraNodeLink = "nvlink"
    """What the nvlink_* fields measure: nvlink | xgmi (AMD Infinity Fabric) | pcie (no
    NVLink: GPUs of a node talk over PCIe, e.g. RTX PRO 6000 servers)."""
    network_bandwidth_gb_per_s: float = Field(gt=0, le=1e6)
    """Scale-out network bandwidth per GPU, one direction, GB/s (400 Gb/s NIC = 50 GB/s)."""
    host_bandwidth_gb_per_s: float = Field(default=55.0, gt=0, le=1e6)
    """GPU <-> host memory bandwidth per GPU, one direction, GB/s (PCIe Gen5 x16 ~55
    achieved; NVLink-C2C on Grace systems): activation and optimizer offloading."""
    nvlink_latency_us: float = Field(default=3.0, ge=0, le=1e6)
    """Per-hop latency of an NVLink collective step, microseconds."""
    network_latency_us: float = Field(default=8.0, ge=0, le=1e6)
    """Per-hop latency of a network collective step, microseconds."""
    cuda_context_gib: float = Field(default=0.75, ge=0, le=1000)
    """CUDA context and kernels resident per GPU, GiB."""
    nccl_buffer_gib: float = Field(default=0.5, ge=0, le=1000)
    """NCCL communicator buffers per GPU, GiB."""
    fragmentation_fraction: float = Field(default=0.05, ge=0, lt=1)
    """Allocator fragmentation: extra fraction of tensor memory the caching allocator holds."""
    calibration: Calibration = Calibration()
    """Fitted efficiency parameters."""
    serving_calibration: ServingCalibration = ServingCalibration()
    """Fitted parameters of the serving (inference) time model."""

    @model_validator(mode="after")
    def _domain(self) -> HardwareSpec:
        if self.nvlink_domain_size < self.gpus_per_node:
            raise ValueError(
                f"nvlink_domain_size ({self.nvlink_domain_size}) must be >= gpus_per_node "
                f"({self.gpus_per_node})"
            )
        return self

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s for the precision the matmuls run in (fp8 falls back to bf16 if absent,
        fp4 to fp8 then bf16)."""
        p = self.peak_tflops
        value = {
            "bf16": p.bf16,
            "fp16": p.fp16,
            "fp8": p.fp8 or p.bf16,
            "fp4": p.fp4 or p.fp8 or p.bf16,
        }[precision]
        return value * 1e12


class TrainingSpec(_Spec):
    """What one optimizer step processes, and how."""

    seq_length: int = Field(ge=1, le=100_000_000)
    """Tokens per sequence."""
    global_batch_size: int = Field(ge=1, le=MAX_BATCH)
    """Sequences per optimizer step."""
    precision: Precision = "bf16"
    """bf16 | fp16 | fp8 (fp8 GEMMs, bf16 weights and activations elsewhere)."""
    flash_attention: bool = True
    """Fused attention that never stores the s x s scores (default on every modern stack)."""
    accounting: Literal["megatron", "deepspeed"] = "megatron"
    """Model-state bytes: megatron (fp32 main grads, 18 B/param) or deepspeed (16 B/param)."""
    fp8_recipe: Fp8Recipe | None = None
    """FP8 scaling recipe (Megatron `--fp8-recipe`): delayed (amax history), tensorwise
    (current per-tensor scaling), mxfp8 (1x32 block scales; Blackwell only) or blockwise
    (1x128 / 128x128 blocks); needs precision fp8; default delayed (Megatron's)."""
    fp8_param_gather: bool = False
    """The distributed optimizer keeps FP8 weight copies and all-gathers FP8 weights
    (`--fp8-param-gather`): no BF16 weight copy; needs precision fp8."""
    cross_entropy: CrossEntropy = "vocab_parallel"
    """The loss: vocab_parallel (Megatron-LM's, fused or not: one fp32 copy of the logits,
    softmax and gradient in place) or pytorch_fp32 (torchtitan's eager loss:
    F.cross_entropy on an fp32 copy of the bf16 logits, ~3x the bytes at its peak)."""
    loss_parallel: bool = True
    """The logits stay split over the TP ranks for the loss (Megatron always; torchtitan
    unless `disable_loss_parallel`); false gathers the whole vocabulary on every TP rank."""
    attention_kernel: AttentionKernel = "fused"
    """Which attention kernel family runs the core: fused (the GPU generation's own: Transformer
    Engine / cuDNN fused attention, FlashAttention-3 on Hopper, FlashAttention-2 on Ampere; the
    profile's `attention_efficiency`) or flash2 (FlashAttention-2's SM80 kernels on a newer GPU:
    PyTorch SDPA's flash backend, which torchtitan's 2024-2025 releases ran on Hopper;
    cost.compute.attention_kernel_share)."""

    @property
    def recipe(self) -> str | None:
        """The FP8 recipe in effect: fp8_recipe, else delayed for precision fp8, else None."""
        if self.precision != "fp8":
            return None
        return self.fp8_recipe or "delayed"


class TrainingInput(_Spec):
    """`training:` in a config: like TrainingSpec, with seq_length defaulting to the model's."""

    seq_length: int | None = Field(default=None, ge=1, le=100_000_000)
    """Tokens per sequence; default the model's training length."""
    global_batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH)
    """Sequences per optimizer step; default about 4M tokens."""
    precision: Precision = "bf16"
    """bf16 | fp16 | fp8."""
    flash_attention: bool = True
    """Fused attention that never stores the s x s scores."""
    accounting: Literal["megatron", "deepspeed"] = "megatron"
    """Model-state accounting: megatron or deepspeed."""
    fp8_recipe: Fp8Recipe | None = None
    """FP8 scaling recipe (Megatron `--fp8-recipe`): delayed (amax history), tensorwise
    (current per-tensor scaling), mxfp8 (1x32 block scales; Blackwell only) or blockwise
    (1x128 / 128x128 blocks); needs precision fp8; default delayed (Megatron's)."""
    fp8_param_gather: bool = False
    """The distributed optimizer keeps FP8 weight copies and all-gathers FP8 weights
    (`--fp8-param-gather`): no BF16 weight copy; needs precision fp8."""
    cross_entropy: CrossEntropy = "vocab_parallel"
    """vocab_parallel (Megatron-LM's loss) | pytorch_fp32 (torchtitan's eager
    F.cross_entropy on fp32 logits); a torchtitan import sets pytorch_fp32."""
    loss_parallel: bool = True
    """false: the whole vocabulary's logits on every TP rank for the loss (torchtitan
    `disable_loss_parallel`); needs cross_entropy pytorch_fp32."""
    attention_kernel: AttentionKernel = "fused"
    """fused (TE/cuDNN fused attention, FlashAttention-3 on Hopper) | flash2 (FlashAttention-2
    kernels on Hopper or Blackwell: PyTorch SDPA's flash backend, torchtitan through 2025)."""


def _parallel_spec() -> type[_Spec]:
    """`ParallelSpec` from the layout table: one key per row of planner/layout.py (its config
    name, type, default, bounds and docstring)."""
    from typing import get_type_hints

    from pydantic import create_model

    from planner.fields import SAME, config_name, info
    from planner.layout import LAYOUT_FIELDS, Layout

    hints = get_type_hints(Layout)
    keys: dict[str, Any] = {}
    for f in LAYOUT_FIELDS:
        name, row = config_name(f), info(f)
        if not name:
            continue
        typ = row.spec_type if row.spec_type is not None else hints[f.name]
        default = f.default if row.spec_default is SAME else row.spec_default
        keys[name] = (typ, Field(default=default, description=row.doc, **row.bounds))
    return create_model(
        "ParallelSpec",
        __base__=_Spec,
        __module__=__name__,
        __doc__="`parallel:` in a config: the layout, in Megatron-LM's terms "
        "(one key per row of the layout table, planner/layout.py).",
        **keys,
    )


if TYPE_CHECKING:

    class ParallelSpec(_Spec):
        """(for type checkers: the keys are the layout table's rows)"""

        def __getattr__(self, name: str) -> Any: ...
else:
    ParallelSpec = _parallel_spec()


class ConfigSpec(_Spec):
    """A whole config file for `validate` and `export`."""

    model: str | dict[str, Any]
    """Preset name or alias, path to a model YAML or HF config.json, or an inline mapping."""
    hardware: str | dict[str, Any] = "h100-sxm"
    """Profile name, path to a profile YAML, or an inline mapping."""
    num_gpus: int = Field(ge=1, le=_MAX_DIM)
    """Total GPUs (the world size)."""
    training: TrainingInput = TrainingInput()
    """Sequence length, global batch, precision."""
    parallel: ParallelSpec = ParallelSpec()
    """The layout."""


def _key_list(keys: list[str], limit: int = 360) -> str:
    """The keys, comma-separated, cut at a key boundary after `limit` characters with how many
    more there are and where they are listed (the error stays one readable line)."""
    shown: list[str] = []
    used = 0
    for key in keys:
        if shown and used + len(key) + 2 > limit:
            rest = len(keys) - len(shown)
            return f"{', '.join(shown)} ... and {rest} more (docs/config.md, 'Every key')"
        shown.append(key)
        used += len(key) + 2
    return ", ".join(shown)


def field_help(cls: type[BaseModel]) -> dict[str, str]:
    """{field: the docstring under it} for a spec class (the help text of its keys); a class
    built from a table (ParallelSpec) carries them as the fields' descriptions."""
    import ast
    import inspect
    import textwrap

    described = {
        k: " ".join(f.description.split()) for k, f in cls.model_fields.items() if f.description
    }
    if described:
        return described
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    out: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]  # the class statement
    for stmt, nxt in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out[stmt.target.id] = " ".join(nxt.value.value.split())
    return out


_MAX_PATTERN = 100_000
LAYER_KINDS = ("full", "sliding", "chunked", "dsa", "linear")
_KIND_ALIASES = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "global": "full",
    "local": "sliding",
}


def pattern_list(value: Any, *, field: str) -> list[Any]:
    """A list expression as Megatron writes `--moe-layer-freq`: list literals of ints or
    strings joined by + and repeated by * (an int), parentheses, e.g. "[0]*3+[1]*58" or
    "([0]+[1]*1)*24". Evaluated by walking the syntax tree (no eval), at most 100,000 items."""
    import ast

    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str) or len(value) > 10_000:
        raise ValueError(f'{field} must be a list or a list expression such as "[0]*3+[1]*58"')
    try:
        tree = ast.parse(value.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError(
            f'{field} = {short(value)} is not a list expression; write it like "[0]*3+[1]*58"'
        ) from None

    def ev(node: Any, depth: int = 0) -> Any:
        if depth > 50:
            raise ValueError(f"{field} is nested too deeply")
        if isinstance(node, ast.Constant) and type(node.value) in (int, str):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left, depth + 1), ev(node.right, depth + 1)
            if isinstance(node.op, ast.Add) and type(a) is type(b) and not isinstance(a, str):
                out = a + b
            elif isinstance(node.op, ast.Mult) and isinstance(a, list) and type(b) is int:
                out = a * b if 0 <= b and len(a) * b <= _MAX_PATTERN else None
            elif isinstance(node.op, ast.Mult) and isinstance(b, list) and type(a) is int:
                out = b * a if 0 <= a and len(b) * a <= _MAX_PATTERN else None
            elif isinstance(node.op, ast.Mult) and type(a) is int and type(b) is int:
                out = a * b if abs(a * b) <= _MAX_PATTERN else None
            else:
                out = None
            if out is None or (isinstance(out, list) and len(out) > _MAX_PATTERN):
                raise ValueError(
                    f"{field} = {short(value)}: only lists + lists and list * count "
                    "(up to 100,000 entries) are allowed"
                )
            return out
        raise ValueError(
            f"{field} = {short(value)}: only list literals, + and * are allowed; "
            'write it like "[0]*3+[1]*58"'
        )

    got = ev(tree.body)
    if not isinstance(got, list):
        raise ValueError(f"{field} = {short(value)} is not a list")
    return got


def moe_pattern_of(
    freq: Any, num_layers: int, *, field: str = "moe_layer_freq"
) -> tuple[bool, ...]:
    """Megatron's `--moe-layer-freq`: int N -> [1 if i % N == 0 else 0 for i in range(L)];
    a list (or list expression) of 0/1, one per layer. Cached (specs are frozen)."""
    if isinstance(freq, list):
        freq = tuple(freq)
    return _moe_pattern(freq, num_layers, field)


@functools.lru_cache(maxsize=256)
def _moe_pattern(freq: Any, num_layers: int, field: str) -> tuple[bool, ...]:
    if isinstance(freq, bool):
        raise ValueError(f"{field} must be an int or a 0/1 list, got {str(freq).lower()}")
    if isinstance(freq, int):
        if not 1 <= freq <= num_layers:
            raise ValueError(f"{field} = {freq} must be between 1 and num_layers ({num_layers})")
        return tuple(i % freq == 0 for i in range(num_layers))
    pat = pattern_list(freq, field=field)
    if len(pat) != num_layers or any(type(v) is not int or v not in (0, 1) for v in pat):
        raise ValueError(
            f"{field} must give 0 or 1 for each of the {num_layers} layers "
            f"(got {len(pat)} entries); fix the list"
        )
    return tuple(v == 1 for v in pat)


def kinds_of(types: Any, num_layers: int, *, field: str = "layer_types") -> tuple[str, ...]:
    """Attention kind per layer from a list or list expression of kind names (Hugging Face's
    full_attention / sliding_attention / linear_attention spellings accepted). Cached."""
    if isinstance(types, list):
        types = tuple(types)
    return _kinds(types, num_layers, field)


@functools.lru_cache(maxsize=256)
def _kinds(types: Any, num_layers: int, field: str) -> tuple[str, ...]:
    pat = pattern_list(types, field=field)
    out = []
    for v in pat:
        kind = _KIND_ALIASES.get(v, v) if isinstance(v, str) else v
        if kind not in LAYER_KINDS:
            raise ValueError(f"{field} entry {short(v)} is not one of {', '.join(LAYER_KINDS)}")
        out.append(kind)
    if len(out) != num_layers:
        raise ValueError(
            f"{field} must name a kind for each of the {num_layers} layers "
            f"(got {len(out)}); fix the list"
        )
    return tuple(out)


def _divisor_list(n: int) -> str:
    from planner.units import divisors

    ds = divisors(n)
    return ", ".join(map(str, ds[:-1])) + f" or {ds[-1]}" if len(ds) > 1 else str(ds[0])


def parse_spec(cls: type[_Spec], data: Any, *, where: str = "") -> Any:
    """Build a spec from plain data; a ValidationError becomes one SpecError line."""
    if not isinstance(data, dict):
        label = where or cls.__name__
        raise SpecError(
            f"{label} must be a mapping of keys to values, got "
            f"{type(data).__name__} {_short(data)}; see examples/"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc, cls, where=where) from None


def _short(value: Any) -> str:
    return short(value)


def _model_at(cls: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The (nested) spec class that `loc` points into."""
    model: Any = cls
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        ann = getattr(field, "annotation", None)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            break
    return model  # type: ignore[no-any-return]


def spec_error(exc: ValidationError, cls: type[BaseModel], *, where: str = "") -> SpecError:
    """One validation problem as `field = value: problem; fix` (one line), with the field and
    value as data. An unknown key comes first: `num_layer: 80` is one misspelt key (say so,
    with the closest valid one), not also a missing `num_layers`."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(
        p
        for p in err["loc"]
        if not (isinstance(p, str) and p.startswith(("function-", "str", "dict[")))
    )
    field = ".".join(str(p) for p in loc)
    if where:
        field = f"{where}.{field}" if field else where
    kind, value = err["type"], err.get("input")
    if kind == "extra_forbidden":
        model = _model_at(cls, loc)
        valid = list(model.model_fields)
        close = difflib.get_close_matches(str(loc[-1])[:100], valid, n=1, cutoff=0.5)
        hint = ""
        if close:
            about = field_help(model).get(close[0], "")
            hint = f"did you mean {close[0]!r}? " + (
                f"({close[0]}: {about.rstrip('.')}) " if about else ""
            )
        return SpecError(
            f"unknown key {short(field, 120)}; {hint}valid keys here: {_key_list(valid)}",
            field=field,
            value=value,
        )
    if kind == "missing":
        return SpecError(
            f"missing required key {field!r}; add it (see README, 'Config files')",
            field=field,
            value=None,
        )
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
        kw = {"value": value} if loc else {}  # a whole-mapping check: no single value
        return SpecError(f"{field or 'model'}: {msg}" if field else msg, field=field or None, **kw)
    if isinstance(value, float) and not math.isfinite(value):
        msg = "must be a finite number"
    if kind in ("model_type", "dict_type"):  # not "instance of ParallelSpec": users write YAML
        msg = "must be a mapping of keys to values"
    return SpecError(
        f"{field} = {_short(value)}: {msg.lower()}; fix this value", field=field, value=value
    )


class JobLike(Protocol):
    """What the cost model and the caveats read of a job: planner.config.Job is one, but
    config sits above them in the import layers (.importlinter), so the shape lives here."""

    @property
    def model(self) -> ModelSpec: ...
    @property
    def hardware(self) -> HardwareSpec: ...
    @property
    def training(self) -> TrainingSpec: ...

"""`Layout`: one way to split a job over the GPUs, with its derived sizes.

Axes in Megatron's rank order, innermost first: tp, cp, ep, dp, pp (+ vpp, etp).
`world_size = tp*cp*dp*pp`; EP borrows ranks from dp*cp*tp, ETP from there too (the expert
grid is etp*ep*edp*pp = world). A plain frozen dataclass (not pydantic): the search builds
hundreds of thousands of these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from planner.fields import (
    MAX_BATCH,
    MAX_DIM,
    ActivationCache,
    CpCommType,
    CudaGraphs,
    Dispatcher,
    PipelineSchedule,
    Recompute,
    RecomputeModule,
    StateDtype,
    config_name,
    info,
    layout_fields,
    layout_key,
    row,
)

__all__ = [
    "Layout",
    "layout_from_spec",
    "stage_layer_counts",
    "AUTO_FIELDS",
    "bubble_fraction",
    "bubble_formula",
    "dualpipe_fits",
    "LAYOUT_FIELDS",
    "layout_key_for",
]

# Which cost parts (planner.fields.PARTS) a field feeds. A row that says nothing reads them all.
_ALL_BUT_SPLIT = {
    "acts",
    "layer_base",
    "moe_layer",
    "layer",
    "states",
    "act_vector",
    "first_params",
    "pipeline",
    "dp",
}
"""Every part but the stage grouping and the state dtypes (tp, etp)."""
_ACTS = {"acts", "layer_base", "moe_layer", "layer", "act_vector", "pipeline"}
"""Activation-side fields: activations, every layer time and the pipeline part; the DP part
reads them only through the compute windows it is given."""
_LAYER = {"layer_base", "moe_layer", "layer", "pipeline"}
"""Fields of a layer's times (not its activations)."""
_SPLIT = {"stages", "states", "act_vector", "first_params", "pipeline", "dp"}
"""Fields of the pipeline split."""
_STATES = {"dtypes", "states", "dp"}
"""Model-state dtypes: the states and the DP traffic; the pipeline part does not read them."""


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to split a job. Each field is one row of the layout table (planner/fields.py):
    its default and doc, its config/JSON name, its Megatron-LM / NeMo / torchtitan names and
    the cost parts that read it."""

    tp: int = row(
        1,
        "Tensor-parallel degree.",
        reads=_ALL_BUT_SPLIT,
        bounds=dict(ge=1, le=MAX_DIM),
        megatron="--tensor-model-parallel-size",
        nemo="tensor_model_parallel_size",
        torchtitan="parallelism.tensor_parallel_degree",
    )
    pp: int = row(
        1,
        "Pipeline-parallel degree.",
        reads={"stages", "states", "act_vector", "first_params", "pipeline", "dp"},
        bounds=dict(ge=1, le=MAX_DIM),
        megatron="--pipeline-model-parallel-size",
        nemo="pipeline_model_parallel_size",
        torchtitan="parallelism.pipeline_parallel_degree",
    )
    cp: int = row(
        1,
        "Context-parallel degree (splits the sequence).",
        reads={
            "acts",
            "layer_base",
            "moe_layer",
            "layer",
            "states",
            "act_vector",
            "pipeline",
            "dp",
        },
        bounds=dict(ge=1, le=MAX_DIM),
        megatron="--context-parallel-size",
        nemo="context_parallel_size",
        torchtitan="parallelism.context_parallel_degree",
    )
    ep: int = row(
        1,
        "Expert-parallel degree (borrows ranks from dp*cp*tp).",
        reads={"moe_layer", "layer", "states", "first_params", "pipeline", "dp"},
        bounds=dict(ge=1, le=MAX_DIM),
        megatron="--expert-model-parallel-size",
        nemo="expert_model_parallel_size",
        torchtitan="parallelism.expert_parallel_degree",
    )
    etp: int = row(
        1,
        "Expert tensor-parallel degree; default = tp.",
        reads=_ALL_BUT_SPLIT,
        spec_type=Optional[int],
        spec_default=None,
        bounds=dict(ge=1, le=MAX_DIM),
        megatron="--expert-tensor-parallel-size",
        nemo="expert_tensor_parallel_size",
        torchtitan="parallelism.expert_tensor_parallel_degree",
    )
    dp: int = row(
        1,
        "Data-parallel degree; optional, must equal num_gpus / (tp*pp*cp) if given.",
        reads={"states", "pipeline", "dp"},
        spec_type=Optional[int],
        spec_default=None,
        bounds=dict(ge=1, le=MAX_DIM),
        torchtitan="parallelism.data_parallel_shard_degree",
    )
    vpp: int = row(
        1,
        "Virtual pipeline stages per pipeline rank (interleaved 1F1B); left out, "
        "the planner picks the fastest that fits (and says so).",
        reads={"act_vector", "pipeline"},
        bounds=dict(ge=1, le=100_000),
        megatron="--num-virtual-stages-per-pipeline-rank",
        nemo="virtual_pipeline_model_parallel_size",
    )
    micro_batch_size: int = row(
        1,
        "Sequences per micro-batch; left out, the planner picks the fastest that fits (and "
        "says so).",
        reads=_ACTS | {"dp"},
        bounds=dict(ge=1, le=MAX_BATCH),
        short=("mbs",),
        megatron="--micro-batch-size",
        nemo="micro_batch_size",
        torchtitan="parallelism.pipeline_parallel_microbatch_size",
    )
    sp: bool = row(
        False,
        "Megatron sequence parallelism; default true when tp > 1.",
        reads=_ACTS,
        config="sequence_parallel",
        spec_type=Optional[bool],
        spec_default=None,
        megatron="--sequence-parallel",
        nemo="sequence_parallel",
    )
    zero: int = row(
        1,
        "0..3; 1 = Megatron distributed optimizer, 2/3 = Megatron FSDP / DeepSpeed ZeRO-2/3.",
        reads={"dp"},
        config="zero_stage",
        bounds=dict(ge=0, le=3),
        megatron="--use-distributed-optimizer",
    )
    recompute: str = row(
        "none",
        "Activation recompute: none | selective (attention core) | full (every layer).",
        reads=_ACTS,
        spec_type=Recompute,
        megatron="--recompute-granularity",
        nemo="recompute_granularity",
        torchtitan="activation_checkpoint.mode",
    )
    first_stage_layers: int | None = row(
        None,
        "Layers on the first pipeline rank (`--decoder-first-pipeline-num-layers`).",
        reads=_SPLIT,
        bounds=dict(ge=0, le=10_000),
        megatron="--decoder-first-pipeline-num-layers",
        nemo="num_layers_in_first_pipeline_stage",
        torchtitan="parallelism.pipeline_parallel_first_stage_less_layers",
    )
    last_stage_layers: int | None = row(
        None,
        "Layers on the last pipeline rank (`--decoder-last-pipeline-num-layers`).",
        reads=_SPLIT,
        bounds=dict(ge=0, le=10_000),
        megatron="--decoder-last-pipeline-num-layers",
        nemo="num_layers_in_last_pipeline_stage",
        torchtitan="parallelism.pipeline_parallel_last_stage_less_layers",
    )
    cp_comm_type: str = row(
        "p2p",
        "Context-parallel exchange: p2p (ring attention) or a2a (Ulysses).",
        reads=_LAYER,
        spec_type=CpCommType,
        megatron="--cp-comm-type",
        nemo="cp_comm_type",
        torchtitan="parallelism.context_parallel_rotate_method",
    )
    overlap_grad_reduce: bool = row(
        True,
        "Overlap the DP gradient reduction with backward (`--overlap-grad-reduce`).",
        reads={"dp"},
        megatron="--overlap-grad-reduce",
        nemo="overlap_grad_reduce",
    )
    overlap_param_gather: bool = row(
        True,
        "Overlap the distributed optimizer's parameter all-gather with forward.",
        reads={"dp"},
        megatron="--overlap-param-gather",
        nemo="overlap_param_gather",
    )
    tp_comm_overlap: bool = row(
        False,
        "Overlap TP collectives with GEMMs (`--tp-comm-overlap`, needs SP); default: on "
        "when sequence parallelism is on with tp > 1 (NeMo's recipes and Megatron-LM's "
        "published benchmarks run with it).",
        reads=_LAYER,
        spec_type=Optional[bool],
        spec_default=None,
        megatron="--tp-comm-overlap",
        nemo="tp_comm_overlap",
    )
    # production recipe settings
    recompute_modules: tuple[str, ...] = row(
        (),
        "What selective recompute recomputes (Megatron `--recompute-modules`): core_attn, "
        "mlp, moe, moe_act, layernorm, mla_up_proj, shared_experts; or, alone, "
        "torchtitan_op (torchtitan's op-level selective checkpointing, "
        '`selective_ac_option = "op"`); needs recompute selective; default [core_attn].',
        reads=_ACTS,
        spec_type=Optional[tuple[RecomputeModule, ...]],
        spec_default=None,
        json_from="selective_modules",
        megatron="--recompute-modules",
        nemo="recompute_modules",
        torchtitan="activation_checkpoint.selective_ac_option",
    )
    recompute_num_layers: int | None = row(
        None,
        "With recompute full: the layers of each virtual stage that recompute (Megatron "
        "`--recompute-method block --recompute-num-layers N`); the others keep their "
        "activations. Default: every layer (`--recompute-method uniform "
        "--recompute-num-layers 1`).",
        reads={"act_vector", "pipeline"},
        bounds=dict(ge=0, le=10_000),
        megatron="--recompute-num-layers",
        nemo="recompute_num_layers",
    )
    cpu_offloading_num_layers: int = row(
        0,
        "Layers per pipeline stage whose activations go to host memory between forward and "
        "backward (Megatron `--cpu-offloading-num-layers`), over the host link (PCIe or "
        "NVLink-C2C, the profile's host_bandwidth_gb_per_s).",
        reads={"act_vector", "pipeline"},
        bounds=dict(ge=0, le=10_000),
        megatron="--cpu-offloading-num-layers",
        nemo="cpu_offloading_num_layers",
    )
    activation_func_fp8_input_store: bool = row(
        False,
        "Keep the gated MLP's activation input (the SwiGLU input, fc1's output) in FP8 "
        "for the backward, 1 byte an element instead of 2: dense MLP, shared and routed "
        "experts (Megatron-Core's TransformerConfig field, written by the NeMo and "
        "Megatron-Bridge exports; Megatron-LM's pretrain_gpt.py has no flag for it). "
        "DeepSeek-V3 caches the MoE SwiGLU input in FP8 (arXiv:2412.19437 sec. 3.3.3).",
        reads=_ACTS,
        nemo="activation_func_fp8_input_store",
    )
    activation_cache: str = row(
        "te",
        "Which framework's activation caching: te (Transformer Engine and Megatron-Core: "
        "the attention output in bf16, plus the FP8 projection's copy under an FP8 "
        "recipe; a `moe_act` checkpoint keeps the fc1 output as fc1 wrote it, bf16) | "
        "deepseek (DeepSeek-V3's own framework, arXiv:2412.19437 sec. 3.3.3: the "
        "attention output once in a 12-bit E5M6 with 1x128 power-of-two scales, for both "
        "its users; with activation_func_fp8_input_store the SwiGLU output is recomputed "
        "from the FP8 input, kept with 1x128 scales; with the layernorm recompute every "
        "RMSNorm reruns and the FP8 inputs of the Linears after it are regenerated, sec. "
        "3.2.3). No export writes deepseek.",
        reads=_ACTS,
        spec_type=ActivationCache,
    )
    grad_reduce_in_fp32: bool = row(
        True,
        "fp32 gradient buffer and reduction (Megatron's default with bf16); false = bf16 "
        "gradients (`--grad-reduce-in-bf16`, Megatron-Bridge `ddp.grad_reduce_in_fp32: "
        "false`).",
        reads=_STATES,
        megatron="--grad-reduce-in-bf16",
        nemo="grad_reduce_in_fp32",
    )
    exp_avg_dtype: str = row(
        "fp32",
        "Adam first moment dtype (`--exp-avg-dtype`, precision-aware optimizer).",
        reads=_STATES,
        spec_type=StateDtype,
        megatron="--exp-avg-dtype",
        nemo="exp_avg_dtype",
    )
    exp_avg_sq_dtype: str = row(
        "fp32",
        "Adam second moment dtype (`--exp-avg-sq-dtype`, precision-aware optimizer).",
        reads=_STATES,
        spec_type=StateDtype,
        megatron="--exp-avg-sq-dtype",
        nemo="exp_avg_sq_dtype",
    )
    moe_token_dispatcher: str = row(
        "allgather",
        "MoE token dispatcher (`--moe-token-dispatcher-type`; deepep / hybridep "
        "are `flex` with `--moe-flex-dispatcher-backend`): alltoall | allgather "
        "(Megatron's default) | deepep | hybridep.",
        reads={"layer", "pipeline"},
        spec_type=Dispatcher,
        megatron="--moe-token-dispatcher-type",
        nemo="moe_token_dispatcher_type",
        torchtitan="parallelism.expert_parallel_comm_backend",
    )
    pipeline_schedule: str = row(
        "1f1b",
        "Pipeline schedule: 1f1b (Megatron's; interleaved when vpp > 1) | interleaved | "
        "dualpipe (DeepSeek-V3's bidirectional schedule: bubble (pp/2-1)(F&B+B-3W), rank r "
        "holds stages r and pp-1-r (two copies of the parameters; the embedding and the "
        "output layer on the end ranks) and runs half the micro-batches through each, "
        "pp+1 micro-batches of activations, EP all-to-all overlapped; not in Megatron-LM) | "
        "dualpipev (DualPipe cut in half: one copy, two chunks a rank; torchtitan "
        "`DualPipeV`).",
        reads={
            "stages",
            "moe_layer",
            "layer",
            "pipeline",
            "states",
            "act_vector",
            "first_params",
            "dp",
        },
        spec_type=PipelineSchedule,
        torchtitan="parallelism.pipeline_parallel_schedule",
    )
    overlap_moe_expert_parallel_comm: bool = row(
        False,
        "Hide the EP dispatch/combine behind the other micro-batch's compute "
        "(`--overlap-moe-expert-parallel-comm`).",
        reads={"moe_layer", "layer", "pipeline"},
        megatron="--overlap-moe-expert-parallel-comm",
        nemo="overlap_moe_expert_parallel_comm",
    )
    moe_pad_expert_input_to_capacity: bool = row(
        False,
        "Token-drop MoE padded to the capacity (`--moe-pad-expert-input-to-capacity`, with "
        "`--moe-expert-capacity-factor` = the model's moe_capacity_factor; alltoall "
        "dispatcher): every expert computes its full capacity and the dispatch shapes are "
        "static, so no MoE layer waits for its token counts on the host (cost/launch.py).",
        reads={"moe_layer", "layer", "pipeline"},
        megatron="--moe-pad-expert-input-to-capacity",
        nemo="moe_pad_expert_input_to_capacity",
    )
    cuda_graphs: str = row(
        "none",
        "CUDA graphs: none | partial (per-layer graphs, `--cuda-graph-impl "
        "transformer_engine`) | full (the whole iteration, `--cuda-graph-impl local "
        "--cuda-graph-scope full_iteration`).",
        reads=_LAYER,
        spec_type=CudaGraphs,
        megatron="--cuda-graph-impl",
        nemo="cuda_graph_impl",
    )
    pipeline_model_parallel_layout: str | None = row(
        None,
        "Megatron's pipeline layout string (`--pipeline-model-parallel-layout`, e.g. "
        "`Et*4|(t*4|)*14tmL`: E embedding, t decoder layer, m MTP layer, L loss, | a "
        "virtual-stage boundary, *n and parentheses repeat); replaces "
        "first/last_stage_layers and vpp.",
        reads=_SPLIT,
        bounds=dict(max_length=10_000),
        megatron="--pipeline-model-parallel-layout",
        nemo="pipeline_model_parallel_layout",
    )
    auto: tuple[str, ...] = row(
        (),
        "Fields the config left out that the planner chose (the fastest that fits; tune.py).",
        compare=False,
        config="",
    )

    # derived sizes -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.cp * self.pp

    @property
    def ep_span(self) -> int:
        """GPUs one expert-parallel group spans: ep*etp (inside one NVLink domain or not)."""
        return self.ep * self.etp

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: world / (etp*ep*pp) (Megatron)."""
        return max(1, self.world_size // (self.etp * self.ep * self.pp))

    @property
    def optimizer_shard(self) -> int:
        """Ranks the distributed optimizer shards dense states over: dp*cp (what Megatron does)."""
        return self.dp * self.cp

    @property
    def uneven(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    def num_microbatches(self, global_batch_size: int) -> int:
        """m = B / (b*dp), floored (the rules report a remainder)."""
        return global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def name(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts += [f"dp{self.dp}", f"pp{self.pp}"]
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        return "-".join(parts)

    def with_(self, **changes) -> Layout:
        return replace(self, **changes)

    def as_dict(self, global_batch_size: int | None = None) -> dict[str, Any]:
        """The JSON `layout` object: every row's config name and value (the resolved value
        where the row says so), with num_microbatches after micro_batch_size when the global
        batch is given."""
        d: dict[str, Any] = {}
        for f in LAYOUT_FIELDS:
            name = config_name(f)
            if not name:
                continue
            value = getattr(self, info(f).json_from or f.name)
            d[name] = list(value) if isinstance(value, tuple) else value
            if f.name == "micro_batch_size" and global_batch_size is not None:
                d["num_microbatches"] = self.num_microbatches(global_batch_size)
        return d

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """The modules selective recompute recomputes (Megatron's default: core_attn); ()
        unless recompute is selective."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)


LAYOUT_FIELDS = layout_fields(Layout)
"""The rows of the layout table, in order."""


def layout_key_for(part: str):
    """The cache key of cost part `part` (planner.fields.PARTS) as a function of a Layout."""
    return layout_key(Layout, part)


def _layout_vpp(spec: Any) -> int:
    """vpp from a pipeline layout string (its stages / pp) where it gives one, else the
    config's; a layout that does not parse or divide keeps the config's (the
    `pipeline-layout` rule reports it)."""
    text = spec.pipeline_model_parallel_layout
    if not text or "vpp" in spec.model_fields_set:
        return spec.vpp
    from planner.pipeline_layout import parse_layout

    try:
        n = len(parse_layout(text))
    except ValueError:
        return spec.vpp
    return n // spec.pp if n % spec.pp == 0 and n >= spec.pp else spec.vpp


def layout_from_spec(spec: Any, *, num_gpus: int) -> Layout:
    """The layout a config describes. dp defaults to num_gpus/(tp*pp*cp), floored; the
    `world-size` and `dp-matches-world` rules report what does not divide."""
    dp = spec.dp if spec.dp is not None else max(1, num_gpus // (spec.tp * spec.pp * spec.cp))
    sp = spec.sequence_parallel if spec.sequence_parallel is not None else spec.tp > 1
    given = set(spec.model_fields_set)
    if spec.pipeline_model_parallel_layout:
        given.add("vpp")  # the layout string fixes the virtual stages
    return Layout(
        tp=spec.tp,
        cp=spec.cp,
        ep=spec.ep,
        dp=dp,
        pp=spec.pp,
        vpp=_layout_vpp(spec),
        etp=spec.etp if spec.etp is not None else spec.tp,
        sp=sp,
        zero=spec.zero_stage,
        micro_batch_size=spec.micro_batch_size,
        recompute=spec.recompute,
        first_stage_layers=spec.first_stage_layers,
        last_stage_layers=spec.last_stage_layers,
        cp_comm_type=spec.cp_comm_type,
        overlap_grad_reduce=spec.overlap_grad_reduce,
        overlap_param_gather=spec.overlap_param_gather,
        tp_comm_overlap=(
            spec.tp_comm_overlap if spec.tp_comm_overlap is not None else sp and spec.tp > 1
        ),
        recompute_modules=tuple(spec.recompute_modules or ()),
        recompute_num_layers=spec.recompute_num_layers,
        cpu_offloading_num_layers=spec.cpu_offloading_num_layers,
        activation_func_fp8_input_store=spec.activation_func_fp8_input_store,
        activation_cache=spec.activation_cache,
        grad_reduce_in_fp32=spec.grad_reduce_in_fp32,
        exp_avg_dtype=spec.exp_avg_dtype,
        exp_avg_sq_dtype=spec.exp_avg_sq_dtype,
        moe_token_dispatcher=spec.moe_token_dispatcher,
        pipeline_schedule=spec.pipeline_schedule,
        overlap_moe_expert_parallel_comm=spec.overlap_moe_expert_parallel_comm,
        moe_pad_expert_input_to_capacity=spec.moe_pad_expert_input_to_capacity,
        cuda_graphs=spec.cuda_graphs,
        pipeline_model_parallel_layout=spec.pipeline_model_parallel_layout,
        auto=tuple(f for f in AUTO_FIELDS if f not in given),
    )


AUTO_FIELDS = ("micro_batch_size", "vpp")
"""Tuning knobs a config may leave to the planner: it picks the fastest value that fits."""


def stage_layer_counts(num_layers: int, layout: Layout) -> tuple[int, float, int]:
    """Transformer layers on the (first, each middle, last) pipeline rank.

    Even split: L/p each. With first/last given (Megatron --decoder-first/last-pipeline-num-
    layers) the middle ranks share the rest evenly. A non-whole middle count is returned as a
    float; the `layers-divisible` rule reports it.
    """
    p = layout.pp
    if p == 1:
        return num_layers, float(num_layers), num_layers
    if not layout.uneven:
        even = num_layers / p
        return int(even), even, int(even)
    first = layout.first_stage_layers
    last = layout.last_stage_layers
    if first is None or last is None:
        # one side given: the other ranks share the rest evenly
        known = first if first is not None else last
        rest = (num_layers - known) / (p - 1)
        first = known if first is not None else int(rest)
        last = known if last is not None else int(rest)
        middle = rest
    else:
        middle = (num_layers - first - last) / (p - 2) if p > 2 else float(first)
    return first, middle, last


def bubble_fraction(p: int, m: int, v: int = 1, schedule: str = "1f1b") -> float:
    """Idle time as a fraction of the ideal (bubble-free) time, for equal stages:
    (p-1)/(v*m) for 1F1B (v = 1) and interleaved 1F1B; for DualPipe its bubble
    (p/2-1)(F&B + B - 3W) (arXiv:2412.19437 Table 2) over the ideal m(F + B), with the
    backward twice the forward (B = 2F), its weight-gradient half W = F and F&B = F + B:
        dualpipe    (p/2-1)(F + 2B - 3W) / (m(F + B)) = (p/2-1) * 2F / (3Fm) = (p-2)/(3m)
        dualpipev   its 2p chunks of half a rank's layers: (p-1)F / (3Fm)    = (p-1)/(3m)
    (the time model takes F, B and W from each stage's own compute: pipeline.schedule_bubble)."""
    if p <= 1:
        return 0.0
    if schedule == "dualpipe":
        return (p - 2) / (3 * max(m, 1))
    if schedule == "dualpipev":
        return (p - 1) / (3 * max(m, 1))
    return (p - 1) / (v * max(m, 1))


def dualpipe_fits(p: int, m: int) -> str | None:
    """Why DualPipe cannot run p ranks and m micro-batches, or None: deepseek-ai/DualPipe
    `DualPipe.step` asserts an even number of ranks and `num_chunks % 2 == 0 and
    num_chunks >= num_ranks * 2`."""
    if p < 2 or p % 2:
        return f"DualPipe needs an even pp of 2 or more (pp {p})"
    if m % 2 or m < 2 * p:
        return f"DualPipe needs an even number of micro-batches of at least 2*pp = {2 * p} (m {m})"
    return None


def bubble_formula(p: int, m: int, v: int = 1, schedule: str = "1f1b") -> str:
    """`bubble_fraction`'s closed form with the numbers in it, for messages."""
    if schedule == "dualpipe":
        return f"(pp-2)/(3m) = ({p}-2)/(3*{m})"
    if schedule == "dualpipev":
        return f"(pp-1)/(3m) = ({p}-1)/(3*{m})"
    return f"(pp-1)/(vpp*m) = ({p}-1)/({v}*{m})"

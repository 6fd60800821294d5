"""`Layout`: one way to split a job over the GPUs, with its derived sizes.

Axes in Megatron's rank order, innermost first: tp, cp, ep, dp, pp (+ vpp, etp).
`world_size = tp*cp*dp*pp`; EP borrows ranks from dp*cp*tp, ETP from there too (the expert
grid is etp*ep*edp*pp = world). A plain frozen dataclass (not pydantic): the search builds
hundreds of thousands of these.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.specs import ParallelSpec

__all__ = ["Layout", "layout_from_spec", "stage_layer_counts", "AUTO_FIELDS", "bubble_fraction"]


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1
    vpp: int = 1
    etp: int = 1
    sp: bool = False
    zero: int = 1
    micro_batch_size: int = 1
    recompute: str = "none"
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    cp_comm_type: str = "p2p"
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    # production recipe settings (ParallelSpec documents each)
    recompute_modules: tuple[str, ...] = ()
    """What selective recompute recomputes; () with recompute selective means (core_attn,)."""
    recompute_num_layers: int | None = None
    """With recompute full: layers per virtual stage that recompute (None: all)."""
    cpu_offloading_num_layers: int = 0
    grad_reduce_in_fp32: bool = True
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    moe_token_dispatcher: str = "allgather"
    overlap_moe_expert_parallel_comm: bool = False
    cuda_graphs: str = "none"
    pipeline_model_parallel_layout: str | None = None
    auto: tuple[str, ...] = field(default=(), compare=False)
    """Fields the config left out that the planner chose (the fastest that fits; tune.py)."""

    # derived sizes -------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def model_parallel_size(self) -> int:
        return self.tp * self.cp * self.pp

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

    def with_(self, **changes) -> "Layout":
        return replace(self, **changes)

    def as_dict(self, global_batch_size: int | None = None) -> dict:
        d = {
            "tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp, "ep": self.ep,
            "etp": self.etp, "vpp": self.vpp, "micro_batch_size": self.micro_batch_size,
        }
        if global_batch_size is not None:
            d["num_microbatches"] = self.num_microbatches(global_batch_size)
        d.update({
            "sequence_parallel": self.sp, "zero_stage": self.zero, "recompute": self.recompute,
            "first_stage_layers": self.first_stage_layers,
            "last_stage_layers": self.last_stage_layers, "cp_comm_type": self.cp_comm_type,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "overlap_param_gather": self.overlap_param_gather,
            "tp_comm_overlap": self.tp_comm_overlap,
            "recompute_modules": list(self.selective_modules),
            "recompute_num_layers": self.recompute_num_layers,
            "cpu_offloading_num_layers": self.cpu_offloading_num_layers,
            "grad_reduce_in_fp32": self.grad_reduce_in_fp32,
            "exp_avg_dtype": self.exp_avg_dtype, "exp_avg_sq_dtype": self.exp_avg_sq_dtype,
            "moe_token_dispatcher": self.moe_token_dispatcher,
            "overlap_moe_expert_parallel_comm": self.overlap_moe_expert_parallel_comm,
            "cuda_graphs": self.cuda_graphs,
            "pipeline_model_parallel_layout": self.pipeline_model_parallel_layout,
        })
        return d

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """The modules selective recompute recomputes (Megatron's default: core_attn); ()
        unless recompute is selective."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)


def _layout_vpp(spec: ParallelSpec) -> int:
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


def layout_from_spec(spec: ParallelSpec, *, num_gpus: int) -> Layout:
    """The layout a config describes. dp defaults to num_gpus/(tp*pp*cp), floored; the
    `world-size` and `dp-matches-world` rules report what does not divide."""
    dp = spec.dp if spec.dp is not None else max(1, num_gpus // (spec.tp * spec.pp * spec.cp))
    sp = spec.sequence_parallel if spec.sequence_parallel is not None else spec.tp > 1
    given = set(spec.model_fields_set)
    if spec.pipeline_model_parallel_layout:
        given.add("vpp")   # the layout string fixes the virtual stages
    return Layout(
        tp=spec.tp, cp=spec.cp, ep=spec.ep, dp=dp, pp=spec.pp, vpp=_layout_vpp(spec),
        etp=spec.etp if spec.etp is not None else spec.tp, sp=sp, zero=spec.zero_stage,
        micro_batch_size=spec.micro_batch_size, recompute=spec.recompute,
        first_stage_layers=spec.first_stage_layers, last_stage_layers=spec.last_stage_layers,
        cp_comm_type=spec.cp_comm_type, overlap_grad_reduce=spec.overlap_grad_reduce,
        overlap_param_gather=spec.overlap_param_gather,
        tp_comm_overlap=(spec.tp_comm_overlap if spec.tp_comm_overlap is not None
                         else sp and spec.tp > 1),
        recompute_modules=tuple(spec.recompute_modules or ()),
        recompute_num_layers=spec.recompute_num_layers,
        cpu_offloading_num_layers=spec.cpu_offloading_num_layers,
        grad_reduce_in_fp32=spec.grad_reduce_in_fp32,
        exp_avg_dtype=spec.exp_avg_dtype, exp_avg_sq_dtype=spec.exp_avg_sq_dtype,
        moe_token_dispatcher=spec.moe_token_dispatcher,
        overlap_moe_expert_parallel_comm=spec.overlap_moe_expert_parallel_comm,
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


def bubble_fraction(p: int, m: int, v: int = 1) -> float:
    """(p-1)/(v*m): idle time as a fraction of the ideal (bubble-free) time."""
    if p <= 1:
        return 0.0
    return (p - 1) / (v * max(m, 1))

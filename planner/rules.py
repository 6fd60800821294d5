"""Rules: small pure checks of a layout for a job, each returning Violations.

Hard rules (errors) are the frameworks' own (docs/reference/framework-rules.md, Megatron-LM
rules R1-R15 in the docstrings, e.g.
docs/reference/framework-rules.md#r1-world-size-divisible-by-tp-pp-and-cp); guidance from the
reference chapters comes as warnings. Rules are listed in the seven-step order so the search
can prune cheapest-first and count what each rule removed. Messages follow Megatron: the
values, then the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.errors import Violation
from planner.layout import (
    Layout,
    bubble_formula,
    bubble_fraction,
    dualpipe_fits,
    stage_layer_counts,
)
from planner.specs import HardwareSpec, ModelSpec, TrainingSpec
from planner.units import GiB, divisors

__all__ = [
    "Context",
    "RULES",
    "WARNINGS",
    "check",
    "rule_ids",
    "DEFAULT_HEADROOM",
    "MEMORY_MARGIN",
    "USUAL_MAX_BATCH_TOKENS",
    "USUAL_MAX_MOE_BATCH_TOKENS",
    "batch_ok",
    "interleave_ok",
    "seq_tp_ok",
    "moe_sp_ok",
    "fits",
    "split_options",
    "vpp_options",
]

DEFAULT_HEADROOM = 0.05
"""Fraction of GPU memory kept free on top of the modelled overheads (fits-in-memory)."""
MEMORY_MARGIN = 0.10
"""The memory model's uncertainty: published peaks are within ~10% of the estimate
(benchmarks/accuracy.py). validate calls a layout infeasible only when its estimate exceeds
the GPU by more than this; between the headroom and that, it warns how near the edge it is.
plan proposes only layouts that keep the headroom."""
USUAL_MAX_BATCH_TOKENS = 2**24  # dense: Llama 3 405B's 16M (arXiv 2407.21783)
USUAL_MAX_MOE_BATCH_TOKENS = 15360 * 4096  # MoE: DeepSeek-V3's (arXiv 2412.19437)
"""16.8M tokens: the largest global batch of published dense pre-training (Llama 3 405B: 16M)."""


@dataclass(frozen=True)
class Context:
    """What a rule looks at. `memory` (a MemoryBreakdown) is set when it was computed."""

    model: ModelSpec
    hardware: HardwareSpec
    training: TrainingSpec
    num_gpus: int
    layout: Layout
    memory: object = None
    headroom: float = DEFAULT_HEADROOM

    @property
    def m(self) -> int:
        return self.layout.num_microbatches(self.training.global_batch_size)


Rule = Callable[[Context], str | None]


def _try(values: Iterable[int], name: str) -> str:
    vals = sorted(set(values))
    if not vals:
        return ""
    if len(vals) == 1:
        return f"; try {name} {vals[0]}"
    return f"; try {name} " + ", ".join(map(str, vals[:-1])) + f" or {vals[-1]}"


# -- predicates shared with the search (one source of truth for the arithmetic) -------------


def batch_ok(global_batch_size: int, micro_batch_size: int, dp: int) -> bool:
    """B % (b*dp) == 0 and at least one micro-batch."""
    unit = micro_batch_size * dp
    return global_batch_size % unit == 0 and global_batch_size >= unit


def interleave_ok(vpp: int, pp: int, m: int) -> bool:
    """The interleaved schedule needs m >= pp."""
    return vpp == 1 or pp == 1 or m >= pp


def seq_tp_ok(seq: int, cp: int, tp: int, sp: bool) -> bool:
    """With SP each TP rank takes (seq/cp)/tp tokens."""
    return not (sp and tp > 1) or (seq // cp) % tp == 0


def moe_sp_ok(is_moe: bool, ep: int, tp: int, sp: bool) -> bool:
    return not (is_moe and ep > 1 and tp > 1 and not sp)


def fits(total_bytes: float, capacity_bytes: float, headroom: float) -> bool:
    return total_bytes <= capacity_bytes * (1 - headroom)


# -- step 1: the world and the model's shape -------------------------------------------------


def world_size(c: Context) -> str | None:
    """Megatron R1 (docs/reference/framework-rules.md#r1-world-size-divisible-by-tp-pp-and-cp):
    world % (tp*pp*cp) == 0 and dp = world/(tp*pp*cp)."""
    lay = c.layout
    mp = lay.tp * lay.pp * lay.cp
    if c.num_gpus % mp:
        msg = (
            f"num_gpus ({c.num_gpus}) must be divisible by tp*pp*cp "
            f"({lay.tp}*{lay.pp}*{lay.cp} = {mp})"
        )
        if c.num_gpus % (lay.tp * lay.cp):
            ok = [t for t in divisors(c.num_gpus) if t <= 64 and c.num_gpus % (t * lay.cp) == 0]
            return msg + _try(sorted(ok, key=lambda t: abs(t - lay.tp))[:5], "tp")
        ok = [p for p in divisors(c.num_gpus // (lay.tp * lay.cp))]
        return msg + _try(sorted(ok, key=lambda p: abs(p - lay.pp))[:5], "pp")
    if lay.world_size != c.num_gpus:
        return (
            f"dp ({lay.dp}) must equal num_gpus / (tp*pp*cp) = {c.num_gpus} / {mp} = "
            f"{c.num_gpus // mp}; set dp {c.num_gpus // mp} or leave it out"
        )
    return None


def heads_divisible_by_tp(c: Context) -> str | None:
    """Megatron R4 (docs/reference/framework-rules.md#r4-heads-divisible-by-tp):
    num_attention_heads % tp == 0."""
    a, t = c.model.num_attention_heads, c.layout.tp
    if a % t:
        return f"num_attention_heads ({a}) must be divisible by tp ({t})" + _try(
            [d for d in divisors(a) if d <= 64], "tp"
        )
    return None


def kv_heads_vs_tp(c: Context) -> str | None:
    """Megatron R5 (docs/reference/framework-rules.md#r5-query-groups-and-tp):
    num_query_groups % tp == 0 or tp % num_query_groups == 0."""
    if c.model.is_mla:
        return None
    g, t = c.model.kv_heads, c.layout.tp
    if g % t and t % g:
        ok = [d for d in divisors(c.model.num_attention_heads) if (g % d == 0 or d % g == 0)]
        return f"num_kv_heads ({g}) and tp ({t}) must divide one another" + _try(ok[:8], "tp")
    return None


def precision_supported(c: Context) -> str | None:
    if c.training.precision == "fp8" and c.hardware.peak_tflops.fp8 is None:
        return (
            f"precision fp8 needs FP8 tensor cores, which {c.hardware.name} lacks; "
            "use precision bf16"
        )
    return None


def layers_divisible(c: Context) -> str | None:
    """Megatron R10/R11 (docs/reference/framework-rules.md#r10-layers-divisible-by-pp,
    docs/reference/framework-rules.md#r11-virtual-stages-need-pp-and-micro-batches): layers
    split whole over pp (and vpp): L % pp == 0, or the uneven split first + middle*(pp-2) +
    last == L with whole middle counts; each rank's count % vpp == 0, except when the embedding
    and the loss are accounted as layers (first = last = middle - 1), where
    (L + 2) % (pp*vpp) == 0."""
    lay, L = c.layout, c.model.num_layers
    if lay.pipeline_model_parallel_layout:
        return None  # pipeline-layout checks the custom split instead
    p, v = lay.pp, lay.vpp
    first, mid, last = stage_layer_counts(L, lay)
    if not lay.uneven:
        if L % p:
            near = sorted(divisors(L), key=lambda q: abs(q - p))[:3]
            return (
                f"num_layers ({L}) must be divisible by pp ({p})"
                + _try(near, "pp")
                + f", or set first_stage_layers/last_stage_layers (e.g. "
                f"{_uneven_hint(L, p)})"
            )
        per = L // p
        if per % v:
            return (
                f"layers per pipeline rank ({per} = {L}/{p}) must be divisible by vpp ({v})"
                + _try([d for d in divisors(per) if d <= 16], "vpp")
            )
        return None
    if p == 1:
        return "first_stage_layers/last_stage_layers need pp > 1; remove them or raise pp"
    if p == 2 and first + last != L:  # stage_layer_counts has no middle rank to absorb the rest
        return (
            f"first_stage_layers ({first}) + last_stage_layers ({last}) must equal num_layers "
            f"({L}) with pp 2; try {_uneven_hint(L, p)}"
        )
    if first < 0 or last < 0 or first + last > L or mid != int(mid) or mid < 0:
        return (
            f"num_layers ({L}) does not split as first {first} + {p - 2} x middle + last "
            f"{last} with whole middle counts; try {_uneven_hint(L, p)}"
        )
    if v > 1 and p > 2 and first == last == mid - 1:
        # the embedding and the loss take a layer's place on the first and last ranks
        # (Megatron --account-for-embedding/loss-in-pipeline-split): (L + 2) % (pp*vpp) == 0
        if (L + 2) % (p * v):
            return (
                f"num_layers + 2 ({L + 2}, the embedding and the loss counted as layers) must "
                f"be divisible by pp*vpp ({p}*{v})"
                + _try([d for d in divisors(int(mid)) if d <= 16], "vpp")
            )
        return None
    for name, n in (
        ("first_stage_layers", first),
        ("middle stage layers", int(mid)),
        ("last_stage_layers", last),
    ):
        if p > 2 or name != "middle stage layers":
            if n % v:
                return f"{name} ({n}) must be divisible by vpp ({v}); each rank's layers split into vpp chunks"
    return None


def split_options(L: int, p: int) -> list[tuple[int | None, int | None]]:
    """The layer split the search tries for pp = p: even when L % p == 0; otherwise the
    embedding and the loss each taking a layer's place (first = last = (L+2)/p - 1, as
    Llama 3 405B's 7 + 14x8 + 7); otherwise ceil(L/p) on the middle ranks and the remainder
    shared by the first and last ranks. Empty when no split leaves every rank a layer."""
    if p == 1 or L % p == 0:
        return [(None, None)]
    if p > 2 and (L + 2) % p == 0 and (L + 2) // p >= 2:
        k = (L + 2) // p
        return [(k - 1, k - 1)]
    if p == 2:
        return [(L // 2, L - L // 2)]
    mid = -(-L // p)
    rest = L - (p - 2) * mid
    if rest >= 2:
        return [(rest // 2, rest - rest // 2)]
    return []


def vpp_options(L: int, p: int, first: int | None, last: int | None, max_vpp: int) -> list[int]:
    """The virtual-stage counts the layers-divisible rule accepts for this split."""
    if p == 1:
        return [1]
    from math import gcd

    f, mid, la = stage_layer_counts(
        L, Layout(pp=p, first_stage_layers=first, last_stage_layers=last)
    )
    if mid != int(mid):
        return [1]
    mid = int(mid)
    if p > 2 and first is not None and f == la == mid - 1:
        g = mid  # embedding and loss accounted as layers
    else:
        g = gcd(f, la) if p == 2 else gcd(gcd(f, la), mid)
    return [v for v in divisors(g) if v <= max_vpp] if g else [1]


def _uneven_hint(L: int, p: int) -> str:
    if p < 2:
        return "pp > 1"
    # the embedding and the loss each take a layer's place (Llama 3 405B: 7 + 14x8 + 7)
    if p > 2 and (L + 2) % p == 0:
        k = (L + 2) // p
        return f"first_stage_layers {k - 1}, last_stage_layers {k - 1}"
    base = L // p
    extra = L - base * p
    return f"first_stage_layers {base + extra - extra // 2}, last_stage_layers {base + extra // 2}"


def pipeline_layout(c: Context) -> str | None:
    """Megatron's --pipeline-model-parallel-layout checks (pipeline_layout.py), and that it
    replaces first/last_stage_layers (Megatron rejects both together) and fixes vpp."""
    lay = c.layout
    text = lay.pipeline_model_parallel_layout
    if not text:
        return None
    from planner.pipeline_layout import layout_problem, parse_layout

    short = text if len(text) <= 40 else text[:37] + "..."
    try:
        stages = parse_layout(text)
    except ValueError as exc:
        return f"pipeline_model_parallel_layout {short!r}: {exc}"
    if lay.uneven:
        return (
            "pipeline_model_parallel_layout replaces first_stage_layers/last_stage_layers; "
            "remove those two"
        )
    problem = layout_problem(
        stages, pp=lay.pp, num_layers=c.model.num_layers, mtp_num_layers=c.model.mtp_num_layers
    )
    if problem:
        return f"pipeline_model_parallel_layout {short!r} {problem}; fix the layout string"
    if len(stages) != lay.pp * lay.vpp:
        return (
            f"pipeline_model_parallel_layout {short!r} has {len(stages)} stages = pp "
            f"{lay.pp} x vpp {len(stages) // lay.pp}, but vpp is {lay.vpp}; leave vpp out "
            "(the layout sets it)"
        )
    return None


def vpp_needs_pp(c: Context) -> str | None:
    """Megatron R11: virtual stages need pp > 1
    (docs/reference/framework-rules.md#r11-virtual-stages-need-pp-and-micro-batches)."""
    if c.layout.vpp > 1 and c.layout.pp == 1:
        return f"vpp ({c.layout.vpp}) needs pp > 1; set vpp 1 or raise pp"
    return None


# -- step 2-4: batch and sequence -----------------------------------------------------------


def batch_divisible(c: Context) -> str | None:
    """Megatron R9
    (docs/reference/framework-rules.md#r9-global-batch-divisible-by-micro-batch-times-dp):
    global_batch_size % (micro_batch_size*dp) == 0, at least one micro-batch."""
    lay, B = c.layout, c.training.global_batch_size
    if lay.world_size != c.num_gpus:
        return None  # world-size reports the layout; dp is not known yet
    unit = lay.micro_batch_size * lay.dp
    if B < lay.dp:
        return (
            f"global_batch_size ({B}) is smaller than dp ({lay.dp}): each data-parallel "
            f"rank needs at least one sequence per step; raise global_batch_size to "
            f"{unit} or a multiple of it, or lower dp (raise tp, pp or cp)"
        )
    if not batch_ok(B, lay.micro_batch_size, lay.dp):
        lo = max(unit, B // unit * unit)
        hi = lo + unit if B > lo else lo
        return (
            f"global_batch_size ({B}) must be a multiple of micro_batch_size*dp "
            f"({lay.micro_batch_size}*{lay.dp} = {unit}); try global_batch_size {lo}"
            + (f" or {hi}" if hi != lo else "")
        )
    return None


def vpp_needs_microbatches(c: Context) -> str | None:
    """Megatron R11: the interleaved schedule needs num_microbatches >= pp
    (docs/reference/framework-rules.md#r11-virtual-stages-need-pp-and-micro-batches)."""
    lay = c.layout
    if not interleave_ok(lay.vpp, lay.pp, c.m):
        return (
            f"interleaved schedule (vpp {lay.vpp}) needs num_microbatches ({c.m}) >= pp "
            f"({lay.pp}); raise global_batch_size or lower micro_batch_size, or set vpp 1"
        )
    return None


def dualpipe_shape(c: Context) -> str | None:
    """deepseek-ai/DualPipe `DualPipe.step` asserts an even number of pipeline ranks and an
    even number of micro-batches of at least twice that (m/2 enter at each end)."""
    lay = c.layout
    if lay.pipeline_schedule != "dualpipe" or lay.pp <= 1 or c.m <= 0:
        return None
    why = dualpipe_fits(lay.pp, c.m)
    if why is None:
        return None
    return (
        f"pipeline_schedule dualpipe: {why}; use an even pp and raise global_batch_size or "
        "lower micro_batch_size or dp to an even m >= 2*pp, or use 1f1b"
    )


def seq_divisible_by_cp(c: Context) -> str | None:
    """Megatron R8 (docs/reference/framework-rules.md#r8-sequence-divisible-by-2cp):
    cp > 1 => seq_length % (2*cp) == 0 (causal load balancing)."""
    cp, s = c.layout.cp, c.training.seq_length
    if cp > 1 and s % (2 * cp):
        ok = divisors(s // 2) if s % 2 == 0 else [1]  # odd s: no cp > 1 works
        return f"seq_length ({s}) must be divisible by 2*cp ({2 * cp}); " + _try(
            [d for d in ok if d <= 64], "cp"
        ).lstrip("; ")
    return None


def cp_sliding_window(c: Context) -> str | None:
    """Transformer Engine's context-parallel attention (Megatron-Core's) runs sliding-window
    layers only with the a2a or all-gather exchange: its ring (p2p, a2a+p2p) asserts "The
    context parallel running configs cannot support sliding window attention!"
    (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py)."""
    lay, m = c.layout, c.model
    if lay.cp > 1 and lay.cp_comm_type in ("p2p", "a2a+p2p") and "sliding" in m.attention_kinds:
        return (
            f"cp {lay.cp} with cp_comm_type {lay.cp_comm_type} and {m.window_size}-token "
            "sliding-window layers: Transformer Engine's context-parallel ring cannot run a "
            "window (it asserts); set cp_comm_type a2a or allgather, or cp 1"
        )
    return None


def cp_dsa(c: Context) -> str | None:
    """Megatron-Core's DSA attention runs context parallelism with the all-gather exchange only
    (the indexer scores every key): it asserts "DSAttention context parallelism currently
    supports cp_comm_type=allgather only." (megatron/core/transformer/
    experimental_attention_variant/dsa.py, DSAttention.forward)."""
    lay, m = c.layout, c.model
    if lay.cp > 1 and lay.cp_comm_type != "allgather" and "dsa" in m.attention_kinds:
        return (
            f"cp {lay.cp} with cp_comm_type {lay.cp_comm_type} and DSA layers: Megatron-Core's "
            "DSA attention runs context parallelism with the all-gather exchange only (it "
            "asserts); set cp_comm_type allgather, or cp 1"
        )
    return None


def seq_divisible_by_tp(c: Context) -> str | None:
    """With sequence parallelism each TP rank takes seq/(cp*tp) tokens: (seq/cp) % tp == 0."""
    lay, s = c.layout, c.training.seq_length
    if not seq_tp_ok(s, lay.cp, lay.tp, lay.sp):
        return (
            f"seq_length/cp ({s}/{lay.cp}) must be divisible by tp ({lay.tp}) with "
            "sequence_parallel; change seq_length or tp"
        )
    return None


def overlap_flags(c: Context) -> str | None:
    """Megatron R13 (docs/reference/framework-rules.md#r13-overlap-flags): --tp-comm-overlap
    needs SP; --overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce."""
    lay = c.layout
    if lay.tp_comm_overlap and not (lay.sp and lay.tp > 1):
        return "tp_comm_overlap needs sequence_parallel with tp > 1; turn one on or the other off"
    if lay.overlap_param_gather and lay.zero >= 1 and not lay.overlap_grad_reduce:
        return "overlap_param_gather needs overlap_grad_reduce; set overlap_grad_reduce true"
    return None


# -- step 5: experts ---------------------------------------------------------------------------


def experts_divisible_by_ep(c: Context) -> str | None:
    """Megatron R3 (docs/reference/framework-rules.md#r3-experts-divisible-by-ep):
    ep > 1 => num_experts % ep == 0 (and ep > 1 needs an MoE model)."""
    ep, E = c.layout.ep, c.model.num_experts
    if ep > 1 and not E:
        return f"ep ({ep}) > 1 needs an MoE model ({c.model.name} has no experts); set ep 1"
    if E and E % ep:
        return f"num_experts ({E}) must be divisible by ep ({ep})" + _try(divisors(E)[:10], "ep")
    return None


def expert_grid(c: Context) -> str | None:
    """Megatron R2 (docs/reference/framework-rules.md#r2-the-expert-grid):
    world % (etp*ep*pp) == 0; EP borrows ranks from dp*cp*tp."""
    lay = c.layout
    if lay.ep == 1 and lay.etp == lay.tp:
        return None  # the grid is tp*pp: world-size already checks it
    grid = lay.etp * lay.ep * lay.pp
    if c.num_gpus % grid:
        return (
            f"num_gpus ({c.num_gpus}) must be divisible by etp*ep*pp "
            f"({lay.etp}*{lay.ep}*{lay.pp} = {grid}); lower ep or etp"
        )
    if (lay.tp * lay.cp * lay.dp) % (lay.etp * lay.ep):
        return (
            f"etp*ep ({lay.etp}*{lay.ep}) must divide tp*cp*dp ({lay.tp}*{lay.cp}*{lay.dp}); "
            "EP borrows ranks from data, context and tensor parallelism"
        )
    return None


def moe_needs_sp(c: Context) -> str | None:
    """Megatron R14 (docs/reference/framework-rules.md#r14-moe-with-tp-needs-sp):
    training MoE layers with ep > 1 and tp > 1 needs sequence parallelism."""
    lay = c.layout
    if not moe_sp_ok(c.model.is_moe, lay.ep, lay.tp, lay.sp):
        return (
            f"MoE with ep ({lay.ep}) > 1 and tp ({lay.tp}) > 1 needs sequence_parallel; "
            "set sequence_parallel true"
        )
    return None


# -- recipe settings -------------------------------------------------------------------------------


def fp8_settings(c: Context) -> str | None:
    """Megatron: fp8_param must be used together with fp8 mode; MXFP8 (and FP4) need
    Blackwell tensor cores."""
    tr, hw = c.training, c.hardware
    if tr.precision != "fp8":
        given = [
            k
            for k, on in (
                ("fp8_recipe", tr.fp8_recipe is not None),
                ("fp8_param_gather", tr.fp8_param_gather),
            )
            if on
        ]
        if given:
            return (
                f"{' and '.join(given)} need precision fp8 (precision is {tr.precision}); "
                "set precision fp8 or remove them"
            )
        return None
    if tr.recipe == "mxfp8" and hw.architecture != "blackwell":
        return (
            f"fp8_recipe mxfp8 needs Blackwell tensor cores ({hw.name} is "
            f"{hw.architecture or 'of unknown architecture'}); use tensorwise or delayed, "
            "or a Blackwell profile"
        )
    return None


def loss_settings(c: Context) -> str | None:
    """Megatron-LM's vocab-parallel cross-entropy always keeps the logits split over TP;
    only a PyTorch loss (torchtitan's) can gather them (`disable_loss_parallel`)."""
    tr = c.training
    if not tr.loss_parallel and tr.cross_entropy == "vocab_parallel":
        return (
            "loss_parallel false needs cross_entropy pytorch_fp32 (Megatron-LM's "
            "vocab-parallel loss always splits the logits over TP); set cross_entropy "
            "pytorch_fp32 or remove loss_parallel"
        )
    return None


def recompute_settings(c: Context) -> str | None:
    """Megatron TransformerConfig: recompute_modules only with selective granularity,
    recompute_num_layers only with full; mla_up_proj needs multi-latent attention."""
    lay, m = c.layout, c.model
    if lay.recompute_modules and lay.recompute != "selective":
        return (
            f"recompute_modules ({', '.join(lay.recompute_modules)}) need recompute "
            f"selective (recompute is {lay.recompute}); set recompute selective"
        )
    if lay.recompute_num_layers is not None and lay.recompute != "full":
        return (
            f"recompute_num_layers ({lay.recompute_num_layers}) needs recompute full "
            f"(recompute is {lay.recompute}); set recompute full or remove it"
        )
    if "mla_up_proj" in lay.selective_modules and not m.is_mla:
        return (
            f"recompute module mla_up_proj needs multi-latent attention, which {m.name} "
            "does not use; remove it"
        )
    if "torchtitan_op" in lay.recompute_modules and len(lay.recompute_modules) > 1:
        return (
            f"recompute module torchtitan_op (torchtitan's op-level checkpointing) is a "
            f"policy of its own, not a module to combine with "
            f"{', '.join(x for x in lay.recompute_modules if x != 'torchtitan_op')}; use it "
            "alone or drop it"
        )
    return None


def cpu_offloading(c: Context) -> str | None:
    """Megatron TransformerConfig: 0 <= cpu_offloading_num_layers < num_layers, no pipeline
    parallelism, no activation recompute, no CUDA graphs with CPU offloading."""
    lay, n = c.layout, c.layout.cpu_offloading_num_layers
    if not n:
        return None
    if n >= c.model.num_layers:
        return (
            f"cpu_offloading_num_layers ({n}) must be below num_layers "
            f"({c.model.num_layers}); try {c.model.num_layers - 1} or fewer"
        )
    clash = [
        what
        for what, bad in (
            ("pp > 1", lay.pp > 1),
            ("recompute", lay.recompute != "none"),
            ("cuda_graphs", lay.cuda_graphs != "none"),
        )
        if bad
    ]
    if clash:
        return (
            f"cpu_offloading_num_layers ({n}) does not work with {' or '.join(clash)} "
            "(Megatron raises); turn those off or the offloading"
        )
    return None


def moe_comm_overlap(c: Context) -> str | None:
    """Megatron: overlap_moe_expert_parallel_comm needs ep > 1, the alltoall or flex
    (deepep / hybridep) dispatcher, no full recompute, no `moe` recompute module and at
    most one MTP layer."""
    lay, m = c.layout, c.model
    if not lay.overlap_moe_expert_parallel_comm:
        return None
    why = [
        what
        for what, bad in (
            (f"ep > 1 (ep is {lay.ep})", lay.ep <= 1 or not m.is_moe),
            (
                "the alltoall, deepep or hybridep dispatcher (allgather cannot overlap)",
                lay.moe_token_dispatcher == "allgather",
            ),
            ("no full recompute", lay.recompute == "full"),
            ("no moe recompute module", "moe" in lay.selective_modules),
            ("at most one MTP layer", m.mtp_num_layers > 1),
        )
        if bad
    ]
    if why:
        return (
            "overlap_moe_expert_parallel_comm needs "
            + ", ".join(why)
            + "; change those or turn the overlap off"
        )
    return None


def moe_pad_capacity(c: Context) -> str | None:
    """R16 (docs/reference/framework-rules.md#r16-drop-and-pad-moe): Megatron-Core pads expert inputs to the capacity (`--moe-pad-expert-input-to-capacity`)
    only in its alltoall dispatcher (MoEAlltoAllTokenDispatcher's drop_and_pad; the flex
    dispatcher asserts it is off, and a capacity factor works only with alltoall), for a MoE
    model."""
    lay, m = c.layout, c.model
    if not lay.moe_pad_expert_input_to_capacity:
        return None
    if not m.is_moe:
        return (
            "moe_pad_expert_input_to_capacity needs a MoE model (the model has no experts); "
            "turn it off"
        )
    if lay.moe_token_dispatcher != "alltoall":
        return (
            f"moe_pad_expert_input_to_capacity needs the alltoall dispatcher (moe_token_dispatcher "
            f"is {lay.moe_token_dispatcher}); set moe_token_dispatcher alltoall or turn it off"
        )
    return None


# -- memory --------------------------------------------------------------------------------------

_MEMORY_FIX = (
    "raise tp or pp, use recompute full (or more recompute modules), a higher "
    "zero_stage, bf16 gradients and moments, or a smaller micro_batch_size"
)


def fits_in_memory(c: Context) -> str | None:
    """The most loaded rank's estimate does not exceed the GPU's memory by more than the
    model's uncertainty (MEMORY_MARGIN)."""
    mem = c.memory
    if mem is None:
        return None
    limit = mem.capacity * (1 + MEMORY_MARGIN)
    if mem.total > limit:
        return (
            f"memory per GPU ({mem.total / GiB:.1f} GiB on the {mem.stage} pipeline rank, "
            f"{mem.fraction:.0%}) exceeds the {mem.capacity / GiB:.1f} GiB the GPU has by "
            f"{(mem.total - mem.capacity) / GiB:.1f} GiB, beyond the estimate's "
            f"{MEMORY_MARGIN:.0%} uncertainty; " + _MEMORY_FIX
        )
    return None


def memory_near_capacity(c: Context) -> str | None:
    """Inside the headroom (or over capacity by less than the model's uncertainty): it may
    fit or not; say how near."""
    mem = c.memory
    if (
        mem is None
        or fits(mem.total, mem.capacity, c.headroom)
        or mem.total > mem.capacity * (1 + MEMORY_MARGIN)
    ):
        return None
    cap = mem.capacity * (1 - c.headroom)
    where = "over" if mem.total > mem.capacity else "within"
    return (
        f"memory per GPU ({mem.total / GiB:.1f} GiB on the {mem.stage} pipeline rank) is "
        f"{mem.fraction:.0%} of the {mem.capacity / GiB:.1f} GiB the GPU has, {where} it and "
        f"inside the {c.headroom:.0%} headroom ({cap / GiB:.1f} GiB) by "
        f"{(mem.total - cap) / GiB:.1f} GiB; the estimate is good to about "
        f"{MEMORY_MARGIN:.0%}, so it may not fit: " + _MEMORY_FIX
    )


# -- warnings: the reference chapters' guidance ------------------------------------------------


def sp_needs_tp(c: Context) -> str | None:
    """Megatron R12 (warning; docs/reference/framework-rules.md#r12-sequence-parallelism-with-tp-1):
    SP with tp = 1 is switched off by Megatron-LM (NeMo 2 rejects it)."""
    if c.layout.sp and c.layout.tp == 1:
        return "sequence_parallel with tp 1 does nothing (Megatron-LM turns it off; NeMo 2 rejects it); set it false"
    return None


def tp_crosses_node(c: Context) -> str | None:
    hw, t = c.hardware, c.layout.tp
    if t > hw.nvlink_domain_size:
        return (
            f"tp ({t}) spans more than one NVLink domain ({hw.nvlink_domain_size} GPUs on "
            f"{hw.name}): its per-layer all-reduces then cross the network "
            f"({hw.network_bandwidth_gb_per_s:.0f} GB/s per GPU instead of NVLink's "
            f"{hw.nvlink_bandwidth_gb_per_s:.0f}) and cannot overlap with the GEMMs; "
            f"keep tp <= {hw.nvlink_domain_size} and use pp across nodes"
        )
    if t > 1 and hw.gpus_per_node % t and t < hw.gpus_per_node:
        return (
            f"tp ({t}) does not divide the {hw.gpus_per_node} GPUs of a node: some TP "
            "groups straddle two nodes; use a tp that divides the node"
        )
    return None


def tp_above_8(c: Context) -> str | None:
    t = c.layout.tp
    if t > 8 and t <= c.hardware.nvlink_domain_size:
        return (
            f"tp ({t}) > 8: GEMMs get thin and communication dominates; memory savings "
            "diminish beyond 8 (prefer pp or cp)"
        )
    return None


def microbatches_4p(c: Context) -> str | None:
    p, m = c.layout.pp, c.m
    if p > 1 and 0 < m < 4 * p:  # m = 0: batch-divisible reports the batch itself
        return (
            f"num_microbatches ({m}) < 4*pp ({4 * p}): pipeline bubble "
            f"{bubble_fraction(p, m, c.layout.vpp, c.layout.pipeline_schedule):.0%}; raise "
            "global_batch_size, lower micro_batch_size or dp, or use vpp"
        )
    return None


def bubble_above_20(c: Context) -> str | None:
    lay = c.layout
    bub = bubble_fraction(lay.pp, c.m, lay.vpp, lay.pipeline_schedule)
    if bub > 0.20 and c.m > 0:
        form = bubble_formula(lay.pp, c.m, lay.vpp, lay.pipeline_schedule)
        return (
            f"pipeline bubble {form} = {bub:.0%} > 20%; more micro-batches or virtual "
            "stages shrink it"
        )
    return None


def zero3_with_tp_pp(c: Context) -> str | None:
    lay = c.layout
    if lay.zero == 3 and (lay.tp > 1 or lay.pp > 1):
        return (
            f"zero_stage 3 with tp {lay.tp} / pp {lay.pp}: parameter all-gathers on top of "
            "model parallelism cost ~1.5x DP traffic; measure it, ZeRO-1/2 usually suffices"
        )
    return None


def ep_crosses_node(c: Context) -> str | None:
    lay, hw = c.layout, c.hardware
    span = lay.ep_span
    if lay.ep > 1 and span > hw.nvlink_domain_size:
        return (
            f"ep*etp ({lay.ep}*{lay.etp} = {span}) spans beyond one NVLink domain "
            f"({hw.nvlink_domain_size}): the all-to-all crosses the network; "
            "keep ep*etp within a node if the experts fit"
        )
    return None


def cp_short_sequence(c: Context) -> str | None:
    cp, s = c.layout.cp, c.training.seq_length
    if cp > 1 and s // cp < 4096:
        return (
            f"cp ({cp}) on a {s}-token sequence leaves {s // cp} tokens per rank: the K/V "
            "exchange is hard to hide behind so little attention; keep >= 4096 tokens per "
            "rank (CP pays off for long sequences)"
        )
    return None


def batch_beyond_usual(c: Context) -> str | None:
    """Beyond the largest published batch of its kind: 16M tokens for a dense model (Llama 3
    405B, arXiv 2407.21783), 15,360 x 4,096 = 62.9M for a mixture of experts (DeepSeek-V3,
    arXiv 2412.19437)."""
    lay, tr = c.layout, c.training
    tokens = tr.global_batch_size * tr.seq_length
    floor = lay.dp * lay.micro_batch_size * tr.seq_length
    most, usual = (
        (USUAL_MAX_MOE_BATCH_TOKENS, "<= 62.9M for a MoE (DeepSeek-V3)")
        if c.model.is_moe
        else (USUAL_MAX_BATCH_TOKENS, "<= 16M for a dense model")
    )
    if floor > most:
        return (
            f"dp ({lay.dp}) x micro_batch_size x seq_length forces at least "
            f"{floor / 1e6:.1f}M tokens per step, beyond the usual {usual}; use more "
            "tp/pp/cp"
        )
    if tokens > most:
        return (
            f"global batch of {tokens / 1e6:.1f}M tokens is beyond the usual {usual} "
            "(convergence suffers); fewer sequences per step"
        )
    return None


RULES: list[tuple[str, Rule]] = [
    ("world-size", world_size),
    ("heads-divisible-by-tp", heads_divisible_by_tp),
    ("kv-heads-vs-tp", kv_heads_vs_tp),
    ("precision-supported", precision_supported),
    ("layers-divisible", layers_divisible),
    ("pipeline-layout", pipeline_layout),
    ("vpp-needs-pp", vpp_needs_pp),
    ("batch-divisible", batch_divisible),
    ("vpp-needs-microbatches", vpp_needs_microbatches),
    ("dualpipe-shape", dualpipe_shape),
    ("seq-divisible-by-cp", seq_divisible_by_cp),
    ("cp-sliding-window", cp_sliding_window),
    ("cp-dsa", cp_dsa),
    ("seq-divisible-by-tp", seq_divisible_by_tp),
    ("overlap-flags", overlap_flags),
    ("experts-divisible-by-ep", experts_divisible_by_ep),
    ("expert-grid", expert_grid),
    ("moe-needs-sp", moe_needs_sp),
    ("fp8-settings", fp8_settings),
    ("loss-settings", loss_settings),
    ("recompute-settings", recompute_settings),
    ("cpu-offloading", cpu_offloading),
    ("moe-comm-overlap", moe_comm_overlap),
    ("moe-pad-capacity", moe_pad_capacity),
    ("fits-in-memory", fits_in_memory),
]
"""Hard rules, in the order the search applies them (cheapest first)."""

WARNINGS: list[tuple[str, Rule]] = [
    ("memory-near-capacity", memory_near_capacity),
    ("sp-needs-tp", sp_needs_tp),
    ("tp-crosses-node", tp_crosses_node),
    ("tp-above-8", tp_above_8),
    ("microbatches-below-4p", microbatches_4p),
    ("bubble-above-20pct", bubble_above_20),
    ("zero3-with-tp-pp", zero3_with_tp_pp),
    ("ep-crosses-node", ep_crosses_node),
    ("cp-short-sequence", cp_short_sequence),
    ("batch-beyond-usual", batch_beyond_usual),
]
"""Guidance from the reference chapters."""


def rule_ids() -> list[str]:
    return [r for r, _ in RULES] + [r for r, _ in WARNINGS]


def check(ctx: Context) -> list[Violation]:
    """Every violation, errors first (in rule order), then warnings."""
    out = [Violation(rid, msg, "error") for rid, fn in RULES if (msg := fn(ctx))]
    out += [Violation(rid, msg, "warning") for rid, fn in WARNINGS if (msg := fn(ctx))]
    return out

"""`CostModel`: memory and step time of layouts of one job, composed from the pure formulas.

The formulas live in memory.py, compute.py, comm.py and pipeline.py. This class only
composes them, and caches what does not depend on the whole layout: per-layer costs depend on
(tp, cp, ep, etp, sp, micro-batch, recompute, CP and TP-overlap modes) only, so a search over
pp, dp, vpp and ZeRO reuses them. `estimate()` and the search share this one composition.

Step (see step.py for the parts): per micro-batch a stage costs Σ_layers (fwd + bwd +
recompute) + TP/EP/CP exposed + PP p2p (+ the output layer and loss on the last stage);
the step is pipeline_time(stages) + exposed DP + the optimizer update.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Any, NamedTuple, cast

from planner.cost.comm import (
    Link,
    all_reduce_time,
    all_to_all_time,
    cp_ring_time,
    exposed_time,
    group_link,
    p2p_time,
)
from planner.cost.compute import (
    LayerTimes,
    attention_kernel_share,
    gemm_efficiency,
    hardware_flops_per_step,
    layer_times,
    logits_time,
    model_flops_per_step,
)
from planner.cost.launch import host_mode, host_parts
from planner.cost.memory import (
    MemoryBreakdown,
    StateDtypes,
    in_flight_layers,
    layer_activation_bytes,
    loss_bytes,
    mtp_extra_bytes,
    op_sac_on,
    recompute_working_set,
    routed_activation_bytes,
    stage_params,
    state_bytes,
    state_dtypes,
)
from planner.cost.moe import (
    FP8_DISPATCH_BYTES,
    dispatch_seconds,
    expert_tokens,
    exposed_dispatch,
    router_flops,
    tile_padded_tokens,
    unpaired_share,
)
from planner.cost.params import padded_vocab
from planner.cost.pipeline import (
    activations_in_flight,
    bubble_fraction,
    pipeline_time,
    schedule_bubble,
)
from planner.cost.precision import linear_peak, quantize_bytes, quantized_elements
from planner.cost.shape import ModelShape, model_shape
from planner.cost.step import StepTime, dp_exposed, optimizer_times
from planner.fields import PARTS
from planner.layout import Layout, layout_key_for, stage_layer_counts
from planner.pipeline_layout import parse_layout, rank_stages
from planner.units import GiB

__all__ = ["CostModel", "LayerCosts", "Stage"]

# Every cache key is derived from the layout table (planner/layout.py, one row per field, each
# saying which of these parts read it): a field a part reads cannot be left out of its key.
_KEY = {part: layout_key_for(part) for part in PARTS}
_KEY_DTYPES, _KEY_ACTS, _KEY_LAYER_BASE = _KEY["dtypes"], _KEY["acts"], _KEY["layer_base"]
_KEY_MOE_LAYER, _KEY_LAYER, _KEY_STAGES = _KEY["moe_layer"], _KEY["layer"], _KEY["stages"]
_KEY_STATES, _KEY_ACT_VECTOR = _KEY["states"], _KEY["act_vector"]
_KEY_FIRST_PARAMS, _PIPE_FIELDS, _DP_FIELDS = _KEY["first_params"], _KEY["pipeline"], _KEY["dp"]


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """Per layer and micro-batch on one GPU (seconds, bytes); d = dense layer, e = MoE layer."""

    tokens: float
    act_d: float  # stored activations (with the layout's recompute)
    act_e: float
    work_d: float  # one layer's full activations (the recompute working set)
    work_e: float
    fwd_d: float
    bwd_d: float
    rec_d: float
    fwd_e: float
    bwd_e: float
    rec_e: float
    tp: float  # exposed TP communication per dense layer (fwd + bwd + recompute)
    tp_e: float  # ... per MoE layer (the expert block needs none when etp = 1)
    ep: float  # exposed EP all-to-all per MoE layer
    cp: float  # exposed CP communication per layer
    logits: float  # output layer + loss, fwd + bwd
    logits_bytes: float  # fp32 logits + final norm output
    transient: float  # TP/SP all-gather buffer
    ep_end: float = 0.0  # EP per MoE layer of an unpaired micro-batch (all of it exposed)


class _LayerBase(NamedTuple):
    """The ep- and dispatcher-free part of `LayerCosts` (`CostModel._layer_base`)."""

    tokens: float
    act_d: float
    act_e: float
    work_d: float
    work_e: float
    full: bool
    mods: tuple[str, ...]
    kw: dict[str, Any]  # layer_times' keywords shared by the dense and the MoE layer
    d: LayerTimes  # the dense layer's LayerTimes
    local: float  # tokens a rank routes
    tp_s: float
    tp_e: float
    cp_s: float
    logits: float
    logits_bytes: float
    transient: float
    mtp_bytes: float  # an MTP layer's activations beside its layer and loss (mtp_extra_bytes)
    ws_d: float  # a selective recompute's working set, dense layer (recompute_working_set)
    ws_e: float  # the same, MoE layer


class Stage(NamedTuple):
    """A group of `count` identical pipeline ranks from `rank` on (first, middle, last, or
    the groups of a custom layout): decoder layers, how many are MoE, what else it holds."""

    name: str
    rank: int
    count: int  # type: ignore[assignment]  # shadows tuple.count; a field here
    layers: float
    moe_layers: float
    embedding: bool
    output: bool
    mtp: int
    share: float = 1.0
    """The share of a step's micro-batches that pass through each of the group's layers: 1,
    or 1/2 for a DualPipe rank, which holds two stages and runs half the micro-batches (one
    direction's) through each (`dualpipe_ranks`)."""


def dualpipe_ranks(stages: list[Stage], p: int) -> list[Stage]:
    """DualPipe's ranks from the pipeline's p stages (groups of identical ranks): rank r holds
    stage r and stage p-1-r (deepseek-ai/DualPipe examples/example_dualpipe.py:
    `nn.Sequential(full_modules[rank], full_modules[pp_size - 1 - rank])`; DeepSeek-V3 report
    arXiv:2412.19437 §3.2.3: "we deploy the shallowest layers (including the embedding layer)
    and deepest layers (including the output head) of the model on the same PP rank"), and
    half of a step's micro-batches enter from each end, so each of its two stages runs m/2
    of them. A rank's parameters are its two stages' (the schedule's two copies); its time
    per micro-batch is the mean of the two stages'. Consecutive identical ranks are grouped;
    rank 0 and rank p-1 both hold the first and the last stage (named first and last)."""
    per_rank = [st for st in stages for _ in range(st.count)]
    out: list[Stage] = []
    for r, st in enumerate(per_rank):
        o = per_rank[p - 1 - r]
        paired = Stage(
            st.name,
            r,
            1,
            st.layers + o.layers,
            st.moe_layers + o.moe_layers,
            st.embedding or o.embedding,
            st.output or o.output,
            st.mtp + o.mtp,
            0.5,
        )
        if out and out[-1][3:] == paired[3:] and out[-1].name == paired.name:
            out[-1] = out[-1]._replace(count=out[-1].count + 1)
        else:
            out.append(paired)
    return out


class CostModel:
    """Memory and time of layouts for one job (model, hardware, training)."""

    def __init__(self, job: Any, shape: ModelShape | None = None):
        self.job = job
        self.shape = shape or model_shape(job.model)
        hw, tr = job.hardware, job.training
        self.hw = hw
        self.cal = hw.calibration
        self.seq, self.gbs = tr.seq_length, tr.global_batch_size
        self.precision, self.flash, self.accounting = (
            tr.precision,
            tr.flash_attention,
            tr.accounting,
        )
        self.recipe = tr.recipe
        self.fp8_param_gather = tr.fp8_param_gather
        self.cross_entropy, self.loss_parallel = tr.cross_entropy, tr.loss_parallel
        self.capacity = hw.memory_gib * GiB
        self.fixed = (hw.cuda_context_gib + hw.nccl_buffer_gib) * GiB
        self.frag = hw.fragmentation_fraction
        self.bf16 = hw.peak_flops("bf16")
        self.peak = hw.peak_flops(self.precision)
        self.hbm = hw.hbm_bandwidth_gb_per_s * 1e9
        self.host = hw.host_bandwidth_gb_per_s * 1e9
        self.link_kw = dict(
            domain=hw.nvlink_domain_size,
            nvlink_bw=hw.nvlink_bandwidth_gb_per_s * 1e9 * self.cal.nvlink_efficiency,
            network_bw=hw.network_bandwidth_gb_per_s * 1e9 * self.cal.network_efficiency,
            nvlink_lat=hw.nvlink_latency_us * 1e-6,
            network_lat=hw.network_latency_us * 1e-6,
        )
        self._layers: dict[Any, Any] = {}
        self._links: dict[Any, Any] = {}
        self._states: dict[Any, Any] = {}
        self._stages: dict[Any, Any] = {}
        self._first_params: dict[Any, Any] = {}
        self._hardware_flops: dict[Any, Any] = {}
        self._dtypes: dict[Any, Any] = {}
        self._acts: dict[Any, Any] = {}
        self._act_vectors: dict[Any, Any] = {}
        self._layer_bases: dict[Any, Any] = {}
        self._moe_layers: dict[Any, Any] = {}
        self._pipes: dict[Any, Any] = {}
        self._dp_opt: dict[Any, Any] = {}
        s = self.shape
        self.model_flops = model_flops_per_step(s, seq=self.seq, global_batch_size=self.gbs)
        self.L_dense = s.L_dense if s.E else s.L
        m = job.model
        self.router_groups = (m.moe_router_num_groups, m.moe_router_group_topk)

    # ------------------------------------------------------------------ cached pieces
    def link(self, n: int, stride: int) -> Link:
        key = (n, stride)
        got = self._links.get(key)
        if got is None:
            got = self._links[key] = group_link(n=n, stride=stride, **self.link_kw)
        return got

    def dtypes(self, lay: Layout) -> StateDtypes:
        """Bytes per parameter of the model states under this layout's recipe settings."""
        key = _KEY_DTYPES(lay)
        got = self._dtypes.get(key)
        if got is None:
            got = self._dtypes[key] = state_dtypes(
                accounting=self.accounting,
                precision=self.precision,
                recipe=self.recipe,
                fp8_param_gather=self.fp8_param_gather,
                grad_reduce_in_fp32=key[0],
                exp_avg_dtype=key[1],
                exp_avg_sq_dtype=key[2],
                architecture=self.hw.architecture,
            )
        return got

    def act_costs(self, lay: Layout) -> tuple[Any, ...]:
        """(act_d, act_e, work_d, work_e, logits_bytes, transient, mtp_bytes, ws_d, ws_e) per
        layer and micro-batch: the memory side of `layer_costs`, cached on what activations
        depend on only."""
        key = _KEY_ACTS(lay)
        got = self._acts.get(key)
        if got is None:
            lc = self._layer_base(lay)  # not the ep- and dispatcher-dependent layer times
            got = self._acts[key] = (
                lc.act_d,
                lc.act_e,
                lc.work_d,
                lc.work_e,
                lc.logits_bytes,
                lc.transient,
                lc.mtp_bytes,
                lc.ws_d,
                lc.ws_e,
            )
        return got

    def layer_costs(self, lay: Layout) -> LayerCosts:
        key = _KEY_LAYER(lay)
        got = self._layers.get(key)
        if got is None:
            got = self._layers[key] = self._layer_costs(lay)
        return got

    def _layer_costs(self, lay: Layout) -> LayerCosts:
        b = self._layer_base(lay)
        d, e, ep_s, ep_end = b.d, b.d, 0.0, 0.0
        if self.shape.E:
            e = self._moe_layer(lay, b)
            if lay.ep > 1:
                s = self.shape
                again = b.full or "moe" in b.mods  # recomputing the MoE layer dispatches again
                kind = lay.moe_token_dispatcher
                one = dispatch_seconds(
                    kind,
                    tokens=b.local,
                    h=s.h,
                    k=s.k,
                    cf=s.capacity_factor,
                    experts=s.E,
                    ep=lay.ep,
                    link=self.link(lay.ep, lay.etp),
                    dispatch_bytes=self._dispatch_bytes(kind),
                    groups=self.router_groups[0],
                    group_topk=self.router_groups[1],
                )
                ep_end = (2 + again) * one
                overlap = lay.overlap_moe_expert_parallel_comm or lay.pipeline_schedule in (
                    "dualpipe",
                    "dualpipev",
                )
                ep_s = exposed_dispatch(
                    ep_end,
                    window=e.fwd + e.bwd,
                    overlap=overlap,
                    hide=self.cal.ep_overlap_efficiency,
                )
        return LayerCosts(
            b.tokens,
            b.act_d,
            b.act_e,
            b.work_d,
            b.work_e,
            d.fwd,
            d.bwd,
            d.recompute,
            e.fwd,
            e.bwd,
            e.recompute,
            b.tp_s,
            b.tp_e,
            ep_s,
            b.cp_s,
            b.logits,
            b.logits_bytes,
            b.transient,
            max(ep_s, ep_end),
        )

    def _dispatch_bytes(self, kind: str) -> float | None:
        """Bytes per element of the forward dispatch: FP8 with its 1x128 scales where DeepEP /
        HybridEP run under the blockwise recipe (DeepSeek-V3's: the activations are quantized
        to 1x128 tiles before the dispatch, cost/moe.py), else the combine's BF16 (None):
        with the other recipes the model takes the dispatch in BF16 and the quantization
        after it, in the expert GEMMs."""
        if self.recipe == "blockwise" and kind in ("deepep", "hybridep"):
            return FP8_DISPATCH_BYTES
        return None

    def _layer_base(self, lay: Layout) -> _LayerBase:
        """What `_layer_costs` computes that does not depend on ep or the dispatcher: the
        activations, the dense layer's times, TP and CP traffic, the output layer. Cached on
        `layer_costs`' key less those (the search prices every ep and dispatcher of it)."""
        key = _KEY_LAYER_BASE(lay)
        got = self._layer_bases.get(key)
        if got is None:
            got = self._layer_bases[key] = self._compute_layer_base(lay)
        return got

    def _compute_layer_base(self, lay: Layout) -> _LayerBase:
        s, cal = self.shape, self.cal
        t, cp = lay.tp, lay.cp
        tokens = self.seq * lay.micro_batch_size / cp
        seq_rank = self.seq // cp
        mods = lay.selective_modules
        akw = dict(
            tokens=tokens,
            seq=seq_rank,
            t=t,
            sp=lay.sp,
            flash=self.flash,
            etp=lay.etp,
            recipe=self.recipe,
            fp8_act_input=lay.activation_func_fp8_input_store,
            cache=lay.activation_cache,
        )
        act_d = layer_activation_bytes(s, moe=False, recompute=lay.recompute, modules=mods, **akw)
        work_d = layer_activation_bytes(s, moe=False, recompute="none", **akw)
        act_e = (
            layer_activation_bytes(s, moe=True, recompute=lay.recompute, modules=mods, **akw)
            if s.E
            else 0.0
        )
        work_e = layer_activation_bytes(s, moe=True, recompute="none", **akw) if s.E else 0.0
        ws_d = ws_e = 0.0
        if lay.recompute == "selective":
            ws_d = recompute_working_set(s, moe=False, modules=mods, whole=work_d, **akw)
            ws_e = (
                recompute_working_set(s, moe=True, modules=mods, whole=work_e, **akw)
                if s.E
                else 0.0
            )
        mtp_bytes = (
            mtp_extra_bytes(
                tokens=tokens, h=s.h, t=t, sp=lay.sp, recipe=self.recipe, recompute=lay.recompute
            )
            if s.mtp
            else 0.0
        )

        full = lay.recompute == "full"
        rates = self._rates(lay, tokens)  # [0] and [2] do not depend on ep
        attn_rate = (
            self.bf16
            * cal.attention_efficiency
            * attention_kernel_share(self.job.training.attention_kernel, self.hw.architecture)
        )
        host_d = host_parts(
            moe=False,
            cuda_graphs=lay.cuda_graphs,
            launch_us=cal.launch_overhead_us,
            recipe=self.recipe,
            mla=s.mla,
            q_lora=s.q_lora,
            tp=t,
        )
        kw = dict(
            tokens=tokens,
            seq=self.seq,
            tp=t,
            recompute=lay.recompute,
            gemm_flops_per_s=rates[0],
            modules=mods,
            attn_flops_per_s=attn_rate,
            hbm_bytes_per_s=self.hbm,
            ew_factor=cal.elementwise_bytes_per_activation,
            overhead_s=cal.layer_overhead_us * 1e-6,
        )
        qd = self._quant_bytes(lay, tokens, moe=False)
        d = layer_times(
            s,
            moe=False,
            act_bytes_fwd=work_d,
            freed_bytes=work_d - act_d,
            extra_bytes_fwd=qd[0],
            extra_bytes_bwd=qd[1],
            host=host_d,
            **kw,
        )
        local = tokens / (t if lay.sp else 1)  # tokens a rank routes (SP shards them)
        hide = cal.overlap_efficiency

        tp_s = 0.0
        if t > 1:
            tp_link = self.link(t, 1)
            # op SAC reruns the sequence-parallel all-gathers before the matmuls it recomputes
            # (half of what a full recompute's rerun all-gathers and reduce-scatters move)
            op_sac = op_sac_on(s, mods, moe=bool(s.E))
            tp_s = (4 + 2 * full + op_sac) * all_reduce_time(2.0 * tokens * s.h, t, tp_link)
            if lay.tp_comm_overlap and not tp_link.crosses_network:
                # Transformer Engine's userbuffer overlap needs the TP group in one NVLink domain
                tp_s *= 1.0 - hide
        # an MoE layer gathers and scatters the sequence-parallel tokens for the attention
        # block, and for the expert block only when the experts (etp > 1) or shared experts
        # are tensor-parallel; with etp = 1 the routed tokens travel by all-to-all instead
        tp_e = tp_s if (lay.etp > 1 or s.f_s) else tp_s / 2
        cp_s = 0.0
        if cp > 1:
            cp_link = self.link(cp, t)
            if lay.cp_comm_type in ("p2p", "a2a+p2p"):
                attn_core = tokens * s.attn_core(self.seq) / t / attn_rate
                ring = cp_ring_time(2.0 * tokens * 2 * s.g * s.d / t, cp, cp_link)
                cp_s = (3 + full) * exposed_time(ring, attn_core, hide)
            else:
                a2a = all_to_all_time(2.0 * tokens * (2 * s.q + 2 * s.g * s.d) / t, cp, cp_link)
                cp_s = 2 * a2a * (1.5 if full else 1.0)
        vocab = padded_vocab(s.V, t)
        loss = dict(cross_entropy=self.cross_entropy, loss_parallel=self.loss_parallel)
        logits = logits_time(
            tokens=tokens,
            h=s.h,
            vocab=vocab,
            tp=t,
            flops_per_s=rates[2],
            hbm_bytes_per_s=self.hbm,
            **loss,
        )
        logits_bytes = loss_bytes(tokens=tokens, vocab=vocab, h=s.h, t=t, sp=lay.sp, **loss)
        transient = 4.0 * tokens * s.h if t > 1 and lay.sp else 0.0
        return _LayerBase(
            tokens,
            act_d,
            act_e,
            work_d,
            work_e,
            full,
            mods,
            kw,
            d,
            local,
            tp_s,
            tp_e,
            cp_s,
            logits,
            logits_bytes,
            transient,
            mtp_bytes,
            ws_d,
            ws_e,
        )

    def _moe_layer(self, lay: Layout, b: _LayerBase) -> LayerTimes:
        """The MoE layer's times (LayerTimes), which depend on ep and the all-to-all overlap
        but not on the dispatcher: cached on `_layer_base`'s key and those two."""
        overlap = lay.overlap_moe_expert_parallel_comm
        key = _KEY_MOE_LAYER(lay)
        got = self._moe_layers.get(key)
        if got is not None:
            return cast(LayerTimes, got)
        s, cal = self.shape, self.cal
        tokens, t = b.tokens, lay.tp
        rates = self._rates(lay, tokens)
        copies = tokens / t * s.k * s.capacity_factor * lay.etp  # expert rows per GPU
        qe = self._quant_bytes(lay, tokens, moe=True)
        # element-wise traffic of the routed rows, counted per kernel rather than through
        # c_ew: permute + unpermute read and write h each; the activation reads the fc1
        # output and writes its result (6 f_e gated, 4 f_e gelu; backward 10 and 6)
        fc1_w = 4.0 if s.gated else 2.0
        per_row = copies / lay.etp * s.f_e
        routed_f = 8.0 * s.h * copies + (fc1_w + 2.0) * per_row
        routed_b = 8.0 * s.h * copies + (2.0 * fc1_w + 2.0) * per_row
        kept = b.work_e - routed_activation_bytes(
            s,
            tokens=tokens,
            t=t,
            sp=lay.sp,
            etp=lay.etp,
            recipe=self.recipe,
            fp8_act_input=lay.activation_func_fp8_input_store,
            cache=lay.activation_cache,
        )
        mode = host_mode(
            moe=True,
            cuda_graphs=lay.cuda_graphs,
            ep_overlap=overlap and lay.ep > 1,
            padded=lay.moe_pad_expert_input_to_capacity,
        )
        got = self._moe_layers[key] = layer_times(
            s,
            moe=True,
            act_bytes_fwd=kept,
            freed_bytes=b.work_e - b.act_e,
            expert_flops_per_s=rates[1],
            copies=copies,
            extra_bytes_fwd=qe[0] + routed_f,
            extra_bytes_bwd=qe[1] + routed_b,
            host=host_parts(
                moe=True,
                cuda_graphs=lay.cuda_graphs,
                launch_us=cal.launch_overhead_us,
                local_experts=max(1, s.E // lay.ep),
                recipe=self.recipe,
                padded=lay.moe_pad_expert_input_to_capacity,
                mla=s.mla,
                q_lora=s.q_lora,
                tp=t,
                shared=s.f_s > 0,
            ),
            host_mode=mode,
            launch_s=cal.launch_overhead_us * 1e-6,
            router_s=b.local * router_flops(s.h, s.E) / rates[2],
            **b.kw,
        )
        return got

    def _rates(self, lay: Layout, tokens: float) -> tuple[float, float, float]:
        """FLOP/s of (the TP-sharded projections, the routed experts' grouped GEMMs, the
        BF16 output layer): peak x efficiency (precision.py) x the size factor n/(n + n_half)
        of `gemm_efficiency`, 1/n = tp/h + 1/tokens, or for an expert etp/f_e + 1/n_e, times
        n_e over the rows its tiles compute (moe.tile_padded_tokens)."""
        s, cal = self.shape, self.cal
        size = gemm_efficiency(
            eff_max=1.0, half_size=cal.matmul_half_size, tp=lay.tp, h=s.h, tokens=tokens
        )
        lin = (
            linear_peak(self.hw, self.recipe) if self.recipe else self.peak * cal.matmul_efficiency
        )
        expert = lin * size
        if s.E:
            n_e = expert_tokens(
                tokens=tokens / lay.tp * lay.etp,
                ep=lay.ep,
                k=s.k,
                cf=s.capacity_factor,
                experts=s.E,
            )
            # the grouped GEMM computes each expert's rows in whole tiles (moe.tile_padded_tokens);
            # padded to the capacity, exactly ep·etp·ceil(T·k·cf/E) rows (Megatron's get_capacity)
            padded = lay.moe_pad_expert_input_to_capacity
            rows = (
                lay.ep * lay.etp * ceil(tokens / lay.tp * s.k * s.capacity_factor / s.E - 1e-9)
                if padded
                else n_e
            )
            expert = (
                lin
                * gemm_efficiency(
                    eff_max=1.0, half_size=cal.matmul_half_size, tp=lay.etp, h=s.f_e, tokens=rows
                )
                * n_e
                / tile_padded_tokens(rows, padded=padded)
            )
        return lin * size, expert, self.bf16 * cal.matmul_efficiency * size

    def _quant_bytes(self, lay: Layout, tokens: float, *, moe: bool) -> tuple[float, float]:
        """HBM bytes of FP8 quantization per layer and micro-batch, (forward, backward)."""
        if self.recipe is None:
            return 0.0, 0.0
        q = quantize_bytes(self.recipe, self.hw.architecture)
        f_tp, b_tp, f_r, b_r = quantized_elements(self.shape, moe=moe, etp=lay.etp)
        per = tokens / lay.tp
        return q * per * (f_tp + f_r), q * per * (b_tp + b_r)

    # ------------------------------------------------------------------ stages
    def stages(self, lay: Layout) -> list[Stage]:
        """The pipeline ranks as groups of identical ones (first, middle, last; or the groups
        of a custom `pipeline_model_parallel_layout`)."""
        key = _KEY_STAGES(lay)
        got = self._stages.get(key)
        if got is None:
            got = self._stage_list(lay)
            if lay.pipeline_schedule == "dualpipe" and lay.pp > 1:
                got = dualpipe_ranks(got, lay.pp)
            self._stages[key] = got
        return got

    def _moe_in(self, layers: float, start: float) -> float:
        """MoE layers among `layers` layers from global layer index `start` on."""
        if not self.shape.E:
            return 0.0
        return self.shape.moe_between(start, layers)

    def _moe_middle(self, first_n: float, mid_n: float, count: int) -> float:
        """MoE layers of the middle rank that holds the most of them: the first middle rank
        when the dense layers come first (as before the layer pattern), the most loaded one
        of an interleaved pattern (`moe_layer_freq`)."""
        if self.shape.moe_prefix is None or not self.shape.E:
            return self._moe_in(mid_n, first_n)
        return max(self._moe_in(mid_n, first_n + r * mid_n) for r in range(max(1, count)))

    def _stage_list(self, lay: Layout) -> list[Stage]:
        s = self.shape
        p = lay.pp
        if lay.pipeline_model_parallel_layout:
            return self._custom_stages(lay)
        first_n, mid_n, last_n = stage_layer_counts(s.L, lay)
        if p == 1:
            return [Stage("first", 0, 1, s.L, float(s.L_moe), True, True, s.mtp)]
        out = [Stage("first", 0, 1, first_n, self._moe_in(first_n, 0), True, False, 0)]
        if p > 2:
            out.append(
                Stage(
                    "middle",
                    1,
                    p - 2,
                    mid_n,
                    self._moe_middle(first_n, mid_n, p - 2),
                    False,
                    False,
                    0,
                )
            )
        out.append(
            Stage("last", p - 1, 1, last_n, self._moe_in(last_n, s.L - last_n), False, True, s.mtp)
        )
        return out

    def _custom_stages(self, lay: Layout) -> list[Stage]:
        """Per rank from the layout string; consecutive identical ranks grouped (the lowest
        rank of a group holds the most micro-batches in flight, so it stands for them)."""
        stages = parse_layout(lay.pipeline_model_parallel_layout or "")
        p = lay.pp
        # global index of each stage's first decoder layer (stages are in layer order)
        starts, n = [], 0
        for st in stages:
            starts.append(n)
            n += st.count("t")
        out: list[Stage] = []
        prev = None
        for rs in rank_stages(stages, p):
            idx = [v * p + rs.rank for v in range(len(stages) // p)]
            moe = sum(self._moe_in(stages[i].count("t"), starts[i]) for i in idx)
            sig = (rs.layers, moe, rs.embedding, rs.loss, rs.mtp)
            if prev is not None and prev[0] == sig:
                g = out[-1]
                out[-1] = g._replace(count=g.count + 1)
                continue
            name = "first" if rs.rank == 0 else "last" if rs.rank == p - 1 else f"rank {rs.rank}"
            out.append(
                Stage(name, rs.rank, 1, float(rs.layers), moe, rs.embedding, rs.loss, rs.mtp)
            )
            prev = (sig,)
        return out

    def stage_states(self, lay: Layout, zero: int) -> tuple[Any, ...]:
        """(transient bytes, [(stage, weights, gradients, optimizer bytes)] per stage group).
        Cached: it does not depend on the micro-batch, vpp, sp or recompute."""
        key = (_KEY_STATES(lay), zero)
        got = self._states.get(key)
        if got is not None:
            return cast(tuple[Any, ...], got)
        s = self.shape
        vocab = padded_vocab(s.V, lay.tp)
        dt = self.dtypes(lay)
        stages = []
        for st in self.stages(lay):
            dense_p, linear_p, expert_p = stage_params(
                s,
                layers=st.layers,
                moe_layers=st.moe_layers,
                t=lay.tp,
                with_embedding=st.embedding,
                with_output=st.output,
                vocab=vocab,
                mtp=st.mtp,
            )
            w, g, o = state_bytes(
                dense_params=dense_p,
                linear_params=linear_p,
                expert_params=expert_p / (lay.ep * lay.etp),
                zero=zero,
                shard=lay.optimizer_shard,
                expert_shard=lay.edp,
                dtypes=dt,
            )
            stages.append((st, w, g, o))  # a DualPipe rank's two stages: `dualpipe_ranks`
        gather = 0.0
        if zero == 3:
            # FSDP: the gathered (unsharded) layer and the prefetched next one, and the
            # unsharded gradients of the layer being reduce-scattered
            dense = s.dense_tp / lay.tp + s.dense_rep
            moe = s.moe_tp / lay.tp + s.moe_rep + s.moe_experts / (lay.ep * lay.etp) if s.E else 0.0
            w_gather = 1.0 if self.fp8_param_gather else 2.0
            gather = (2 * w_gather + dt.grad) * max(dense, moe)
        got = self._states[key] = (gather, stages)
        return got

    # ------------------------------------------------------------------ memory
    def memory(self, lay: Layout, *, zero: int | None = None) -> MemoryBreakdown:
        """The most loaded rank's memory (first, a middle or the last pipeline rank)."""
        total, w, g, o, acts, other, name = self._worst_rank(
            lay, lay.zero if zero is None else zero
        )
        return MemoryBreakdown(w, g, o, acts, other, self.capacity, name)

    def memory_total(self, lay: Layout) -> float:
        """`memory(lay).total` without building the breakdown (the search's hot path)."""
        return cast(float, self._worst_rank(lay, lay.zero)[0])

    def _recompute_share(self, lay: Layout, layers: float) -> float:
        """Fraction of a stage's layers that recompute in full: 1 for recompute full (or
        `recompute_num_layers` of each virtual stage's layers/vpp), else 0."""
        if lay.recompute != "full":
            return 0.0
        n = lay.recompute_num_layers
        if n is None or not layers:
            return 1.0
        chunk = layers / lay.vpp
        return min(1.0, n / chunk) if chunk else 1.0

    def _stage_activations(
        self, lay: Layout, ac: tuple[Any, ...], st: Stage, m: int, rank: int | None = None
    ) -> float:
        """Activation bytes a rank of this stage group holds at its peak (`ac`: act_costs);
        the group's lowest rank (which holds the most micro-batches in flight) unless
        `rank` is given."""
        act_d, act_e, work_d, work_e, logits_bytes, _, mtp_bytes, ws_d, ws_e = ac
        layers = st.layers + st.mtp
        if not layers:
            return logits_bytes * (1 + st.mtp) if st.output else 0.0
        moe = st.moe_layers + (st.mtp if self.shape.E else 0)
        if lay.recompute == "full":
            r = self._recompute_share(lay, st.layers * st.share)
            kept_d, kept_e = r * act_d + (1 - r) * work_d, r * act_e + (1 - r) * work_e
        else:  # the search's hot path: no share to take
            r, kept_d, kept_e = 0.0, act_d, act_e
        per_layer = ((layers - moe) * kept_d + moe * kept_e) / layers
        held = in_flight_layers(layers, lay.pp, lay.vpp, m, st.rank if rank is None else rank)
        if lay.pipeline_schedule in ("dualpipe", "dualpipev") and lay.pp > 1:
            # pp + 1 micro-batches of one stage's activations (DualPipeV: 2pp + 1 of half one);
            # a DualPipe rank's two stages (share 1/2) hold (pp + 1)/2 each
            p = lay.pp * (2 if lay.pipeline_schedule == "dualpipev" else 1)
            held = (
                min(m, activations_in_flight(lay.pipeline_schedule, p=p))
                * layers
                * st.share
                * lay.pp
                / p
            )
        if lay.cpu_offloading_num_layers:
            # offloaded layers leave the GPU: Transformer Engine's offload synchronizer
            # (cpu_offload.py) documents a peak of (L - N) layers
            held = max(0.0, held - min(lay.cpu_offloading_num_layers, layers))
        acts = per_layer * held
        if st.mtp:  # what an MTP layer keeps beside its layer, per micro-batch it holds
            acts += st.mtp * mtp_bytes * held / layers
        logits = logits_bytes * (1 + st.mtp) if st.output else 0.0  # each MTP layer: a loss
        if r >= 1.0:
            # the working set of a recomputed layer; with block recompute (some layers keep
            # theirs) the layers backwarded before it have freed more than it needs. The loss
            # backward frees the logits before the last layer recomputes: the larger counts
            acts += max(work_e if moe else work_d, logits)
        elif lay.recompute == "selective":
            # the first backward reruns the last layer's checkpointed module on top of what
            # the rank holds (recompute_working_set), after the loss backward freed the logits
            acts += max(ws_e if moe else ws_d, logits)
        else:
            acts += logits
        return cast(float, acts)

    def memory_by_rank(self, lay: Layout) -> list[MemoryBreakdown]:
        """Every pipeline rank's memory, rank 0 first (the pictures' memory bars): the same
        arithmetic as `memory`, each rank with its own micro-batches in flight."""
        ac = self.act_costs(lay)
        m = self.gbs // (lay.micro_batch_size * lay.dp) or 1
        gather, stages = self.stage_states(lay, lay.zero)
        transient = ac[5] + gather
        out = []
        for st, w, g, o in stages:
            for r in range(st.rank, st.rank + st.count):
                acts = self._stage_activations(lay, ac, st, m, rank=r)
                tensors = w + g + o + acts
                out.append(
                    MemoryBreakdown(
                        w,
                        g,
                        o,
                        acts,
                        self.fixed + self.frag * tensors + transient,
                        self.capacity,
                        st.name,
                    )
                )
        return out

    def act_vector(self, lay: Layout) -> tuple[tuple[float, ...], float]:
        """(activation bytes of each stage group's most loaded rank, in `stages` order; the
        TP/SP gather buffer): the activation side of `_worst_rank`. Cached on every field it
        reads: not ep, ZeRO or the state dtypes, dp only through m."""
        m = self.gbs // (lay.micro_batch_size * lay.dp) or 1
        key = (_KEY_ACT_VECTOR(lay), m)
        got = self._act_vectors.get(key)
        if got is None:
            ac = self.act_costs(lay)
            got = self._act_vectors[key] = (
                tuple(self._stage_activations(lay, ac, st, m) for st in self.stages(lay)),
                ac[5],
            )
        return got

    def worst_total(self, sums: tuple[Any, ...], acts: tuple[Any, ...]) -> float:
        """The most loaded rank's total bytes from `state_sums` and `act_vector` (what
        `memory_total` returns, the same arithmetic as `_worst`; the search's hot path calls
        it with both looked up once)."""
        gather, per_rank = sums
        per_stage, transient = acts
        transient += gather
        fixed, scale = self.fixed, 1.0 + self.frag
        best = -1.0
        for states, a in zip(per_rank, per_stage):
            total = (states + a) * scale + fixed + transient
            if total > best:
                best = total
        return best

    def state_sums(self, states: tuple[Any, ...]) -> tuple[float, tuple[float, ...]]:
        """`stage_states` as `worst_total` takes it: (transient bytes, weights + gradients +
        optimizer bytes of each stage group), summed in `_worst`'s order."""
        gather, stages = states
        return gather, tuple(w + g + o for _, w, g, o in stages)

    def _worst(self, states: tuple[Any, ...], acts: tuple[Any, ...]) -> tuple[int, float]:
        """(index of the most loaded stage group, its total bytes): the first of the
        largest."""
        gather, stages = states
        per_stage, transient = acts
        transient += gather
        fixed, frag = self.fixed, self.frag
        best, best_total = 0, -1.0
        for i, (_, w, g, o) in enumerate(stages):
            total = (w + g + o + per_stage[i]) * (1.0 + frag) + fixed + transient
            if total > best_total:
                best, best_total = i, total
        return best, best_total

    def _worst_rank(self, lay: Layout, zero: int) -> tuple[Any, ...]:
        states, acts = self.stage_states(lay, zero), self.act_vector(lay)
        i, total = self._worst(states, acts)
        st, w, g, o = states[1][i]
        a, transient = acts[0][i], acts[1] + states[0]
        return total, w, g, o, a, self.fixed + self.frag * (w + g + o + a) + transient, st.name

    def zero3_no_worse_than_2(self, lay: Layout) -> bool:
        """ZeRO-3 needs no more memory than ZeRO-2 on every pipeline rank of this layout (any
        micro-batch or recompute): the weights it shards save at least its gather buffers."""
        g3, st3 = self.stage_states(lay, 3)
        g2, st2 = self.stage_states(lay, 2)
        return all(
            (a[1] + a[2] + a[3]) * (1.0 + self.frag) + g3
            <= (b[1] + b[2] + b[3]) * (1.0 + self.frag) + g2
            for a, b in zip(st3, st2)
        )

    # ------------------------------------------------------------------ time
    def _stage_parts(
        self, lay: Layout, lc: LayerCosts, st: Stage, m: int | None = None
    ) -> tuple[Any, ...]:
        """(compute, TP, EP, CP exposed) seconds per micro-batch on a rank of this group. With
        `m` the EP part counts the unpaired micro-batches at the schedule's ends in full
        (moe.unpaired_share); without it only the paired law. The search's lower bound
        passes the most micro-batches any dp gives (dp 1), the smallest unpaired share."""
        s = self.shape
        mtp_moe = st.mtp if s.E else 0
        dl = st.layers - st.moe_layers + (st.mtp - mtp_moe)
        el = st.moe_layers + mtp_moe
        r = self._recompute_share(lay, st.layers * st.share) if lay.recompute == "full" else 1.0
        compute = (
            dl * (lc.fwd_d + lc.bwd_d + r * lc.rec_d)
            + el * (lc.fwd_e + lc.bwd_e + r * lc.rec_e)
            + (lc.logits * (1 + st.mtp) if st.output else 0.0)
        )
        ep = lc.ep
        if m is not None and lc.ep_end > ep:
            u = unpaired_share(lay.pipeline_schedule, p=lay.pp, rank=st.rank, m=m)
            ep += u * (lc.ep_end - ep)
        k = st.share  # a DualPipe rank: each of its stages runs half the micro-batches
        return k * compute, k * (dl * lc.tp + el * lc.tp_e), k * el * ep, k * (dl + el) * lc.cp

    def time_lower_bound(self, lay: Layout, *, with_ep: bool = True) -> float:
        """A cheap bound below `time(lay).step_time_s`, the same for every ZeRO stage.

        With t_i the stages' micro-batch times and t̄ their mean, the pipeline takes
        m·t_max + (Σt_i − t_max)/v = t_max·(m − 1/v) + p·t̄/v ≥ t̄·(m + (p−1)/v); DP traffic
        and the optimizer only add. t̄ counts compute and the TP/EP/CP traffic per layer. Lets
        the search time only the layouts that can make the top K. `with_ep=False` leaves the
        EP traffic out: a bound for every dispatcher of the layout at once.
        """
        return self.scale_bound(
            self.bound_sum(lay, with_ep=with_ep),
            lay.pp,
            lay.vpp,
            lay.dp,
            lay.micro_batch_size,
            self.bound_ends(lay) if with_ep else (),
        )

    def bound_sum(self, lay: Layout, *, with_ep: bool = True) -> float:
        """Σ_i t_i of `time_lower_bound`: one micro-batch's compute and TP/EP/CP time summed
        over the pipeline ranks. It does not read dp or ZeRO (nor vpp without block
        recompute). Not cached here: the search keeps the least over the dispatchers on a
        key of its own (planner.search.walk._least_bound_sum)."""
        lc = self.layer_costs(lay)
        total = 0.0
        for st in self.stages(lay):
            c, tp, ep, cp = self._stage_parts(lay, lc, st)
            total += st.count * (c + tp + cp + (ep if with_ep else 0.0))
        return total

    def bound_ends(self, lay: Layout) -> tuple[tuple[int, int, float], ...]:
        """The unpaired micro-batches' EP traffic `bound_sum` leaves out, per stage group:
        (first rank, ranks, extra seconds per unpaired micro-batch on each), for
        `scale_bound` to add Σ_r min(m, w_r)·Δ_r / p (moe.unpaired_share's w). Empty
        without EP overlap. It reads what `bound_sum` reads."""
        lc = self.layer_costs(lay)
        if lc.ep_end <= lc.ep:
            return ()
        delta = lc.ep_end - lc.ep
        mtp = 1 if self.shape.E else 0
        return tuple(
            (st.rank, st.count, st.share * (st.moe_layers + mtp * st.mtp) * delta)
            for st in self.stages(lay)
        )

    def bound_parts(self, lay: Layout) -> tuple[float, tuple[tuple[int, int, float], ...]]:
        """(`bound_sum(lay)`, `bound_ends(lay)`), the same numbers from one look-up of the
        layer costs and the stages (the search's bound takes both of every layout it
        bounds)."""
        lc = self.layer_costs(lay)
        stages = self.stages(lay)
        total = 0.0
        for st in stages:
            c, tp, ep, cp = self._stage_parts(lay, lc, st)
            total += st.count * (c + tp + cp + ep)
        if lc.ep_end <= lc.ep:
            return total, ()
        delta = lc.ep_end - lc.ep
        mtp = 1 if self.shape.E else 0
        return total, tuple(
            (st.rank, st.count, st.share * (st.moe_layers + mtp * st.mtp) * delta) for st in stages
        )

    def scale_bound(
        self,
        total: float,
        pp: int,
        vpp: int,
        dp: int,
        mbs: int,
        ends: tuple[tuple[int, int, float], ...] = (),
    ) -> float:
        """`time_lower_bound` from its `bound_sum`: t̄·(m + (p−1)/v) with t̄ = Σt_i / p, plus
        the unpaired micro-batches' EP traffic `ends` (`bound_ends`): Σ_r min(m, p−r)·Δ_r / p
        (m·t̄ holds m·u_r·Δ_r = min(m, w_r)·Δ_r of each rank's). Increasing in `total` and in
        each Δ, so the least bound over layouts that differ only in what `bound_sum` reads is
        this of the least sum and the least Δs."""
        m = self.gbs // (mbs * dp) or 1
        extra = 0.0
        for rank, count, delta in ends:
            extra += delta * sum(min(m, pp - r) for r in range(rank, rank + count))
        return total / pp * (m + (pp - 1) / vpp) + extra / pp

    def _first_rank_params(self, lay: Layout, first: Stage) -> tuple[float, float, float]:
        """(dense, of which linear, expert) parameters on a first-stage rank (experts already
        / ep*etp)."""
        key = _KEY_FIRST_PARAMS(lay)
        got = self._first_params.get(key)
        if got is None:
            dense_p, linear_p, expert_p = stage_params(
                self.shape,
                layers=first.layers,
                moe_layers=first.moe_layers,
                t=lay.tp,
                with_embedding=first.embedding,
                with_output=first.output,
                vocab=padded_vocab(self.shape.V, lay.tp),
                mtp=first.mtp,
            )
            got = self._first_params[key] = (  # DualPipe: both stages (`dualpipe_ranks`)
                dense_p,
                linear_p,
                expert_p / (lay.ep * lay.etp),
            )
        return got

    def _offload_exposed(self, lay: Layout, lc: LayerCosts, st: Stage) -> float:
        """Seconds per micro-batch the activation offload copies add: the offloaded layers'
        bytes go to the host in forward and come back in backward over the host link,
        overlapped with the other layers' compute (a fraction `overlap_efficiency`)."""
        off = min(lay.cpu_offloading_num_layers, st.layers)
        if not off:
            return 0.0
        moe = st.moe_layers / st.layers if st.layers else 0.0
        per_layer = moe * lc.act_e + (1 - moe) * lc.act_d
        copy = off * per_layer / self.host
        fwd = st.layers * (moe * lc.fwd_e + (1 - moe) * lc.fwd_d)
        bwd = st.layers * (moe * lc.bwd_e + (1 - moe) * lc.bwd_d)
        hide = self.cal.overlap_efficiency
        return cast(float, max(0.0, copy - hide * fwd) + max(0.0, copy - hide * bwd))

    def _pp_seconds(self, lay: Layout, lc: LayerCosts) -> float:
        """Exposed point-to-point seconds per micro-batch on a stage (activations in,
        gradients back, v times when interleaved, partly hidden then)."""
        if lay.pp <= 1:
            return 0.0
        pp_s = (
            2
            * lay.vpp
            * p2p_time(
                2.0 * lc.tokens * self.shape.h / lay.tp, self.link(2, lay.tp * lay.cp * lay.dp)
            )
        )
        return pp_s * (1.0 - self.cal.overlap_efficiency) if lay.vpp > 1 else pp_s

    def stage_times(self, lay: Layout) -> list[tuple[float, float, float]]:
        """Every pipeline rank's (forward, backward, recompute) seconds per micro-batch, rank
        0 first, as the step time counts them: backward includes recompute; the exposed
        TP/EP/CP/PP communication, offload copies and the output layer are split between
        forward and backward in the ratio of their compute. `pipeline_time` of their sums
        (with m and vpp) is `time(lay)`'s pipeline part; the schedule picture is built from
        them."""
        lc = self.layer_costs(lay)
        pp_s = self._pp_seconds(lay, lc)
        m = max(1, lay.num_microbatches(self.gbs))
        out = []
        for st in self.stages(lay):
            compute, tp_s, ep_s, cp_s = self._stage_parts(lay, lc, st, m)
            total = max(
                0.0, compute + self._offload_exposed(lay, lc, st) + tp_s + ep_s + cp_s + pp_s
            )
            fwd, bwd, rec = self._stage_work(lay, lc, st)
            work = fwd + bwd + rec
            f = total * fwd / work if work else total / 3
            out += [(f, total - f, total * rec / work if work else 0.0)] * st.count
        return out

    def _stage_work(self, lay: Layout, lc: LayerCosts, st: Stage) -> tuple[float, float, float]:
        """(forward, backward, recompute) compute seconds of one micro-batch on this stage."""
        mtp_moe = st.mtp if self.shape.E else 0
        dl = st.layers - st.moe_layers + (st.mtp - mtp_moe)
        el = st.moe_layers + mtp_moe
        r = self._recompute_share(lay, st.layers * st.share) if lay.recompute == "full" else 1.0
        k = st.share
        return (
            k * (dl * lc.fwd_d + el * lc.fwd_e),
            k * (dl * lc.bwd_d + el * lc.bwd_e),
            k * r * (dl * lc.rec_d + el * lc.rec_e),
        )

    def _pipeline(self, lay: Layout) -> tuple[Any, ...]:
        """(m, pipeline seconds, the slowest rank's total and its (compute, TP, EP, CP)
        parts, PP seconds, the first stage, its forward and backward compute windows)."""
        lc = self.layer_costs(lay)
        m = max(1, lay.num_microbatches(self.gbs))
        pp_s = self._pp_seconds(lay, lc)
        totals, groups = [], []  # per rank; per stage group (its ranks' total, parts)
        stage_list = self.stages(lay)
        works = []
        dual = lay.pipeline_schedule in ("dualpipe", "dualpipev") and lay.pp > 1
        for st in stage_list:
            compute, tp_s, ep_s, cp_s = self._stage_parts(lay, lc, st, m)
            compute += self._offload_exposed(lay, lc, st)
            # an invalid split (layers-divisible) can leave a stage a negative layer count:
            # it does no work, it does not run backwards in time (bubble_s >= 0)
            total = max(0.0, compute + tp_s + ep_s + cp_s + pp_s)
            totals += [total] * st.count
            groups.append((total, (compute, tp_s, ep_s, cp_s)))
            if dual:
                works.append(self._stage_work(lay, lc, st))
        first = stage_list[0]
        f_moe = first.moe_layers
        first_fwd = (first.layers - f_moe) * lc.fwd_d + f_moe * lc.fwd_e
        first_bwd = (first.layers - f_moe) * lc.bwd_d + f_moe * lc.bwd_e
        # the slowest rank (the first of them): the groups hold consecutive ranks in order
        slow = max(range(len(groups)), key=lambda i: groups[i][0])
        t_slow, parts = groups[slow]
        if dual:
            pipe = m * t_slow + self._dualpipe_bubble(lay, t_slow, works[slow])
        else:
            pipe = pipeline_time(totals, m=m, v=lay.vpp)
        return m, pipe, t_slow, parts, pp_s, first, first_fwd, first_bwd

    @staticmethod
    def _dualpipe_bubble(lay: Layout, total: float, work: tuple[float, float, float]) -> float:
        """DualPipe's (pp/2-1)(F&B + B - 3W) (pipeline.schedule_bubble) of the slowest rank:
        its micro-batch time `total` split into F and B in the ratio of its compute, W half
        of the backward without recompute (the weight-gradient GEMMs match the input-gradient
        ones), F&B = F + B. DualPipeV's chunks are half a rank's layers, on 2·pp stages."""
        fwd, bwd, rec = work
        all_ = fwd + bwd + rec
        f = total * fwd / all_ if all_ else total / 3
        b, w = total - f, (total * bwd / all_ / 2 if all_ else total / 3)
        if lay.pipeline_schedule == "dualpipev":
            return schedule_bubble("dualpipev", p=2 * lay.pp, f=f / 2, b=b / 2, w=w / 2)
        return schedule_bubble("dualpipe", p=lay.pp, f=f, b=b, w=w)

    def _dp_and_optimizer(
        self, lay: Layout, m: int, first: Stage, first_fwd: float, first_bwd: float
    ) -> tuple[float, tuple[float, float, float]]:
        """(exposed DP seconds, (Adam update, gradient clipping, per-step overhead) seconds)
        of a step."""
        dt = self.dtypes(lay)
        dense_p, linear_p, expert_p = self._first_rank_params(lay, first)
        # the distributed optimizer gathers FP8 weights with fp8_param_gather (1 byte)
        gather_bytes = 2.0
        if self.fp8_param_gather and dense_p + expert_p:
            gather_bytes = (2.0 * (dense_p - linear_p) + linear_p + expert_p) / (dense_p + expert_p)
        dp_s = dp_exposed(
            zero=lay.zero,
            m=m,
            dense_params=dense_p,
            expert_params=expert_p,
            dp_link=self.link(lay.dp * lay.cp, lay.tp),
            dp_size=lay.dp * lay.cp,
            edp_link=self.link(lay.edp, lay.etp * lay.ep),
            edp_size=lay.edp,
            grad_bytes=dt.grad,
            param_bytes=gather_bytes,
            window_fwd=first_fwd,
            window_bwd=first_bwd,
            hide=self.cal.overlap_efficiency,
            overlap_grad_reduce=lay.overlap_grad_reduce,
            overlap_param_gather=lay.overlap_param_gather,
            units=max(1, round(first.layers)),
        )
        shard = lay.optimizer_shard if lay.zero >= 1 else 1
        eshard = lay.edp if lay.zero >= 1 else 1
        # the optimizer works on fp32 main gradients where the gradients are fp16 (`state_dtypes`)
        grad = 4.0 if self.precision == "fp16" else dt.grad
        update, clip = optimizer_times(
            params=dense_p / shard + expert_p / eshard,
            hbm_bytes_per_s=self.hbm,
            grad=grad,
            exp_avg=2.0 if lay.exp_avg_dtype == "bf16" else 4.0,
            exp_avg_sq=2.0 if lay.exp_avg_sq_dtype == "bf16" else 4.0,
        )
        return dp_s, (update, clip, self.cal.step_overhead_ms * 1e-3)

    def _parts(
        self, lay: Layout
    ) -> tuple[tuple[Any, ...], tuple[float, tuple[float, float, float]]]:
        """(`_pipeline`, `_dp_and_optimizer`) of the layout. The pipeline part does not read
        ZeRO, the state dtypes or the DP overlap settings: it is cached on every other field
        (its key: the layout table's fields that read "pipeline"). The DP and optimizer part reads the layer costs only through the first stage's
        forward and backward compute windows: it is cached on those and every field but the
        ones it reads only through them (the fields that read "dp"). The search's ZeRO stages,
        dispatchers and savers of one layout share them."""
        key = _PIPE_FIELDS(lay)
        pipe = self._pipes.get(key)
        if pipe is None:
            pipe = self._pipes[key] = self._pipeline(lay)
        key = (_DP_FIELDS(lay), pipe[6], pipe[7])
        got = self._dp_opt.get(key)
        if got is None:
            got = self._dp_opt[key] = self._dp_and_optimizer(lay, pipe[0], *pipe[5:])
        return pipe, got

    def pipeline_seconds(self, lay: Layout) -> float:
        """The pipeline part of `step_seconds`, no more than it (DP and optimizer add)."""
        key = _PIPE_FIELDS(lay)
        pipe = self._pipes.get(key)
        if pipe is None:
            pipe = self._pipes[key] = self._pipeline(lay)
        return cast(float, pipe[1])

    def step_seconds(self, lay: Layout) -> float:
        """`time(lay).step_time_s`, without the rest of the breakdown (the search compares
        the dispatchers and ranks contenders by it)."""
        pipe, (dp_s, opt) = self._parts(lay)
        return cast(float, pipe[1] + dp_s + sum(opt))

    def time(self, lay: Layout) -> StepTime:
        s = self.shape
        pipe, (dp_s, opt) = self._parts(lay)
        opt_s = sum(opt)
        m, pipe_s, t_slow, (c, tp_s, ep_s, cp_s), pp_s = pipe[:5]
        p, v = lay.pp, lay.vpp
        step = pipe_s + dp_s + opt_s
        world = lay.world_size
        tokens = self.gbs * self.seq
        F = self.model_flops
        H = self._hardware_flops.get(lay.recompute)
        if H is None:
            H = self._hardware_flops[lay.recompute] = hardware_flops_per_step(
                s, seq=self.seq, global_batch_size=self.gbs, recompute=lay.recompute
            )
        return StepTime(
            step_time_s=step,
            compute_s=m * c,
            bubble_s=max(0.0, pipe_s - m * t_slow),
            tp_comm_s=m * tp_s,
            pp_comm_s=m * (pp_s if p > 1 else 0.0),
            dp_comm_s=dp_s,
            ep_comm_s=m * ep_s,
            cp_comm_s=m * cp_s,
            optimizer_s=opt_s,
            optimizer_update_s=opt[0],
            grad_clip_s=opt[1],
            step_overhead_s=opt[2],
            bubble_fraction=bubble_fraction(p, m, v, lay.pipeline_schedule),
            tokens_per_s=tokens / step,
            tokens_per_s_per_gpu=tokens / step / world,
            model_tflops_per_gpu=F / step / world / 1e12,
            mfu=F / (step * world * self.peak),
            hfu=H / (step * world * self.peak),
            model_flops=F,
            num_gpus=world,
        )

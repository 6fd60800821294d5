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

from planner.cost.comm import (all_reduce_time, all_to_all_time, group_link, p2p_time)
from planner.cost.compute import (gemm_efficiency, hardware_flops_per_step, layer_times,
                                  logits_time, model_flops_per_step)
from planner.cost.memory import (MemoryBreakdown, in_flight_layers, layer_activation_bytes,
                                 stage_params, state_bytes)
from planner.cost.params import padded_vocab
from planner.cost.pipeline import bubble_fraction, pipeline_time
from planner.cost.shape import ModelShape, model_shape
from planner.cost.step import OPTIMIZER_BYTES_PER_PARAM, StepTime, dp_exposed
from planner.layout import Layout, stage_layer_counts
from planner.units import GiB

__all__ = ["CostModel", "LayerCosts"]


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """Per layer and micro-batch on one GPU (seconds, bytes); d = dense layer, e = MoE layer."""

    tokens: float
    act_d: float          # stored activations (with the layout's recompute)
    act_e: float
    work_d: float         # one layer's full activations (the recompute working set)
    work_e: float
    fwd_d: float
    bwd_d: float
    rec_d: float
    fwd_e: float
    bwd_e: float
    rec_e: float
    tp: float             # exposed TP communication per dense layer (fwd + bwd + recompute)
    tp_e: float           # ... per MoE layer (the expert block needs none when etp = 1)
    ep: float             # exposed EP all-to-all per MoE layer
    cp: float             # exposed CP communication per layer
    logits: float         # output layer + loss, fwd + bwd
    logits_bytes: float   # fp32 logits + final norm output
    transient: float      # TP/SP all-gather buffer


class CostModel:
    """Memory and time of layouts for one job (model, hardware, training)."""

    def __init__(self, job, shape: ModelShape | None = None):
        self.job = job
        self.shape = shape or model_shape(job.model)
        hw, tr = job.hardware, job.training
        self.hw = hw
        self.cal = hw.calibration
        self.seq, self.gbs = tr.seq_length, tr.global_batch_size
        self.precision, self.flash, self.accounting = tr.precision, tr.flash_attention, tr.accounting
        self.capacity = hw.memory_gib * GiB
        self.fixed = (hw.cuda_context_gib + hw.nccl_buffer_gib) * GiB
        self.frag = hw.fragmentation_fraction
        self.bf16 = hw.peak_flops("bf16")
        self.peak = hw.peak_flops(self.precision)
        self.hbm = hw.hbm_bandwidth_gb_per_s * 1e9
        self.link_kw = dict(
            domain=hw.nvlink_domain_size,
            nvlink_bw=hw.nvlink_bandwidth_gb_per_s * 1e9 * self.cal.nvlink_efficiency,
            network_bw=hw.network_bandwidth_gb_per_s * 1e9 * self.cal.network_efficiency,
            nvlink_lat=hw.nvlink_latency_us * 1e-6, network_lat=hw.network_latency_us * 1e-6)
        self._layers: dict = {}
        self._links: dict = {}
        self._states: dict = {}
        self._stages: dict = {}
        self._first_params: dict = {}
        self._hardware_flops: dict = {}
        s = self.shape
        self.model_flops = model_flops_per_step(s, seq=self.seq, global_batch_size=self.gbs)
        self.L_dense = s.L_dense if s.E else s.L

    # ------------------------------------------------------------------ cached pieces
    def link(self, n: int, stride: int):
        key = (n, stride)
        got = self._links.get(key)
        if got is None:
            got = self._links[key] = group_link(n=n, stride=stride, **self.link_kw)
        return got

    def layer_costs(self, lay: Layout) -> LayerCosts:
        key = (lay.tp, lay.cp, lay.ep, lay.etp, lay.sp, lay.micro_batch_size, lay.recompute,
               lay.cp_comm_type, lay.tp_comm_overlap)
        got = self._layers.get(key)
        if got is None:
            got = self._layers[key] = self._layer_costs(lay)
        return got

    def _layer_costs(self, lay: Layout) -> LayerCosts:
        s, cal = self.shape, self.cal
        t, cp = lay.tp, lay.cp
        tokens = self.seq * lay.micro_batch_size / cp
        seq_rank = self.seq // cp
        akw = dict(tokens=tokens, seq=seq_rank, t=t, sp=lay.sp, flash=self.flash, etp=lay.etp)
        act_d = layer_activation_bytes(s, moe=False, recompute=lay.recompute, **akw)
        work_d = layer_activation_bytes(s, moe=False, recompute="none", **akw)
        act_e = layer_activation_bytes(s, moe=True, recompute=lay.recompute, **akw) if s.E else 0.0
        work_e = layer_activation_bytes(s, moe=True, recompute="none", **akw) if s.E else 0.0

        eff = gemm_efficiency(eff_max=cal.matmul_efficiency, half_size=cal.matmul_half_size,
                              tp=t, h=s.h, tokens=tokens)
        attn_rate = self.bf16 * cal.attention_efficiency
        kw = dict(tokens=tokens, seq=self.seq, tp=t, recompute=lay.recompute, gemm_flops_per_s=self.peak * eff,
                  attn_flops_per_s=attn_rate, hbm_bytes_per_s=self.hbm,
                  ew_factor=cal.elementwise_bytes_per_activation,
                  overhead_s=cal.layer_overhead_us * 1e-6)
        d = layer_times(s, moe=False, act_bytes_fwd=work_d, **kw)
        e = layer_times(s, moe=True, act_bytes_fwd=work_e, **kw) if s.E else d
        hide = cal.overlap_efficiency
        full = lay.recompute == "full"

        tp_s = 0.0
        if t > 1:
            tp_link = self.link(t, 1)
            tp_s = (4 + 2 * full) * all_reduce_time(2.0 * tokens * s.h, t, tp_link)
            if lay.tp_comm_overlap and not tp_link.crosses_network:
                # Transformer Engine's userbuffer overlap needs the TP group in one NVLink domain
                tp_s *= 1.0 - hide
        # an MoE layer gathers and scatters the sequence-parallel tokens for the attention
        # block, and for the expert block only when the experts (etp > 1) or shared experts
        # are tensor-parallel; with etp = 1 the routed tokens travel by all-to-all instead
        tp_e = tp_s if (lay.etp > 1 or s.f_s) else tp_s / 2
        ep_s = 0.0
        if lay.ep > 1 and s.E:
            routed = tokens / (t if lay.sp else 1) * s.k * s.capacity_factor
            ep_s = (4 + 2 * full) * all_to_all_time(2.0 * routed * s.h, lay.ep,
                                                    self.link(lay.ep, lay.etp))
        cp_s = 0.0
        if cp > 1:
            cp_link = self.link(cp, t)
            if lay.cp_comm_type in ("p2p", "a2a+p2p"):
                attn_core = tokens * s.attn_core_flops_per_s * self.seq / t / attn_rate
                ring = (cp - 1) * p2p_time(2.0 * tokens * 2 * s.g * s.d / t, cp_link)
                cp_s = (3 + full) * max(0.0, ring - hide * attn_core)
            else:
                a2a = all_to_all_time(2.0 * tokens * (2 * s.q + 2 * s.g * s.d) / t, cp, cp_link)
                cp_s = 2 * a2a * (1.5 if full else 1.0)
        vocab = padded_vocab(s.V, t)
        logits = logits_time(tokens=tokens, h=s.h, vocab=vocab, tp=t, flops_per_s=self.bf16 * eff,
                             hbm_bytes_per_s=self.hbm)
        logits_bytes = 4.0 * tokens * vocab / t + 2.0 * tokens * s.h / (t if lay.sp else 1)
        transient = 4.0 * tokens * s.h if t > 1 and lay.sp else 0.0
        return LayerCosts(tokens, act_d, act_e, work_d, work_e, d.fwd, d.bwd, d.recompute,
                          e.fwd, e.bwd, e.recompute, tp_s, tp_e, ep_s, cp_s, logits,
                          logits_bytes, transient)

    # ------------------------------------------------------------------ stages
    def stages(self, lay: Layout):
        """[(name, rank, layers, moe_layers, has_embedding, has_output)] for first/middle/last."""
        key = (lay.pp, lay.first_stage_layers, lay.last_stage_layers)
        got = self._stages.get(key)
        if got is None:
            got = self._stages[key] = self._stage_list(lay)
        return got

    def _stage_list(self, lay: Layout):
        s = self.shape
        first_n, mid_n, last_n = stage_layer_counts(s.L, lay)
        p = lay.pp

        def moe_in(layers: float, start: float) -> float:
            if not s.E:
                return 0.0
            return max(0.0, min(layers, start + layers - self.L_dense))

        if p == 1:
            return [("first", 0, s.L, float(s.L_moe), True, True)]
        out = [("first", 0, first_n, moe_in(first_n, 0), True, False)]
        if p > 2:
            out.append(("middle", 1, mid_n, moe_in(mid_n, first_n), False, False))
        out.append(("last", p - 1, last_n, moe_in(last_n, s.L - last_n), False, True))
        return out

    def stage_states(self, lay: Layout, zero: int) -> tuple:
        """(transient bytes, [(name, rank, layers, moe_layers, has_output, weights, gradients,
        optimizer bytes) for the first, a middle and the last pipeline rank]). Cached: it does
        not depend on the micro-batch, vpp, sp or recompute."""
        key = (lay.tp, lay.pp, lay.first_stage_layers, lay.last_stage_layers, lay.ep, lay.etp,
               lay.dp, lay.cp, zero)
        got = self._states.get(key)
        if got is not None:
            return got
        s = self.shape
        vocab = padded_vocab(s.V, lay.tp)
        stages = []
        for name, rank, layers, moe_layers, emb, out in self.stages(lay):
            dense_p, expert_p = stage_params(s, layers=layers, moe_layers=moe_layers, t=lay.tp,
                                             with_embedding=emb, with_output=out, vocab=vocab)
            w, g, o = state_bytes(dense_params=dense_p, expert_params=expert_p / (lay.ep * lay.etp),
                                  zero=zero, shard=lay.optimizer_shard, expert_shard=lay.edp,
                                  accounting=self.accounting, precision=self.precision)
            stages.append((name, rank, layers, moe_layers, out, w, g, o))
        gather = 0.0
        if zero == 3:   # the gathered (DP-unsharded) layer and the prefetched next one, bf16
            dense = s.dense_tp / lay.tp + s.dense_rep
            moe = s.moe_tp / lay.tp + s.moe_rep + s.moe_experts / (lay.ep * lay.etp) if s.E else 0.0
            gather = 2 * 2.0 * max(dense, moe)
        got = self._states[key] = (gather, stages)
        return got

    def memory(self, lay: Layout, *, zero: int | None = None) -> MemoryBreakdown:
        """The most loaded rank's memory (first, a middle or the last pipeline rank)."""
        total, w, g, o, acts, other, name = self._worst_rank(lay, lay.zero if zero is None else zero)
        return MemoryBreakdown(w, g, o, acts, other, self.capacity, name)

    def memory_total(self, lay: Layout) -> float:
        """`memory(lay).total` without building the breakdown (the search's hot path)."""
        return self._worst_rank(lay, lay.zero)[0]

    def memory_by_rank(self, lay: Layout) -> list[MemoryBreakdown]:
        """Every pipeline rank's memory, rank 0 first (the pictures' memory bars). The middle
        ranks share the middle stage's layers and states; their activations differ by rank
        (rank r holds fewer micro-batches in flight). Same arithmetic as `memory`."""
        gather, stages = self.stage_states(lay, lay.zero)
        lc, m = self.layer_costs(lay), self.gbs // (lay.micro_batch_size * lay.dp) or 1
        by_name = {st[0]: st for st in stages}
        out = []
        for r in range(lay.pp):
            name = "first" if r == 0 else "last" if r == lay.pp - 1 else "middle"
            st = by_name[name]
            total, w, g, o, acts, other, _ = self._rank_memory(lay, lc, m, gather, st[:1] + (r,) + st[2:])
            out.append(MemoryBreakdown(w, g, o, acts, other, self.capacity, name))
        return out

    def _rank_memory(self, lay: Layout, lc: LayerCosts, m: int, gather: float,
                     stage: tuple) -> tuple:
        """(total, weights, gradients, optimizer, activations, other, stage name) of one
        pipeline rank with m micro-batches per step; `stage` is an entry of `stage_states`."""
        name, rank, layers, moe_layers, out, w, g, o = stage
        per_layer = ((layers - moe_layers) * lc.act_d + moe_layers * lc.act_e) / layers if layers else 0.0
        acts = per_layer * in_flight_layers(layers, lay.pp, lay.vpp, m, rank)
        if lay.recompute == "full" and layers:
            acts += lc.work_e if moe_layers else lc.work_d
        if out:
            acts += lc.logits_bytes
        tensors = w + g + o + acts
        transient = lc.transient + gather
        total = tensors * (1.0 + self.frag) + self.fixed + transient
        return total, w, g, o, acts, self.fixed + self.frag * tensors + transient, name

    def _worst_rank(self, lay: Layout, zero: int) -> tuple:
        gather, stages = self.stage_states(lay, zero)
        lc, m = self.layer_costs(lay), self.gbs // (lay.micro_batch_size * lay.dp) or 1
        best = None
        for st in stages:
            got = self._rank_memory(lay, lc, m, gather, st)
            if best is None or got[0] > best[0]:
                best = got
        return best

    def zero3_no_worse_than_2(self, lay: Layout) -> bool:
        """ZeRO-3 needs no more memory than ZeRO-2 on every pipeline rank of this layout (any
        micro-batch or recompute): the weights it shards save at least its gather buffers."""
        g3, st3 = self.stage_states(lay, 3)
        g2, st2 = self.stage_states(lay, 2)
        return all((a[5] + a[6] + a[7]) * (1.0 + self.frag) + g3
                   <= (b[5] + b[6] + b[7]) * (1.0 + self.frag) + g2 for a, b in zip(st3, st2))

    def time_lower_bound(self, lay: Layout) -> float:
        """A cheap bound below `time(lay).step_time_s`, the same for every ZeRO stage.

        With t_i the stages' micro-batch times and t̄ their mean, the pipeline takes
        m·t_max + (Σt_i − t_max)/v = t_max·(m − 1/v) + p·t̄/v ≥ t̄·(m + (p−1)/v); DP traffic
        and the optimizer only add. t̄ counts compute and the TP/EP/CP traffic per layer. Lets
        the search time only the layouts that can make the top K.
        """
        lc = self.layer_costs(lay)
        s = self.shape
        m = self.gbs // (lay.micro_batch_size * lay.dp) or 1
        L_moe = s.L_moe if s.E else 0
        total = ((s.L - L_moe) * (lc.fwd_d + lc.bwd_d + lc.rec_d + lc.tp)
                 + L_moe * (lc.fwd_e + lc.bwd_e + lc.rec_e + lc.ep + lc.tp_e)
                 + s.L * lc.cp + lc.logits)
        return total / lay.pp * (m + (lay.pp - 1) / lay.vpp)

    def _first_rank_params(self, lay: Layout, first_stage: tuple) -> tuple[float, float]:
        """(dense, expert) parameters on a first-stage rank (experts already / ep*etp)."""
        key = (lay.tp, lay.pp, lay.first_stage_layers, lay.last_stage_layers, lay.ep, lay.etp)
        got = self._first_params.get(key)
        if got is None:
            _, _, layers, moe_layers, _, out = first_stage
            dense_p, expert_p = stage_params(self.shape, layers=layers, moe_layers=moe_layers,
                                             t=lay.tp, with_embedding=True, with_output=out,
                                             vocab=padded_vocab(self.shape.V, lay.tp))
            got = self._first_params[key] = (dense_p, expert_p / (lay.ep * lay.etp))
        return got

    def _stage_parts(self, lay: Layout, lc: LayerCosts, stage_list) -> list[tuple]:
        """Per entry of `stages`, one micro-batch: (rank, compute incl. recompute and the
        output layer, exposed TP, EP, CP seconds, forward, backward, recompute of its layers)."""
        out = []
        for name, rank, layers, moe_layers, emb, has_out in stage_list:
            dl = layers - moe_layers
            compute = (dl * (lc.fwd_d + lc.bwd_d + lc.rec_d)
                       + moe_layers * (lc.fwd_e + lc.bwd_e + lc.rec_e)
                       + (lc.logits if has_out else 0.0))
            out.append((rank, compute, dl * lc.tp + moe_layers * lc.tp_e, moe_layers * lc.ep,
                        layers * lc.cp, dl * lc.fwd_d + moe_layers * lc.fwd_e,
                        dl * lc.bwd_d + moe_layers * lc.bwd_e,
                        dl * lc.rec_d + moe_layers * lc.rec_e))
        return out

    def _pp_seconds(self, lay: Layout, lc: LayerCosts) -> float:
        """Exposed point-to-point seconds per micro-batch on a stage (activations in,
        gradients back, v times when interleaved, partly hidden then)."""
        if lay.pp <= 1:
            return 0.0
        pp_s = 2 * lay.vpp * p2p_time(2.0 * lc.tokens * self.shape.h / lay.tp,
                                      self.link(2, lay.tp * lay.cp * lay.dp))
        return pp_s * (1.0 - self.cal.overlap_efficiency) if lay.vpp > 1 else pp_s

    def stage_times(self, lay: Layout) -> list[tuple[float, float, float]]:
        """Every pipeline rank's (forward, backward, recompute) seconds per micro-batch, rank
        0 first, as the step time counts them: backward includes recompute; the exposed
        TP/EP/CP/PP communication and the output layer are split between forward and
        backward in the ratio of their compute. `pipeline_time` of their sums (with m and
        vpp) is `time(lay)`'s pipeline part; the schedule picture is built from them."""
        lc = self.layer_costs(lay)
        pp_s = self._pp_seconds(lay, lc)
        rows = {r[0]: r for r in self._stage_parts(lay, lc, self.stages(lay))}
        out = []
        for rank in range(lay.pp):
            key = rank if rank in rows else 1          # the middle ranks share one entry
            _, compute, tp_s, ep_s, cp_s, fwd, bwd, rec = rows[key]
            total = compute + tp_s + ep_s + cp_s + pp_s
            work = fwd + bwd + rec
            f = total * fwd / work if work else total / 3
            out.append((f, total - f, total * rec / work if work else 0.0))
        return out

    def time(self, lay: Layout) -> StepTime:
        s = self.shape
        lc = self.layer_costs(lay)
        m = max(1, lay.num_microbatches(self.gbs))
        p, v = lay.pp, lay.vpp
        pp_s = self._pp_seconds(lay, lc)
        totals, parts = [], []
        first_fwd = first_bwd = 0.0
        stage_list = self.stages(lay)
        for rank, compute, tp_s, ep_s, cp_s, fwd, bwd, _ in self._stage_parts(lay, lc, stage_list):
            parts.append((compute, tp_s, ep_s, cp_s))
            totals.append(compute + tp_s + ep_s + cp_s + (pp_s if p > 1 else 0.0))
            if rank == 0:
                first_fwd, first_bwd = fwd, bwd
        if p > 2:   # the middle entry stands for p - 2 identical ranks
            totals = [totals[0]] + [totals[1]] * (p - 2) + [totals[2]]
            parts = [parts[0]] + [parts[1]] * (p - 2) + [parts[2]]
        pipe = pipeline_time(totals, m=m, v=v)
        i_slow = max(range(len(totals)), key=totals.__getitem__)
        c, tp_s, ep_s, cp_s = parts[i_slow]

        dense_p, expert_p = self._first_rank_params(lay, stage_list[0])
        dp_s = dp_exposed(zero=lay.zero, m=m, dense_params=dense_p, expert_params=expert_p,
                          dp_link=self.link(lay.dp * lay.cp, lay.tp), dp_size=lay.dp * lay.cp,
                          edp_link=self.link(lay.edp, lay.etp * lay.ep), edp_size=lay.edp,
                          grad_bytes=2.0 if self.accounting == "deepspeed" else 4.0,
                          window_fwd=first_fwd, window_bwd=first_bwd,
                          hide=self.cal.overlap_efficiency,
                          overlap_grad_reduce=lay.overlap_grad_reduce,
                          overlap_param_gather=lay.overlap_param_gather)
        shard = lay.optimizer_shard if lay.zero >= 1 else 1
        eshard = lay.edp if lay.zero >= 1 else 1
        opt_s = OPTIMIZER_BYTES_PER_PARAM * (dense_p / shard + expert_p / eshard) / self.hbm
        step = pipe + dp_s + opt_s
        world = lay.world_size
        tokens = self.gbs * self.seq
        F = self.model_flops
        H = self._hardware_flops.get(lay.recompute)
        if H is None:
            H = self._hardware_flops[lay.recompute] = hardware_flops_per_step(
                s, seq=self.seq, global_batch_size=self.gbs, recompute=lay.recompute)
        return StepTime(
            step_time_s=step, compute_s=m * c, bubble_s=pipe - m * totals[i_slow],
            tp_comm_s=m * tp_s, pp_comm_s=m * (pp_s if p > 1 else 0.0), dp_comm_s=dp_s,
            ep_comm_s=m * ep_s, cp_comm_s=m * cp_s, optimizer_s=opt_s,
            bubble_fraction=bubble_fraction(p, m, v), tokens_per_s=tokens / step,
            tokens_per_s_per_gpu=tokens / step / world,
            model_tflops_per_gpu=F / step / world / 1e12, mfu=F / (step * world * self.peak),
            hfu=H / (step * world * self.peak), model_flops=F, num_gpus=world)

"""Time of serving: the engine step (prefill chunk, decode, or both mixed), prefill (TTFT),
decode (TPOT), continuous batching at a concurrency, a static batch, speculative decoding and
the KV transfer of disaggregated serving.

One engine step on one GPU of pipeline stage s, with T tokens in the step (decoding sequences
x tokens each, plus prompt tokens being prefilled), is the sum over its layers of a roofline
per kernel group, plus the fixed costs that dominate small batches:

    GEMMs        max(W / (B_hbm * e_hbm),  F / (P * e(n)))         per layer
                 e(n) = gemm_efficiency * n / (n + gemm_half_tokens), 1/n = tp/h + 1/T
                 (TP thins the GEMMs, small batches shorten them: Calibration's form)
    MoE experts  the same with W = the experts the step touches, E/G * (1 - (1 - k/E)^T_g) of
                 them (uniform routing; T_g the tokens of the step over the whole MoE group,
                 all dp ranks with attention DP), and the grouped e(n) (moe_efficiency m:
                 g m n / (n + m h)) with n = T_g k / touched, the tokens each TOUCHED expert
                 gets (one token: k experts of 1 token each, not k/E of a token);
                 plus the routed activations' HBM traffic of the permute, activation and
                 combine kernels, T_g k / ep pairs x routed_activation_bytes, and the MoE
                 layer's fixed cost moe_layer_overhead_us (its extra kernels and the
                 latency-bound grouped GEMMs of a few tokens per expert)
    attention    decode: max(KV bytes read / (B_hbm * e_hbm), 4 (a/tp) d ctx / P_bf16 e_attn)
                 prefill: 4 (a/tp) d tokens * span / (P_bf16 * attention_efficiency)
    TP           2 all-reduces of T*h*2 bytes per layer (ring, comm.all_reduce_time on the
                 tp group's link; alpha = allreduce_latency_us inside the NVLink/PCIe domain)
    EP           with attention DP: dispatch and combine all-to-all per MoE layer
                 (comm.all_to_all_time); each token goes once to every rank holding one of
                 its k experts, (ep-1)(1 - (1 - 1/ep)^k) remote ranks on average (uniform
                 routing), dispatched in the GEMM precision (the engines quantize before the
                 all-to-all: FP8 / NVFP4 dispatch) and combined in bf16; without attention
                 DP the TP all-reduce combines
    PP           a point-to-point send of T*h*2 bytes per stage boundary (comm.p2p_time)
    CP           the cp ranks (tp groups with the same weights) split each prompt: a GPU runs
                 T = decode tokens + prompt tokens / cp (GEMM FLOPs of the prompt / cp) and
                 1/cp of its causal attention (load-balanced, zigzag split); per layer the
                 ring passes the local K/V block (bf16) on cp-1 times (comm.cp_ring_time on
                 the cp group's link, stride tp), shown as far as the prompt's attention
                 does not hide it (comm.exposed_time with the profile's overlap_efficiency,
                 as training's CP p2p ring). Decode: every cp rank runs the decoding tokens'
                 GEMMs on its whole weights and attends its 1/cp of the KV cache (KV bytes
                 read and attention FLOPs / cp), then one latency-bound all-reduce per layer
                 over cp combines the partial outputs and their log-sum-exp (per token a/tp
                 heads x (d_v x 2 + 4) bytes; comm.all_reduce_time)
    fixed        layer_overhead_us per layer of an eager step (graph_layer_overhead_us of a
                 decode-only step within the engine's CUDA graph batch), step_overhead_us per step, sequence_overhead_us
                 per sequence in the step, request_overhead_us per request admitted and
                 finished in the step (host work); the output layer on the last stage (a GEMM
                 of the sampled tokens); B_hbm the profile's HBM bandwidth, P the precision's
                 peak

With pp stages the engine keeps pp micro-batches in flight (TensorRT-LLM, vLLM, SGLang): every
stage works on its own micro-batch of B/pp sequences, a sequence advances one token every
`pp` stage steps, so the token interval is pp * max_s t_s(B/pp): PP shards memory (more
requests fit) but does not cut the time per token, and a prompt crosses every stage (+ hops).

Continuous batching at concurrency C (per instance, steady state, uniform lengths): the C
prompts of a rank go in chunk steps of the engine's budget (max_num_tokens less the running
requests' decode tokens), each beside the other requests decoding; every other step is a pure
decode step of C sequences of mean context ISL + OSL/2; TPOT counts the chunk steps a request
sits through one by one (estimate.closed_loop, estimate.mixed_tpot), throughput is Little's
law over a group's cycle; TTFT (lock-step groups, or vLLM's clients out of step:
estimate.independent_ttft; the overlap schedulers' first-token step; a benchmark run's first
wave), SGLang's prefill-first schedule and the wait of clients beyond what the engine runs at
once (estimate.admission_wait) follow the closed loop of benchmark clients (their docstrings
have the assumptions).
A static batch prefills C*ISL tokens in chunks of max_num_tokens, then decodes OSL-1 steps.
Speculative decoding: each step verifies k drafted tokens (T = C*(k+1)) after k draft passes
(the MTP layers, or the draft model) and yields (1 - a^(k+1)) / (1 - a) tokens (Leviathan et
al. 2023, i.i.d. acceptance a). Disaggregated: TTFT is the prefill worker's (from one prompt
alone to a full chunk of prompts as its load grows) plus the KV transfer of ISL tokens to the
decode worker over the real link (NVLink inside one domain, else the network, over min(P, D)
GPUs' links); throughput is the lesser of the prefill and decode pools; a decode worker
runs the batch its closed loop of clients leaves it, N D / (TTFT + D) (Little's law,
estimate.decode_batch_reached).

Left out: arrivals other than the closed loop's, prefix caching, sampling cost beyond the fixed terms,
routing skew beyond uniform, overlap of communication with compute (counted exposed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cost import shape_of
from planner.cost.comm import (
    all_reduce_time,
    all_to_all_time,
    cp_ring_time,
    exposed_time,
    group_link,
    p2p_time,
)
from planner.serve.engines import engine_settings
from planner.serve.memory import (
    bytes_per_param,
    expert_bytes_per_param,
    kv_bytes_per_token_layer,
    kv_tokens_kept,
    linear_state_bytes,
    plain_kv,
    stage_bounds,
    stage_layers,
)

__all__ = [
    "StepParts",
    "ServeCost",
    "accepted_tokens",
    "kv_transfer_time",
    "routed_activation_bytes",
    "touched_experts",
]

ACT = 2.0  # bytes per activation element on the wire (bf16)


@dataclass(frozen=True, slots=True)
class StepParts:
    """One step (token interval) split by what it spends time on, seconds."""

    weights_s: float = 0.0  # GEMM time where bound by streaming the weights
    compute_s: float = 0.0  # GEMM time where bound by FLOPs (beyond the weight stream)
    attention_s: float = 0.0  # KV read (decode) and attention FLOPs (prefill)
    tp_comm_s: float = 0.0
    ep_comm_s: float = 0.0
    pp_comm_s: float = 0.0
    overhead_s: float = 0.0  # layer, step and per-sequence fixed costs
    cp_comm_s: float = 0.0  # CP: the exposed K/V ring (prefill) and the decode combine

    @property
    def total(self) -> float:
        return (
            self.weights_s
            + self.compute_s
            + self.attention_s
            + self.tp_comm_s
            + self.ep_comm_s
            + self.pp_comm_s
            + self.overhead_s
            + self.cp_comm_s
        )

    def scaled(self, k: float) -> StepParts:
        return StepParts(*(getattr(self, f) * k for f in self.__slots__))

    def plus(self, o: StepParts) -> StepParts:
        return StepParts(*(getattr(self, f) + getattr(o, f) for f in self.__slots__))

    def as_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__slots__}
        d["step_s"] = self.total
        return d


def touched_experts(E: int, k: int, tokens: float) -> float:
    """Expected distinct experts of E that `tokens` tokens routed to k experts each hit,
    uniform routing: E (1 - (1 - k/E)^tokens) (each expert is missed by one token with
    probability 1 - k/E)."""
    if E <= 0 or tokens <= 0:
        return 0.0
    return E * (1.0 - (1.0 - k / E) ** tokens)


def routed_activation_bytes(h: int, f_e: float, gated: bool) -> float:
    """Bytes one token-expert pair moves through HBM in the memory-bound kernels of a routed
    MoE layer, beside its grouped GEMMs (bf16 activations): the permute that gathers the
    token's row into its expert's block (h written), the activation between the two grouped
    GEMMs (the first GEMM's 2 f_e (gated; f_e plain) read, f_e written) and the combine that
    reads the k expert outputs back into the token's row (h read):

        bytes = 2 * (2 h + (3 if gated else 2) f_e)        f_e = moe_ffn_hidden_size / etp

    (vLLM fused_moe: the act kernel between the two invoke_fused_moe_kernel calls and
    moe_sum; TensorRT-LLM CUTLASS MoE: expandInputRows and finalizeMoeRouting around the
    grouped GEMMs). A dense MLP moves the same kinds of rows once per token for 2 x 3 h ffn
    FLOPs; a pair does only 2 x 3 h f_e: for Qwen3-235B (h 4096, f_e 1536, etp 1) 25.6 kB
    per 37.7 MFLOP, 1,475 FLOP a byte, 2.5 x an H100's FP8 peak over its HBM bandwidth
    (1,979 TFLOP/s / 3.35 TB/s = 590), so at large batches the traffic adds a fifth to a
    half of the expert GEMMs' time, where Llama 3 70B's MLP (h 8192, ffn 28672) is at 6,900
    FLOP a byte. Counted at the HBM rate of the weights (B_hbm e_hbm), in weights_s."""
    return ACT * (2.0 * h + (3.0 if gated else 2.0) * f_e)


def accepted_tokens(k: int, a: float) -> float:
    """Expected tokens per verification step with k drafted tokens of acceptance rate a:
    (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, eq. 1)."""
    return (1 - a ** (k + 1)) / (1 - a)


def _link(hw, n: int, stride: int):
    cal, sc = hw.calibration, hw.serving_calibration
    return group_link(
        n=n,
        stride=stride,
        domain=hw.nvlink_domain_size,
        nvlink_bw=hw.nvlink_bandwidth_gb_per_s * 1e9 * sc.link_efficiency,
        network_bw=hw.network_bandwidth_gb_per_s * 1e9 * cal.network_efficiency,
        nvlink_lat=sc.allreduce_latency_us * 1e-6,
        network_lat=hw.network_latency_us * 1e-6,
    )


class ServeCost:
    """The constants of one (job, instance) computed once; step times are arithmetic."""

    def __init__(self, job, inst, *, model=None):
        m = model or job.model
        self.m, self.inst, self.hw = m, inst, job.hardware
        sv, hw = job.serving, job.hardware
        sh = shape_of(m)
        c = hw.serving_calibration
        self.c = c
        self.settings = engine_settings(job, inst)
        self.bw = hw.hbm_bandwidth_gb_per_s * 1e9 * c.hbm_efficiency
        self.peak = hw.peak_flops(sv.precision)
        self.peak16 = hw.peak_flops("bf16")
        q = bytes_per_param(sv.precision)
        self.q = q
        tp, G = inst.tp, inst.moe_group
        self.h, self.tp = m.hidden_size, tp
        self.dense_w, self.dense_f = sh.dense_tp / tp * q, 2.0 * sh.dense_tp / tp
        self.moe_w, self.moe_f = sh.moe_tp / tp * q, 2.0 * sh.moe_tp / tp
        self.E, self.k = sh.E, sh.k
        self.experts_w = (
            sh.moe_experts / G * expert_bytes_per_param(m, sv.precision) if m.is_moe else 0.0
        )
        self.pair_f = (
            2.0 * sh.moe_experts / sh.E / G if m.is_moe else 0.0
        )  # per token-expert pair, per GPU
        self.group_tokens = inst.dp if inst.dp_attention else 1
        self.pair_bytes = (
            routed_activation_bytes(m.hidden_size, m.expert_ffn / inst.etp, m.gated) / inst.ep
            if m.is_moe
            else 0.0
        )  # per GPU per token-expert pair of the MoE group (each ep rank gets 1/ep of them)
        cp = inst.cp
        self.cp = cp
        self.kv_layer = kv_bytes_per_token_layer(m, tp, sv.kv_dtype, cp)  # per GPU: 1/cp
        if m.is_mla:
            rope = m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64
            self.attn_decode_f = 2.0 * sh.a / tp * (2 * m.kv_lora_rank + rope) / cp  # absorbed MLA
            self.attn_prefill_f = 2.0 * sh.a / tp * (m.qk_head_dim + rope + m.v_head_dim) / cp
            d_v = m.v_head_dim
        else:
            self.attn_decode_f = self.attn_prefill_f = 4.0 * sh.a / tp * sh.d / cp
            d_v = sh.d
        # CP: the bf16 K/V block of one local token passed round the ring, and what one
        # decoding token's partial attention sends to be combined (outputs + fp32 LSE)
        self.cp_kv = kv_bytes_per_token_layer(m, tp, "bf16")
        self.cp_combine = sh.a / tp * (d_v * ACT + 4.0)
        self.cp_hide = hw.calibration.overlap_efficiency
        self.lm_w = m.vocab_size * m.hidden_size / tp * ACT
        self.lm_f = 2.0 * m.vocab_size * m.hidden_size / tp
        self.stages = stage_layers(m, inst.pp)
        self.m, self.plain = m, plain_kv(m)
        if not self.plain:  # attention kinds per stage, and the linear layers' fixed costs
            kinds = m.attention_kinds
            self.stage_kinds = [
                sorted({k: kinds[a:b].count(k) for k in set(kinds[a:b])}.items())
                for a, b in stage_bounds(m, inst.pp)
            ]
            self.lin_state = linear_state_bytes(m, tp) / cp
            self.lin_f = sh.linear_core_flops / min(tp, m.linear_num_value_heads or 1) / cp
            self.idx_bytes = ((m.dsa_index_head_dim or 0) + 4) / cp
            self.idx_f = 2.0 * (m.dsa_index_heads or 0) * (m.dsa_index_head_dim or 0) / cp
        self.pp = inst.pp
        self.tp_link = _link(hw, tp, 1)
        self.ep_link = _link(hw, inst.ep, max(1, G // inst.ep))
        self.cp_link = _link(hw, cp, tp)
        self.pp_link = _link(hw, 2, tp * cp * inst.dp)

    # ------------------------------------------------------------------ one stage, one step
    def _gemm(
        self, w: float, f: float, n: float, eff_scale: float = 1.0, grouped: bool = False
    ) -> tuple[float, float]:
        """(weight-stream time, extra compute time) of a GEMM group: max(W/B, F/(P e(n))).
        Grouped (expert) GEMMs: e(n) = g m n / (n + m h), which is a dense GEMM's g n / h for
        short GEMMs (both pad a tile) and g m (moe_efficiency m) for long ones."""
        c = self.c
        half = c.gemm_half_tokens * (eff_scale if grouped else 1.0)
        eff = c.gemm_efficiency * eff_scale * n / (n + half) if n > 0 else c.gemm_efficiency
        t_mem = w / self.bw
        t_cmp = f / (self.peak * eff) if f > 0 else 0.0
        return t_mem, max(0.0, t_cmp - t_mem)

    def eager_share(self, seqs: float, prefill: float, q: int = 1) -> float:
        """1 when a step runs eagerly (prompt tokens in it, or more sequences than the
        engine's CUDA graphs hold), else 0 (a graph replay)."""
        return 1.0 if prefill > 0 or seqs * q > self.settings.cuda_graph_batch else 0.0

    def stage(
        self,
        s: int,
        *,
        seqs: float,
        ctx: float,
        prefill: float = 0.0,
        span: float = 0.0,
        q: int = 1,
        last_logits: float | None = None,
        requests: float = 0.0,
        eager: float | None = None,
        ranks: float | None = None,
    ) -> StepParts:
        """One step of stage s on one GPU: `seqs` decoding sequences of mean context `ctx`
        (q tokens each), `prefill` prompt tokens attending `span` tokens on average,
        `requests` requests admitted (and as many finished) in the step; `eager` the share
        of such steps run eagerly rather than from a CUDA graph (default: eager_share);
        `ranks` the attention-DP ranks whose tokens (as many as this one's) the MoE layers
        see (default: all dp of them; 1: this rank's alone, the others idle)."""
        c = self.c
        nd, nm = self.stages[s]
        cp = self.cp
        local = prefill / cp if cp > 1 else prefill  # this GPU's share of the prompt tokens
        T = seqs * q + local
        if T <= 0:
            return StepParts()
        n = 1.0 / (self.tp / self.h + 1.0 / T)
        w = cmp = attn = tpc = epc = 0.0
        if nd:
            a, b = self._gemm(self.dense_w, self.dense_f * T, n)
            w, cmp = w + nd * a, cmp + nd * b
        if nm:
            a, b = self._gemm(self.moe_w, self.moe_f * T, n)
            Tg = T * (self.group_tokens if ranks is None else ranks)
            touched = touched_experts(self.E, self.k, Tg) / self.E  # share of the experts
            ne = Tg * self.k / (self.E * touched)  # tokens per touched expert
            n_e = 1.0 / (self.inst.etp / self.h + 1.0 / ne) if ne > 0 else 0.0
            a2, b2 = self._gemm(
                self.experts_w * touched,
                self.pair_f * Tg * self.k,
                n_e,
                c.moe_efficiency,
                grouped=True,
            )
            routed = Tg * self.k * self.pair_bytes / self.bw  # permute, activation, combine
            w, cmp = w + nm * (a + a2 + routed), cmp + nm * (b + b2)
            if self.inst.dp_attention and self.inst.ep > 1:
                ep = self.inst.ep
                fan = ep * (1.0 - (1.0 - 1.0 / ep) ** self.k)  # S: (n-1)/n of it is remote
                epc = nm * (
                    all_to_all_time(T * self.h * fan * self.q, ep, self.ep_link)
                    + all_to_all_time(T * self.h * fan * ACT, ep, self.ep_link)
                )
        L = nd + nm
        kv_read = seqs * ctx * self.kv_layer
        dec = max(
            kv_read / self.bw,
            seqs * q * ctx * self.attn_decode_f / (self.peak16 * c.attention_efficiency),
        )
        pre = prefill * span * self.attn_prefill_f / (self.peak16 * c.attention_efficiency)
        attn = (
            L * (dec + pre) if self.plain else self._kinds_attention(s, seqs, ctx, prefill, span, q)
        )
        cpc = 0.0
        if cp > 1:
            if local > 0:
                ring = cp_ring_time(local * self.cp_kv, cp, self.cp_link)
                cpc += L * exposed_time(ring, pre, self.cp_hide)
            if seqs > 0:
                cpc += L * all_reduce_time(seqs * q * self.cp_combine, cp, self.cp_link)
        if self.tp > 1:
            tpc = L * 2 * all_reduce_time(T * self.h * ACT, self.tp, self.tp_link)
        e = self.eager_share(seqs, prefill, q) if eager is None else eager
        per_layer = e * c.layer_overhead_us + (1.0 - e) * c.graph_layer_overhead_us
        over = (L * per_layer + nm * c.moe_layer_overhead_us + c.step_overhead_us) * 1e-6
        ppc = p2p_time(T * self.h * ACT, self.pp_link) if self.pp > 1 and s < self.pp - 1 else 0.0
        if s == self.pp - 1:
            logits = seqs if last_logits is None else last_logits
            a, b = self._gemm(self.lm_w, self.lm_f * logits, max(1.0, logits))
            w, cmp = w + a, cmp + b
            over += logits * c.sequence_overhead_us * 1e-6 + requests * c.request_overhead_us * 1e-6
        return StepParts(w, cmp, attn, tpc, epc, ppc, over, cpc)

    def _kinds_attention(
        self, s: int, seqs: float, ctx: float, prefill: float, span: float, q: int
    ) -> float:
        """Attention time of stage s by layer kind: a window or chunk layer reads and attends
        at most W or C tokens of context (prefill: of the span), a dsa layer reads the
        indexer's keys of the whole context and attends its top-k, a linear layer reads its
        fixed state and costs its core FLOPs per token."""
        c, m = self.c, self.m
        rate = self.peak16 * c.attention_efficiency
        total = 0.0
        for kind, n in self.stage_kinds[s]:
            if kind == "linear":
                dec = max(seqs * self.lin_state / self.bw, seqs * q * self.lin_f / rate)
                pre = prefill * self.lin_f / rate
            else:
                near = m.dsa_index_topk if kind == "dsa" else None
                kept = min(ctx, float(near)) if near else kv_tokens_kept(m, kind, ctx)
                pspan = min(span, float(near)) if near else kv_tokens_kept(m, kind, span)
                read = seqs * kept * self.kv_layer
                flops = seqs * q * kept * self.attn_decode_f
                pflops = prefill * pspan * self.attn_prefill_f
                if kind == "dsa":
                    read += seqs * ctx * self.idx_bytes
                    flops += seqs * q * ctx * self.idx_f
                    pflops += prefill * span * self.idx_f
                dec = max(read / self.bw, flops / rate)
                pre = pflops / rate
            total += n * (dec + pre)
        return total

    def interval(
        self,
        *,
        seqs: float,
        ctx: float,
        prefill: float = 0.0,
        span: float = 0.0,
        q: int = 1,
        requests: float = 0.0,
        eager: float | None = None,
    ) -> StepParts:
        """The token interval of the instance for `seqs` sequences per (DP) rank (`requests`
        requests of the whole instance arriving and leaving per interval, handled by its one
        front end): with pp stages, pp x the slowest stage's step on a micro-batch of seqs/pp."""
        pp = self.pp
        parts = [
            self.stage(
                s,
                seqs=seqs / pp,
                ctx=ctx,
                prefill=prefill / pp,
                span=span,
                q=q,
                requests=requests / pp,
                eager=eager,
            )
            for s in range(pp)
        ]
        worst = max(parts, key=lambda p: p.total)
        return worst.scaled(pp)

    def prefill_time(
        self,
        tokens: float,
        *,
        span: float,
        seqs: float = 1.0,
        decode_seqs: float = 0.0,
        decode_ctx: float = 0.0,
        ranks: float | None = None,
    ) -> float:
        """Time until the last of `tokens` prompt tokens (of `seqs` requests) has crossed every
        stage: chunks of max_num_tokens, each crossing the pp stages (pipelined); `ranks` as in
        stage()."""
        chunk = max(1, self.settings.max_num_tokens)
        n_chunks = max(1, math.ceil(tokens / chunk))
        per = tokens / n_chunks
        logits = seqs / n_chunks
        stages = [
            self.stage(
                s,
                seqs=decode_seqs,
                ctx=decode_ctx,
                prefill=per,
                span=span,
                last_logits=logits + decode_seqs,
                ranks=ranks,
            ).total
            for s in range(self.pp)
        ]
        return (n_chunks - 1) * max(stages) + sum(stages)


def kv_transfer_time(job, layout, *, tokens: float) -> float:
    """Seconds to move one request's KV cache (`tokens` prompt tokens, whole model) from a
    prefill worker to a decode worker: NVLink when the deployment fits one NVLink domain,
    else the network, spread over the min(prefill, decode) GPUs' links."""
    from planner.serve.memory import kv_bytes_per_token_at

    hw = job.hardware
    size = tokens * kv_bytes_per_token_at(job.model, job.serving.kv_dtype, tokens)
    lanes = min(layout.prefill.gpus, layout.decode.gpus)
    if layout.num_gpus <= hw.nvlink_domain_size:
        bw = hw.nvlink_bandwidth_gb_per_s * 1e9 * hw.serving_calibration.link_efficiency
        lat = hw.nvlink_latency_us * 1e-6
    else:
        bw = hw.network_bandwidth_gb_per_s * 1e9 * hw.calibration.network_efficiency
        lat = hw.network_latency_us * 1e-6
    return size / (bw * lanes) + lat

"""Memory of one serving GPU: weights, KV cache, activation workspace, the rest; and how many
tokens and requests the KV cache holds.

Per GPU of pipeline stage s (L_s layers) of an instance (tp, pp, ep, dp;
docs/reference/formulas.md#f2-parameter-counts for the parameter counts,
`planner.cost.shape.ModelShape`):

- Weights. The linear layers (attention projections, MLP, shared and routed experts) in the
  serving precision: bf16 2 B/param, fp8 1 B (+ per-tensor or per-channel scales, < 0.1 %),
  fp4 0.5625 B (NVFP4: 4-bit values and one FP8 scale per 16, NVIDIA ModelOpt; MXFP4 has one
  per 32 and is costed the same). Embedding, output layer, norms and router stay bf16 (ModelOpt
  and the engines leave them unquantized). Attention and dense MLP split over tp; routed
  experts over the MoE group (tp*dp with attention DP, else tp: ep ranks x etp); the embedding
  on the first stage and the output layer on the last, vocabulary-parallel over tp.
- KV cache per token: MHA/GQA 2 * L_s * g/tp * d * b (g KV heads of dim d; replicated, one
  head per GPU, when tp > g); MLA L_s * (kv_lora_rank + rope dim) * b, the same latent on
  every TP rank (attention DP splits the requests instead). b = 2 (bf16) or 1 (fp8).
  Context parallelism splits each sequence's tokens over the cp ranks (load-balanced), so a
  GPU holds 1/cp of every request's KV cache: per token and GPU the bytes above / cp, and the
  instance holds cp times the tokens. CP does not shard weights: every cp rank holds the
  weights of its tp group (the weight bytes are those of cp 1).
- Layer kinds (docs/cost-model.md "Layer kinds"): a request of n tokens keeps n tokens in
  a full or dsa layer (dsa adds the indexer's fp8 key, d_I + 4 bytes a token), min(n, W) in a
  sliding-window layer, min(n, C) in a chunked-local layer (the chunk it is in), and in a
  linear-attention layer a fixed state: nv/tp value heads of d_k x d_v plus the convolution's
  last kernel-1 inputs, bf16, whatever n. The KV bytes per token of such a model are its
  bytes per request over n (n = input + output), so capacity counts tokens of such requests.
- Activations: the workspace of one engine step of `max_num_tokens` tokens, max_num_tokens/cp
  on each GPU with CP (residual and normed input 2h, the QKV output, the gated MLP's 2f/tp or
  the MoE layer's routed intermediate, 16-bit) plus fp32 logits of one token per running
  request (V/tp each).
- Other: CUDA context and NCCL buffers (the profile's) and the engine's CUDA graphs.
- The KV cache gets what the engine's memory rule leaves (`engines.kv_budget`); the instance
  holds dp * min over stages (KV bytes / KV bytes per token) tokens, and max concurrency =
  tokens / (input + output tokens, rounded up to the engine's KV block).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.cost import shape_of
from planner.serve.engines import engine_settings, kv_budget, round_up
from planner.specs import ModelSpec

__all__ = [
    "ServeMemory",
    "bytes_per_param",
    "kv_bytes_per_token_layer",
    "stage_layers",
    "stage_weight_bytes",
    "instance_memory",
    "kv_bytes_per_token_model",
    "stage_bounds",
    "plain_kv",
    "kv_tokens_kept",
    "linear_state_bytes",
    "kv_bytes_per_request",
    "kv_bytes_per_token_at",
    "expert_bytes_per_param",
    "EXPERT_BYTES",
]

ACT_BYTES = 2  # 16-bit activations
KV_BYTES = {"bf16": 2, "fp8": 1}


def bytes_per_param(precision: str) -> float:
    """Bytes per linear-layer parameter: bf16 2, fp8 1, fp4 0.5 + 1/16 (NVFP4 block scales)."""
    return {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}[precision]


@dataclass(frozen=True)
class ServeMemory:
    """Per GPU of the most loaded stage; tokens and concurrency per instance."""

    weights: float
    kv_cache: float
    activations: float
    other: float
    capacity: float
    kv_bytes_per_token: float  # on one GPU, for one token of one request
    kv_tokens_capacity: int  # per instance (all its dp ranks)
    max_concurrency: int  # per instance: requests of input+output tokens it holds
    limited_by: str = "kv"  # kv | max_batch_size (what caps max_concurrency)
    stage: int = 0
    per_stage_weights: tuple = field(default=(), compare=False)

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.other

    @property
    def fits(self) -> bool:
        return self.max_concurrency >= 1

    def as_dict(self) -> dict:
        return {
            "weights_bytes": round(self.weights),
            "kv_cache_bytes": round(self.kv_cache),
            "activations_bytes": round(self.activations),
            "other_bytes": round(self.other),
            "total_bytes": round(self.total),
            "capacity_bytes": round(self.capacity),
            "kv_tokens_capacity": self.kv_tokens_capacity,
            "max_concurrency": self.max_concurrency,
        }


def stage_bounds(m: ModelSpec, pp: int) -> list[tuple[int, int]]:
    """[start, end) layer indices of each pipeline stage: as evenly as pp allows, the first
    stages taking one more when they do not divide."""
    L, pp = m.num_layers, max(1, pp)
    base, extra = divmod(L, pp)
    out, start = [], 0
    for s in range(pp):
        end = start + base + (1 if s < extra else 0)
        out.append((start, end))
        start = end
    return out


def stage_layers(m: ModelSpec, pp: int) -> list[tuple[int, int]]:
    """(dense, MoE) layers of each pipeline stage (`stage_bounds`), from the model's layer
    pattern (`moe_layer_freq`; dense layers first by default)."""
    pattern = m.moe_layers
    return [
        (end - start - sum(pattern[start:end]), sum(pattern[start:end]))
        for start, end in stage_bounds(m, pp)
    ]


def plain_kv(m: ModelSpec) -> bool:
    """Every layer keeps every token (full causal attention): KV bytes are per token. (A set
    difference, not a generator over the layers: the serve search asks it ~8,000 times.)"""
    return not set(m.attention_kinds) - {"full"}


def kv_tokens_kept(m: ModelSpec, kind: str, n: float) -> float:
    """Tokens of a request of n tokens a layer of this kind keeps in its KV cache."""
    if kind == "sliding":
        return min(n, float(m.window_size or n))
    if kind == "chunked":
        return min(n, float(m.attention_chunk_size or n))
    if kind == "linear":
        return 0.0
    return n


def linear_state_bytes(m: ModelSpec, tp: int) -> float:
    """A linear-attention layer's fixed state per request on one GPU: the nv/tp value heads'
    d_k x d_v matrices and the short convolution's last kernel-1 inputs, bf16."""
    nk, nv = m.linear_num_key_heads or 0, m.linear_num_value_heads or 0
    dk, dv = m.linear_key_head_dim or 0, m.linear_value_head_dim or 0
    share = max(1, min(tp, nv))
    conv = (2 * nk * dk + nv * dv) * (m.linear_conv_kernel_dim - 1)
    return float(ACT_BYTES * (nv * dk * dv + conv)) / share


def kv_bytes_per_request(
    m: ModelSpec,
    tp: int,
    kv_dtype: str,
    n: float,
    *,
    cp: int = 1,
    layers: tuple[int, int] | None = None,
) -> float:
    """KV-cache bytes one request of n tokens holds on one GPU, over the layers [start, end)
    (all by default), by layer kind (module docstring)."""
    start, end = layers if layers is not None else (0, m.num_layers)
    per = kv_bytes_per_token_layer(m, tp, kv_dtype, cp)
    total = 0.0
    for kind in m.attention_kinds[start:end]:
        if kind == "linear":
            total += linear_state_bytes(m, tp) / cp
            continue
        total += kv_tokens_kept(m, kind, n) * per
        if kind == "dsa":
            total += n * ((m.dsa_index_head_dim or 0) + 4) / cp
    return total


def kv_bytes_per_token_layer(m: ModelSpec, tp: int, kv_dtype: str, cp: int = 1) -> float:
    """KV-cache bytes one token takes in one layer on one GPU of a tp group, averaged over the
    cp ranks its sequence is split over: MHA/GQA 2 * max(1, g/tp) * d * b / cp, MLA
    (kv_lora_rank + rope) * b / cp."""
    b = KV_BYTES[kv_dtype]
    if m.is_mla:
        rope = m.qk_pos_emb_head_dim if m.qk_pos_emb_head_dim is not None else 64
        return float((m.kv_lora_rank + rope) * b) / cp
    heads = max(1, m.kv_heads // tp) if m.kv_heads >= tp else 1
    return float(2 * heads * m.head_dim * b) / cp


def kv_bytes_per_token_model(m: ModelSpec, kv_dtype: str) -> float:
    """KV bytes of one token over the whole model (all layers, all KV heads): what a
    disaggregated prefill worker sends the decode worker per prompt token."""
    return kv_bytes_per_token_layer(m, 1, kv_dtype) * m.num_layers


def kv_bytes_per_token_at(m: ModelSpec, kv_dtype: str, n: float) -> float:
    """`kv_bytes_per_token_model` of a request of n tokens by layer kind (window and chunk
    layers keep at most W or C tokens, linear layers a fixed state): bytes per request / n."""
    if plain_kv(m) or n <= 0:
        return kv_bytes_per_token_model(m, kv_dtype)
    return kv_bytes_per_request(m, 1, kv_dtype, n) / n


EXPERT_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 0.5 + 1.0 / 32}
"""Bytes per routed-expert parameter as published (`expert_precision`): MXFP4 is 4-bit values
with one E8M0 scale byte per 32 (OCP Microscaling spec)."""


def expert_bytes_per_param(m: ModelSpec, precision: str) -> float:
    """Routed experts' bytes per parameter: the serving precision's, or the published
    `expert_precision` where that is smaller (gpt-oss ships MXFP4 experts and the engines
    serve them so)."""
    q = bytes_per_param(precision)
    if m.expert_precision is None:
        return q
    return min(q, EXPERT_BYTES[m.expert_precision])


def stage_weight_bytes(m: ModelSpec, inst, precision: str, *, mtp_layers: int = 0) -> list[float]:
    """Weight bytes on one GPU of each pipeline stage (module docstring)."""
    sh = shape_of(m)
    q = bytes_per_param(precision)
    tp, G = inst.tp, inst.moe_group
    dense = sh.dense_tp / tp * q + sh.dense_rep * ACT_BYTES
    qe = expert_bytes_per_param(m, precision)
    moe = (
        (sh.moe_tp / tp * q + sh.moe_rep * ACT_BYTES + sh.moe_experts / G * qe) if m.is_moe else 0.0
    )
    vocab = m.vocab_size * m.hidden_size / tp * ACT_BYTES
    stages = stage_layers(m, inst.pp)
    out = []
    for s, (nd, nm) in enumerate(stages):
        w = nd * dense + nm * moe
        if s == 0:
            w += vocab + sh.emb_extra * ACT_BYTES
        if s == len(stages) - 1:
            w += (0.0 if (m.tied_embeddings and inst.pp == 1) else vocab) + sh.out_norm * ACT_BYTES
            if mtp_layers:  # each MTP layer: a transformer layer, 2 norms, a 2h x h projection
                layer = moe if m.is_moe else dense
                w += mtp_layers * (layer + 2 * m.hidden_size**2 * q + 2 * m.hidden_size * ACT_BYTES)
                if m.mtp_dedicated_embeddings:  # Qwen3.5: an embedding of its own per MTP layer
                    w += mtp_layers * vocab
        out.append(w)
    return out


def activation_bytes(m: ModelSpec, inst, *, tokens: int, batch: int) -> float:
    """Workspace of one engine step of `tokens` tokens (tokens/cp on each GPU: CP splits the
    prompt chunk) and fp32 logits for `batch` requests."""
    sh = shape_of(m)
    tp = inst.tp
    # a model with no dense layer and no dense width of its own (Qwen3.5's config has no
    # intermediate_size) has no dense MLP: no width is made up for it
    f = 0 if (sh.L_dense == 0 and m.ffn_hidden_size is None) else sh.f
    dense = 2 * m.hidden_size + (sh.q + 2 * sh.g * sh.d) / tp + 2 * f / tp
    per_token = dense
    if m.is_moe:
        routed = (inst.dp if inst.dp_attention else 1) * sh.k / inst.ep
        moe = 2 * m.hidden_size + routed * (m.hidden_size + 2 * sh.f_e / inst.etp) + 2 * sh.f_s / tp
        per_token = max(dense, moe)
    logits = batch * m.vocab_size / tp * 4
    return tokens / inst.cp * per_token * ACT_BYTES + logits


def instance_memory(job, inst) -> ServeMemory:
    """Memory of the most loaded GPU of one instance and the requests its KV cache holds."""
    m, hw, sv = job.model, job.hardware, job.serving
    st = engine_settings(job, inst)
    spec = sv.speculative
    mtp = m.mtp_num_layers if (spec is not None and spec.method == "mtp") else 0
    weights = stage_weight_bytes(m, inst, sv.precision, mtp_layers=mtp)
    draft_w = draft_kv = 0.0
    if job.draft is not None:  # the draft model runs tensor-parallel on the same GPUs
        from planner.serve.layout import Instance

        dinst = Instance(tp=inst.tp)
        draft_w = sum(stage_weight_bytes(job.draft, dinst, sv.precision)) / inst.pp
        draft_kv = (
            kv_bytes_per_token_layer(job.draft, inst.tp, sv.kv_dtype)
            * job.draft.num_layers
            / inst.pp
        )
    capacity = hw.memory_gib * 2**30
    batch = min(st.max_batch_size, 4096)
    act = activation_bytes(m, inst, tokens=st.max_num_tokens, batch=batch)
    other = (hw.cuda_context_gib + hw.nccl_buffer_gib) * 2**30 + st.cuda_graph_bytes
    kv_layer = kv_bytes_per_token_layer(m, inst.tp, sv.kv_dtype, inst.cp)
    plain = plain_kv(m)
    n_req = float(sv.input_length + sv.output_length)
    bounds = stage_bounds(m, inst.pp)
    best = None
    for s, ((nd, nm), w) in enumerate(zip(stage_layers(m, inst.pp), weights)):
        w = w + draft_w
        extra = mtp if s == inst.pp - 1 else 0
        if plain:
            kvpt = (nd + nm + extra) * kv_layer + draft_kv
        else:  # bytes of one request of n tokens over n (the MTP layers are full layers)
            kvpt = (
                kv_bytes_per_request(m, inst.tp, sv.kv_dtype, n_req, cp=inst.cp, layers=bounds[s])
                / n_req
                + extra * kv_layer
                + draft_kv
            )
        budget = kv_budget(st, capacity=capacity, weights=w, activations=act, other=other)
        tokens = int(budget // kvpt) if kvpt > 0 else 0
        if best is None or tokens < best[0]:
            best = (tokens, s, w, budget, kvpt)
    tokens, s, w, budget, kvpt = best
    per_request = round_up(sv.input_length + sv.output_length, st.block_tokens)
    by_kv = tokens // per_request
    conc = min(by_kv, st.max_batch_size)
    limited = "kv" if by_kv <= st.max_batch_size else "max_batch_size"
    return ServeMemory(
        weights=w,
        kv_cache=budget,
        activations=act,
        other=other,
        capacity=capacity,
        kv_bytes_per_token=kvpt,
        kv_tokens_capacity=tokens * inst.dp,
        max_concurrency=conc * inst.dp,
        limited_by=limited,
        stage=s,
        per_stage_weights=tuple(weights),
    )

"""MoE layers: expert GEMM sizes, the token dispatcher's traffic, and what overlap hides.

Routed copies: a rank holding T tokens sends k*cf copies of each to the experts (cf = the
capacity / imbalance factor on the hottest rank). A local expert's GEMM multiplies
    n_e = T * ep * k * cf / E        tokens (its share of the EP group's copies)
by its weights (h x f_e/etp): small for fine-grained experts (Qwen3, DeepSeek: f_e 768-2048),
so the grouped GEMM runs at the size-dependent efficiency of `gemm_efficiency` with
1/n = etp/f_e + 1/n_e.

Dispatchers (Megatron `--moe-token-dispatcher-type`, flex backends), per MoE layer forward
(dispatch + combine; backward repeats both), S = bytes of one copy = 2h (bf16):
  alltoall   NCCL all-to-all of every copy, S*T*k*cf each way, on the EP group's links
             (comm.all_to_all_time).
  allgather  all-gather of the tokens over the EP group and a reduce-scatter back:
             (ep-1) * T * 2h each way.
  deepep     DeepEP kernels: a token travels once to each distinct node it needs over RDMA
             and once to each distinct GPU over NVLink (dedup):
                 D(g) = g * (1 - C(E - E/g, k) / C(E, k))  distinct groups of g hit by top-k
             network bytes T * D(nodes) * (nodes-1)/nodes * 2h, NVLink bytes T * D(ranks) * 2h,
             concurrently.
             With group-limited routing (Megatron `moe_router_num_groups` G,
             `moe_router_group_topk` G_k; DeepSeek-V3 §2.1.2: each token to at most 4 of 8
             nodes) a token's k experts lie in G_k of the G groups, so the nodes it reaches are
             at most the nodes those G_k groups sit on:
                 D_lim(nodes) = D_groups * hit,  D_groups = distinct nodes of G_k groups
                 drawn from G (the same D with groups for experts), hit = D(G_k, G_k*E/G, k)/G_k
                 the chance a chosen group gets at least one of the k experts,
             taken where it is below the unlimited D(nodes); the GPUs it reaches are
             D(G_k*ep/G, G_k*E/G, k), the ranks of the chosen groups. One RDMA hop per node, then
             NVLink forwarding inside it (DeepEP's "normal kernels with NVLink and RDMA
             forwarding", deepseek-ai/DeepEP README: 43-51 GB/s RDMA of CX7's ~50 at EP 16-64,
             153-158 GB/s NVLink of H800's ~160).
  hybridep   the same deduplicated traffic (NVIDIA's HybridEP kernels).
Bytes per copy: BF16, 2h each way; with an FP8 recipe the DeepEP / HybridEP dispatch sends
FP8 with one fp32 scale per 128 elements, h * (1 + 4/128) bytes, and the combine stays BF16
(DeepSeek-V3 §3.3.2; DeepEP README: "FP8 dispatching and BF16 combining"); the backward's
dispatch (the combine's gradient) is BF16 and its combine (the dispatch's gradient) too.
Every dispatcher hands the experts' grouped GEMM its per-expert token counts, which
Transformer Engine's GroupedLinear takes as a host list: a device-to-host sync in every MoE
layer (launch.host_mode), unless the dispatch is padded to a fixed capacity, which
full-iteration CUDA graphs require (`cuda_graphs: full`).
`overlap_moe_expert_parallel_comm` (Megatron's 1F1B all-to-all overlap) and DualPipe pair a
micro-batch's forward with another's backward and run one's dispatch and combine under the
other's compute. For a paired micro-batch, with c its layer's traffic, W the compute it is
paired with (the layer's forward + backward) and η the profile's `ep_overlap_efficiency`
(the share of W the traffic can run under: the dependencies inside a layer leave some of it
exposed), the communication kernels take s = COMM_SM_SHARE of the SMs (DeepSeek-V3 §3.2: 20
of H800's 132 for DeepEP), so the compute under them runs at 1 - s:
    paired    max(c - η·W, s·c)     (all hidden: the compute slows by s·c; else what sticks out)
    unpaired  c                     (the first and last micro-batches of a stage: the warm-up
                                     forwards and cool-down backwards have no partner)
The pipeline part weighs them by the unpaired share u = min(1, w/m) of a stage's m
micro-batches, w = pp - rank for 1F1B (its warm-up forwards and the one at the seam) and
pp/2 for DualPipe (each end of the bidirectional pipeline half as long).

MoE compute besides the experts' FLOPs (`router_flops`, `tile_padded_tokens`):
  router     the gating GEMM, h x E per token: 2·h·E FLOPs forward (4·h·E backward: dgrad
             and wgrad), in BF16 (Transformer Engine does not quantize it; Megatron-Core's
             TopKRouter is a plain torch linear), on the tokens a rank routes. Its softmax /
             top-k and auxiliary-loss kernels are element-wise passes over the fp32 router
             logits and probabilities the layer stores (8E bytes a token), already in
             c_ew x the stored bytes.
  tile       a grouped GEMM computes each expert's rows in whole tiles of GEMM_TILE_M rows:
             the last tile of an expert is computed full whatever it holds. With the
             remainder of an expert's n tokens uniform over 0..t-1 the expected rows are
                 n + (t - 1)/2   (n >= (t + 1)/2),   t   (fewer: one tile)
             and the expert GEMM runs at n / that of its rate. t = 128: DeepGEMM's grouped
             contiguous layout aligns every expert's rows to its M block
             (deep_gemm `get_m_alignment_for_contiguous_layout()`: "always 128"), and
             CUTLASS's SM90 / SM100 grouped kernels tile M by 128 (64 at the smallest).
  padded     drop-and-pad (`moe_pad_expert_input_to_capacity`): every expert computes its
             capacity C = ceil(T·k·cf/E) rows from each of the ep·etp ranks (Megatron-Core's
             `get_capacity`, ceil(tokens·k/E·cf)), padding included, so n_e = ep·etp·C exactly
             and its tiles ceil(n_e/t)·t; a dropless expert's n_e is the mean with the
             remainder uniform (above).
"""

from __future__ import annotations

from math import ceil, comb

from planner.cost.comm import Link, all_gather_time, all_to_all_time, reduce_scatter_time

__all__ = [
    "distinct_groups",
    "limited_nodes",
    "expert_tokens",
    "dispatch_seconds",
    "exposed_dispatch",
    "unpaired_share",
    "FP8_DISPATCH_BYTES",
    "COMM_SM_SHARE",
    "GEMM_TILE_M",
    "router_flops",
    "tile_padded_tokens",
]

GEMM_TILE_M = 128
"""Rows of a grouped GEMM's tile (DeepGEMM's contiguous-layout M alignment, CUTLASS's M tile)."""


def router_flops(h: int, experts: int) -> float:
    """FLOPs of the router GEMM per routed token, forward: 2·h·E (backward twice that)."""
    return 2.0 * h * experts if experts else 0.0


def tile_padded_tokens(n: float, tile: int = GEMM_TILE_M, *, padded: bool = False) -> float:
    """Rows a grouped GEMM computes for an expert with n tokens: n + (tile - 1)/2 (the last
    tile's expected empty rows, the remainder uniform), one whole tile below (tile + 1)/2.
    Padded to the capacity (`padded`) every expert holds exactly n rows: ceil(n/tile)·tile."""
    if n <= 0:
        return 0.0
    if padded:
        return float(ceil(n / tile - 1e-9) * tile)
    return float(tile) if n < (tile + 1) / 2 else n + (tile - 1) / 2


_KERNEL_LATENCY_S = 20e-6  # a DeepEP / HybridEP dispatch or combine kernel's fixed cost
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128
"""Bytes per element of an FP8 dispatch: 1 byte plus one fp32 scale per 1x128 block."""


def distinct_groups(groups: int, experts: int, k: int) -> float:
    """Expected distinct groups (ranks or nodes, each holding experts/groups experts) that a
    token's top-k experts fall in, for uniform routing: g * (1 - C(E - E/g, k) / C(E, k))."""
    if groups <= 1 or experts <= 0:
        return 1.0
    per = experts // groups
    if k >= experts - per + 1:
        return float(groups)
    return groups * (1.0 - comb(experts - per, k) / comb(experts, k))


def limited_nodes(
    nodes: int, experts: int, k: int, groups: int | None, group_topk: int | None
) -> float:
    """Expected distinct nodes a token reaches: D(nodes) for free routing, and with
    group-limited routing (G groups, G_k of them per token) at most D_groups * hit, where
    D_groups = the distinct nodes of G_k of the G groups (groups spread evenly, G/nodes to a
    node when G >= nodes) and hit = D(G_k, G_k*E/G, k)/G_k."""
    free = distinct_groups(nodes, experts, k)
    if not groups or not group_topk or group_topk >= groups or nodes <= 1:
        return free
    if groups >= nodes:
        d_groups = distinct_groups(nodes, groups, group_topk)
    else:  # a group spans nodes/groups nodes
        d_groups = group_topk * nodes / groups
    hit = distinct_groups(group_topk, group_topk * experts // groups, k) / group_topk
    return min(free, d_groups * hit)


def expert_tokens(*, tokens: float, ep: int, k: int, cf: float, experts: int) -> float:
    """Tokens one local expert's GEMM gets per micro-batch: T * ep * k * cf / E."""
    return tokens * ep * k * cf / max(experts, 1)


def dispatch_seconds(
    kind: str,
    *,
    tokens: float,
    h: int,
    k: int,
    cf: float,
    experts: int,
    ep: int,
    link: Link,
    elem_bytes: float = 2.0,
    dispatch_bytes: float | None = None,
    groups: int | None = None,
    group_topk: int | None = None,
) -> float:
    """Dispatch + combine of one MoE layer's forward on one rank holding `tokens` tokens.
    `dispatch_bytes` (per element; default `elem_bytes`) is the dispatch's, the combine's is
    `elem_bytes` (DeepEP / HybridEP only: FP8 dispatch, BF16 combine); `groups` /
    `group_topk` the router's group limit (DeepEP / HybridEP: fewer nodes per token)."""
    if ep <= 1:
        return 0.0
    row = elem_bytes * h
    if kind == "alltoall":
        return 2.0 * all_to_all_time(tokens * k * cf * row, ep, link)
    if kind == "allgather":
        full = tokens * ep * row  # the gathered buffer
        return all_gather_time(full, ep, link) + reduce_scatter_time(full, ep, link)
    # deepep / hybridep: deduplicated per node over the network and per GPU over NVLink
    local = link.local_ranks if link.crosses_network else ep
    nodes = max(1, ep // max(local, 1))
    ranks = distinct_groups(ep, experts, k) * cf
    if groups and group_topk and group_topk < groups and ep % groups == 0:
        # the k experts lie among the G_k*E/G experts on the G_k*ep/G ranks of the chosen groups
        ranks = min(
            ranks,
            distinct_groups(group_topk * ep // groups, group_topk * experts // groups, k) * cf,
        )
    inside = tokens * ranks / link.nvlink_bandwidth
    outside = 0.0
    if link.crosses_network and nodes > 1:
        remote = limited_nodes(nodes, experts, k, groups, group_topk) * (nodes - 1) / nodes * cf
        outside = tokens * remote / link.network_bandwidth
    rows = h * (dispatch_bytes if dispatch_bytes is not None else elem_bytes) + row
    return max(inside, outside) * rows + 2.0 * (_KERNEL_LATENCY_S + link.latency)


COMM_SM_SHARE = 20 / 132
"""The SMs the overlapped dispatch / combine kernels take from the compute (DeepSeek-V3 report,
arXiv:2412.19437 §3.2: 20 of the H800's 132 SMs)."""


def exposed_dispatch(comm: float, *, window: float, overlap: bool, hide: float) -> float:
    """What of a paired micro-batch's layer traffic `comm` stays on the critical path: all of
    it without overlap, else max(comm - hide*window, COMM_SM_SHARE*comm) (the compute it runs
    under slows by the SMs the communication kernels take)."""
    if not overlap:
        return comm
    return max(comm - hide * window, COMM_SM_SHARE * comm)


def unpaired_share(schedule: str, *, p: int, rank: int, m: int) -> float:
    """The share of a stage's m micro-batches whose dispatch has no compute partner: w/m,
    w = p - rank for 1F1B (warm-up forwards and the seam), max(1, p/2) for DualPipe(V)."""
    w = max(1.0, p / 2) if schedule in ("dualpipe", "dualpipev") else float(max(1, p - rank))
    return min(1.0, w / max(m, 1))

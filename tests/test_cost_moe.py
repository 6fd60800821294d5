"""MoE dispatch traffic (planner/cost/moe.py): DeepEP's node-limited volume, FP8 dispatch with
BF16 combine, derived on small cases.

Sources: DeepSeek-V3 report (arXiv:2412.19437) §2.1.2 (node-limited routing: each token to at
most M = 4 nodes), §3.2 (dispatch over IB to the same-index GPU of each target node, then
NVLink forwarding), §3.3.2 (FP8 dispatch, BF16 combine); deepseek-ai/DeepEP README ("Normal
kernels with NVLink and RDMA forwarding", the V3 setting: 7168 hidden, top-4 groups, top-8
experts, FP8 dispatching and BF16 combining).
"""

from __future__ import annotations

from math import comb

import pytest

from planner.cost.comm import Link
from planner.cost.moe import (
    COMM_SM_SHARE,
    FP8_DISPATCH_BYTES,
    dispatch_seconds,
    distinct_groups,
    exposed_dispatch,
    limited_nodes,
    unpaired_share,
)

# DeepSeek-V3: 256 routed experts, top-8, EP 64 over 8 nodes of 8 GPUs, 8 groups, top-4 groups
E, K, EP, NODES, G, GK, H = 256, 8, 64, 8, 8, 4, 7168
NVL, NET = 160e9, 50e9  # DeepEP README: H800 ~160 GB/s NVLink, CX7 ~50 GB/s RDMA
LINK = Link(
    bandwidth=NET * 8,
    latency=8e-6,
    crosses_network=True,
    local_ranks=8,
    nvlink_bandwidth=NVL,
    network_bandwidth=NET,
)


def _miss(pool: int, out: int, k: int) -> float:
    """P(none of k draws without replacement from `pool` lands in a given `out` of them)."""
    return comb(pool - out, k) / comb(pool, k)


@pytest.mark.parametrize(
    "groups, experts, k, want",
    [
        # 8 nodes of 32 experts, top-8: 8 * (1 - C(224, 8) / C(256, 8))
        (8, 256, 8, 8 * (1 - _miss(256, 32, 8))),
        # 4 groups chosen of 8 (groups as the 'experts', 1 per node): 8 * (1 - C(7,4)/C(8,4)) = 4
        (8, 8, 4, 4.0),
        # one group: always 1; k covering all but one group's experts: every group
        (1, 64, 8, 1.0),
        (4, 8, 7, 4.0),
    ],
    ids=["v3-nodes-free", "v3-groups", "one-group", "k-covers-all"],
)
def test_distinct_groups(groups, experts, k, want):
    assert distinct_groups(groups, experts, k) == pytest.approx(want, rel=1e-12)


def test_node_limited_routing_reaches_at_most_the_group_limit():
    # the 4 chosen groups sit on 4 distinct nodes (one group per node: D = 4 exactly); each
    # chosen group gets >= 1 of the 8 experts drawn from its 4*32 = 128 with probability
    # 1 - C(96, 8)/C(128, 8)
    hit = 1 - _miss(128, 32, 8)
    want = 4 * hit
    got = limited_nodes(NODES, E, K, G, GK)
    assert got == pytest.approx(want, rel=1e-12)
    assert got <= GK  # §2.1.2: at most 4 nodes per token
    assert got < limited_nodes(NODES, E, K, None, None)  # free routing reaches ~5.3 nodes
    assert limited_nodes(NODES, E, K, None, None) == pytest.approx(
        8 * (1 - _miss(256, 32, 8)), rel=1e-12
    )


def test_deepep_node_limited_volume_fp8_dispatch_bf16_combine():
    # One rank with T tokens: each token crosses the network once to each distinct remote node
    # it needs (the share (nodes-1)/nodes of the D_lim nodes is remote) and is forwarded over
    # NVLink once to each distinct GPU of the chosen groups: D(32 ranks, 128 experts, 8).
    # Dispatch carries FP8 + one fp32 scale per 128 (h * 1.03125 bytes), combine BF16 (2h).
    T = 4096
    remote = limited_nodes(NODES, E, K, G, GK) * (NODES - 1) / NODES
    ranks = 32 * (1 - _miss(128, 4, 8))
    row = H * (1 + 4 / 128) + 2 * H
    net_s = T * remote * row / NET
    nvl_s = T * ranks * row / NVL
    want = max(net_s, nvl_s) + 2 * (20e-6 + LINK.latency)
    got = dispatch_seconds(
        "deepep",
        tokens=T,
        h=H,
        k=K,
        cf=1.0,
        experts=E,
        ep=EP,
        link=LINK,
        dispatch_bytes=FP8_DISPATCH_BYTES,
        groups=G,
        group_topk=GK,
    )
    assert got == pytest.approx(want, rel=1e-12)
    assert net_s > nvl_s  # the RDMA side is DeepEP's bottleneck (README)
    # network bytes per token and direction, about 3.2 nodes of 7168 bytes FP8 dispatch
    assert remote * H * FP8_DISPATCH_BYTES == pytest.approx(
        4 * (1 - _miss(128, 32, 8)) * 7 / 8 * 7168 * 1.03125, rel=1e-12
    )
    # BF16 both ways moves 4h per copy where FP8 dispatch moves 3.03h
    bf16 = dispatch_seconds(
        "deepep", tokens=T, h=H, k=K, cf=1.0, experts=E, ep=EP, link=LINK, groups=G, group_topk=GK
    )
    assert (bf16 - 2 * (20e-6 + LINK.latency)) / (
        got - 2 * (20e-6 + LINK.latency)
    ) == pytest.approx(4 / (2 + FP8_DISPATCH_BYTES), rel=1e-12)


def test_group_limit_does_not_change_the_flat_all_to_all():
    # NCCL's all-to-all sends every routed copy (no dedup): the router's group limit changes
    # where copies go, not how many
    kw = dict(tokens=4096, h=H, k=K, cf=1.0, experts=E, ep=EP, link=LINK)
    assert dispatch_seconds("alltoall", **kw) == dispatch_seconds(
        "alltoall", groups=G, group_topk=GK, **kw
    )


@pytest.mark.parametrize(
    "comm, window, hide, want",
    [
        # the compute window three times the traffic: all hidden, the compute slowed by the SMs
        # the communication kernels take, 20 of 132 (DeepSeek-V3 §3.2): 20/132 * 1.0
        (1.0, 3.0, 0.9, 20 / 132),
        # the traffic beyond the usable window sticks out: 2.0 - 0.9 * 1.0 = 1.1
        (2.0, 1.0, 0.9, 1.1),
        # no window: all of it
        (1.0, 0.0, 0.9, 1.0),
    ],
    ids=["window-3x", "comm-exceeds-window", "no-window"],
)
def test_paired_exposed_dispatch(comm, window, hide, want):
    assert exposed_dispatch(comm, window=window, overlap=True, hide=hide) == pytest.approx(want)
    assert exposed_dispatch(comm, window=window, overlap=False, hide=hide) == comm
    assert COMM_SM_SHARE == pytest.approx(20 / 132)


@pytest.mark.parametrize(
    "schedule, p, rank, m, want",
    [
        ("1f1b", 1, 0, 8, 1 / 8),  # pp 1: the first forward and the last backward, 1 of 8
        ("1f1b", 4, 0, 16, 4 / 16),  # rank 0 of 4: 3 warm-up forwards and the seam
        ("1f1b", 4, 3, 16, 1 / 16),  # the last rank: no warm-up
        ("1f1b", 8, 0, 4, 1.0),  # fewer micro-batches than stages: none paired
        ("dualpipe", 16, 0, 64, 8 / 64),  # each end of the bidirectional pipeline: pp/2
    ],
    ids=["pp1", "pp4-rank0", "pp4-last", "m-below-p", "dualpipe-pp16"],
)
def test_unpaired_share(schedule, p, rank, m, want):
    assert unpaired_share(schedule, p=p, rank=rank, m=m) == pytest.approx(want)


def test_overlap_law_in_a_step():
    # EP exposed per MoE layer and micro-batch on a pp-1 rank: the paired law on (m-1)/m of
    # the micro-batches, all of it on 1/m (Qwen3-30B-A3B on 16 H100, ep 16, alltoall)
    from planner.config import config_from_data
    from planner.cost import estimate
    from planner.cost.model import CostModel

    job, lay = config_from_data(
        {
            "model": {
                "name": "q",
                "num_layers": 4,
                "hidden_size": 2048,
                "num_attention_heads": 32,
                "num_kv_heads": 4,
                "kv_channels": 128,
                "vocab_size": 151936,
                "ffn_hidden_size": 6144,
                "num_experts": 128,
                "moe_top_k": 8,
                "moe_ffn_hidden_size": 768,
                "num_dense_layers": 0,
            },
            "hardware": "h100-sxm",
            "num_gpus": 16,
            "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "bf16"},
            "parallel": {
                "ep": 16,
                "moe_token_dispatcher": "alltoall",
                "overlap_moe_expert_parallel_comm": True,
                "micro_batch_size": 1,
            },
        }
    )
    cm = CostModel(job)
    lc = cm.layer_costs(lay)
    m = lay.num_microbatches(64)
    assert m == 4 and lc.ep_end > lc.ep
    want = m * 4 * ((1 - 1 / m) * lc.ep + 1 / m * lc.ep_end)
    assert estimate(job, lay).time.ep_comm_s == pytest.approx(want, rel=1e-9)


def test_router_group_limit_round_trips_through_megatron(tmp_path):
    # Megatron's --moe-router-num-groups / --moe-router-group-topk carry the group limit both
    # ways (the deepseek-v3 preset: 8 groups, 4 a token; its config.json n_group / topk_group)
    from planner.config import config_from_data
    from planner.frameworks import load_any
    from planner.frameworks.export import export

    job, lay = config_from_data(
        {
            "model": "deepseek-v3",
            "hardware": "h800",
            "num_gpus": 2048,
            "parallel": {
                "pp": 16,
                "ep": 64,
                "etp": 1,
                "first_stage_layers": 3,
                "last_stage_layers": 2,
            },
        }
    )
    assert (job.model.moe_router_num_groups, job.model.moe_router_group_topk) == (8, 4)
    text = export(job, lay, "megatron")
    assert "--moe-router-num-groups 8" in text and "--moe-router-group-topk 4" in text
    script = tmp_path / "train.sh"
    script.write_text(text)
    back = load_any(script, hardware="h800", gpus=2048)
    assert (back.job.model.moe_router_num_groups, back.job.model.moe_router_group_topk) == (8, 4)

"""Collectives on the link each parallel axis really uses (alpha-beta model,
docs/reference/formulas.md#f6-collectives).

Ring collectives over n ranks, S bytes, achieved bandwidth B, per-step latency α:
    all-reduce            2(n-1)/n * S/B + 2(n-1)α
    reduce-scatter        (n-1)/n * S/B + (n-1)α        (all-gather the same)
    all-to-all            (n-1)/n * S/B + α + (n-1)δ    (S = bytes each rank sends in total)
    point-to-point        S/B + α
    CP ring (one layer)   (cp-1) * (S/B + α)             (S = the local K/V block; ring attention)
    exposed               max(0, t_comm - hide * t_compute)   (what overlap leaves visible)
Placement (Megatron rank order tp-cp-ep-dp-pp, innermost first): a group of n ranks spaced
`stride` apart covers n*stride consecutive ranks. If that fits in one NVLink domain the group
runs on NVLink at `nvlink_bandwidth * nvlink_efficiency`. Otherwise it crosses the network:
a hierarchical (NCCL multi-ring / NVLS) reduction spreads the inter-node volume over the
`g = domain/stride` ranks of the group inside each domain, each with its own NIC, so the
achieved bandwidth is min(NVLink, g * network) (efficiencies applied); an all-to-all sends
the off-domain share (n - g)/n of its bytes over the NIC and the rest over NVLink.

The all-to-all is not a ring: NCCL runs it as one group of ncclSend/ncclRecv to every peer
(NCCL user guide, "Point-to-point communication", all-to-all: the calls in a group "progress
independently"), so the sends are in flight at once and the latency is paid once, α of the
slowest tier, plus a per-peer issue cost δ = A2A_PEER_ISSUE_S (~1 µs: the proxy posts one
work request per peer and channel) for each of the n-1 peers. Over 128 ranks across nodes that
is 8 + 127 µs, not the ring's 127 × 8 µs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Link",
    "group_link",
    "all_reduce_time",
    "reduce_scatter_time",
    "all_gather_time",
    "all_to_all_time",
    "p2p_time",
    "ring_all_reduce_volume",
    "cp_ring_time",
    "exposed_time",
    "A2A_PEER_ISSUE_S",
    "all_to_all_latency",
]

A2A_PEER_ISSUE_S = 1e-6
"""δ: the per-peer issue cost of NCCL's grouped all-to-all (one send and one receive posted per
peer; ~1 µs each, the order of one small ncclSend's host-side launch)."""


@dataclass(frozen=True, slots=True)
class Link:
    """Achieved bandwidth (bytes/s) and per-step latency (s) of one group's collectives."""

    bandwidth: float
    latency: float
    crosses_network: bool
    local_ranks: int  # ranks of the group inside one NVLink domain
    nvlink_bandwidth: float  # achieved NVLink bandwidth (for the all-to-all split)
    network_bandwidth: float  # achieved per-GPU network bandwidth


def group_link(
    *,
    n: int,
    stride: int,
    domain: int,
    nvlink_bw: float,
    network_bw: float,
    nvlink_lat: float,
    network_lat: float,
) -> Link:
    """The link tier of a group of n ranks spaced `stride` apart (bandwidths already achieved)."""
    if n <= 1 or n * stride <= domain:
        return Link(nvlink_bw, nvlink_lat, False, max(1, n), nvlink_bw, network_bw)
    local = max(1, min(n, domain // stride))
    bw = min(nvlink_bw, local * network_bw)
    return Link(bw, network_lat, True, local, nvlink_bw, network_bw)


def ring_all_reduce_volume(size: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(n-1)/n * S."""
    return 2.0 * (n - 1) / n * size if n > 1 else 0.0


def all_reduce_time(size: float, n: int, link: Link) -> float:
    """2(n-1)/n * S/B + 2(n-1)α."""
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n * size / link.bandwidth + 2.0 * (n - 1) * link.latency


def reduce_scatter_time(size: float, n: int, link: Link) -> float:
    """(n-1)/n * S/B + (n-1)α, S = the full (unsharded) buffer."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * size / link.bandwidth + (n - 1) * link.latency


all_gather_time = reduce_scatter_time


def all_to_all_latency(n: int, link: Link) -> float:
    """α + (n-1)δ: the sends to all n-1 peers are posted at once (NCCL's grouped send/recv),
    the slowest tier's latency paid once and δ per peer."""
    return link.latency + (n - 1) * A2A_PEER_ISSUE_S if n > 1 else 0.0


def all_to_all_time(size: float, n: int, link: Link) -> float:
    """(n-1)/n * S/B + α + (n-1)δ; across domains the off-domain share (n-g)/n goes over the
    network and the rest over NVLink, concurrently: max of the two."""
    if n <= 1:
        return 0.0
    if not link.crosses_network:
        return (n - 1) / n * size / link.bandwidth + all_to_all_latency(n, link)
    g = link.local_ranks
    inside = (g - 1) / n * size / link.nvlink_bandwidth
    outside = (n - g) / n * size / link.network_bandwidth
    return max(inside, outside) + all_to_all_latency(n, link)


def p2p_time(size: float, link: Link) -> float:
    """S/B + α."""
    return size / link.bandwidth + link.latency


def cp_ring_time(size: float, cp: int, link: Link) -> float:
    """Ring attention's K/V exchange in one layer's forward: each of the cp ranks passes its
    local K/V block of S bytes on cp-1 times, (cp-1) * (S/B + α); 0 without CP."""
    if cp <= 1:
        return 0.0
    return (cp - 1) * p2p_time(size, link)


def exposed_time(comm: float, compute: float, hide: float) -> float:
    """The part of `comm` seconds that overlapping with `compute` seconds leaves visible:
    max(0, comm - hide * compute), `hide` the achieved overlap (Calibration.overlap_efficiency)."""
    return max(0.0, comm - hide * compute)

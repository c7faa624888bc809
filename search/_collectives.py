"""Collective and point-to-point times on the link a group really uses.

Ring algorithms (nccl-tests ``doc/PERFORMANCE.md``): an all-reduce of S bytes over n ranks
moves ``2(n-1)/n * S`` per rank, an all-gather or reduce-scatter ``(n-1)/n * S``; the time
is that traffic over the bus bandwidth plus a latency term (Hockney alpha-beta model).
"""

from __future__ import annotations

from dataclasses import dataclass

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec


@dataclass(frozen=True, slots=True)
class Link:
    """Bus bandwidth and latency of one communication group."""

    bus_bytes_per_s: float
    latency_s: float
    inter_node: bool


def group_link(cluster: ClusterSpec, size: int, stride: int, cal: Calibration) -> Link:
    """The link used by a group of ``size`` ranks spaced ``stride`` apart in rank order.

    Ranks fill a node first (Megatron order: tp innermost, then cp, dp, pp), nodes fill an NVLink
    domain (one node, or an NVL72 rack). A group inside one NVLink domain runs on NVLink; a group
    spanning domains is limited by the NICs its members per domain can use in parallel (one rail
    per GPU: ``k`` members per domain give ``k`` NICs, as NCCL spreads rings over rails), never
    above NVLink.
    """
    node = cluster.node
    gpn = node.nvlink_domain
    nvlink = node.intra_node_bytes_per_s
    if size <= 1 or stride * size <= gpn:
        return Link(nvlink, cal.collective_latency_s, False)
    members_per_node = 1 if stride >= gpn else min(size, gpn // stride)
    network = members_per_node * node.nic_bytes_per_s_per_gpu
    return Link(min(nvlink, network), cal.collective_latency_s, True)


def p2p_link(cluster: ClusterSpec, size: int, stride: int, cal: Calibration) -> Link:
    """Link of the neighbour-to-neighbour transfers in a ring or chain of ``size`` ranks ``stride``
    apart (pipeline stages, ring attention): NVLink when the whole chain sits in one NVLink domain;
    otherwise the slowest hop, which crosses domains on one GPU's NIC (one rail per GPU)."""
    node = cluster.node
    if stride * size <= node.nvlink_domain:
        return Link(node.intra_node_bytes_per_s, cal.collective_latency_s, False)
    return Link(node.nic_bytes_per_s_per_gpu, cal.collective_latency_s, True)


def all_reduce_time_s(size_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce: ``alpha + 2(n-1)/n * S / busbw`` (nccl-tests busbw definition)."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return link.latency_s + 2.0 * (ranks - 1) / ranks * size_bytes / link.bus_bytes_per_s


def all_gather_time_s(size_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-gather of a ``size_bytes`` result: ``alpha + (n-1)/n * S / busbw``.

    Reduce-scatter of a ``size_bytes`` input costs the same (nccl-tests PERFORMANCE.md).
    """
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    return link.latency_s + (ranks - 1) / ranks * size_bytes / link.bus_bytes_per_s


reduce_scatter_time_s = all_gather_time_s


def p2p_time_s(size_bytes: float, bytes_per_s: float, latency_s: float) -> float:
    """One send/recv: ``alpha + S / bandwidth``."""
    if size_bytes <= 0:
        return 0.0
    return latency_s + size_bytes / bytes_per_s


def all_to_all_time_s(size_bytes: float, ranks: int, cluster: ClusterSpec, stride: int, cal: Calibration) -> float:
    """All-to-all in which each of ``ranks`` ranks (``stride`` apart in rank order) sends
    ``size_bytes`` in total, an equal share to every rank including itself (nccl-tests alltoall:
    busbw = algbw x (n-1)/n). Shares to ranks in the same NVLink domain (the node, or an NVL72 rack)
    cross NVLink; the others leave through the NICs, one rail per GPU. The two run concurrently:
    the slower sets the time, plus one collective latency."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    node = cluster.node
    gpn = node.nvlink_domain
    local = ranks if stride * ranks <= gpn else max(1, gpn // stride) if stride < gpn else 1
    intra_s = size_bytes * (local - 1) / ranks / node.intra_node_bytes_per_s
    inter_s = size_bytes * (ranks - local) / ranks / node.nic_bytes_per_s_per_gpu
    return cal.collective_latency_s + max(intra_s, inter_s)

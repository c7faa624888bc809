"""Collective and point-to-point times on the link a group really uses.

Ring algorithms (nccl-tests ``doc/PERFORMANCE.md``): an all-reduce of S bytes over n ranks
moves ``2(n-1)/n * S`` per rank, an all-gather or reduce-scatter ``(n-1)/n * S``; the time
is that traffic over the bus bandwidth plus a latency term (Hockney alpha-beta model).

Where a group lands (:func:`search._fabric.group_span`) decides its link: inside one NVLink
domain the node's measured bus bandwidth, which is NCCL's own pick there (NVLS, the NVSwitch's
in-switch reduction, on H100/H200/B200/B300 and NVL72 systems, ``NodeSpec.nvls``; ring on older
NVSwitch boards); across domains the rails its members per domain use, at the bandwidth of the
highest fabric tier it spans (:mod:`search._fabric`). Across nodes NCCL chooses ring or tree for
an all-reduce by its own alpha-beta model (``src/graph/tuning.cc``, ``ncclTopoTuneModel``): tree's
algorithm bandwidth is ``0.9 x 0.5`` of the bus bandwidth, ring's ``n / 2(n-1)`` of it, so for the
bandwidth-bound messages costed here (gradient buckets and activations of megabytes) ring is its
choice and tree only wins on latency (``log2`` of the nodes against ring's ``2(n-1)`` hops), which the
calibrated single latency does not tell apart. With in-network reduction on the fabric (SHARP,
NCCL's CollNet) the all-reduce is the faster of ring and SHARP.
"""

from __future__ import annotations

from dataclasses import dataclass

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._fabric import Group, group_span

SHARP_EFFICIENCY = 0.9
"""Achieved fraction of the rail bandwidth of a CollNet (SHARP) all-reduce: NCCL's model corrects
CollNet's bus bandwidth by ``.9`` (``src/graph/tuning.cc``, ``if (a == NCCL_ALGO_COLLNET) busBw *= .9``)."""


@dataclass(frozen=True, slots=True)
class Link:
    """Bus bandwidth and latency of one communication group."""

    bus_bytes_per_s: float
    latency_s: float
    inter_node: bool
    sharp_bytes_per_s: float = 0.0
    """Algorithm bandwidth of an in-network (SHARP) all-reduce over this group; 0: none."""
    tier: int = -1
    """Highest fabric tier the group spans (index into ``ClusterSpec.fabric.tiers``); -1 on NVLink."""


def _max_rank(group: Group) -> int:
    return sum((size - 1) * stride for size, stride in group)


def rail_bytes_per_s(cluster: ClusterSpec, tier: int) -> float:
    """Bus bandwidth of one GPU's rail for a group whose highest fabric tier is ``tier``: the tier's
    measured figure when the profile has one, else the node's NIC share over the oversubscription
    of the uplinks the group's traffic crosses (:meth:`search._fabric.Fabric.slowdown`)."""
    fabric = cluster.fabric
    measured = fabric.tiers[tier].bus_bytes_per_s
    if measured is not None:
        return measured
    return cluster.node.nic_bytes_per_s_per_gpu / fabric.slowdown(tier)


def link_of(cluster: ClusterSpec, group: Group, cal: Calibration) -> Link:
    """The link of ``group`` (its (size, stride) dimensions in rank order, :data:`search._fabric.Group`).

    Ranks fill a node first, nodes fill an NVLink domain (one node, or an NVL72 rack), domains fill
    the fabric's leaves. A group inside one NVLink domain runs on NVLink; a group spanning domains
    is limited by the rails its members per domain can use in parallel (one rail per GPU: ``k``
    members per domain give ``k`` NICs, as NCCL spreads rings over rails), each at the bandwidth
    of the highest tier the group spans, never above NVLink.
    """
    node = cluster.node
    nvlink = node.intra_node_bytes_per_s
    if _max_rank(group) < node.nvlink_domain:
        return Link(nvlink, cal.collective_latency_s, False)
    span = group_span(group, node.gpus_per_node, node.nvlink_domain, cluster.fabric)
    if span.size <= 1:
        return Link(nvlink, cal.collective_latency_s, False)
    network = span.domain_members * rail_bytes_per_s(cluster, span.tier)
    sharp = 0.0
    if cluster.fabric.sharp:  # reduced in the switches: one stream up per rail, no oversubscription
        sharp = min(nvlink, SHARP_EFFICIENCY * span.domain_members * rail_bytes_per_s(cluster, 0))
    return Link(min(nvlink, network), cal.collective_latency_s, True, sharp, span.tier)


def group_link(cluster: ClusterSpec, size: int, stride: int, cal: Calibration) -> Link:
    """The link used by a group of ``size`` ranks spaced ``stride`` apart in rank order
    (:func:`link_of` of the one-dimensional group)."""
    return link_of(cluster, ((size, stride),), cal)


def p2p_link_of(cluster: ClusterSpec, group: Group, cal: Calibration) -> Link:
    """Link of the neighbour-to-neighbour transfers in a ring or chain of ``group``'s ranks
    (pipeline stages, ring attention): NVLink when the whole chain sits in one NVLink domain;
    otherwise the slowest hop, which crosses domains on one GPU's rail at the bandwidth of the
    highest tier the chain spans."""
    node = cluster.node
    if _max_rank(group) < node.nvlink_domain:
        return Link(node.intra_node_bytes_per_s, cal.collective_latency_s, False)
    span = group_span(group, node.gpus_per_node, node.nvlink_domain, cluster.fabric)
    return Link(rail_bytes_per_s(cluster, span.tier), cal.collective_latency_s, True, tier=span.tier)


def p2p_link(cluster: ClusterSpec, size: int, stride: int, cal: Calibration) -> Link:
    """:func:`p2p_link_of` a chain of ``size`` ranks ``stride`` apart."""
    return p2p_link_of(cluster, ((size, stride),), cal)


def all_reduce_time_s(size_bytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce, ``alpha + 2(n-1)/n * S / busbw`` (nccl-tests busbw definition), or with
    in-network reduction on the link the faster of it and SHARP's ``alpha + S / algbw`` (each GPU
    sends its data once and receives the result once)."""
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    ring = link.latency_s + 2.0 * (ranks - 1) / ranks * size_bytes / link.bus_bytes_per_s
    if link.sharp_bytes_per_s:
        return min(ring, link.latency_s + size_bytes / link.sharp_bytes_per_s)
    return ring


def all_reduce_algorithm(link: Link, ranks: int, nvls: bool) -> str:
    """The all-reduce algorithm NCCL would run on ``link`` for a bandwidth-bound message: ``nvls``
    inside an NVLink domain whose switches reduce (``NodeSpec.nvls``), else ``ring``; across nodes
    ``sharp`` when in-network reduction is faster than the ring (see the module docstring)."""
    if not link.inter_node:
        return "nvls" if nvls else "ring"
    if link.sharp_bytes_per_s and 1.0 / link.sharp_bytes_per_s < 2.0 * (ranks - 1) / ranks / link.bus_bytes_per_s:
        return "sharp"
    return "ring"


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
    """:func:`all_to_all_group_s` of ``ranks`` ranks ``stride`` apart."""
    return all_to_all_group_s(size_bytes, ((ranks, stride),), cluster, cal)


def all_to_all_group_s(size_bytes: float, group: Group, cluster: ClusterSpec, cal: Calibration) -> float:
    """All-to-all in which each rank of ``group`` sends ``size_bytes`` in total, an equal share to
    every rank including itself (nccl-tests alltoall: busbw = algbw x (n-1)/n). Shares to ranks in
    the same NVLink domain (the node, or an NVL72 rack) cross NVLink; the others leave through the
    GPU's rail, those to ranks under the same leaf at the rail's bandwidth, those to other leaves at
    the bandwidth of the highest tier the group spans (they share the one NIC, so their times add).
    NVLink and the NIC run concurrently: the slower sets the time, plus one collective latency."""
    ranks = 1
    for size, _ in group:
        ranks *= size
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    node = cluster.node
    if _max_rank(group) < node.nvlink_domain:
        return cal.collective_latency_s + size_bytes * (ranks - 1) / ranks / node.intra_node_bytes_per_s
    span = group_span(group, node.gpus_per_node, node.nvlink_domain, cluster.fabric)
    local, leaf = span.domain_members, span.leaf_members
    intra_s = size_bytes * (local - 1) / ranks / node.intra_node_bytes_per_s
    inter_s = size_bytes * (ranks - leaf) / ranks / rail_bytes_per_s(cluster, span.tier)
    if leaf > local:
        inter_s += size_bytes * (leaf - local) / ranks / rail_bytes_per_s(cluster, 0)
    return cal.collective_latency_s + max(intra_s, inter_s)

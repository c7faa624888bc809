"""The scale-out network as data: a fat tree of tiers (leaf, spine, optional core) above the nodes.

A node's NICs (one rail per GPU on DGX / NVL72 systems: ``NodeSpec.nic_bytes_per_s_per_gpu``)
reach the leaf tier at line rate; each tier above is reached through uplinks that may be
*oversubscribed* (a 2:1 leaf has half as much bandwidth up as down). A communication group is
costed on the highest tier it spans: traffic of a group whose members sit under different
leaves climbs to the spine and, with every group of a synchronous step sending at the same
time, gets the rail bandwidth divided by the oversubscription of the uplinks it crosses
(DGX SuperPOD reference architectures build these fabrics rail-optimized and non-blocking, 1:1;
Meta's Llama 3 cluster is 1:1 inside a 3,072-GPU pod and 1:7 between pods, Dubey et al. 2024,
arXiv:2407.21783 Sec. 3.3.1).

In-network reduction (SHARP; NCCL's CollNet algorithm with the SHARP plugin) reduces in the
switches: each GPU sends its data up once and receives the result once, and the uplinks carry one
reduced stream per switch, so an all-reduce is neither doubled like a ring's nor slowed by
oversubscription (:func:`search._collectives.all_reduce_time_s`).

The default, ``Fabric()``, is one non-blocking tier over all nodes: today's single inter-node
figure, exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache
from typing import Any

from search._errors import SpecError

TIER_NAMES: tuple[str, ...] = ("leaf", "spine", "core")
"""Tier names bottom up; a fabric has the first one, two or three."""
OVERSUBSCRIPTION = (1.0, 64.0)
"""Physical range of a tier's oversubscription (down:up bandwidth of the uplinks into it): 1 is
non-blocking; 1:7 is the most found in published AI fabrics (Llama 3's aggregation layer)."""
RAIL_BYTES_PER_S = (1e6, 1e14)
"""Range of a measured per-GPU rail bandwidth (as the node's link fields)."""


@dataclass(frozen=True, slots=True)
class FabricTier:
    """One tier of switches: leaf, spine or core."""

    name: str
    """``leaf``, ``spine`` or ``core`` (:data:`TIER_NAMES`, in that order)."""
    nodes: int = 0
    """Nodes under one switch group of this tier, consecutive in rank order (a leaf: the nodes of
    one scalable unit whose rails it connects; a spine: a pod). 0 means every node (the top tier)."""
    oversubscription: float = 1.0
    """Down:up bandwidth ratio of the uplinks from the tier below into this one (2.0 for 2:1; 1.0
    non-blocking). The leaf's is 1: the NICs reach it at line rate."""
    bus_bytes_per_s: float | None = None
    """Measured bus bandwidth per GPU rail of a group whose highest tier is this one (an
    ``autopar profile`` across nodes of one leaf, or across leaves); None: the node's rail
    bandwidth over the oversubscription of this tier and those below."""

    def __post_init__(self) -> None:
        owner = f"FabricTier({self.name})"
        if self.name not in TIER_NAMES:
            raise SpecError(f"{owner}.name", f"{self.name!r} is not a tier", f"use one of: {', '.join(TIER_NAMES)}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 0:
            raise SpecError(f"{owner}.nodes", f"{self.nodes!r} is not a node count >= 0",
                            "give the nodes under one switch group of this tier, or 0 for all nodes")
        ratio = self.oversubscription
        low, high = OVERSUBSCRIPTION
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not low <= ratio <= high:
            raise SpecError(f"{owner}.oversubscription", f"{ratio!r} is outside the physical range [{low:g}, {high:g}]",
                            "give the down:up ratio of the uplinks into this tier (1 non-blocking, 2 for 2:1)")
        if self.name == "leaf" and ratio != 1:
            raise SpecError(f"{owner}.oversubscription", f"{ratio:g}: the NICs reach their leaf at line rate",
                            "give oversubscription on the spine (leaf uplinks) or the core (spine uplinks)")
        bus = self.bus_bytes_per_s
        if bus is not None:
            low, high = RAIL_BYTES_PER_S
            if isinstance(bus, bool) or not isinstance(bus, int | float) or not low <= bus <= high:
                raise SpecError(f"{owner}.bus_bytes_per_s", f"{bus!r} is outside the physical range [{low:g}, "
                                f"{high:g}]", "give a measured bus bandwidth per GPU rail in bytes/s, or null")


@dataclass(frozen=True, slots=True)
class Fabric:
    """The scale-out fabric: its tiers bottom up and whether its switches reduce (SHARP)."""

    tiers: tuple[FabricTier, ...] = (FabricTier("leaf"),)
    """Leaf first; each tier's ``nodes`` a multiple of the one below's; the last one's may be 0
    (all nodes). The default is one non-blocking tier over every node."""
    sharp: bool = False
    """In-network reduction for all-reduces (SHARP with NCCL's CollNet plugin, ``NCCL_COLLNET_ENABLE=1``);
    off unless the cluster runs it."""

    def __post_init__(self) -> None:
        if isinstance(self.tiers, list):  # JSON gives lists
            object.__setattr__(self, "tiers", tuple(self.tiers))
        tiers = self.tiers
        if not isinstance(tiers, tuple) or not 1 <= len(tiers) <= len(TIER_NAMES) or not all(
                isinstance(t, FabricTier) for t in tiers):
            raise SpecError("Fabric.tiers", f"{tiers!r} is not 1 to 3 tiers", "give leaf, then spine, then core")
        names = tuple(t.name for t in tiers)
        if names != TIER_NAMES[:len(tiers)]:
            raise SpecError("Fabric.tiers", f"tiers {list(names)} are not {list(TIER_NAMES[:len(tiers)])}",
                            "list the tiers bottom up: leaf, spine, core")
        for below, above in itertools.pairwise(tiers):
            if below.nodes == 0 or (above.nodes and above.nodes % below.nodes):
                raise SpecError(f"Fabric.tiers.{above.name}.nodes",
                                f"{above.nodes} nodes is not a multiple of the {below.name}'s {below.nodes}",
                                f"give the {below.name} a node count and the {above.name} a multiple of it (0: all)")
        if not isinstance(self.sharp, bool):
            raise SpecError("Fabric.sharp", f"{self.sharp!r} is not a boolean", "use true or false")

    def describe(self) -> str:
        """One line for people: ``leaf 32 nodes, spine 256 nodes 2:1, core``, ``+ SHARP``."""
        parts = []
        for t in self.tiers:
            text = t.name + (f" {t.nodes} nodes" if t.nodes else "")
            if t.oversubscription != 1:
                text += f" {t.oversubscription:g}:1"
            parts.append(text)
        text = "non-blocking" if len(self.tiers) == 1 and not self.tiers[0].nodes else ", ".join(parts)
        return text + (" + SHARP" if self.sharp else "")

    def slowdown(self, tier: int) -> float:
        """Product of the oversubscriptions a group whose highest tier is ``tier`` crosses."""
        out = 1.0
        for t in self.tiers[:tier + 1]:
            out *= t.oversubscription
        return out

    def tier_of_nodes(self, first: int, last: int) -> int:
        """Index of the lowest tier under one switch group of which nodes ``first`` .. ``last`` sit."""
        for index, t in enumerate(self.tiers):
            if t.nodes == 0 or first // t.nodes == last // t.nodes:
                return index
        return len(self.tiers) - 1  # clusters larger than the fabric described: its top tier


NON_BLOCKING = Fabric()
"""One non-blocking tier over every node (the default)."""

Group = tuple[tuple[int, int], ...]
"""A communication group as (size, stride) dimensions: its ranks are ``sum(k_i * stride_i)``,
``0 <= k_i < size_i`` (the group of rank 0; Megatron's groups are translates of it)."""


@dataclass(frozen=True, slots=True)
class Span:
    """Where a group lands."""

    size: int
    """Ranks in the group."""
    domain_members: int
    """Members in the NVLink domain of rank 0, each owning a whole stride of it (``domain // stride``
    for a one-dimensional group, at least 1): the rails the group uses per domain when it leaves it."""
    domains: int
    """NVLink domains the group touches."""
    tier: int
    """Highest fabric tier the group spans (index into ``Fabric.tiers``); -1 inside one NVLink domain."""
    leaf_members: int
    """Members under the leaf of rank 0."""


@cache
def group_span(group: Group, gpus_per_node: int, domain_gpus: int, fabric: Fabric) -> Span:
    """Where ``group`` lands on nodes of ``gpus_per_node`` GPUs with NVLink domains of ``domain_gpus``
    under ``fabric`` (ranks fill a node, nodes fill a domain, domains fill a leaf in order)."""
    ranks = [0]
    for size, stride in group:
        ranks = [r + k * stride for r in ranks for k in range(size)]
    first, last = min(ranks), max(ranks)
    domains = len({r // domain_gpus for r in ranks})
    step = min(stride for size, stride in group if size > 1) if any(size > 1 for size, _ in group) else 1
    domain_members = max(1, sum(1 for r in ranks if r + step <= domain_gpus))
    if domains == 1:
        return Span(len(ranks), domain_members, 1, -1, len(ranks))
    tier = fabric.tier_of_nodes(first // gpus_per_node, last // gpus_per_node)
    leaf_nodes = fabric.tiers[0].nodes
    leaf_members = len(ranks) if leaf_nodes == 0 else sum(1 for r in ranks if r // gpus_per_node < leaf_nodes)
    return Span(len(ranks), domain_members, domains, tier, leaf_members)


def fabric_dict(fabric: Fabric) -> dict[str, Any]:
    """JSON-ready data of ``fabric`` (what :func:`fabric_from_dict` reads back)."""
    return {"tiers": [{"name": t.name, "nodes": t.nodes, "oversubscription": t.oversubscription,
                       "bus_bytes_per_s": t.bus_bytes_per_s} for t in fabric.tiers], "sharp": fabric.sharp}


def fabric_from_dict(data: object, where: str) -> Fabric:
    """A fabric from JSON (``{"tiers": [{"name": "leaf", "nodes": 32}, ...], "sharp": false}``); a
    wrong shape is a :class:`SpecError` naming ``where``."""
    fix = 'write {"tiers": [{"name": "leaf", "nodes": 32}, {"name": "spine", "oversubscription": 2}], "sharp": false}'
    if not isinstance(data, dict) or set(data) - {"tiers", "sharp"} or not isinstance(data.get("tiers"), list):
        raise SpecError(where, "is not an object of tiers (and sharp)", fix)
    tiers = []
    for tier in data["tiers"]:
        if not isinstance(tier, dict) or set(tier) - {"name", "nodes", "oversubscription", "bus_bytes_per_s"}:
            raise SpecError(f"{where}.tiers", f"{tier!r} is not a tier", fix)
        tiers.append(FabricTier(**tier))
    return Fabric(tuple(tiers), sharp=data.get("sharp", False))

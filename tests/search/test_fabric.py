"""The network as a topology: fabric tiers, oversubscription and SHARP, checked against the published
bus bandwidths (nccl-tests busbw) and against today's single inter-node figure."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from search import ClusterSpec, ParallelConfig, SpecError, TrainingSpec, cluster_preset, default_calibration, predict
from search._collectives import all_reduce_algorithm, all_reduce_time_s, all_to_all_time_s, group_link, p2p_link
from search._fabric import Fabric, FabricTier, group_span

CAL = default_calibration()
GB = 1e9


def two_tier(oversubscription: float = 1.0, leaf_nodes: int = 4, sharp: bool = False) -> Fabric:
    return Fabric((FabricTier("leaf", leaf_nodes), FabricTier("spine", 0, oversubscription)), sharp=sharp)


def test_the_default_fabric_is_todays_single_network_figure() -> None:
    """A non-blocking fabric of any shape costs every group as one network number did."""
    flat = cluster_preset("dgx-h100", 64, fabric=Fabric())
    superpod = cluster_preset("dgx-h100", 64)
    assert superpod.fabric.tiers[0].nodes == 32 and len(superpod.fabric.tiers) == 3
    for size, stride in ((16, 1), (64, 8), (512, 1), (2, 256), (8, 8)):
        on_flat, on_superpod = group_link(flat, size, stride, CAL), group_link(superpod, size, stride, CAL)
        assert on_flat.bus_bytes_per_s == on_superpod.bus_bytes_per_s
        assert all_to_all_time_s(1e9, size, flat, stride, CAL) == all_to_all_time_s(1e9, size, superpod, stride, CAL)
    # A group over 64 nodes spans two leaves of 32 and so the spine, at the same rate.
    assert group_link(superpod, 512, 1, CAL).tier == 1 and group_link(superpod, 256, 1, CAL).tier == 0


def test_h100_ndr400_inter_node_all_reduce_busbw_is_the_published_370_385() -> None:
    """DGX H100, 8x ConnectX-7 NDR400: nccl-tests all_reduce_perf across nodes reports ~370-385 GB/s busbw
    (issue 15; nccl-tests #290 46-48 GB/s per NIC); the ring runs on the 8 rails."""
    cluster = cluster_preset("dgx-h100", 4)
    link = group_link(cluster, 32, 1, CAL)
    assert link.inter_node and 370 * GB <= link.bus_bytes_per_s <= 385 * GB
    assert all_reduce_algorithm(link, 32, cluster.node.nvls) == "ring"
    size = 8 * 2**30  # nccl-tests' largest message: its time gives back the busbw
    busbw = 2 * 31 / 32 * size / (all_reduce_time_s(size, 32, link) - link.latency_s)
    assert busbw == pytest.approx(link.bus_bytes_per_s)


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72"])
def test_nvl72_in_rack_all_reduce_busbw_is_the_published_745_847_with_nvls(name: str) -> None:
    """GB200 NVL72, 72 GPUs of one rack: 745.5 GB/s average and 834.6-846.8 at 4-8 GiB
    (coreweave/nccl-tests #43), NCCL's NVLS algorithm."""
    rack = cluster_preset(name, 18)
    link = group_link(rack, 72, 1, CAL)
    assert not link.inter_node and 745 * GB <= link.bus_bytes_per_s <= 847 * GB
    assert all_reduce_algorithm(link, 72, rack.node.nvls) == "nvls"
    assert all_reduce_algorithm(group_link(cluster_preset("dgx-a100-80gb"), 8, 1, CAL), 8, False) == "ring"


def test_an_oversubscribed_spine_slows_a_dp_all_reduce_across_leaves_by_its_factor() -> None:
    """2:1 leaf uplinks: a dp all-reduce whose ranks sit under two leaves gets half the rail bandwidth,
    so its bandwidth term doubles and the latency does not; the same all-reduce inside one leaf is
    untouched."""
    blocking = cluster_preset("dgx-b200", 8, fabric=two_tier(2.0))
    free = cluster_preset("dgx-b200", 8, fabric=two_tier(1.0))
    size = 2e9
    # dp = 8 ranks, one per node at a stride of tp = 8: nodes 0-7, two leaves of 4.
    slow, fast = group_link(blocking, 8, 8, CAL), group_link(free, 8, 8, CAL)
    assert slow.tier == fast.tier == 1
    assert slow.bus_bytes_per_s == pytest.approx(fast.bus_bytes_per_s / 2)
    slow_s, fast_s = all_reduce_time_s(size, 8, slow), all_reduce_time_s(size, 8, fast)
    assert slow_s - CAL.collective_latency_s == pytest.approx(2 * (fast_s - CAL.collective_latency_s))
    # dp = 4 over nodes 0-3: one leaf, no uplink crossed.
    assert group_link(blocking, 4, 8, CAL) == group_link(free, 4, 8, CAL)
    assert group_link(blocking, 4, 8, CAL).tier == 0
    # Through the whole cost model: the dp all-reduce of a Megatron DDP step.
    model_cfg: dict[str, Any] = {"dp": 8, "tp": 8, "zero_stage": 0, "recompute": "full"}
    from search import model_preset
    model = model_preset("llama2-7b")
    training = TrainingSpec(global_batch=64)
    slow_p = predict(model, blocking, ParallelConfig(**model_cfg), training)
    fast_p = predict(model, free, ParallelConfig(**model_cfg), training)
    assert slow_p.time_breakdown_s["dp_comm"] > fast_p.time_breakdown_s["dp_comm"] * 1.5


def test_a_core_tier_divides_by_every_oversubscription_below_it() -> None:
    fabric = Fabric((FabricTier("leaf", 2), FabricTier("spine", 4, 2.0), FabricTier("core", 0, 3.0)))
    cluster = cluster_preset("dgx-h100", 8, fabric=fabric)
    rail = cluster.node.nic_bytes_per_s_per_gpu
    assert p2p_link(cluster, 2, 8, CAL).bus_bytes_per_s == rail  # nodes 0, 1: one leaf
    assert p2p_link(cluster, 2, 16, CAL).bus_bytes_per_s == pytest.approx(rail / 2)  # nodes 0, 2: the spine
    assert p2p_link(cluster, 2, 32, CAL).bus_bytes_per_s == pytest.approx(rail / 6)  # nodes 0, 4: the core


def test_sharp_reduces_in_the_switch_and_ignores_oversubscription() -> None:
    """In-network reduction: each GPU sends its data once (algbw = 0.9 x the rails), against a ring's
    2(n-1)/n; NCCL takes the faster, so SHARP; reduce-scatters and all-gathers stay rings."""
    ring = cluster_preset("dgx-h100", 8, fabric=two_tier(2.0))
    sharp = cluster_preset("dgx-h100", 8, fabric=two_tier(2.0, sharp=True))
    size = 4e9
    with_sharp, without = group_link(sharp, 8, 8, CAL), group_link(ring, 8, 8, CAL)
    assert with_sharp.bus_bytes_per_s == without.bus_bytes_per_s  # the ring's figure is unchanged
    assert with_sharp.sharp_bytes_per_s == pytest.approx(0.9 * ring.node.nic_bytes_per_s_per_gpu)
    assert all_reduce_algorithm(with_sharp, 8, True) == "sharp"
    expected = CAL.collective_latency_s + size / (0.9 * ring.node.nic_bytes_per_s_per_gpu)
    assert all_reduce_time_s(size, 8, with_sharp) == pytest.approx(expected)
    assert all_reduce_time_s(size, 8, with_sharp) < all_reduce_time_s(size, 8, without) / 3


def test_an_all_to_all_pays_the_spine_only_for_the_shares_that_leave_the_leaf() -> None:
    """ep = 16 over 16 nodes at stride 8 (one member per node), leaves of 4 nodes, 2:1: 3 of 16 shares go
    to nodes of the same leaf at the rail's rate, 12 across the spine at half of it."""
    cluster = cluster_preset("dgx-h100", 16, fabric=two_tier(2.0))
    rail = cluster.node.nic_bytes_per_s_per_gpu
    size = 1e9
    expected = CAL.collective_latency_s + size * 12 / 16 / (rail / 2) + size * 3 / 16 / rail
    assert all_to_all_time_s(size, 16, cluster, 8, CAL) == pytest.approx(expected)


def test_group_span_counts_where_a_group_lands() -> None:
    fabric = two_tier(leaf_nodes=36)  # two NVL72 racks of 18 trays per leaf
    span = group_span(((2, 72),), 4, 72, fabric)  # one GPU in each of two racks under one leaf
    assert (span.size, span.domain_members, span.domains, span.tier) == (2, 1, 2, 0)
    span = group_span(((4, 72),), 4, 72, fabric)  # four racks: two leaves
    assert (span.size, span.domain_members, span.domains, span.tier) == (4, 1, 4, 1)
    span = group_span(((2, 4), (4, 144)), 4, 72, fabric)  # cp = 2 beside dp = 4 behind pp = 2, tp = 4
    assert (span.size, span.domain_members, span.domains, span.tier) == (8, 2, 4, 1)


@pytest.mark.parametrize(("build", "field"), [
    (lambda: FabricTier("leaf", 4, 2.0), "FabricTier(leaf).oversubscription"),
    (lambda: FabricTier("spine", 4, 0.5), "FabricTier(spine).oversubscription"),
    (lambda: FabricTier("spine", 4, 100.0), "FabricTier(spine).oversubscription"),
    (lambda: FabricTier("rack", 4), "FabricTier(rack).name"),
    (lambda: FabricTier("leaf", -1), "FabricTier(leaf).nodes"),
    (lambda: FabricTier("spine", 4, bus_bytes_per_s=0.0), "FabricTier(spine).bus_bytes_per_s"),
    (lambda: Fabric((FabricTier("spine"),)), "Fabric.tiers"),
    (lambda: Fabric((FabricTier("leaf", 4), FabricTier("spine", 6))), "Fabric.tiers.spine.nodes"),
    (lambda: Fabric((FabricTier("leaf"), FabricTier("spine"))), "Fabric.tiers.spine.nodes"),
    (lambda: cluster_preset("gb200-nvl72", 36, fabric=two_tier(leaf_nodes=8)), "ClusterSpec.fabric.tiers.leaf.nodes"),
])
def test_a_bad_fabric_names_its_field(build: Any, field: str) -> None:
    with pytest.raises(SpecError) as err:
        build()
    assert err.value.field == field


def test_a_cluster_takes_only_a_fabric() -> None:
    base = cluster_preset("dgx-h100")
    with pytest.raises(SpecError, match=r"ClusterSpec\.fabric"):
        dataclasses.replace(base, fabric={"tiers": []})  # type: ignore[arg-type]
    assert isinstance(ClusterSpec(base.gpu, base.node).fabric, Fabric)


def test_the_search_on_two_nvl72_racks_keeps_its_largest_communication_group_on_nvlink() -> None:
    """Llama 3 70B on two GB200 NVL72 racks (144 GPUs): the ranked best's most expensive communication
    term belongs to a group inside one rack's NVLink domain; only the data-parallel group crosses racks."""
    from search import model_preset
    from search._placement import landing
    from search._search import search

    cluster = cluster_preset("gb200-nvl72", 36)
    result = search(model_preset("llama3-70b"), cluster, 288, framework="megatron", top_k=3)
    assert result.best is not None
    breakdown = result.best.prediction.time_breakdown_s
    terms = {"tp_comm": "tp", "cp_comm": "cp", "ep_comm": "ep", "pp_p2p": "pp", "dp_comm": "dp"}
    largest = max(terms, key=lambda term: breakdown.get(term, 0.0))
    assert breakdown[largest] > 0
    where = landing(result.best.config, cluster.node.gpus_per_node, cluster.node.nvlink_domain, cluster.fabric)
    assert where[terms[largest]] == "nvlink"
    assert {group for group, tier in where.items() if tier != "nvlink"} <= {"dp", "edp"}

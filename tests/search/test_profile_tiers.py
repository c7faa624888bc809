"""Hardware profile schema version 2: the topology measured (each node's leaf) and across-leaf fits,
which become the fabric's spine rail; version 1 profiles still load."""

from __future__ import annotations

import json

import pytest

from search import Fingerprint, HardwareProfile, LinkFit, SpecError, apply_profile, cluster_preset
from search import default_calibration as calibration
from search._collectives import group_link
from search._fabric import Fabric

FP = Fingerprint(gpu_name="NVIDIA H100 80GB HBM3", gpu_count=512, gpus_per_node=8,
                 created_at="2026-06-01T00:00:00+00:00", hostnames=tuple(f"n{i}" for i in range(64)),
                 leaves=("su1",) * 32 + ("su2",) * 32)
INTER_LEAF = LinkFit("all_reduce", "inter_leaf", 32, 30e-6, 21e9, ((1e6, 8e-5), (1e9, 9e-2)), ranks_per_node=1)


def test_a_version_1_profile_loads_without_leaves() -> None:
    data = json.loads(HardwareProfile(fingerprint=FP).to_json())
    data["schema_version"] = 1
    del data["fingerprint"]["leaves"]
    profile = HardwareProfile.from_dict(data)
    assert profile.fingerprint.leaves == () and profile.schema_version == 2


def test_leaves_and_across_leaf_fits_round_trip() -> None:
    profile = HardwareProfile(fingerprint=FP, links=(INTER_LEAF,))
    again = HardwareProfile.from_dict(json.loads(profile.to_json()))
    assert again == profile and again.fingerprint.leaves[31:33] == ("su1", "su2")
    assert again.link("all_reduce", "inter_leaf") == INTER_LEAF


def test_an_unknown_scope_is_refused() -> None:
    data = json.loads(HardwareProfile(fingerprint=FP, links=(INTER_LEAF,)).to_json())
    data["links"][0]["scope"] = "rack"
    with pytest.raises(SpecError, match=r"^HardwareProfile\.links\.scope: "):
        HardwareProfile.from_dict(data)


def test_the_across_leaf_fit_is_the_spines_rail_and_groups_across_leaves_run_at_it() -> None:
    """DGX H100 SuperPOD, 64 nodes in two scalable units: the measured 21 GB/s per rail across leaves (a
    congested spine) replaces the NIC's 47 GB/s for groups spanning both units, not inside one."""
    cluster, notes = apply_profile(cluster_preset("dgx-h100", 64), HardwareProfile(fingerprint=FP, links=(INTER_LEAF,)))
    assert cluster.fabric.tiers[1].bus_bytes_per_s == 21e9
    cal = calibration()
    assert group_link(cluster, 2, 32 * 8, cal).bus_bytes_per_s == 21e9  # nodes 0 and 32: two leaves
    assert group_link(cluster, 2, 16 * 8, cal).bus_bytes_per_s == cluster.node.nic_bytes_per_s_per_gpu  # one leaf
    assert not any("across-leaf" in note for note in notes)


def test_an_across_leaf_fit_on_a_one_tier_fabric_is_said() -> None:
    flat = cluster_preset("dgx-h100", 64, fabric=Fabric())
    cluster, notes = apply_profile(flat, HardwareProfile(fingerprint=FP, links=(INTER_LEAF,)))
    assert cluster.fabric == Fabric() and any("fabric has one tier" in note for note in notes)

"""Blackwell presets: the GPUs hold hardware_2024_2026.json's figures, and an NVL72 rack is one
NVLink domain of 18 four-GPU trays (a group inside it is costed on NVLink, a group across racks on
the network), where DGX B200 nodes of 8 send the same group over the network."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from search import (
    ParallelConfig,
    SpecError,
    TrainingSpec,
    cluster_preset,
    default_calibration,
    gpu_preset,
    model_preset,
    predict,
)
from search._collectives import all_to_all_time_s, group_link

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
HARDWARE: dict[str, Any] = json.loads((DATA / "hardware_2024_2026.json").read_text())
RUN_GPUS = sorted({run["cluster"]["gpu"] for run in json.loads((DATA / "runs_2024_2026.json").read_text())})
NVL72 = ("gb200-nvl72", "gb300-nvl72")
CAL = default_calibration()


@pytest.mark.parametrize("record", HARDWARE["gpus"], ids=lambda r: r["id"])
def test_each_gpu_of_the_hardware_file_has_its_peaks(record: dict[str, Any]) -> None:
    gpu = gpu_preset(record["id"])
    assert gpu.memory_bytes == record["memory_bytes"]
    assert gpu.hbm_bytes_per_s == record["hbm_bytes_per_s"]
    peaks = record["peak_flop_per_s"]
    assert gpu.fp16_flop_per_s == peaks["fp16"] and gpu.bf16_flop_per_s == peaks["bf16"]
    assert gpu.tf32_flop_per_s == peaks["tf32"]
    # The H100 HBM2e 96GB has no FP32 figure in the file: H100 SXM5's, the upper bound its other peaks are.
    assert gpu.fp32_flop_per_s == (peaks["fp32"] or gpu_preset("h100-sxm5-80gb").fp32_flop_per_s)
    assert gpu.fp8_flop_per_s == record["peak_flop_per_s_fp8"]
    assert gpu.fp4_flop_per_s == record.get("peak_flop_per_s_fp4")
    if "peak_flop_per_s_fp4" in record:
        assert gpu.peak_flop_per_s("fp4") == record["peak_flop_per_s_fp4"]
    else:  # Hopper has no FP4 tensor cores
        with pytest.raises(SpecError, match="no fp4 tensor cores"):
            gpu.peak_flop_per_s("fp4")


@pytest.mark.parametrize("gpu_id", RUN_GPUS)
def test_every_gpu_of_the_2024_2026_runs_has_a_preset(gpu_id: str) -> None:
    assert gpu_preset(gpu_id).name == gpu_id


@pytest.mark.parametrize("record", HARDWARE["nodes"], ids=lambda r: r["id"])
def test_each_node_of_the_hardware_file_has_a_cluster_preset_with_its_topology(record: dict[str, Any]) -> None:
    name = record["id"].removesuffix("-rack")  # gb200-nvl72-rack -> the gb200-nvl72 preset
    cluster = cluster_preset(name)
    assert cluster.gpu.name == record["gpu"]
    assert cluster.node.gpus_per_node == record["gpus_per_node"]
    assert cluster.node.nvlink_domain == record.get("nvlink_domain", record["gpus_per_node"])


@pytest.mark.parametrize("name", ["dgx-b200", "dgx-b300", *NVL72])
def test_blackwell_nvlink_outruns_hopper_nvlink_and_a_full_rail_of_nics(name: str) -> None:
    """NVLink5 busbw (830-835 GB/s measured) above DGX H100's 480 with NVLS, and above what 8 GPUs'
    NICs give a group spread over NVLink domains (8 x 96 GB/s with ConnectX-8)."""
    node = cluster_preset(name).node
    assert node.intra_node_bytes_per_s > cluster_preset("dgx-h100").node.intra_node_bytes_per_s
    assert node.intra_node_bytes_per_s > 8 * node.nic_bytes_per_s_per_gpu


@pytest.mark.parametrize("name", NVL72)
def test_a_16_gpu_group_in_an_nvl72_rack_is_on_nvlink(name: str) -> None:
    rack = cluster_preset(name, 18)
    assert rack.world_size == 72 and rack.node.nvlink_domain == 72
    for stride in (1, 4):  # tp=16 innermost; ep=16 behind tp=4
        link = group_link(rack, 16, stride, CAL)
        assert not link.inter_node and link.bus_bytes_per_s == rack.node.intra_node_bytes_per_s
    size = 256e6
    expected = CAL.collective_latency_s + size * 15 / 16 / rack.node.intra_node_bytes_per_s
    assert all_to_all_time_s(size, 16, rack, 1, CAL) == pytest.approx(expected)
    # The whole rack is one NVLink group too.
    assert not group_link(rack, 72, 1, CAL).inter_node


def test_the_same_group_on_dgx_b200_nodes_goes_over_the_network_and_is_slower() -> None:
    rack, dgx = cluster_preset("gb200-nvl72", 18), cluster_preset("dgx-b200", 9)
    assert rack.world_size == dgx.world_size == 72
    on_dgx, on_rack = group_link(dgx, 16, 1, CAL), group_link(rack, 16, 1, CAL)
    assert on_dgx.inter_node and on_dgx.bus_bytes_per_s == 8 * dgx.node.nic_bytes_per_s_per_gpu
    assert on_dgx.bus_bytes_per_s < on_rack.bus_bytes_per_s
    size = 256e6
    assert all_to_all_time_s(size, 16, dgx, 1, CAL) > 2 * all_to_all_time_s(size, 16, rack, 1, CAL)


@pytest.mark.parametrize("name", NVL72)
def test_a_dp_all_reduce_across_two_racks_is_on_the_network(name: str) -> None:
    racks = cluster_preset(name, 36)
    assert racks.world_size == 144
    assert group_link(racks, 144, 1, CAL).inter_node
    # tp=72 fills each rack: its dp=2 group has one member per rack and so one NIC.
    pair = group_link(racks, 2, 72, CAL)
    assert pair.inter_node and pair.bus_bytes_per_s == racks.node.nic_bytes_per_s_per_gpu


def test_tp16_communication_costs_less_in_an_nvl72_rack_than_across_dgx_b200_nodes() -> None:
    """Llama 3 70B's shape at 8K tokens with 16 KV heads (its 8 cap tp at 8), tp=16 dp=4 on 64 GPUs:
    16 GB200 trays of one rack against 8 DGX B200 (tp=16 does not divide the 72 GPUs of a full rack).
    The GPUs differ (2.5 against 2.25 PFLOP/s), so only the tensor-parallel communication is compared."""
    model = dataclasses.replace(model_preset("llama3-70b"), name="llama3-70b-kv16", kv_heads=16)
    assert model.seq_len == 8192
    config = ParallelConfig(dp=4, tp=16, sp=True, zero_stage=1, recompute="selective")
    training = TrainingSpec(global_batch=64)
    rack = predict(model, cluster_preset("gb200-nvl72", 16), config, training)
    dgx = predict(model, cluster_preset("dgx-b200", 8), config, training)
    # NVLink busbw 835 GB/s against 8 NICs of 48 GB/s for the 16-GPU group spread over two DGX nodes.
    assert 0 < rack.time_breakdown_s["tp_comm"] < 0.75 * dgx.time_breakdown_s["tp_comm"]
    assert not rack.warnings and any("tp=16 spans nodes" in w for w in dgx.warnings)

"""The hardware-profile schema: JSON round trip, validation, alpha-beta fit, apply_profile, staleness."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from search import SpecError, cluster_preset, default_calibration
from search._collectives import group_link
from search._profile import (
    SCHEMA_VERSION,
    Fingerprint,
    GemmSample,
    HardwareProfile,
    LinkFit,
    apply_profile,
    fit_alpha_beta,
    staleness,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

# Measured figures of the fixture profile (A100 80GB nodes).
GEMM_FLOP_PER_S = 270e12
INTRA_BUS = 231e9
INTER_BUS = 185e9
H2D = 21e9
NVME_READ = 12.5e9
NVME_WRITE = 6.5e9
CPU_ADAM = 3.3e9
N = 8192
GEMM_TIME_S = 2.0 * N * N * N / GEMM_FLOP_PER_S


def fingerprint(**overrides: Any) -> Fingerprint:
    fields: dict[str, Any] = dict(
        gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=16, gpus_per_node=8,
        created_at=(NOW - timedelta(days=3)).isoformat(), driver="550.54.15", cuda="12.4", nccl="2.21.5",
        torch="2.13.0", cpu_model="AMD EPYC 7742", cpu_memory_bytes=2**40, hostnames=("node-a", "node-b"),
    )
    fields.update(overrides)
    return Fingerprint(**fields)


def full_profile(**overrides: Any) -> HardwareProfile:
    """Every measurement present; two intra-node all-reduce fits (4 and 8 ranks)."""
    fields: dict[str, Any] = dict(
        fingerprint=fingerprint(),
        gemm=(
            GemmSample(N, N, N, "bf16", GEMM_TIME_S),
            GemmSample(4096, 4096, 4096, "bf16", 2.0 * 4096**3 / 240e12),
            GemmSample(N, N, N, "fp32", 2.0 * N**3 / 19e12),
        ),
        links=(
            LinkFit("all_reduce", "intra_node", 4, 15e-6, 200e9, ((1e6, 2e-5), (1e9, 5e-3))),
            LinkFit("all_reduce", "intra_node", 8, 18e-6, INTRA_BUS, ((1e6, 2.5e-5), (1e9, 8e-3))),
            LinkFit("all_reduce", "inter_node", 16, 40e-6, INTER_BUS, ((1e6, 6e-5), (1e9, 1e-2)), ranks_per_node=8),
            LinkFit("all_gather", "intra_node", 8, 12e-6, 220e9),
        ),
        host_to_device_bytes_per_s=H2D,
        device_to_host_bytes_per_s=20e9,
        nvme_read_bytes_per_s=NVME_READ,
        nvme_write_bytes_per_s=NVME_WRITE,
        cpu_adam_params_per_s=CPU_ADAM,
        aio={"block_size": 1048576, "queue_depth": 32, "single_submit": False},
    )
    fields.update(overrides)
    return HardwareProfile(**fields)


def as_dict(profile: HardwareProfile) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(profile.to_json())
    return data


# ---------------------------------------------------------------- JSON round trip


def test_round_trip_through_json_is_equal() -> None:
    profile = full_profile()
    again = HardwareProfile.from_dict(json.loads(profile.to_json()))
    assert again == profile
    assert again.to_json() == profile.to_json()
    assert isinstance(again.fingerprint.hostnames, tuple)
    assert all(isinstance(s, tuple) for s in again.links[0].samples)


def test_round_trip_of_a_minimal_profile() -> None:
    profile = HardwareProfile(fingerprint=fingerprint(hostnames=()))
    assert HardwareProfile.from_dict(json.loads(profile.to_json())) == profile


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(full_profile().to_json())
    assert HardwareProfile.load(path) == full_profile()


def test_load_of_a_missing_or_broken_file_names_the_profile(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^profile: cannot read"):
        HardwareProfile.load(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SpecError, match=r"^profile: cannot read"):
        HardwareProfile.load(broken)


def test_to_json_carries_the_schema_version() -> None:
    assert as_dict(full_profile())["schema_version"] == SCHEMA_VERSION == 2


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("version", [0, 3, "1", None])
def test_wrong_schema_version_is_refused(version: object) -> None:
    data = as_dict(full_profile())
    data["schema_version"] = version
    with pytest.raises(SpecError, match=r"^HardwareProfile\.schema_version: ") as info:
        HardwareProfile.from_dict(data)
    assert "autopar profile" in info.value.fix


def test_missing_schema_version_is_refused() -> None:
    data = as_dict(full_profile())
    del data["schema_version"]
    with pytest.raises(SpecError, match=r"^HardwareProfile\.schema_version: "):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize("name", ["host_to_device_bytes_per_s", "device_to_host_bytes_per_s",
                                  "nvme_read_bytes_per_s", "nvme_write_bytes_per_s", "cpu_adam_params_per_s"])
@pytest.mark.parametrize("value", [0, -1.0, "fast", math.nan])
def test_non_positive_bandwidths_are_refused(name: str, value: object) -> None:
    data = as_dict(full_profile())
    data[name] = value
    with pytest.raises(SpecError, match=rf"^HardwareProfile\.{name}: "):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize(("key", "value"), [("bus_bytes_per_s", 0.0), ("bus_bytes_per_s", -5e9),
                                            ("bus_bytes_per_s", math.nan), ("latency_s", -1e-6)])
def test_non_physical_link_fit_is_refused(key: str, value: float) -> None:
    data = as_dict(full_profile())
    data["links"][1][key] = value
    with pytest.raises(SpecError, match=r"^HardwareProfile\.links: all_reduce/intra_node"):
        HardwareProfile.from_dict(data)


def test_non_numeric_link_bandwidth_is_a_spec_error() -> None:
    data = as_dict(full_profile())
    data["links"][1]["bus_bytes_per_s"] = "231e9"
    with pytest.raises(SpecError, match=r"^HardwareProfile\.links"):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize("value", [0.0, -1e-3])
def test_non_positive_gemm_time_is_refused(value: float) -> None:
    data = as_dict(full_profile())
    data["gemm"][0]["time_s"] = value
    with pytest.raises(SpecError, match=r"^HardwareProfile\.gemm\.time_s: "):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize("missing", ["gpu_name", "gpu_count", "gpus_per_node", "created_at"])
def test_fingerprint_without_a_required_field_is_refused(missing: str) -> None:
    data = as_dict(full_profile())
    del data["fingerprint"][missing]
    with pytest.raises(SpecError, match=r"^HardwareProfile: malformed profile") as info:
        HardwareProfile.from_dict(data)
    assert missing in str(info.value)  # the underlying error names the missing field
    assert info.value.fix


@pytest.mark.parametrize("fp", ["A100", None, ["NVIDIA A100", 8]])
def test_fingerprint_that_is_not_an_object_is_refused(fp: object) -> None:
    data = as_dict(full_profile())
    data["fingerprint"] = fp
    with pytest.raises(SpecError, match=r"^HardwareProfile: malformed profile"):
        HardwareProfile.from_dict(data)


def test_profile_without_fingerprint_is_refused() -> None:
    data = as_dict(full_profile())
    del data["fingerprint"]
    with pytest.raises(SpecError, match=r"^HardwareProfile: malformed profile.*fingerprint"):
        HardwareProfile.from_dict(data)


def test_fingerprint_with_an_unknown_field_is_refused() -> None:
    data = as_dict(full_profile())
    data["fingerprint"]["gpu_clock_mhz"] = 1410
    with pytest.raises(SpecError, match=r"^HardwareProfile: malformed profile.*gpu_clock_mhz"):
        HardwareProfile.from_dict(data)


@pytest.mark.parametrize(("key", "value"), [("gpu_count", -8), ("gpus_per_node", 0), ("gpus_per_node", "8"),
                                            ("gpu_name", 80)])
def test_fingerprint_values_are_validated(key: str, value: object) -> None:
    data = as_dict(full_profile())
    data["fingerprint"][key] = value
    with pytest.raises(SpecError, match=rf"{key}"):
        HardwareProfile.from_dict(data)


def test_malformed_link_is_refused() -> None:
    data = as_dict(full_profile())
    del data["links"][0]["bus_bytes_per_s"]
    with pytest.raises(SpecError, match=r"^HardwareProfile: malformed profile.*bus_bytes_per_s"):
        HardwareProfile.from_dict(data)


def test_link_lookup_takes_the_fit_with_most_ranks() -> None:
    profile = full_profile()
    fit = profile.link("all_reduce", "intra_node")
    assert fit is not None and fit.ranks == 8 and fit.bus_bytes_per_s == INTRA_BUS
    assert profile.link("all_to_all", "intra_node") is None
    assert profile.link("all_gather", "inter_node") is None


def test_gemm_sample_flop_rate() -> None:
    assert GemmSample(N, N, N, "bf16", GEMM_TIME_S).flop_per_s == pytest.approx(GEMM_FLOP_PER_S, rel=1e-12)


# ---------------------------------------------------------------- alpha-beta fit

ALPHA_S = 25e-6
BUS_BYTES_PER_S = 180e9
SIZES = [2.0**k for k in range(10, 31)]  # 1 KiB .. 1 GiB, as nccl-tests sweeps


def hockney(size: float) -> float:
    return ALPHA_S + size / BUS_BYTES_PER_S


def test_fit_recovers_exact_alpha_and_bandwidth() -> None:
    alpha, bandwidth = fit_alpha_beta([(s, hockney(s)) for s in SIZES])
    assert alpha == pytest.approx(ALPHA_S, rel=1e-9)
    assert bandwidth == pytest.approx(BUS_BYTES_PER_S, rel=1e-9)


def test_fit_with_small_absolute_jitter_is_within_one_percent() -> None:
    """+-0.2 us of timer jitter (deterministic pattern) on every sample."""
    samples = [(s, hockney(s) + 0.2e-6 * math.sin(7.0 * i)) for i, s in enumerate(SIZES)]
    alpha, bandwidth = fit_alpha_beta(samples)
    assert alpha == pytest.approx(ALPHA_S, rel=0.01)
    assert bandwidth == pytest.approx(BUS_BYTES_PER_S, rel=0.01)


RELATIVE_NOISE = [(s, hockney(s) * (1.0 + 0.005 * math.sin(7.0 * i))) for i, s in enumerate(SIZES)]


def test_fit_bandwidth_with_small_relative_noise_is_within_one_percent() -> None:
    """+-0.5 % run-to-run variation (deterministic pattern) on every sample."""
    _, bandwidth = fit_alpha_beta(RELATIVE_NOISE)
    assert bandwidth == pytest.approx(BUS_BYTES_PER_S, rel=0.01)


def test_fit_alpha_with_small_relative_noise_is_within_one_percent() -> None:
    alpha, _ = fit_alpha_beta(RELATIVE_NOISE)
    assert alpha == pytest.approx(ALPHA_S, rel=0.01)


def test_fit_is_order_independent() -> None:
    samples = [(s, hockney(s)) for s in SIZES]
    assert fit_alpha_beta(samples[::-1]) == pytest.approx(fit_alpha_beta(samples), rel=1e-12)


@pytest.mark.parametrize("samples", [
    [(1e6, 1e-3)],
    [(1e6, 1e-3), (1e6, 1.1e-3), (1e6, 0.9e-3)],
    [],
])
def test_fit_needs_two_distinct_sizes(samples: list[tuple[float, float]]) -> None:
    with pytest.raises(ValueError, match="two distinct message sizes"):
        fit_alpha_beta(samples)


def test_fit_refuses_time_that_does_not_grow_with_size() -> None:
    with pytest.raises(ValueError, match="does not grow"):
        fit_alpha_beta([(1e3, 2e-3), (1e9, 1e-3)])


def test_fit_clamps_a_negative_intercept_to_zero() -> None:
    alpha, bandwidth = fit_alpha_beta([(1e6, 1e6 / 1e11 - 1e-6), (1e9, 1e9 / 1e11 - 1e-6)])
    assert alpha == 0.0
    assert bandwidth == pytest.approx(1e11, rel=1e-9)


# ---------------------------------------------------------------- apply_profile


def test_apply_profile_replaces_every_measured_figure() -> None:
    cluster = cluster_preset("dgx-a100-80gb", 2)
    profile = full_profile()
    measured, warnings = apply_profile(cluster, profile)
    assert warnings == ()
    assert measured.profile is profile
    assert measured.gpu.matmul_efficiency == pytest.approx(GEMM_FLOP_PER_S / 312e12, rel=1e-12)
    assert measured.node.pcie_bytes_per_s == H2D
    assert measured.node.nvme_read_bytes_per_s == NVME_READ
    assert measured.node.nvme_write_bytes_per_s == NVME_WRITE
    assert measured.node.cpu_adam_params_per_s == CPU_ADAM
    # Unmeasured facts stay.
    assert measured.gpu.memory_bytes == cluster.gpu.memory_bytes
    assert measured.node.gpus_per_node == cluster.node.gpus_per_node
    assert measured.num_nodes == cluster.num_nodes
    # The input cluster is unchanged (specs are values).
    assert cluster.node.pcie_bytes_per_s != H2D and cluster.profile is None


def test_collective_model_sees_the_measured_bus_bandwidth() -> None:
    cal = default_calibration()
    measured, _ = apply_profile(cluster_preset("dgx-a100-80gb", 2), full_profile())
    # A TP group of 8 inside a node: NVLink at the measured 8-rank all-reduce bus bandwidth.
    intra = group_link(measured, 8, 1, cal)
    assert not intra.inter_node
    assert intra.bus_bytes_per_s == pytest.approx(INTRA_BUS, rel=1e-12)
    # A group of 16 over both nodes, 8 members (8 rails) per node: the measured inter-node bus bandwidth.
    inter = group_link(measured, 16, 1, cal)
    assert inter.inter_node
    assert inter.bus_bytes_per_s == pytest.approx(INTER_BUS, rel=1e-12)
    # A DP group across nodes with tp = 8: one member per node, one rail.
    assert group_link(measured, 2, 8, cal).bus_bytes_per_s == pytest.approx(INTER_BUS / 8, rel=1e-12)


def test_inter_node_fit_with_one_rank_per_node_is_one_rail() -> None:
    """An inter-node all-reduce over 2 ranks (one per node) measures one NIC: a DP group with one
    member per node sees exactly that, a group with all 8 GPUs of each node 8 times that."""
    cal = default_calibration()
    one_rail = 23e9
    profile = full_profile(links=(LinkFit("all_reduce", "intra_node", 8, 1e-5, INTRA_BUS),
                                  LinkFit("all_reduce", "inter_node", 2, 3e-5, one_rail)))
    measured, warnings = apply_profile(cluster_preset("dgx-h100", 2), profile)
    assert warnings == ()
    assert group_link(measured, 2, 8, cal).bus_bytes_per_s == pytest.approx(one_rail, rel=1e-12)
    assert group_link(measured, 16, 1, cal).bus_bytes_per_s == pytest.approx(min(8 * one_rail, INTRA_BUS),
                                                                             rel=1e-12)


def test_matmul_efficiency_is_capped_at_one() -> None:
    fast = full_profile(gemm=(GemmSample(N, N, N, "bf16", 2.0 * N**3 / 400e12),))
    measured, _ = apply_profile(cluster_preset("dgx-a100-80gb"), fast)
    assert measured.gpu.matmul_efficiency == 1.0


EVERYTHING_MISSING = HardwareProfile(fingerprint=fingerprint())


def test_one_warning_per_missing_measurement() -> None:
    cluster = cluster_preset("dgx-a100-80gb", 2)
    same, warnings = apply_profile(cluster, EVERYTHING_MISSING)
    assert len(warnings) == 7
    for needle in ("GEMM", "intra-node", "inter-node", "host_to_device_bytes_per_s", "nvme_read_bytes_per_s",
                   "nvme_write_bytes_per_s", "cpu_adam_params_per_s"):
        assert sum(needle in w for w in warnings) == 1, needle
    assert same.gpu == cluster.gpu
    assert same.node == cluster.node


@pytest.mark.parametrize(("drop", "needle"), [
    ({"gemm": (GemmSample(N, N, N, "fp32", 1.0),)}, "GEMM"),
    ({"links": (LinkFit("all_reduce", "intra_node", 8, 1e-5, INTRA_BUS),)}, "inter-node"),
    ({"links": (LinkFit("all_reduce", "inter_node", 16, 1e-5, INTER_BUS),)}, "intra-node"),
    ({"host_to_device_bytes_per_s": None}, "host_to_device_bytes_per_s"),
    ({"nvme_write_bytes_per_s": None}, "nvme_write_bytes_per_s"),
    ({"cpu_adam_params_per_s": None}, "cpu_adam_params_per_s"),
])
def test_a_single_missing_measurement_gives_a_single_warning(drop: dict[str, Any], needle: str) -> None:
    cluster = cluster_preset("dgx-h100", 2)
    _, warnings = apply_profile(cluster, full_profile(**drop))
    assert len(warnings) == 1
    assert needle in warnings[0]


def test_missing_inter_node_fit_keeps_the_preset_network() -> None:
    cluster = cluster_preset("dgx-h100", 2)
    profile = full_profile(links=(LinkFit("all_reduce", "intra_node", 8, 1e-5, INTRA_BUS),))
    measured, _ = apply_profile(cluster, profile)
    assert measured.node.inter_node_bytes_per_s == cluster.node.inter_node_bytes_per_s


# ---------------------------------------------------------------- staleness


def test_fresh_matching_profile_is_not_stale() -> None:
    assert staleness(full_profile(), cluster_preset("dgx-a100-80gb", 2), now=NOW) == ()


def test_old_profile_is_stale() -> None:
    old = full_profile(fingerprint=fingerprint(created_at=(NOW - timedelta(days=200)).isoformat()))
    reasons = staleness(old, cluster_preset("dgx-a100-80gb", 2), now=NOW)
    assert len(reasons) == 1
    assert "200 days ago" in reasons[0]
    assert staleness(old, cluster_preset("dgx-a100-80gb", 2), max_age_days=365, now=NOW) == ()


def test_naive_timestamp_is_read_as_utc() -> None:
    naive = full_profile(fingerprint=fingerprint(created_at="2026-05-30T12:00:00"))
    assert staleness(naive, cluster_preset("dgx-a100-80gb", 2), now=NOW) == ()


def test_unreadable_timestamp_is_reported() -> None:
    bad = full_profile(fingerprint=fingerprint(created_at="last tuesday"))
    reasons = staleness(bad, cluster_preset("dgx-a100-80gb", 2), now=NOW)
    assert len(reasons) == 1 and "ISO 8601" in reasons[0]


def test_gpu_count_mismatch_is_stale() -> None:
    """Measured on 4-GPU nodes, used for 8-GPU nodes: NVLink and PCIe figures do not transfer."""
    four = full_profile(fingerprint=fingerprint(gpus_per_node=4, gpu_count=8))
    reasons = staleness(four, cluster_preset("dgx-a100-80gb", 2), now=NOW)
    assert len(reasons) == 1
    assert "4 GPUs per node" in reasons[0] and "8" in reasons[0]


def test_gpu_model_mismatch_is_stale() -> None:
    h100 = full_profile(fingerprint=fingerprint(gpu_name="NVIDIA H100 80GB HBM3"))
    reasons = staleness(h100, cluster_preset("dgx-a100-80gb", 2), now=NOW)
    assert len(reasons) == 1
    assert "H100" in reasons[0] and "a100" in reasons[0]


def test_every_reason_is_reported_at_once() -> None:
    wrong = full_profile(fingerprint=fingerprint(gpu_name="NVIDIA H100 80GB HBM3", gpus_per_node=4,
                                                 created_at=(NOW - timedelta(days=400)).isoformat()))
    assert len(staleness(wrong, cluster_preset("dgx-a100-80gb"), now=NOW)) == 3


def test_profile_of_another_gpu_variant_is_stale() -> None:
    forty = full_profile(fingerprint=fingerprint(gpu_name="NVIDIA A100-SXM4-40GB"))
    reasons = staleness(forty, cluster_preset("dgx-a100-80gb", 2), now=NOW)
    assert len(reasons) == 1 and "A100-SXM4-40GB" in reasons[0]


def test_measured_gemm_table_replaces_the_roofline() -> None:
    """A profile's GEMM sweep drives GEMM time: interpolated in log(FLOPs), clamped at the ends."""
    from search._calibration import Calibration
    from search._compute_time import gemm_time_s, make_kernels

    small, large = 2.0 * 1024**3, 2.0 * 8192**3
    table = ((small, 100e12), (large, 250e12))
    cal = Calibration(gemm_overhead_s=0.0)
    kernels = make_kernels(312e12, 0.87, 0.73, 2.0e12, cal, 1.0, 19.5e12, table)
    assert gemm_time_s(8192, 8192, 8192, kernels) == pytest.approx(large / 250e12, rel=1e-12)
    assert gemm_time_s(1024, 1024, 1024, kernels) == pytest.approx(small / 100e12, rel=1e-12)
    assert gemm_time_s(512, 512, 512, kernels) == pytest.approx(2.0 * 512**3 / 100e12, rel=1e-12)
    mid = 2.0 * 2896**3  # about halfway in log(FLOPs)
    rate = mid / gemm_time_s(2896, 2896, 2896, kernels)
    assert 160e12 < rate < 190e12


def test_apply_profile_keeps_the_median_rate_per_gemm_size() -> None:
    samples = (GemmSample(N, N, N, "bf16", 2.0 * N**3 / 260e12), GemmSample(N, N, N, "bf16", GEMM_TIME_S),
               GemmSample(N, N, N, "bf16", 2.0 * N**3 / 280e12), GemmSample(1024, 1024, 1024, "bf16", 1e-4))
    measured, _ = apply_profile(cluster_preset("dgx-a100-80gb"), full_profile(gemm=samples))
    table = measured.gpu.gemm_flop_per_s_by_size
    assert [flop for flop, _ in table] == sorted(flop for flop, _ in table)
    assert dict(table)[2.0 * N**3] == pytest.approx(GEMM_FLOP_PER_S, rel=1e-12)


def test_non_numeric_gemm_time_and_boolean_rates_are_refused() -> None:
    data = as_dict(full_profile())
    data["gemm"][0]["time_s"] = "fast"
    with pytest.raises(SpecError, match=r"^HardwareProfile\.gemm\.time_s: 'fast' is not a number"):
        HardwareProfile.from_dict(data)
    data = as_dict(full_profile())
    data["host_to_device_bytes_per_s"] = True
    with pytest.raises(SpecError, match=r"^HardwareProfile\.host_to_device_bytes_per_s"):
        HardwareProfile.from_dict(data)

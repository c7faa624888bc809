"""Collective benchmark: nccl-tests' bus factors, the alpha-beta fit, and the gloo path for
real (two processes under torchrun)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profiler._collectives import (
    OPS,
    batch_count,
    bus_factor,
    fit_links,
    init_from_env,
    message_elements,
    sample,
)
from profiler._errors import ProfilerUnavailable
from search import Fingerprint, HardwareProfile

REPO = Path(__file__).resolve().parents[2]


def test_bus_factors_are_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md: AllReduce 2(n-1)/n; ReduceScatter, AllGather, AlltoAll (n-1)/n.
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_reduce", 8) == 1.75
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, 2) == 0.5
        assert bus_factor(op, 8) == 0.875
    assert bus_factor("send_recv", 2) == bus_factor("send_recv", 8) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("broadcast", 2)


def test_sample_derives_algbw_and_busbw() -> None:
    s = sample("all_reduce", "intra_node", 8, 8, 2**30, 0.01)
    assert s.algbw_bytes_per_s == pytest.approx(2**30 / 0.01)
    assert s.busbw_bytes_per_s == pytest.approx(2**30 / 0.01 * 1.75)


def test_message_sizes_divide_among_ranks() -> None:
    assert message_elements(1024, 2) == 256
    assert message_elements(1024, 3) == 255
    assert message_elements(4, 8) == 8  # at least one element per rank
    assert batch_count(1024) == 20 and batch_count(2**30) == 1


def _synthetic(op: str, ranks: int, latency_s: float, busbw: float, noise: float = 0.0) -> list[Any]:
    factor = bus_factor(op, ranks)
    return [sample(op, "inter_node", ranks, 1, size, (latency_s + size * factor / busbw) * (1 + noise * (-1) ** i))
            for i, size in enumerate(2**i for i in range(10, 31))]


@pytest.mark.parametrize("noise", [0.0, 0.002])
def test_fit_links_recovers_latency_and_bus_bandwidth(noise: float) -> None:
    samples = _synthetic("all_reduce", 16, 25e-6, 45e9, noise) + _synthetic("all_gather", 16, 12e-6, 40e9, noise)
    fits = {fit.collective: fit for fit in fit_links(samples)}
    assert fits["all_reduce"].latency_s == pytest.approx(25e-6, rel=0.01)
    assert fits["all_reduce"].bus_bytes_per_s == pytest.approx(45e9, rel=0.01)
    assert fits["all_gather"].latency_s == pytest.approx(12e-6, rel=0.01)
    assert fits["all_gather"].bus_bytes_per_s == pytest.approx(40e9, rel=0.01)
    fit = fits["all_reduce"]
    assert (fit.scope, fit.ranks, fit.ranks_per_node) == ("inter_node", 16, 1)
    assert fit.samples == tuple((float(s.size_bytes), s.time_s) for s in samples[:21])


def test_fit_links_leaves_out_what_it_cannot_fit() -> None:
    one_size = [sample("all_reduce", "intra_node", 2, 2, 1024, 1e-5)] * 3
    one_rank = [sample("all_reduce", "intra_node", 1, 1, size, 1e-5) for size in (1024, 2048)]
    assert fit_links(one_size + one_rank) == []


def test_without_a_process_group_it_says_how_to_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ProfilerUnavailable, match="torchrun"):
        init_from_env()


def _torchrun() -> str | None:
    local = Path(sys.executable).parent / "torchrun"
    return str(local) if local.exists() else shutil.which("torchrun")


MEASUREMENTS = 3
"""Tries of the two-rank gloo measurement: on a shared 2-core machine a rank descheduled for a few
milliseconds can make every repeat of one small message slow (a 1 KiB send_recv once timed 14x its fit
while the other sizes sat within 1.3x); such a run is measured again, never accepted."""


def _log_ratios(link: dict[str, Any]) -> list[float]:
    """log(fit / measured) for each sample of one fitted link."""
    factor = bus_factor(link["collective"], link["ranks"])
    return [math.log((link["latency_s"] + size * factor / link["bus_bytes_per_s"]) / t) for size, t in link["samples"]]


def _within_sanity_bounds(link: dict[str, Any]) -> bool:
    """Median sample within 2x of the fit, every sample within 10x."""
    ratios = sorted(abs(r) for r in _log_ratios(link))
    return ratios[len(ratios) // 2] < math.log(2.0) and ratios[-1] < math.log(10.0)


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two CPU processes under torchrun measure every collective with gloo (--quick); measured again
    (up to :data:`MEASUREMENTS` times) while scheduling noise puts a sample outside the sanity bounds."""
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torchrun is not installed (pip install 'autopar[profile]')")
    for _ in range(MEASUREMENTS):
        result = _measure_gloo(torchrun, tmp_path_factory)
        if all(_within_sanity_bounds(link) for link in result["links"]):
            break
    return result


def _measure_gloo(torchrun: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("collectives") / "tmp.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "profiler.collectives_worker", "--quick",
         "--quiet", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_gloo_measures_every_op_at_several_sizes(gloo_run: dict[str, Any]) -> None:
    assert gloo_run["backend"] == "gloo"
    assert (gloo_run["world_size"], gloo_run["nodes"], gloo_run["ranks_per_node"]) == (2, 1, 2)
    samples = gloo_run["samples"]
    for op in OPS:
        sizes = {s["size_bytes"] for s in samples if s["op"] == op}
        assert len(sizes) >= 5, (op, sorted(sizes))
        assert min(sizes) == 1024 and max(sizes) == 64 * 2**20
    for s in samples:
        assert (s["scope"], s["ranks"], s["ranks_per_node"]) == ("intra_node", 2, 2)
        assert s["time_s"] > 0
        assert s["algbw_bytes_per_s"] == pytest.approx(s["size_bytes"] / s["time_s"])
        assert s["busbw_bytes_per_s"] == pytest.approx(s["algbw_bytes_per_s"] * bus_factor(s["op"], 2))


def test_gloo_fits_are_positive_and_predict_the_samples(gloo_run: dict[str, Any]) -> None:
    links = gloo_run["links"]
    assert sorted(link["collective"] for link in links) == sorted(OPS)
    for link in links:
        assert link["ranks"] == 2 and link["ranks_per_node"] == 2 and link["scope"] == "intra_node"
        assert link["latency_s"] >= 0 and link["bus_bytes_per_s"] > 0
        # Two processes on a shared 2-CPU machine are noisy (typically within 1.3x of the fit, now
        # and then 3-5x) and gloo switches algorithms with the size: a sanity bound here; the
        # synthetic test above holds the fit itself to 1 %.
        assert _within_sanity_bounds(link), (link["collective"], _log_ratios(link))


def test_gloo_fits_load_as_a_hardware_profile(gloo_run: dict[str, Any]) -> None:
    fingerprint = Fingerprint(gpu_name="cpu", gpu_count=1, gpus_per_node=1, created_at="2025-01-01T00:00:00+00:00")
    data = json.loads(HardwareProfile(fingerprint=fingerprint).to_json())
    data["links"] = gloo_run["links"]
    profile = HardwareProfile.from_dict(data)
    fit = profile.link("all_reduce", "intra_node")
    assert fit is not None and fit.ranks == 2 and len(fit.samples) == len(gloo_run["links"][0]["samples"])

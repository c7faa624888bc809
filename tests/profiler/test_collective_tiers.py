"""Collectives per tier: inside a node, across nodes of one leaf, across leaves; the groups each tier
measures, the hosts file of leaves, and a real gloo run of three one-rank "nodes" under two leaves
(three worker processes on this host, each node's leaf in AUTOPAR_LEAF) read into a hardware profile."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from profiler._collectives import Topology, plans, read_hosts_file
from profiler._errors import ProfilerUnavailable
from search import HardwareProfile, apply_profile, cluster_preset, default_calibration
from search._collectives import group_link

REPO = Path(__file__).resolve().parents[2]
FOUR_NODES = ((0, 1), (2, 3), (4, 5), (6, 7))


def test_each_tier_measures_its_groups_all_at_once() -> None:
    topo = Topology(FOUR_NODES, ("h0", "h1", "h2", "h3"), ("a", "a", "b", "b"))
    assert plans("intra_node", topo) == [(FOUR_NODES, 2)]
    # One rank (rail) per node across the nodes of each leaf, both leaves at once.
    assert plans("inter_node", topo) == [(((0, 2), (4, 6)), 1)]
    # The j-th node of every leaf: every node sends across the spine at the same time.
    assert plans("inter_leaf", topo) == [(((0, 4), (2, 6)), 1)]


def test_without_leaves_inter_node_spans_all_nodes_and_nothing_spans_leaves() -> None:
    topo = Topology(FOUR_NODES, ("h0", "h1", "h2", "h3"))
    assert plans("inter_node", topo) == [(((0, 2, 4, 6),), 1), ((tuple(range(8)),), 2)]
    with pytest.raises(ProfilerUnavailable, match="AUTOPAR_LEAF"):
        plans("inter_leaf", topo)
    with pytest.raises(ProfilerUnavailable, match="no leaf has two nodes"):
        plans("inter_node", Topology(FOUR_NODES, ("h0", "h1", "h2", "h3"), ("a", "b", "c", "d")))


def test_the_hosts_file_names_each_hosts_leaf(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# rail-optimized SU 1\nnode01 su1-leaf\nnode02 su1-leaf  # same leaf\n\nnode33 su2-leaf\n")
    assert read_hosts_file(hosts) == {"node01": "su1-leaf", "node02": "su1-leaf", "node33": "su2-leaf"}
    hosts.write_text("node01\n")
    with pytest.raises(ValueError, match="HOST LEAF"):
        read_hosts_file(hosts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


MEASUREMENTS = 3
"""Tries of the three-rank measurement: three gloo ranks on a shared 2-core machine can time a 1 KiB
all-reduce slower than a 1 MiB one (scheduling noise), and the profiler then rightly fits no link for
that tier ("time does not grow with size"); such a run is measured again, never accepted."""


def _fits_every_tier(data: dict[str, Any]) -> bool:
    return {fit["scope"] for fit in data["links"]} == {s["scope"] for s in data["samples"]}


@pytest.fixture(scope="module")
def three_node_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """Three one-rank "nodes" (the environment torchrun gives a worker: RANK, WORLD_SIZE, GROUP_RANK as
    the node, MASTER_ADDR/PORT), leaves a, a, b: all_reduce from 1 KiB to 4 MiB per tier; measured again
    (up to :data:`MEASUREMENTS` times) while noise leaves a tier without a physical fit."""
    pytest.importorskip("torch")
    for _ in range(MEASUREMENTS):
        data, out = _measure_three_nodes(tmp_path_factory)
        if _fits_every_tier(data):
            break
    return data, out


def _measure_three_nodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("tiers") / "collectives.json"
    port = str(_free_port())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": port, "CUDA_VISIBLE_DEVICES": ""}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "profiler.collectives_worker", "--quick", "--quiet", "--ops", "all_reduce",
         "--max-bytes", str(4 * 2**20), "--out", str(out)],
        cwd=REPO, env={**env, "RANK": str(node), "GROUP_RANK": str(node), "AUTOPAR_LEAF": "aab"[node]},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in range(3)]
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        if proc.returncode:
            errors.append(err[-3000:])
    assert not errors, errors
    data: dict[str, Any] = json.loads(out.read_text())
    return data, out


def test_three_nodes_under_two_leaves_are_measured_per_tier(three_node_run: tuple[dict[str, Any], Path]) -> None:
    data, _ = three_node_run
    assert (data["backend"], data["world_size"], data["nodes"]) == ("gloo", 3, 3)
    assert data["leaves"] == ["a", "a", "b"]
    scopes = {(s["scope"], s["ranks"]) for s in data["samples"]}
    assert scopes == {("inter_node", 2), ("inter_leaf", 2)}  # one rank per node: nothing inside a node
    assert {fit["scope"] for fit in data["links"]} == {"inter_node", "inter_leaf"}
    assert any("groups of one rank" in note for note in data["notes"])


def test_autopar_profile_reads_the_tiers_into_the_profile(three_node_run: tuple[dict[str, Any], Path],
                                                          tmp_path: Path) -> None:
    from service.cli import main

    _, collectives = three_node_run
    out = tmp_path / "profile.json"
    assert main(["profile", "--only", "collectives", "--collectives-from", str(collectives), "--out", str(out)]) == 0
    profile = HardwareProfile.load(out)
    assert profile.schema_version == 2 and profile.fingerprint.leaves == ("a", "a", "b")
    across = profile.link("all_reduce", "inter_leaf")
    assert across is not None and across.ranks == 2
    cluster, _ = apply_profile(cluster_preset("dgx-h100", 64), profile)
    assert cluster.fabric.tiers[1].bus_bytes_per_s == across.bus_bytes_per_s
    # A group spanning two leaves of 32 nodes runs at the measured across-leaf rail.
    assert group_link(cluster, 2, 32 * 8, default_calibration()).bus_bytes_per_s == across.bus_bytes_per_s


def test_a_bad_collectives_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"samples": []}')
    assert main(["profile", "--only", "collectives", "--collectives-from", str(bad),
                 "--out", str(tmp_path / "p.json")]) == 2
    assert "--collectives-from" in capsys.readouterr().err

"""``autopar search --versus``: the same question on other clusters (node types, NVL72 racks, an
oversubscribed fabric), answered side by side."""

from __future__ import annotations

import json
from typing import Any

import pytest

from search import SpecError
from service._search_cli import versus_cluster
from service.cli import main

# Llama 3 8B on 16 GPUs: two DGX B200 against four GB200 trays of one NVL72 rack; exhaustive in about a second.
QUESTION = ["search", "--model", "llama3-8b", "--cluster", "dgx-b200", "--nodes", "2", "--global-batch", "32",
            "--framework", "megatron", "--top", "3"]


def test_versus_answers_on_each_cluster_with_as_many_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QUESTION, "--versus", "gb200-nvl72", "--versus", "dgx-b200@2:1", "--json"]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    assert [r["cluster"] for r in rows] == ["dgx-b200", "gb200-nvl72", "dgx-b200@2:1"]
    assert [r["num_nodes"] for r in rows] == [2, 4, 2] and {r["world_size"] for r in rows} == {16}
    assert [r["nvlink_domain_gpus"] for r in rows] == [8, 72, 8]
    assert "2:1" in rows[2]["fabric"] and "2:1" not in rows[0]["fabric"]
    for row in rows:
        best = row["best"]["config"]
        # where each group of the best runs: every group of 16 GPUs is on NVLink in the rack
        assert set(row["groups"]) == {name for name, size in (("tp", best["tp"]), ("pp", best["pp"]),
                                                               ("dp", best["dp"] * best["cp"]), ("cp", best["cp"]))
                                      if size > 1} | ({"ep"} if best["ep"] > 1 else set())
    assert set(rows[1]["groups"].values()) <= {"nvlink"}
    # Two DGX B200 sit under one leaf: the 2:1 uplinks above it change nothing.
    assert rows[2]["best"]["prediction"]["tokens_per_s"] == rows[0]["best"]["prediction"]["tokens_per_s"]


def test_versus_prints_one_table_row_per_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QUESTION, "--versus", "gb200-nvl72", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "the same question on 2 clusters" in out and "best configuration per cluster" in out
    assert "gb200-nvl72" in out and "nvlink" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--versus", "dgx-b200@two:1"], "is not an oversubscription"),
    (["--versus", "dgx-2@2:1"], "one tier"),
    (["--versus", "no-such-cluster"], "no-such-cluster"),
    (["--versus", "gb200-nvl72", "--emit", "megatron"], "--emit"),
])
def test_bad_versus_exits_2_naming_it(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*QUESTION, *extra]) == 2
    assert message in capsys.readouterr().err


def test_versus_needs_a_gpu_count_its_nodes_make() -> None:
    with pytest.raises(SpecError, match="do not make 12 GPUs"):
        versus_cluster("dgx-b200", 12)
    assert versus_cluster("dgx-b200@3:1", 64).fabric.tiers[1].oversubscription == 3.0

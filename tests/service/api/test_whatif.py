"""GET /v1/whatif: the same search on 8-GPU nodes and an NVL72 rack, side by side, with where each
group of the best runs; unknown, unfinished or too many ids are refused naming ``ids``."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service._worker import run_worker
from service.api import Settings

QUESTION: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "training": {"global_batch": 32},
                            "framework": "megatron", "top": 3}


def test_two_clusters_side_by_side(client: TestClient, settings: Settings, auth: dict[str, str]) -> None:
    ids = []
    for cluster in ({"preset": "dgx-b200", "nodes": 2}, {"preset": "gb200-nvl72", "nodes": 4}):
        r = client.post("/v1/searches", headers=auth, json={**QUESTION, "cluster": cluster})
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    early = client.get(f"/v1/whatif?ids={ids[0]}")
    assert early.status_code == 409 and early.json()["detail"][0]["field"] == "ids"
    assert run_worker(settings, once=True) == 1 and run_worker(settings, once=True) == 1
    r = client.get(f"/v1/whatif?ids={ids[1]},{ids[0]}")
    assert r.status_code == 200, r.text
    rows = r.json()["data"]
    assert [row["search_id"] for row in rows] == [ids[1], ids[0]]
    assert [(row["cluster"], row["num_nodes"], row["world_size"], row["nvlink_domain_gpus"]) for row in rows] == [
        ("gb200-nvl72", 4, 16, 72), ("dgx-b200", 2, 16, 8)]
    assert rows[0]["fabric"]["tiers"][0]["nodes"] == 144 and rows[1]["fabric"]["tiers"][0]["nodes"] == 32
    configs = {row["cluster"]: client.get(f"/v1/searches/{row['search_id']}/configs?top=1") for row in rows}
    for row in rows:
        best = row["best"]
        assert best is not None and best["tokens_per_s"] > 0
        assert best["config"] == configs[row["cluster"]].json()["configs"][0]["config"]
    assert set(rows[0]["groups"].values()) <= {"nvlink"}  # 16 GPUs of one rack: every group on NVLink
    tp = rows[1]["best"]["config"]["tp"]
    assert rows[1]["groups"].get("tp", "nvlink") == "nvlink" and tp <= 8


def test_bad_ids_are_refused(client: TestClient) -> None:
    missing = client.get("/v1/whatif?ids=nope")
    assert missing.status_code == 404 and missing.json()["detail"][0]["field"] == "ids"
    many = client.get("/v1/whatif?ids=" + ",".join(f"s{i}" for i in range(9)))
    assert many.status_code == 422 and many.json()["detail"][0]["field"] == "ids"

"""The cluster's fabric through the API: accepted on a preset or custom cluster, costed (an
oversubscribed spine slows a prediction whose dp group spans leaves), and refused with a 422 naming
the field when it is not physical."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

# Llama 2 7B, tp=8 dp=8 on 8 DGX H100: each dp group has one rank per node, nodes 0-7.
PREDICT: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "training": {"global_batch": 64},
                           "framework": "megatron", "config": {"tp": 8, "zero_stage": 0, "recompute": "full"}}


def fabric(oversubscription: float, leaf_nodes: int = 4) -> dict[str, Any]:
    return {"tiers": [{"name": "leaf", "nodes": leaf_nodes}, {"name": "spine", "oversubscription": oversubscription}]}


def _predict(client: TestClient, auth: dict[str, str], cluster: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/predict", headers=auth, json={**PREDICT, "cluster": cluster})
    assert r.status_code == 200, r.text
    prediction: dict[str, Any] = r.json()["prediction"]
    return prediction


def test_a_fabric_on_a_preset_is_costed(client: TestClient, auth: dict[str, str]) -> None:
    preset = _predict(client, auth, {"preset": "dgx-h100", "nodes": 8})
    flat = _predict(client, auth, {"preset": "dgx-h100", "nodes": 8, "fabric": fabric(1.0)})
    blocking = _predict(client, auth, {"preset": "dgx-h100", "nodes": 8, "fabric": fabric(4.0)})
    assert flat["time_breakdown_s"]["dp_comm"] == preset["time_breakdown_s"]["dp_comm"]
    assert blocking["time_breakdown_s"]["dp_comm"] > 2 * flat["time_breakdown_s"]["dp_comm"]


@pytest.mark.parametrize(("fabric_body", "field"), [
    ({"tiers": [{"name": "leaf", "nodes": 4, "oversubscription": 2.0}]}, "cluster.fabric.tiers.leaf.oversubscription"),
    ({"tiers": [{"name": "spine", "nodes": 4}]}, "cluster.fabric.tiers"),
    ({"tiers": [{"name": "leaf", "nodes": 4}, {"name": "spine", "nodes": 6}]}, "cluster.fabric.tiers.spine.nodes"),
    (fabric(0.5), "cluster.fabric.tiers.1.oversubscription"),
    (fabric(1.0, leaf_nodes=-1), "cluster.fabric.tiers.0.nodes"),
    ({"tiers": []}, "cluster.fabric.tiers"),
])
def test_a_bad_fabric_is_a_422_naming_the_field(client: TestClient, auth: dict[str, str], fabric_body: dict[str, Any],
                                                field: str) -> None:
    r = client.post("/v1/predict", headers=auth,
                    json={**PREDICT, "cluster": {"preset": "dgx-h100", "nodes": 8, "fabric": fabric_body}})
    assert r.status_code == 422, r.text
    assert field in [item["field"] for item in r.json()["detail"]]


def test_a_leaf_that_splits_an_nvl72_rack_is_a_422(client: TestClient, auth: dict[str, str]) -> None:
    body = {**PREDICT, "config": {"tp": 4, "recompute": "full"},
            "cluster": {"preset": "gb200-nvl72", "nodes": 36, "fabric": fabric(1.0, leaf_nodes=8)}}
    r = client.post("/v1/predict", headers=auth, json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "cluster.fabric.tiers.leaf.nodes"


def test_presets_show_their_fabric_and_it_posts_back(client: TestClient, auth: dict[str, str]) -> None:
    from search import cluster_preset
    from service.cli import presets_dict

    data = client.get("/v1/presets/clusters").json()["data"]
    cli = presets_dict()["clusters"]
    by_name = {c["name"]: c for c in data}
    assert by_name["dgx-h100"]["fabric"]["tiers"][0] == {"name": "leaf", "nodes": 32, "oversubscription": 1.0,
                                                         "bus_bytes_per_s": None}
    assert by_name["grand-teton-h100-hbm2e"]["fabric"]["tiers"][2]["oversubscription"] == 7.0
    for c in data:
        assert c["fabric"] == cli[c["name"]]["fabric"]
    # A preset's fabric and node posted back as a custom cluster predict as the preset.
    h100 = by_name["dgx-h100"]
    custom = _predict(client, auth, {"gpu": h100["gpu"], "node": h100["node"], "nodes": 8, "fabric": h100["fabric"]})
    assert custom == _predict(client, auth, {"preset": "dgx-h100", "nodes": 8})
    assert cluster_preset("dgx-h100").node.nvls and h100["node"]["nvls"]


def test_a_search_keeps_its_fabric_and_another_fabric_is_another_search(client: TestClient, app_db: Any,
                                                                         auth: dict[str, str]) -> None:
    """The stored request carries the fabric (the worker rebuilds the cluster from it) and the request's
    hash counts it: the same question at 2:1 is not answered by the non-blocking one."""
    from service._search_request import from_stored
    from service.store import Search

    base = {"model": {"preset": "llama2-7b"}, "training": {"global_batch": 64}, "top": 3,
            "budget": {"n_trials": 20}}
    flat = client.post("/v1/searches", headers=auth, json={**base, "cluster": {"preset": "dgx-h100", "nodes": 8}})
    blocking = client.post("/v1/searches", headers=auth,
                           json={**base, "cluster": {"preset": "dgx-h100", "nodes": 8, "fabric": fabric(2.0)}})
    assert flat.status_code == blocking.status_code == 202, blocking.text
    assert flat.json()["id"] != blocking.json()["id"]
    with app_db.session() as s:
        row = s.get(Search, blocking.json()["id"])
        stored = from_stored(row.request, app_db)
    assert stored.cluster.fabric.tiers[1].oversubscription == 2.0 and stored.cluster.fabric.tiers[0].nodes == 4
    legacy = {**row.request, "cluster": {k: v for k, v in row.request["cluster"].items() if k != "fabric"}}
    assert len(from_stored(legacy, app_db).cluster.fabric.tiers) == 1  # stored before fabrics: non-blocking

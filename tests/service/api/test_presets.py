"""/v1/presets: the search presets as ``autopar presets --json`` shows them, each entry valid as a
request's custom model or cluster; rendered once, with an ETag."""

from __future__ import annotations

from fastapi.testclient import TestClient

from search import CLUSTER_PRESETS, MODEL_PRESET_PARAMS, MODEL_PRESETS, ModelSpec
from service.api import Settings, create_app
from service.api._resource_models import ClusterPresetList, ModelPresetList
from service.api._routes_presets import models_json
from service.cli import presets_dict
from service.request import ClusterIn, ModelIn
from service.store import Database


def test_model_presets_are_the_search_presets(client: TestClient) -> None:
    r = client.get("/v1/presets/models")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    data = ModelPresetList.model_validate(r.json()).data
    assert [m.name for m in data] == list(MODEL_PRESETS)
    for m in data:
        spec = MODEL_PRESETS[m.name]
        assert ModelSpec(**m.shape.model_dump()) == spec
        assert m.params == spec.params == presets_dict()["models"][m.name]["params"]
        assert m.published_params == MODEL_PRESET_PARAMS[m.name]
        assert m.source, f"{m.name} has no source"


def test_cluster_presets_are_what_autopar_presets_prints(client: TestClient) -> None:
    data = ClusterPresetList.model_validate(client.get("/v1/presets/clusters").json()).data
    cli = presets_dict()["clusters"]
    assert [c.name for c in data] == list(CLUSTER_PRESETS) == list(cli)
    for c in data:
        gpu = {k: v for k, v in cli[c.name]["gpu"].items() if k != "gemm_flop_per_s_by_size"}
        assert c.gpu.model_dump() == gpu and c.node.model_dump() == cli[c.name]["node"]
        ClusterIn(gpu=c.gpu, node=c.node, nodes=2)  # valid as a custom cluster


def test_a_preset_posted_back_as_custom_predicts_the_same(client: TestClient, auth: dict[str, str]) -> None:
    model = next(m for m in client.get("/v1/presets/models").json()["data"] if m["name"] == "llama3-8b")
    cluster = next(c for c in client.get("/v1/presets/clusters").json()["data"] if c["name"] == "dgx-h100")
    common = {"training": {"global_batch": 64}, "config": {"tp": 2, "zero_stage": 1, "recompute": "full"}}
    by_name = client.post("/v1/predict", headers=auth, json={
        "model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100", "nodes": 2}, **common})
    custom = client.post("/v1/predict", headers=auth, json={
        "model": ModelIn(shape=model["shape"]).model_dump(exclude_none=True),
        "cluster": {"gpu": cluster["gpu"], "node": cluster["node"], "nodes": 2}, **common})
    assert by_name.status_code == custom.status_code == 200, custom.text
    assert custom.json()["prediction"] == by_name.json()["prediction"]


def test_presets_are_rendered_once_with_an_etag(client: TestClient) -> None:
    assert models_json() is models_json()
    first = client.get("/v1/presets/models")
    etag = first.headers["ETag"]
    assert client.get("/v1/presets/models").content == first.content
    again = client.get("/v1/presets/models", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
    clusters = client.get("/v1/presets/clusters")
    assert clusters.headers["ETag"] != etag and "max-age" in clusters.headers["Cache-Control"]


def test_presets_need_a_token_when_open_reads_is_off(settings: Settings, app_db: Database, read_token: str,
                                                    write_token: str) -> None:
    closed = settings.model_copy(update={"open_reads": False})
    with TestClient(create_app(closed, db=app_db, migrate=False)) as c:
        for path in ("/v1/presets/models", "/v1/presets/clusters"):
            r = c.get(path)
            assert r.status_code == 401 and "read" in r.json()["detail"][0]["msg"]
            for token in (read_token, write_token):
                assert c.get(path, headers={"Authorization": f"Bearer {token}"}).status_code == 200

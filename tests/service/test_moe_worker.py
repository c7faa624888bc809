"""A worker searches a mixture-of-experts model posted to /v1/searches and serves the ranking
:func:`search.search` gives, expert-parallel degrees included (SQLite and PostgreSQL)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from search import ModelSpec, cluster_preset, search
from service._worker import run_worker
from service.api import Settings
from service.api._search_models import ConfigsOut, SearchOut

SHAPE = {"name": "tiny-moe", "layers": 4, "hidden": 512, "heads": 8, "ffn": 1024, "vocab": 32000, "seq_len": 1024,
         "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
         "moe": {"experts": 8, "topk": 2, "expert_ffn": 512, "shared_experts": 1, "shared_expert_ffn": 512,
                 "first_dense_layers": 1, "capacity_factor": 1.25, "router_load": "force-balanced"}}
CLUSTER = {"preset": "dgx-h100"}


def test_a_worker_searches_a_moe_model(client: TestClient, settings: Settings, auth: dict[str, str]) -> None:
    r = client.post("/v1/searches", headers=auth, json={"model": {"shape": SHAPE}, "cluster": CLUSTER,
                                                         "training": {"global_batch": 64}, "top": 5})
    assert r.status_code == 202, r.text
    assert run_worker(settings, once=True) == 1
    done = SearchOut.model_validate(client.get(r.headers["location"]).json())
    assert (done.status, done.error) == ("done", None)
    served = ConfigsOut.model_validate_json(client.get(f"/v1/searches/{done.id}/configs").content)
    expected = search(ModelSpec(**SHAPE), cluster_preset("dgx-h100"), 64, top_k=5)
    assert [(c.framework, c.config.model_dump()) for c in served.configs] == [
        (e.framework, e.to_dict()["config"]) for e in expected.top]

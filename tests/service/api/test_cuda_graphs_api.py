"""``cuda_graphs`` (Megatron-Core's full-iteration CUDA graph) in ``POST /v1/searches``, on SQLite and
PostgreSQL: the worker's search runs it where a configuration supports it and the launch files write it; a
request with it is another search, one without it (or with "none") hashes as before the field existed; a
value autopar does not cost or another runtime is a 422 naming the field, with nothing stored."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from search import cluster_preset, model_preset, search
from service._search_request import from_stored
from service._worker import run_worker
from service.api import Settings
from service.api._search_models import ConfigsOut, LaunchOut
from service.store import Database, Search

SEARCH: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100", "nodes": 1},
                          "training": {"global_batch": 64}, "top": 5, "cuda_graphs": "full-iteration"}


def _fields(r: Any) -> list[str]:
    return [d["field"] for d in r.json()["detail"]]


def test_a_graphed_search_runs_the_graph_and_launches_with_it(client: TestClient, settings: Settings,
                                                               app_db: Database, auth: dict[str, str]) -> None:
    graphed = client.post("/v1/searches", json=SEARCH, headers=auth)
    assert graphed.status_code == 202, graphed.text
    plain_body = {k: v for k, v in SEARCH.items() if k != "cuda_graphs"}
    plain = client.post("/v1/searches", json=plain_body, headers=auth)
    assert plain.status_code == 202, plain.text
    assert plain.json()["id"] != graphed.json()["id"]
    # "none" is the default: the same search as one that does not name the field (its hash has no key for it).
    none = client.post("/v1/searches", json={**SEARCH, "cuda_graphs": "none"}, headers=auth)
    assert none.json()["id"] == plain.json()["id"]
    assert client.post("/v1/searches", json=SEARCH, headers=auth).json()["id"] == graphed.json()["id"]
    with app_db.session() as s:
        row = s.scalars(select(Search).where(Search.id == graphed.json()["id"])).one()
        assert from_stored(row.request, app_db).search_kwargs()["cuda_graphs"] == "full-iteration"
        old = s.scalars(select(Search).where(Search.id == plain.json()["id"])).one()
        body = {k: v for k, v in old.request["body"].items() if k != "cuda_graphs"}  # stored before the field
        assert from_stored({**old.request, "body": body}, app_db).search_kwargs()["cuda_graphs"] == "none"
    assert run_worker(settings, once=True) == 1 and run_worker(settings, once=True) == 1

    served = ConfigsOut.model_validate_json(client.get(f"{graphed.headers['location']}/configs").content)
    expected = search(model_preset("llama3-8b"), cluster_preset("dgx-h100", 1), 64, top_k=5,
                      cuda_graphs="full-iteration")
    assert {c.framework for c in served.configs} == {"megatron"}
    assert [c.config.model_dump() for c in served.configs] == [e.to_dict()["config"] for e in expected.top]
    first = next(c for c in served.configs if c.config.cuda_graphs == "full-iteration")
    args = LaunchOut.model_validate(client.get(f"{first.launch}?target=megatron").json()).files[
        "megatron_args.txt"].split("\n")
    assert "full_iteration" in args and "--no-check-for-nan-in-loss-and-grad" in args

    unflagged = ConfigsOut.model_validate_json(client.get(f"{plain.headers['location']}/configs").content)
    assert {c.config.cuda_graphs for c in unflagged.configs} == {"none"}


def test_a_graph_autopar_does_not_cost_or_another_runtime_is_422(client: TestClient, app_db: Database,
                                                                 auth: dict[str, str]) -> None:
    for body in ({**SEARCH, "cuda_graphs": "transformer_engine"}, {**SEARCH, "framework": "deepspeed"},
                 {**SEARCH, "framework": "fsdp"}):
        r = client.post("/v1/searches", json=body, headers=auth)
        assert (r.status_code, _fields(r)) == (422, ["cuda_graphs"]), r.text
    with app_db.session() as s:
        assert s.scalar(select(func.count()).select_from(Search)) == 0

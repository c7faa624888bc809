"""``training.grad_reduce_in_bf16`` (Megatron-Core ``--grad-reduce-in-bf16``) through the API, on SQLite
and PostgreSQL: predict and search take it (a 2-byte gradient buffer), a search with it ranks
Megatron-Core alone and launches with the flag, a request differing only in it is another search, and
the combinations TrainingSpec refuses are 422 naming the field with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict, search
from service._worker import run_worker
from service.api import Settings
from service.api._search_models import ConfigsOut, LaunchOut
from service.store import Database, Search

PREDICT: dict[str, Any] = {
    "model": {"preset": "llama3-70b"}, "cluster": {"preset": "dgx-h100", "nodes": 8},
    "training": {"global_batch": 512, "grad_reduce_in_bf16": True}, "framework": "megatron",
    "config": {"tp": 8, "pp": 2, "sp": True, "micro_batch": 1, "zero_stage": 1, "recompute": "selective"}}
CONFIG = ParallelConfig(dp=4, tp=8, pp=2, sp=True, micro_batch=1, zero_stage=1, recompute="selective")
SEARCH: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
                          "training": {"global_batch": 64, "grad_reduce_in_bf16": True}, "top": 3}


def _fields(r: Any) -> list[str]:
    return [d["field"] for d in r.json()["detail"]]


def _training(**changes: Any) -> dict[str, Any]:
    return {"global_batch": 512, "grad_reduce_in_bf16": True, **changes}


def test_predict_with_the_flag_is_predict_with_a_bf16_gradient_buffer(client: TestClient,
                                                                      auth: dict[str, str]) -> None:
    flagged = client.post("/v1/predict", json=PREDICT, headers=auth)
    assert flagged.status_code == 200, flagged.text
    plain = client.post("/v1/predict", json={**PREDICT, "training": {"global_batch": 512}}, headers=auth)
    assert plain.status_code == 200, plain.text
    model, cluster = model_preset("llama3-70b"), cluster_preset("dgx-h100", 8)
    expected = predict(model, cluster, CONFIG, TrainingSpec(512, grad_reduce_in_bf16=True))
    assert flagged.json()["prediction"] == expected.to_dict()
    grads = flagged.json()["prediction"]["memory_breakdown_bytes"]["gradients"]
    assert grads > 0 and grads == plain.json()["prediction"]["memory_breakdown_bytes"]["gradients"] / 2
    assert flagged.json()["prediction"]["peak_memory_bytes_per_gpu"] < plain.json()["prediction"][
        "peak_memory_bytes_per_gpu"]


@pytest.mark.parametrize(("changes", "word"), [
    ({"framework": "deepspeed", "config": {"zero_stage": 1}}, "deepspeed"),
    ({"framework": "fsdp", "config": {"zero_stage": 3}}, "fsdp"),
    ({"training": _training(precision="fp16")}, "fp16"),
])
def test_predict_refuses_what_trainingspec_refuses_naming_the_field(client: TestClient, auth: dict[str, str],
                                                                    changes: dict[str, Any], word: str) -> None:
    r = client.post("/v1/predict", json={**PREDICT, **changes}, headers=auth)
    assert (r.status_code, _fields(r)) == (422, ["training.grad_reduce_in_bf16"]), r.text
    assert word in r.json()["detail"][0]["msg"] and r.json()["detail"][0]["fix"]


def test_a_non_boolean_flag_is_422(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post("/v1/predict", json={**PREDICT, "training": _training(grad_reduce_in_bf16="yes")}, headers=auth)
    assert (r.status_code, _fields(r)) == (422, ["training.grad_reduce_in_bf16"]), r.text


def test_search_with_the_flag_ranks_megatron_and_launches_with_it(client: TestClient, settings: Settings,
                                                                   app_db: Database, auth: dict[str, str]) -> None:
    flagged = client.post("/v1/searches", json=SEARCH, headers=auth)
    assert flagged.status_code == 202, flagged.text
    # The same request without the flag is another search (another answer), not the one above.
    plain = client.post("/v1/searches", json={**SEARCH, "training": {"global_batch": 64}}, headers=auth)
    assert plain.status_code == 202, plain.text
    assert plain.json()["id"] != flagged.json()["id"]
    again = client.post("/v1/searches", json=SEARCH, headers=auth)
    assert again.json()["id"] == flagged.json()["id"]
    assert run_worker(settings, once=True) == 1 and run_worker(settings, once=True) == 1

    served = ConfigsOut.model_validate_json(client.get(f"{flagged.headers['location']}/configs").content)
    expected = search(model_preset("llama2-7b"), cluster_preset("dgx-a100-80gb", 1), 64, top_k=3,
                      grad_reduce_in_bf16=True)
    assert {c.framework for c in served.configs} == {"megatron"}
    assert [(c.framework, c.config.model_dump()) for c in served.configs] == [
        (e.framework, e.to_dict()["config"]) for e in expected.top]
    assert [c.prediction.tokens_per_s for c in served.configs] == [e.prediction.tokens_per_s for e in expected.top]
    best = served.configs[0]
    args = LaunchOut.model_validate(client.get(f"{best.launch}?target=megatron").json()).files[
        "megatron_args.txt"].split("\n")
    assert "--grad-reduce-in-bf16" in args

    unflagged = ConfigsOut.model_validate_json(client.get(f"{plain.headers['location']}/configs").content)
    first = next(c for c in unflagged.configs if c.framework == "megatron")
    args = LaunchOut.model_validate(client.get(f"{first.launch}?target=megatron").json()).files[
        "megatron_args.txt"].split("\n")
    assert "--grad-reduce-in-bf16" not in args

    # A search stored before the field existed (its body without it) launches as it was predicted: no flag.
    with app_db.session() as s:
        row = s.scalars(select(Search).where(Search.id == plain.json()["id"])).one()
        body = dict(row.request["body"])
        body["training"] = {k: v for k, v in body["training"].items() if k != "grad_reduce_in_bf16"}
        row.request = {**row.request, "body": body}
    launch = client.get(f"{first.launch}?target=megatron")
    assert launch.status_code == 200, launch.text
    assert "--grad-reduce-in-bf16" not in launch.json()["files"]["megatron_args.txt"].split("\n")


def test_a_run_of_a_flagged_search_is_predicted_with_the_flag(client: TestClient, settings: Settings,
                                                              auth: dict[str, str]) -> None:
    r = client.post("/v1/searches", json=SEARCH, headers=auth)
    assert r.status_code == 202 and run_worker(settings, once=True) == 1
    best = ConfigsOut.model_validate_json(client.get(f"{r.headers['location']}/configs").content).configs[0]
    run = client.post("/v1/runs", json={"search_id": r.json()["id"], "rank": 1, "iteration_time_s": 5.0},
                      headers=auth)
    assert run.status_code == 201, run.text
    assert run.json()["training"]["grad_reduce_in_bf16"] is True
    config = ParallelConfig(**best.config.model_dump())
    expected = predict(model_preset("llama2-7b"), cluster_preset("dgx-a100-80gb", 1), config,
                       TrainingSpec(64, grad_reduce_in_bf16=True))
    assert run.json()["predicted_peak_memory_bytes"] == expected.peak_memory_bytes_per_gpu
    assert run.json()["predicted_iteration_time_s"] == expected.iteration_time_s


@pytest.mark.parametrize(("changes", "word"), [
    ({"framework": "deepspeed"}, "deepspeed"),
    ({"framework": "megatron-deepspeed"}, "megatron-deepspeed"),
    ({"framework": "fsdp"}, "fsdp"),
    ({"training": {"global_batch": 64, "precision": "fp16", "grad_reduce_in_bf16": True}}, "fp16"),
])
def test_search_refuses_what_trainingspec_refuses_and_stores_nothing(client: TestClient, auth: dict[str, str],
                                                                     changes: dict[str, Any], word: str) -> None:
    r = client.post("/v1/searches", json={**SEARCH, **changes}, headers=auth)
    assert (r.status_code, _fields(r)) == (422, ["training.grad_reduce_in_bf16"]), r.text
    assert word in r.json()["detail"][0]["msg"] and r.json()["detail"][0]["fix"]
    assert client.get("/v1/searches").json()["count"] == 0

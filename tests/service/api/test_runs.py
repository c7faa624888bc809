"""/v1/runs: a measured run is stored with the prediction made when it was posted (from a full
specification or a stored search's rank), and served with its prediction errors."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from search import (
    ClusterSpec,
    Fingerprint,
    GemmSample,
    HardwareProfile,
    ParallelConfig,
    Prediction,
    TrainingSpec,
    apply_profile,
    cluster_preset,
    model_preset,
    predict,
)
from service._search_request import resolve
from service.api import Settings, create_app
from service.request import SearchIn
from service.store import Database, Search, SearchConfig

SPEC = {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100"}, "training": {"global_batch": 64},
        "config": {"tp": 2, "zero_stage": 1, "recompute": "full"}}
FITS = ParallelConfig(dp=4, tp=2, zero_stage=1, recompute="full")
OOM = ParallelConfig(dp=8)  # 177 GiB of an 80 GiB GPU


def _predicted(config: ParallelConfig, cluster: ClusterSpec | None = None) -> Prediction:
    return predict(model_preset("llama3-8b"), cluster or cluster_preset("dgx-h100"), config, TrainingSpec(64))


def _post(client: TestClient, auth: dict[str, str], **body: object) -> dict:
    r = client.post("/v1/runs", json=body, headers=auth)
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == f"/v1/runs/{r.json()['id']}"
    return r.json()


def test_a_run_is_stored_with_its_prediction_and_errors(client: TestClient, auth: dict[str, str]) -> None:
    created = _post(client, auth, **SPEC, iteration_time_s=12.5, peak_memory_bytes=40e9, notes="nightly")
    got = client.get(f"/v1/runs/{created['id']}").json()
    assert got == created
    p = _predicted(FITS)
    assert got["predicted_iteration_time_s"] == p.iteration_time_s
    assert got["predicted_peak_memory_bytes"] == p.peak_memory_bytes_per_gpu
    assert got["predicted_fits"] is True and got["oom_agrees"] is True
    assert got["time_error"] == pytest.approx(p.iteration_time_s / 12.5 - 1)
    assert got["memory_error"] == pytest.approx(p.peak_memory_bytes_per_gpu / 40e9 - 1)
    assert got["config"] == dataclasses.asdict(FITS) and got["framework"] == "megatron"
    assert got["notes"] == "nightly" and got["search_id"] is None and got["autopar_version"]
    assert datetime.fromisoformat(got["created_at"]).tzinfo is not None


def test_an_oom_run_needs_no_time_and_says_whether_the_model_agreed(client: TestClient,
                                                                    auth: dict[str, str]) -> None:
    fitted = _post(client, auth, **SPEC, oom=True)
    assert fitted["iteration_time_s"] is None and fitted["time_error"] is None and fitted["memory_error"] is None
    assert fitted["predicted_fits"] is True and fitted["oom_agrees"] is False
    oom = _post(client, auth, **{**SPEC, "config": {}}, oom=True, iteration_time_s=None)
    assert oom["predicted_fits"] is False and oom["oom_agrees"] is True
    assert oom["predicted_peak_memory_bytes"] == _predicted(OOM).peak_memory_bytes_per_gpu


def test_bad_runs_are_422_naming_the_field_and_nothing_is_stored(client: TestClient, auth: dict[str, str]) -> None:
    cases = [  # (body, the field named, a word of the message or fix)
        ({**SPEC}, "iteration_time_s", "oom"),
        ({**SPEC, "iteration_time_s": None, "oom": False}, "iteration_time_s", "oom"),
        ({**SPEC, "iteration_time_s": -1.0}, "iteration_time_s", "greater than or equal to 0.000001"),
        # values whose prediction error would overflow (found by review: it answered 500 after storing)
        ({**SPEC, "iteration_time_s": 1e-300}, "iteration_time_s", "greater than or equal to 0.000001"),
        ({**SPEC, "iteration_time_s": 1.0, "peak_memory_bytes": 0}, "peak_memory_bytes", "greater than or equal to 1"),
        ({**SPEC, "iteration_time_s": 1.0, "peak_memory_bytes": 1e-300}, "peak_memory_bytes", "1024"),
        ({**SPEC, "iteration_time_s": 1.0, "notes": "x" * 2001}, "notes", "shorter"),
        ({**SPEC, "iteration_time_s": 1.0, "oom": "maybe"}, "oom", "true or false"),
        ({**SPEC, "iteration_time_s": 1.0, "colour": "green"}, "colour", "remove this field"),
        ({k: v for k, v in SPEC.items() if k != "config"} | {"iteration_time_s": 1.0}, "config", "search_id"),
        ({"iteration_time_s": 1.0}, "model", "cluster, training and config"),
        ({**SPEC, "config": {"tp": 3}, "iteration_time_s": 1.0}, "config.dp", "divide"),
        ({**SPEC, "config": {"tp": 8, "dp": 1}, "training": {"global_batch": 64}, "model": {"shape": {
            "name": "odd", "layers": 2, "hidden": 96, "heads": 12, "ffn": 384, "vocab": 100, "seq_len": 128}},
          "iteration_time_s": 1.0}, "config.tp", "heads=12"),
        ({**SPEC, "iteration_time_s": 1.0, "rank": 1}, "search_id", "rank"),
        ({**SPEC, "iteration_time_s": 1.0, "profile_id": "a", "cluster": {"preset": "dgx-h100", "profile_id": "b"}},
         "profile_id", "cluster.profile_id"),
    ]
    for body, field, word in cases:
        r = client.post("/v1/runs", json=body, headers=auth)
        assert r.status_code == 422, (field, r.text)
        item = r.json()["detail"][0]
        assert item["field"] == field, (field, item)
        assert word in item["msg"] + " " + item["fix"], (word, item)
    r = client.post("/v1/runs", json={**SPEC, "iteration_time_s": 1.0, "profile_id": "nope"}, headers=auth)
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "profile_id"
    assert client.get("/v1/runs").json()["count"] == 0


def _store_search(db: Database, settings: Settings, status: str, configs: tuple[ParallelConfig, ...]) -> str:
    """A search row as the searches endpoint stores it, with ranked rows as a worker writes them."""
    body = SearchIn.model_validate({k: v for k, v in SPEC.items() if k != "config"} | {"framework": "megatron"})
    resolved = resolve(body, db, settings)
    search_id = uuid.uuid4().hex
    with db.session() as s:
        # the search id in the hash: several stored searches of one request in a test stay distinct rows
        s.add(Search(id=search_id, request_hash=resolved.request_hash(search_id), request=resolved.stored("test"),
                     model_name="llama3-8b", cluster_name="dgx-h100", num_nodes=1, framework="megatron",
                     objective="throughput", autopar_version="test", status=status))
        s.flush()
        for rank, config in enumerate(configs, 1):
            p = _predicted(config)
            s.add(SearchConfig(search_id=search_id, rank=rank, framework="megatron", config=dataclasses.asdict(config),
                               prediction=p.to_dict(), score=p.tokens_per_s, explanation="test"))
    return search_id


def test_a_run_of_a_search_rank_uses_the_stored_request(client: TestClient, auth: dict[str, str],
                                                        app_db: Database, settings: Settings) -> None:
    search_id = _store_search(app_db, settings, "done", (FITS, OOM))
    run = _post(client, auth, search_id=search_id, rank=2, iteration_time_s=9.0)
    assert (run["search_id"], run["rank"], run["config"]) == (search_id, 2, dataclasses.asdict(OOM))
    assert run["model"]["preset"] == "llama3-8b" and run["training"]["global_batch"] == 64
    assert run["predicted_iteration_time_s"] == _predicted(OOM).iteration_time_s
    _post(client, auth, **SPEC, iteration_time_s=10.0)
    listed = client.get("/v1/runs", params={"search_id": search_id}).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == run["id"]

    queued = _store_search(app_db, settings, "queued", ())
    cases = [  # (body, status, field)
        ({"search_id": "0" * 32, "rank": 1}, 404, "search_id"),
        ({"search_id": search_id, "rank": 3}, 404, "rank"),
        ({"search_id": queued, "rank": 1}, 422, "search_id"),
        ({"search_id": search_id}, 422, "rank"),
        ({"search_id": search_id, "rank": 1, "model": {"preset": "llama3-8b"}}, 422, "model"),
    ]
    for body, status, field in cases:
        r = client.post("/v1/runs", json={**body, "iteration_time_s": 1.0}, headers=auth)
        assert (r.status_code, r.json()["detail"][0]["field"]) == (status, field), r.text
    assert client.get("/v1/runs").json()["count"] == 2


def test_a_run_on_a_profiled_cluster_is_predicted_with_the_profile(client: TestClient, auth: dict[str, str]) -> None:
    profile = HardwareProfile(Fingerprint("NVIDIA H100 SXM5 80GB", 8, 8, datetime.now(UTC).isoformat()),
                              gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0019),))
    r = client.post("/v1/profiles", content=profile.to_json(), headers={"Content-Type": "application/json", **auth})
    profile_id = r.json()["id"]
    run = _post(client, auth, **SPEC, iteration_time_s=12.0, profile_id=profile_id)
    measured = apply_profile(cluster_preset("dgx-h100"), profile)[0]
    assert run["profile_id"] == run["cluster"]["profile_id"] == profile_id
    assert run["predicted_iteration_time_s"] == _predicted(FITS, cluster=measured).iteration_time_s
    assert run["predicted_iteration_time_s"] != _predicted(FITS).iteration_time_s


def test_runs_are_listed_newest_first_by_model(client: TestClient, auth: dict[str, str]) -> None:
    shape = {"name": "my-1b", "layers": 16, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000, "seq_len": 2048}
    ids = [_post(client, auth, **SPEC, iteration_time_s=10.0 + i)["id"] for i in range(2)]
    ids.append(_post(client, auth, **{**SPEC, "model": {"shape": shape}}, iteration_time_s=3.0)["id"])
    page = client.get("/v1/runs", params={"limit": 2}).json()
    assert [r["id"] for r in page["data"]] == ids[::-1][:2] and page["count"] == 3
    assert [r["id"] for r in client.get("/v1/runs", params={"offset": 2}).json()["data"]] == ids[:1]
    by_model = client.get("/v1/runs", params={"model": "llama3-8b", "limit": 1, "offset": 1}).json()
    assert by_model["count"] == 2 and [r["id"] for r in by_model["data"]] == ids[:1]
    assert [r["id"] for r in client.get("/v1/runs", params={"model": "my-1b"}).json()["data"]] == ids[2:]
    assert client.get("/v1/runs", params={"model": "gpt-5"}).json()["count"] == 0
    r = client.get("/v1/runs/not-a-run")
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "run_id" and "not-a-run" in r.text


def test_runs_need_tokens(client: TestClient, settings: Settings, app_db: Database, read_token: str) -> None:
    body = {**SPEC, "iteration_time_s": 1.0}
    assert client.post("/v1/runs", json=body).status_code == 401
    assert client.post("/v1/runs", json=body, headers={"Authorization": f"Bearer {read_token}"}).status_code == 403
    assert client.get("/v1/runs").status_code == 200  # open reads by default
    with TestClient(create_app(settings.model_copy(update={"open_reads": False}), db=app_db, migrate=False)) as c:
        assert c.get("/v1/runs").status_code == 401 and c.get("/v1/runs/x").status_code == 401
        assert c.get("/v1/runs", headers={"Authorization": f"Bearer {read_token}"}).status_code == 200


def test_accuracy_sums_up_the_stored_prediction_errors(client: TestClient, auth: dict[str, str]) -> None:
    predicted = _predicted(FITS)
    t, m = predicted.iteration_time_s, predicted.peak_memory_bytes_per_gpu
    assert client.get("/v1/runs/accuracy").json() == {
        "runs": 0, "timed": 0, "time_mape": None, "time_median_ape": None, "time_worst_ape": None,
        "time_bias": None, "memory_measured": 0, "memory_mape": None, "oom_judged": 0, "oom_agreement": None,
        "by_week": [], "drift": None}
    _post(client, auth, **SPEC, iteration_time_s=t / 1.25, peak_memory_bytes=m)   # predicted 25 % slow
    _post(client, auth, **SPEC, iteration_time_s=t / 0.9)                          # predicted 10 % fast
    _post(client, auth, **{**SPEC, "config": {"dp": 8}}, iteration_time_s=None, oom=True)  # OOM, predicted too
    _post(client, auth, **{**SPEC, "config": {"dp": 8}}, iteration_time_s=2.0)   # ran, but predicted OOM
    acc = client.get("/v1/runs/accuracy").json()
    assert acc["runs"] == 4 and acc["timed"] == 3 and acc["memory_measured"] == 1
    oom_time_error = _predicted(OOM).iteration_time_s / 2.0 - 1
    errors = [0.25, -0.1, oom_time_error]
    assert acc["time_mape"] == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert acc["time_bias"] == pytest.approx(sum(errors) / 3)
    assert acc["time_worst_ape"] == pytest.approx(max(abs(e) for e in errors))
    assert acc["memory_mape"] == pytest.approx(0.0, abs=1e-12)
    assert (acc["oom_judged"], acc["oom_agreement"]) == (4, 0.75)
    assert client.get("/v1/runs/accuracy?model=llama3-70b").json()["runs"] == 0

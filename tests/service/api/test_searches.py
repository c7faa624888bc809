"""/v1/searches end to end on SQLite and PostgreSQL: queue, run in-process, ranked configurations equal
to search.search(), launch files, identical requests, validation, auth, listing and cancelling."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from search import cluster_preset, model_preset, search
from service._worker import run_worker
from service.api import Settings, create_app
from service.api._search_models import ConfigsOut, LaunchOut, SearchListOut, SearchOut
from service.store import Database, Search, SearchConfig

BODY: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
                        "training": {"global_batch": 64}, "top": 5}
SLOW = {"budget": {"n_trials": 5000, "timeout_s": 30}}
"""Sampling that runs for up to 30 s on this machine, reporting progress per trial."""


def body(**changes: Any) -> dict[str, Any]:
    return {**BODY, **changes}


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def fields(r: Any) -> list[str]:
    return [d["field"] for d in r.json()["detail"]]


def test_search_runs_and_serves_the_ranking_of_search_search(client: TestClient, settings: Settings,
                                                             auth: dict[str, str]) -> None:
    r = client.post("/v1/searches", json=body(), headers=auth)
    assert r.status_code == 202, r.text
    queued = SearchOut.model_validate(r.json())
    assert r.headers["location"] == f"/v1/searches/{queued.id}" and queued.status == "queued"
    assert client.get(f"/v1/searches/{queued.id}/configs").status_code == 409

    assert run_worker(settings, once=True) == 1

    done = SearchOut.model_validate(client.get(r.headers["location"]).json())
    assert (done.status, done.progress, done.attempts, done.error) == ("done", 1.0, 1, None)
    assert done.counts.exhaustive and done.counts.n_valid and done.counts.n_feasible
    assert done.timings.total_s is not None and done.timings.search_s is not None and done.timings.queued_s is not None

    configs = client.get(f"/v1/searches/{queued.id}/configs")
    assert configs.status_code == 200 and configs.headers["content-type"] == "application/json"
    served = ConfigsOut.model_validate_json(configs.content)  # the cached bytes follow the published schema
    expected = search(model_preset("llama2-7b"), cluster_preset("dgx-a100-80gb", 1), 64, top_k=5)
    assert [c.rank for c in served.configs] == [1, 2, 3, 4, 5]
    assert [(c.framework, c.config.model_dump()) for c in served.configs] == [
        (e.framework, e.to_dict()["config"]) for e in expected.top]
    assert [c.prediction.tokens_per_s for c in served.configs] == pytest.approx(
        [e.prediction.tokens_per_s for e in expected.top], rel=1e-12)
    top2 = ConfigsOut.model_validate_json(client.get(f"/v1/searches/{queued.id}/configs?top=2").content)
    assert top2.count == 2 and top2.configs == served.configs[:2]
    assert client.get(f"/v1/searches/{queued.id}/configs").content == configs.content  # from the cache

    again = client.post("/v1/searches", json=body(), headers=auth)  # identical: the done search, no new one
    assert (again.status_code, again.json()["id"]) == (200, queued.id)

    best = next(c for c in served.configs if c.framework == "megatron")  # the first Megatron-LM configuration
    megatron = LaunchOut.model_validate(client.get(f"{best.launch}?target=megatron").json())
    args = megatron.files["megatron_args.txt"].split("\n")
    assert args[args.index("--global-batch-size") + 1] == "64"
    assert args[args.index("--micro-batch-size") + 1] == str(best.config.micro_batch)
    if best.config.cp > 1:
        assert args[args.index("--context-parallel-size") + 1] == str(best.config.cp)
    else:
        assert "--context-parallel-size" not in args
    slurm = client.get(f"{best.launch}?target=slurm&hosts=gpu-a&train_script=train.py").json()
    for target in ("torchrun", "deepspeed-launcher", "slurm"):  # issue 17 item 6: no value acts as an option
        assert fields(client.get(f"{best.launch}?target={target}&hosts=gpu-a"
                                 "&train_script=--rdzv-endpoint=attacker.example:29400")) == ["train_script"]
    assert "train.py" in slurm["command"] + "".join(slurm["files"].values())
    assert fields(client.get(f"{best.launch}?target=slurm&hosts=a,b")) == ["hosts"]
    for hosts in (",,,", "gpu-a;reboot", "gpu%20a", "$(id)", "gpu-a%0Anode"):  # review: accepted into scripts
        assert fields(client.get(f"{best.launch}?target=torchrun&hosts={hosts}")) == ["hosts"], hosts
    assert client.get(f"{best.launch}?target=torchrun&hosts=[fe80::1]").status_code == 200
    assert fields(client.get(f"{best.launch}?target=deepspeed")) == ["target"]  # a megatron configuration
    assert fields(client.get(f"{best.launch}?target=nope")) == ["target"]
    assert client.get(f"/v1/searches/{queued.id}/configs/6/launch?target=torchrun").status_code == 404


def test_deepspeed_search_launches_a_ds_config_deepspeed_accepts(client: TestClient, settings: Settings,
                                                                  auth: dict[str, str]) -> None:
    r = client.post("/v1/searches", json=body(framework="deepspeed", top=2), headers=auth)
    assert r.status_code == 202, r.text
    assert run_worker(settings, once=True) == 1
    configs = ConfigsOut.model_validate_json(client.get(f"{r.headers['location']}/configs").content)
    assert {c.framework for c in configs.configs} == {"deepspeed"}
    launch = client.get(f"{configs.configs[0].launch}?target=deepspeed")
    assert launch.status_code == 200, launch.text
    ds = json.loads(launch.json()["files"]["ds_config.json"])
    assert ds["train_batch_size"] == 64
    assert ds["zero_optimization"]["stage"] == configs.configs[0].config.zero_stage
    refused = client.get(f"{configs.configs[0].launch}?target=megatron")
    assert refused.status_code == 422 and fields(refused) == ["target"] and "megatron" in refused.text.lower()
    assert client.get(f"{configs.configs[0].launch}?target=deepspeed-launcher").status_code == 200


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"model": {"preset": "gpt-9000"}}, "model.preset"),
    ({"cluster": {"preset": "no-such-dgx"}}, "cluster.preset"),
    ({"model": {"shape": {"layers": 4, "hidden": 100, "heads": 3, "ffn": 400, "vocab": 1000, "seq_len": 128}}},
     "model.shape.heads"),
    ({"framework": "deepspeed", "cluster": {"preset": "dgx-a100-80gb", "nodes": 4}, "training": {"global_batch": 16}},
     "cluster.nodes"),
    ({"framework": "deepspeed", "training": {"global_batch": 12}}, "training.global_batch"),
    ({"training": {"global_batch": 64, "precision": "fp8"}}, "training.precision"),
    ({"objective": "cost"}, "price_per_gpu_hour"),
    ({"top": 101}, "top"),
    ({"budget": {"n_trials": 5001}}, "budget.n_trials"),
    ({"budget": {"timeout_s": 601}}, "budget.timeout_s"),
    ({"budget": {"timeout_s": 0}}, "budget.timeout_s"),
    ({"colour": "blue"}, "colour"),
    ({"budget": {"seed": 1, "trials": 3}}, "budget.trials"),
    ({"price_per_gpu_hour": -1}, "price_per_gpu_hour"),
    ({"cluster": {"preset": "dgx-a100-80gb", "profile_id": "missing"}}, "cluster.profile_id"),
]


def test_invalid_requests_name_the_field_and_store_nothing(client: TestClient, auth: dict[str, str]) -> None:
    for changes, field in INVALID:  # one database for all cases: each one costs a migration otherwise
        r = client.post("/v1/searches", json=body(**changes), headers=auth)
        assert (r.status_code, fields(r)) == (422, [field]), (changes, r.text)
        assert all(d["fix"] for d in r.json()["detail"]), r.text
    assert client.get("/v1/searches").json()["count"] == 0


def test_writes_need_a_write_token(client: TestClient, read_token: str) -> None:
    assert client.post("/v1/searches", json=body()).status_code == 401
    r = client.post("/v1/searches", json=body(), headers={"Authorization": f"Bearer {read_token}"})
    assert r.status_code == 403 and fields(r) == ["Authorization"]
    assert client.delete("/v1/searches/abc").status_code == 401
    assert client.get("/v1/searches", headers={"Authorization": f"Bearer {read_token}"}).status_code == 200
    assert client.get("/v1/searches", headers={"Authorization": "Bearer ap_nope"}).status_code == 401


def test_openapi_documents_every_answer(sqlite_url: str) -> None:
    paths = create_app(Settings(database_url=sqlite_url), migrate=False).openapi()["paths"]
    expected = {("post", "/v1/searches"): {"200", "202", "401", "403", "422", "429"},
                ("get", "/v1/searches"): {"200", "401", "422"},
                ("get", "/v1/searches/{search_id}"): {"200", "401", "404", "422"},
                ("delete", "/v1/searches/{search_id}"): {"200", "202", "401", "403", "404", "409", "422"},
                ("get", "/v1/searches/{search_id}/configs"): {"200", "401", "404", "409", "422"},
                ("get", "/v1/searches/{search_id}/configs/{rank}/launch"): {"200", "401", "404", "409", "422"}}
    for (method, path), codes in expected.items():
        op = paths[path][method]
        app_wide = {"503"} | ({"413"} if "requestBody" in op else set())  # body limit, database down
        assert set(op["responses"]) == codes | app_wide, (method, path)
        assert op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    ok = paths["/v1/searches/{search_id}/configs"]["get"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"]["$ref"].endswith("/ConfigsOut")


def test_unknown_ids_are_404(client: TestClient) -> None:
    for path in ("/v1/searches/nope", "/v1/searches/nope/configs", "/v1/searches/nope/configs/1/launch?target=slurm"):
        r = client.get(path)
        assert r.status_code == 404 and fields(r) == ["id"], path


def test_list_pages_newest_first_with_filters(client: TestClient, auth: dict[str, str]) -> None:
    ids = [client.post("/v1/searches", json=body(top=k), headers=auth).json()["id"] for k in (1, 2, 3, 4)]
    ids.append(client.post("/v1/searches", json=body(model={"preset": "gpt-1.7b"}), headers=auth).json()["id"])
    assert client.delete(f"/v1/searches/{ids[0]}", headers=auth).status_code == 200
    newest_first = ids[::-1]

    page = SearchListOut.model_validate(client.get("/v1/searches?limit=2").json())
    seen = [s.id for s in page.data]
    assert page.count == 5 and page.offset == 0
    while page.next_cursor:
        page = SearchListOut.model_validate(client.get(f"/v1/searches?limit=2&cursor={page.next_cursor}").json())
        seen += [s.id for s in page.data]
    assert seen == newest_first
    assert [s["id"] for s in client.get("/v1/searches?limit=2&offset=3").json()["data"]] == newest_first[3:]

    by_model = client.get("/v1/searches?model=gpt-1.7b").json()
    assert (by_model["count"], [s["id"] for s in by_model["data"]]) == (1, [ids[4]])
    by_status = client.get("/v1/searches?status=cancelled&cluster=dgx-a100-80gb").json()
    assert [s["id"] for s in by_status["data"]] == [ids[0]]
    assert client.get("/v1/searches?status=queued").json()["count"] == 4
    assert fields(client.get("/v1/searches?limit=201")) == ["limit"]
    assert fields(client.get("/v1/searches?cursor=garbage")) == ["cursor"]
    assert fields(client.get("/v1/searches?status=lost")) == ["status"]


def test_cancel_a_queued_search(client: TestClient, settings: Settings, auth: dict[str, str]) -> None:
    first = client.post("/v1/searches", json=body(), headers=auth).json()
    assert client.post("/v1/searches", json=body(), headers=auth).json()["id"] == first["id"]  # still queued
    r = client.delete(f"/v1/searches/{first['id']}", headers=auth)
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    assert client.delete(f"/v1/searches/{first['id']}", headers=auth).status_code == 200  # already cancelled
    assert run_worker(settings, once=True) == 0  # nothing to claim
    r = client.get(f"/v1/searches/{first['id']}/configs")
    assert r.status_code == 409 and "POST the request again" in r.json()["detail"][0]["fix"]

    second = client.post("/v1/searches", json=body(), headers=auth)  # a cancelled search answers nothing
    assert second.status_code == 202 and second.json()["id"] != first["id"]
    assert run_worker(settings, once=True) == 1
    r = client.delete(f"/v1/searches/{second.json()['id']}", headers=auth)
    assert r.status_code == 409 and fields(r) == ["status"]
    assert client.delete("/v1/searches/nope", headers=auth).status_code == 404


def test_cancel_a_running_search_stops_its_worker(client: TestClient, settings: Settings, app_db: Database,
                                                  auth: dict[str, str]) -> None:
    sid = client.post("/v1/searches", json=body(**SLOW), headers=auth).json()["id"]
    completed: list[int] = []
    worker = threading.Thread(target=lambda: completed.append(run_worker(settings, once=True)))
    worker.start()
    try:
        wait_for(lambda: client.get(f"/v1/searches/{sid}").json()["progress"] > 0)
        r = client.delete(f"/v1/searches/{sid}", headers=auth)
        assert (r.status_code, r.json()["status"]) == (202, "cancelled")
        started = time.monotonic()
        worker.join(timeout=10)
        assert not worker.is_alive() and completed == [0]
        assert time.monotonic() - started < 5  # stopped at a heartbeat, not at the end of the 30 s budget
    finally:
        worker.join()
    after = client.get(f"/v1/searches/{sid}").json()
    assert after["status"] == "cancelled" and after["progress"] < 1 and after["counts"]["n_valid"] is None
    with app_db.session() as s:
        assert s.execute(select(func.count()).select_from(SearchConfig)).scalar_one() == 0
        assert s.execute(select(Search.status)).scalar_one() == "cancelled"


def test_identical_posts_racing_each_other_share_one_search(client: TestClient, app_db: Database,
                                                            auth: dict[str, str]) -> None:
    """Eight identical POSTs at once (the thread pool runs them concurrently): one search is queued,
    every answer names it. The partial unique index of migration 0002 backs the check-then-insert."""
    from concurrent.futures import ThreadPoolExecutor

    from service.store import Search

    body = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 2},
            "training": {"global_batch": 128}, "top": 2}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: client.post("/v1/searches", json=body, headers=auth), range(8)))
    assert {r.status_code for r in answers} == {202}
    assert len({r.json()["id"] for r in answers}) == 1
    with app_db.session() as s:
        assert s.execute(select(func.count()).select_from(Search)).scalar_one() == 1


def test_the_database_refuses_a_second_active_search_for_one_request(app_db: Database) -> None:
    from service.store import Conflict, Search

    def row(status: str) -> Search:
        return Search(id=uuid.uuid4().hex, request_hash="h" * 64, request={}, model_name="m", cluster_name="c",
                      num_nodes=1, framework="any", objective="throughput", autopar_version="0", status=status,
                      progress=0.0, attempts=0)

    with app_db.session() as s:
        s.add_all([row("failed"), row("cancelled"), row("queued")])  # finished ones may repeat
    with pytest.raises(Conflict), app_db.session() as s:  # the store's translation of the unique index's refusal
        s.add(row("done"))


def test_a_search_on_a_profile_of_another_gpu_says_so(client: TestClient, auth: dict[str, str]) -> None:
    """Found by review: predict warned that an A100 profile does not describe an H100 cluster, the
    search did not. Both now carry search.staleness()'s reasons."""
    from datetime import UTC, datetime

    from search import Fingerprint, GemmSample, HardwareProfile

    profile = HardwareProfile(fingerprint=Fingerprint("NVIDIA A100-SXM4-80GB", 8, 8, datetime.now(UTC).isoformat()),
                              gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0045),))
    up = client.post("/v1/profiles", content=profile.to_json(), headers={**auth, "Content-Type": "application/json"})
    assert up.status_code == 201, up.text
    body = {"model": {"preset": "llama2-7b"}, "training": {"global_batch": 64}, "top": 2,
            "cluster": {"preset": "dgx-h100", "profile_id": up.json()["id"]}}
    r = client.post("/v1/searches", json=body, headers=auth)
    assert r.status_code == 202, r.text
    notes = r.json()["notes"]
    assert any(n.startswith("stale profile:") and "A100" in n for n in notes), notes


def test_a_full_queue_answers_429_and_stores_nothing(settings: Settings, app_db: Database,
                                                     auth: dict[str, str]) -> None:
    """A CI loop gone wrong must not bury the workers: at AUTOPAR_MAX_QUEUED waiting searches, a new
    one is refused with Retry-After; an identical request still gets its existing search."""
    from sqlalchemy import func, select

    small = settings.model_copy(update={"max_queued": 2})
    bodies = [{"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb"},
               "training": {"global_batch": 64}, "top": k} for k in (1, 2, 3)]
    with TestClient(create_app(small, db=app_db, migrate=False)) as c:
        assert [c.post("/v1/searches", json=b, headers=auth).status_code for b in bodies[:2]] == [202, 202]
        r = c.post("/v1/searches", json=bodies[2], headers=auth)
        assert r.status_code == 429 and r.headers["retry-after"] == "30"
        assert r.json()["detail"][0]["field"] == "queue" and "autopar worker" in r.json()["detail"][0]["fix"]
        assert c.post("/v1/searches", json=bodies[0], headers=auth).status_code == 202  # the existing one
    with app_db.session() as s:
        assert s.execute(select(func.count()).select_from(Search)).scalar_one() == 2

"""Idempotency-Key on POST /v1/searches (and the helper other POST routes reuse), on SQLite and
PostgreSQL: replay, mismatch, per-caller keys, nothing stored for refused requests, and the race
where another request with the same key commits first."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service._tokens import create_token
from service.api._idempotency import Answer, IdempotentRequest, body_hash
from service.store import Database, IdempotencyKey, Search

BODY: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
                        "training": {"global_batch": 64}, "top": 3}


def count(db: Database, table: Any) -> int:
    with db.session() as s:
        return int(s.execute(select(func.count()).select_from(table)).scalar_one())


def test_same_key_and_body_replays_the_first_answer(client: TestClient, app_db: Database,
                                                    auth: dict[str, str]) -> None:
    headers = {**auth, "Idempotency-Key": "k-1"}
    first = client.post("/v1/searches", json=BODY, headers=headers)
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    # The same request spelled differently (key order, an explicit default) is the same request.
    again = client.post("/v1/searches", json={"top": 3, **BODY, "framework": "any"}, headers=headers)
    assert (again.status_code, again.json()) == (202, first.json())
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert count(app_db, Search) == 1 and count(app_db, IdempotencyKey) == 1


def test_same_key_with_another_body_is_refused(client: TestClient, app_db: Database, auth: dict[str, str]) -> None:
    headers = {**auth, "Idempotency-Key": "k-2"}
    assert client.post("/v1/searches", json=BODY, headers=headers).status_code == 202
    r = client.post("/v1/searches", json={**BODY, "top": 4}, headers=headers)
    assert r.status_code == 422
    [item] = r.json()["detail"]
    assert item["field"] == "Idempotency-Key" and "new Idempotency-Key" in item["fix"]
    assert count(app_db, Search) == 1


def test_keys_belong_to_their_caller(client: TestClient, app_db: Database, auth: dict[str, str]) -> None:
    other = {"Authorization": f"Bearer {create_token(app_db, 'other', ['write'])[1]}", "Idempotency-Key": "shared"}
    assert client.post("/v1/searches", json=BODY, headers={**auth, "Idempotency-Key": "shared"}).status_code == 202
    r = client.post("/v1/searches", json={**BODY, "top": 4}, headers=other)  # not a mismatch: another caller
    assert r.status_code == 202 and "idempotent-replayed" not in r.headers
    assert count(app_db, IdempotencyKey) == 2


def test_a_refused_request_stores_neither_resource_nor_key(client: TestClient, app_db: Database,
                                                          auth: dict[str, str]) -> None:
    headers = {**auth, "Idempotency-Key": "k-3"}
    bad = client.post("/v1/searches", json={**BODY, "model": {"preset": "nope"}}, headers=headers)
    assert bad.status_code == 422
    assert count(app_db, IdempotencyKey) == 0 and count(app_db, Search) == 0
    assert client.post("/v1/searches", json=BODY, headers=headers).status_code == 202  # the fixed retry


def test_key_length_is_checked_and_the_header_documented(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post("/v1/searches", json=BODY, headers={**auth, "Idempotency-Key": "x" * 201})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "Idempotency-Key"
    params = client.get("/openapi.json").json()["paths"]["/v1/searches"]["post"]["parameters"]
    header = next(p for p in params if p["name"] == "Idempotency-Key")
    assert header["in"] == "header" and "same key" in header["description"]


def test_a_write_that_fails_leaves_no_key(app_db: Database) -> None:
    idem = IdempotentRequest("k-4", "tok", "POST", "/v1/things")

    def create(s: Any) -> Answer:
        idem.remember(s, "digest", Answer(201, {"id": 1}))  # the key row is in the transaction ...
        raise RuntimeError("the resource could not be written")  # ... that fails

    with pytest.raises(RuntimeError):
        idem.respond(app_db, {"a": 1}, create)
    assert count(app_db, IdempotencyKey) == 0


def test_a_concurrent_request_with_the_same_key_wins_and_is_replayed(app_db: Database) -> None:
    idem = IdempotentRequest("k-5", "tok", "POST", "/v1/things")

    def create(s: Any) -> Answer:
        with app_db.session() as other:  # the other request commits its key first
            idem.remember(other, body_hash({"a": 1}), Answer(201, {"id": "theirs"}, "/v1/things/theirs"))
        return Answer(201, {"id": "ours"}, "/v1/things/ours")

    response = idem.respond(app_db, {"a": 1}, create)
    assert (response.status_code, response.body, response.headers["location"]) == (
        201, b'{"id":"theirs"}', "/v1/things/theirs")
    assert response.headers["idempotent-replayed"] == "true"


def _profile_body() -> dict[str, Any]:
    from datetime import UTC, datetime

    from search import Fingerprint, GemmSample, HardwareProfile

    p = HardwareProfile(fingerprint=Fingerprint("NVIDIA H100 80GB HBM3", 8, 8, datetime.now(UTC).isoformat(),
                                                hostnames=("node01",)),
                        gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0016),))
    body: dict[str, Any] = json.loads(p.to_json())
    return body


RUN_BODY: dict[str, Any] = {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100"},
                            "training": {"global_batch": 64}, "config": {"tp": 2, "zero_stage": 1,
                                                                          "recompute": "full"},
                            "iteration_time_s": 1.5}


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/profiles"])
def test_other_posts_replay_under_their_key_too(client: TestClient, app_db: Database, auth: dict[str, str],
                                                path: str) -> None:
    """POST /v1/runs and /v1/profiles create one resource per key: a retry replays the first answer."""
    from service.store import Profile, Run

    if path == "/v1/runs":
        body, table = RUN_BODY, Run
    else:
        body, table = _profile_body(), Profile
    headers = {**auth, "Idempotency-Key": f"k-{path}"}
    first = client.post(path, json=body, headers=headers)
    assert first.status_code == 201, first.text
    again = client.post(path, json=body, headers=headers)
    assert (again.status_code, again.json(), again.headers["location"]) == (201, first.json(),
                                                                             first.headers["location"])
    assert again.headers["idempotent-replayed"] == "true"
    assert count(app_db, table) == 1
    fresh = client.post(path, json=body, headers={**auth, "Idempotency-Key": f"k2-{path}"})
    assert fresh.status_code == 201 and fresh.headers["location"] != first.headers["location"]
    assert count(app_db, table) == 2


def test_keys_expire_after_a_day(client: TestClient, app_db: Database, auth: dict[str, str]) -> None:
    """An expired key may carry a new request, and expired keys are purged as new ones arrive."""
    from datetime import timedelta

    from sqlalchemy import update

    from service.store import utc_now

    headers = {**auth, "Idempotency-Key": "old"}
    assert client.post("/v1/searches", json=BODY, headers=headers).status_code == 202
    with app_db.session() as s:
        s.execute(update(IdempotencyKey).values(created_at=utc_now() - timedelta(hours=25)))
    r = client.post("/v1/searches", json={**BODY, "top": 4}, headers=headers)  # fresh again: no 422
    assert r.status_code == 202 and "idempotent-replayed" not in r.headers
    assert count(app_db, IdempotencyKey) == 1
    with app_db.session() as s:
        s.execute(update(IdempotencyKey).values(created_at=utc_now() - timedelta(hours=25)))
    assert client.post("/v1/searches", json={**BODY, "top": 2},
                       headers={**auth, "Idempotency-Key": "new"}).status_code == 202
    assert count(app_db, IdempotencyKey) == 1  # "old" was purged when "new" was stored

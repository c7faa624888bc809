"""/healthz, /readyz and /metrics, in process, on SQLite and PostgreSQL: readiness follows the schema,
request metrics are labelled by route template, the search gauges count the rows in the database."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.api import Settings, autopar_version, create_app
from service.store import Database, Search, head_revision

UNREACHABLE = "postgresql+psycopg://nobody@127.0.0.1:1/nothing"  # port 1: refused at once


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value of a Prometheus text exposition."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def search_row(search_id: str, status: str) -> Search:
    return Search(id=search_id, request_hash=search_id.ljust(64, "0"), request={}, model_name="gpt3-175b",
                  cluster_name="dgx-a100-80gb", num_nodes=1, framework="megatron", objective="throughput",
                  autopar_version="0", status=status)


@pytest.fixture
def app(settings: Settings, app_db: Database) -> FastAPI:
    """The service with two extra routes: one with a path parameter, one that fails."""
    app = create_app(settings, db=app_db, migrate=False)

    @app.get("/test/items/{item_id}")
    def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    @app.get("/test/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    return app


@pytest.fixture
def tc(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_healthz_and_readyz_on_a_migrated_database(client: TestClient, app_db: Database) -> None:
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "version": autopar_version()}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "database": app_db.dialect, "revision": head_revision()}


def test_readyz_follows_the_schema(db_url: str) -> None:
    """Not ready before the migration (503 saying what to run), ready after it, without a restart."""
    db = Database(db_url)
    try:
        with TestClient(create_app(Settings(database_url=db_url, workers=0), db=db, migrate=False)) as c:
            assert c.get("/healthz").status_code == 200
            answer = c.get("/readyz")
            assert answer.status_code == 503
            (item,) = answer.json()["detail"]
            assert item["field"] == "AUTOPAR_DATABASE_URL" and "revision none" in item["msg"]
            assert "autopar db upgrade" in item["fix"]
            db.upgrade()
            assert c.get("/readyz").status_code == 200
    finally:
        db.dispose()


def test_health_without_a_database() -> None:
    """/healthz never touches the database; /readyz and the metrics say it does not answer."""
    db = Database(UNREACHABLE)
    with TestClient(create_app(Settings(database_url=UNREACHABLE, workers=0), db=db, migrate=False)) as c:
        assert c.get("/healthz").status_code == 200
        answer = c.get("/readyz")
        assert answer.status_code == 503
        assert "does not answer" in answer.json()["detail"][0]["msg"]
        scrape = c.get("/metrics")
        assert scrape.status_code == 200
        assert value(scrape.text, "autopar_database_up") == 0.0
        assert ("autopar_searches", frozenset({("status", "queued")})) not in samples(scrape.text)
    db.dispose()


def test_request_metrics_use_route_templates(tc: TestClient) -> None:
    for item_id in ("a", "b", "c"):
        assert tc.get(f"/test/items/{item_id}").status_code == 200
    assert tc.get("/no/such/path/42").status_code == 404
    assert tc.get("/test/boom").status_code == 500
    assert tc.post("/healthz").status_code == 405
    too_big = tc.post("/test/items/a", content=b"x", headers={"content-length": str(1 << 30)})
    assert too_big.status_code == 413
    text = tc.get("/metrics").text
    requests = "autopar_http_requests_total"
    assert value(text, requests, method="GET", route="/test/items/{item_id}", status="200") == 3
    assert value(text, requests, method="GET", route="<unmatched>", status="404") == 1
    assert value(text, requests, method="GET", route="/test/boom", status="500") == 1
    assert value(text, requests, method="POST", route="/healthz", status="405") == 1
    assert value(text, requests, method="POST", route="<unmatched>", status="413") == 1  # refused before routing
    assert value(text, "autopar_http_request_duration_seconds_count", route="/test/items/{item_id}") == 3
    assert value(text, "autopar_http_request_duration_seconds_sum", route="/test/items/{item_id}") > 0
    assert value(text, "autopar_build_info", version=autopar_version(), python=platform.python_version()) == 1
    assert not any("/test/items/a" in dict(labels).get("route", "") for _, labels in samples(text))
    # the counter moves: the scrape above is counted by the next one
    assert value(tc.get("/metrics").text, requests, method="GET", route="/metrics", status="200") == 1


def test_search_gauges_count_the_rows(tc: TestClient, app_db: Database) -> None:
    statuses = ["queued", "queued", "queued", "running", "done", "done", "failed"]
    with app_db.session() as s:
        s.add_all(search_row(f"s{i}", status) for i, status in enumerate(statuses))
    text = tc.get("/metrics").text
    assert value(text, "autopar_database_up") == 1
    expected: dict[str, Any] = {"queued": 3, "running": 1, "done": 2, "failed": 1, "cancelled": 0}
    assert {status: value(text, "autopar_searches", status=status) for status in expected} == expected
    assert value(text, "autopar_queue_depth") == 3


def test_health_and_metrics_need_no_token(sqlite_url: str) -> None:
    """Probes and scrapers carry no token, even when every /v1 read needs one."""
    settings = Settings(database_url=sqlite_url, workers=0, open_reads=False)
    db = Database(sqlite_url)
    with TestClient(create_app(settings, db=db)) as c:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert c.get(path).status_code == 200, path
    db.dispose()


def test_apps_in_one_process_have_their_own_registries(settings: Settings, app_db: Database) -> None:
    with TestClient(create_app(settings, db=app_db, migrate=False)) as a, \
            TestClient(create_app(settings, db=app_db, migrate=False)) as b:
        for _ in range(2):
            a.get("/healthz")
        b.get("/healthz")
        key = {"method": "GET", "route": "/healthz", "status": "200"}
        assert value(a.get("/metrics").text, "autopar_http_requests_total", **key) == 2
        assert value(b.get("/metrics").text, "autopar_http_requests_total", **key) == 1


def test_operation_ids_read_as_sdk_methods(client: TestClient) -> None:
    """Issue 17: operationIds an SDK generator turns into method names (createSearch, listConfigs, ...),
    not FastAPI's create_search_v1_searches_post."""
    import re

    spec = client.get("/openapi.json").json()
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z0-9]*)*", i) for i in ids), ids
    assert {"createSearch", "listSearches", "getSearch", "cancelSearch", "listConfigs", "getLaunchFiles", "predict",
            "createProfile", "createRun", "getRunsAccuracy"} <= set(ids)

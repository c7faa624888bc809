"""Issue 17: the faults an adversarial probe found, each reproduced, on SQLite and PostgreSQL where
the database matters: near-zero hardware figures, 32-bit counters and database text reaching
clients, the worker's back-off after an outage, bodies that never finish, NUL in names."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from search import ClusterSpec, SpecError, cluster_preset
from search._cluster_spec import BOUNDS
from service import _worker
from service.api import Settings
from service.store import Database, Search
from service.store._jobs import claim, finish

GPU: dict[str, Any] = {"memory_bytes": 80 * 2**30, "hbm_bytes_per_s": 3.35e12, "fp16_flop_per_s": 989e12,
                       "bf16_flop_per_s": 989e12, "fp32_flop_per_s": 67e12}
NODE: dict[str, Any] = {"gpus_per_node": 8, "intra_node_bytes_per_s": 4.8e11, "inter_node_bytes_per_s": 3.76e11,
                        "pcie_bytes_per_s": 2.75e10, "cpu_memory_bytes": 2 * 2**40, "nvme_bytes": 3e13,
                        "nvme_read_bytes_per_s": 2e10, "nvme_write_bytes_per_s": 1e10, "cpu_adam_params_per_s": 2.8e9}
PREDICT: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "training": {"global_batch": 64},
                           "framework": "megatron", "config": {"tp": 8}}
SEARCH: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "training": {"global_batch": 64}, "top": 3,
                          "budget": {"n_trials": 50}}


# --- 1. near-zero hardware figures ------------------------------------------------------------


def test_every_preset_lies_inside_the_physical_bounds() -> None:
    from search import CLUSTER_PRESETS

    for name in CLUSTER_PRESETS:
        spec = cluster_preset(name)  # built through __post_init__: the bounds hold
        assert isinstance(spec, ClusterSpec)


@pytest.mark.parametrize(("part", "field"), [("gpu", "fp16_flop_per_s"), ("gpu", "hbm_bytes_per_s"),
                                             ("node", "inter_node_bytes_per_s"), ("node", "pcie_bytes_per_s"),
                                             ("gpu", "matmul_efficiency"), ("node", "cpu_adam_params_per_s")])
@pytest.mark.parametrize("tiny", [5e-324, 1e-300])
def test_a_near_zero_figure_is_a_422_naming_its_range(client: TestClient, auth: dict[str, str], part: str,
                                                      field: str, tiny: float) -> None:
    """Before: 5e-324 FLOP/s made POST /v1/predict answer 500 (division by zero) and a search fail in
    the worker with a raw Python error; 1e-300 gave 200 with iteration_time_s null."""
    cluster = {"gpu": dict(GPU), "node": dict(NODE), "nodes": 1}
    cluster[part][field] = tiny
    low, high = BOUNDS[field]
    for path, body in (("/v1/predict", {**PREDICT, "cluster": cluster}),
                       ("/v1/searches", {**SEARCH, "cluster": cluster})):
        r = client.post(path, json=body, headers=auth)
        assert r.status_code == 422, (path, r.text)
        [item] = r.json()["detail"]
        assert item["field"] == f"cluster.{part}.{field}"
        assert f"[{low:g}, {high:g}]" in item["fix"], item
    with client.app.state.autopar.db.session() as s:  # type: ignore[attr-defined]
        assert s.execute(select(Search.id)).first() is None  # nothing was queued


def test_the_schema_documents_each_range() -> None:
    from service.request import GPUIn, NodeIn

    for model in (GPUIn, NodeIn):
        props = model.model_json_schema()["properties"]
        for name, (low, high) in BOUNDS.items():
            if name in props:
                prop = props[name] if "minimum" in props[name] else next(
                    p for p in props[name]["anyOf"] if "minimum" in p)
                assert (prop["minimum"], prop["maximum"]) == (low, high), name
                assert f"[{low:g}, {high:g}]" in props[name]["description"]


def test_the_specs_refuse_a_figure_outside_its_range() -> None:
    import dataclasses

    base = cluster_preset("dgx-h100")
    for field, value in (("fp16_flop_per_s", 5e-324), ("hbm_bytes_per_s", 1e-300), ("memory_bytes", 2.0**80)):
        with pytest.raises(SpecError, match=field):
            dataclasses.replace(base.gpu, **{field: value})
    with pytest.raises(SpecError, match="nvme_write_bytes_per_s"):
        dataclasses.replace(base.node, nvme_write_bytes_per_s=5e-324)


@pytest.mark.parametrize("edge", ["low", "high"])
def test_predictions_at_the_edges_of_every_range_are_finite(client: TestClient, edge: str) -> None:
    """Every prediction is finite or refused: the slowest and the fastest hardware the bounds allow."""
    pick = 0 if edge == "low" else 1
    gpu = {k: BOUNDS[k][pick] for k in GPU} | {"matmul_efficiency": BOUNDS["matmul_efficiency"][pick]}
    node = {k: (BOUNDS[k][pick] if k in BOUNDS else v) for k, v in NODE.items()}
    r = client.post("/v1/predict", json={**PREDICT, "cluster": {"gpu": gpu, "node": node, "nodes": 2}})
    assert r.status_code == 200, r.text

    def numbers(value: Any) -> list[float]:
        if isinstance(value, dict):
            return [x for v in value.values() for x in numbers(v)]
        if isinstance(value, list):
            return [x for v in value for x in numbers(v)]
        return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []

    prediction = r.json()["prediction"]
    assert prediction["iteration_time_s"] is not None and all(math.isfinite(x) for x in numbers(prediction))


# --- 2. 64-bit counters; no database text reaches a client --------------------------------------


def test_counters_past_two_to_the_31_are_stored(client: TestClient, app_db: Database, auth: dict[str, str]) -> None:
    """Before: PostgreSQL's INTEGER refused gpt-1t's space size on 65,536 nodes ("integer out of range"),
    and the search's error showed the SQL text to the client."""
    sid = client.post("/v1/searches", json={**SEARCH, "cluster": {"preset": "dgx-h100"}}, headers=auth).json()["id"]
    c = claim(app_db, "w")
    assert c is not None and c.search_id == sid
    huge = 3 * 2**40
    assert finish(app_db, c, {"space_size": huge, "n_valid": huge - 1, "n_feasible": 2**33, "n_evaluated": 2**32},
                  [])
    counts = client.get(f"/v1/searches/{sid}").json()["counts"]
    assert (counts["space_size"], counts["n_valid"], counts["n_feasible"], counts["n_evaluated"]) == (
        huge, huge - 1, 2**33, 2**32)


def test_a_database_error_in_the_worker_shows_no_sql(client: TestClient, app_db: Database, settings: Settings,
                                                     auth: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy.exc import DataError

    from service.store._translate import translated

    sid = client.post("/v1/searches", json={**SEARCH, "cluster": {"preset": "dgx-h100"}}, headers=auth).json()["id"]

    def refuse(*_: object, **__: object) -> bool:
        with translated(app_db.url):  # what the store does with the driver's refusal
            raise DataError("UPDATE searches SET space_size=%(space_size)s", {"space_size": 2**40},
                            Exception("integer out of range"))

    monkeypatch.setattr(_worker, "finish", refuse)
    assert _worker.run_worker(settings, once=True) == 0
    failed = client.get(f"/v1/searches/{sid}").json()
    assert failed["status"] == "failed", failed
    for leak in ("UPDATE", "space_size", "out of range", "%("):
        assert leak not in failed["error"], failed["error"]
    assert "operator" in failed["error"] and "(DataError)" in failed["error"]


# --- 8. the worker's back-off is capped ------------------------------------------------------------


class _Clock(threading.Event):
    """A stop event whose waits return at once, recording how long the worker asked to wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return self.is_set()


def test_after_a_long_outage_the_worker_claims_again_within_two_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: waits doubled up to 30 s, so after a 45 s outage the workers took 15.3 s to claim again."""
    from service.store import StorageUnavailable

    clock = _Clock()
    calls = {"n": 0}

    def flaky_claim(*_: object, **__: object) -> None:
        calls["n"] += 1
        if sum(clock.waits) < 45.0:  # the database is down for 45 s of the worker's time
            raise StorageUnavailable("AUTOPAR_DATABASE_URL", "cannot use the database: connection refused", "retry")
        clock.set()  # back: this claim answered (nothing queued); stop
        return None

    monkeypatch.setattr(_worker, "claim", flaky_claim)
    settings = Settings(database_url="sqlite://", workers=0, poll_s=0.5)
    assert _worker.run_worker(settings, stop=clock) == 0
    assert max(clock.waits) <= _worker.MAX_BACKOFF_S <= 2.0, clock.waits
    assert sum(clock.waits) - 45.0 <= 2.0  # the first claim after the outage came within the cap


# --- 4. the queue limit is exact under concurrent POSTs ---------------------------------------------


def test_the_queue_limit_is_exact_under_200_concurrent_posts(settings: Settings, app_db: Database,
                                                             auth: dict[str, str]) -> None:
    """Before: with AUTOPAR_MAX_QUEUED=50, 200 concurrent POSTs left 63, 58 and 53 searches queued on
    PostgreSQL (each counted the queue before the others committed)."""
    from concurrent.futures import ThreadPoolExecutor

    from service.api import create_app

    limited = settings.model_copy(update={"max_queued": 50})
    with TestClient(create_app(limited, db=app_db, migrate=False)) as c:
        def post(seed: int) -> int:  # 200 different requests (the seed is part of the request)
            body = {**SEARCH, "cluster": {"preset": "dgx-h100"}, "budget": {"n_trials": 50, "seed": seed}}
            return c.post("/v1/searches", json=body, headers=auth).status_code

        with ThreadPoolExecutor(max_workers=64) as pool:
            codes = list(pool.map(post, range(200)))
    assert sorted(set(codes)) == [202, 429], codes
    assert codes.count(202) == 50, codes.count(202)
    with app_db.session() as s:
        assert len(s.execute(select(Search.id).where(Search.status == "queued")).all()) == 50


# --- 8. a body that never finishes; NUL in names -------------------------------------------------


def test_a_body_that_never_finishes_is_answered_408_within_the_timeout(settings: Settings,
                                                                         app_db: Database) -> None:
    """Before: a request whose body never finished held its connection for over 90 s."""
    import json
    import time

    import anyio

    from service.api import create_app

    app = create_app(settings.model_copy(update={"body_timeout_s": 0.5}), db=app_db, migrate=False)
    sent: list[dict[str, Any]] = []

    async def scenario() -> None:
        messages = [{"type": "http.request", "body": b'{"model": ', "more_body": True}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await anyio.sleep(3600)  # the rest of the body never comes
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/predict", "raw_path": b"/v1/predict", "query_string": b"",
                 "root_path": "", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000),
                 "headers": [(b"content-type", b"application/json"), (b"content-length", b"5000")]}
        with anyio.fail_after(10):
            await app(scope, receive, send)

    started = time.monotonic()
    anyio.run(scenario)
    assert time.monotonic() - started < 5
    assert sent[0]["status"] == 408, sent
    [item] = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["detail"]
    assert item["field"] == "body" and "AUTOPAR_BODY_TIMEOUT_S" in item["fix"]


@pytest.mark.parametrize("where", ["model", "gpu", "profile-name"])
def test_a_nul_in_a_name_gets_the_same_422_on_both_backends(client: TestClient, auth: dict[str, str],
                                                            app_db: Database, where: str) -> None:
    """Before: a NUL in a name was stored on SQLite but refused on PostgreSQL."""
    shape = {"name": "my\x00model", "layers": 4, "hidden": 1024, "heads": 16, "ffn": 4096, "vocab": 32000,
             "seq_len": 2048}
    if where == "model":
        r = client.post("/v1/searches", json={**SEARCH, "model": {"shape": shape}, "cluster": {"preset": "dgx-h100"}},
                        headers=auth)
    elif where == "gpu":
        r = client.post("/v1/searches", json={**SEARCH, "cluster": {"gpu": {**GPU, "name": "h\x00100"}, "node": NODE}},
                        headers=auth)
    else:
        from tests.service.api.test_profiles import profile

        r = client.post("/v1/profiles", params={"name": "rack\x001"}, content=profile().to_json(),
                        headers={**auth, "Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    [item] = r.json()["detail"]
    assert (item["field"], item["type"]) == ("request", "invalid_value") and "NUL" in item["msg"], item
    with app_db.session() as s:
        assert s.execute(select(Search.id)).first() is None

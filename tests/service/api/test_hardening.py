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
    from service.api._schemas import GPUIn, NodeIn

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

    sid = client.post("/v1/searches", json={**SEARCH, "cluster": {"preset": "dgx-h100"}}, headers=auth).json()["id"]

    def refuse(*_: object, **__: object) -> bool:
        raise DataError("UPDATE searches SET space_size=%(space_size)s", {"space_size": 2**40},
                        Exception("integer out of range"))

    monkeypatch.setattr(_worker, "finish", refuse)
    assert _worker.run_worker(settings, once=True) == 0
    failed = client.get(f"/v1/searches/{sid}").json()
    assert failed["status"] == "failed", failed
    for leak in ("UPDATE", "space_size", "out of range", "%("):
        assert leak not in failed["error"], failed["error"]
    assert "operator" in failed["error"]


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
    from sqlalchemy.exc import OperationalError

    clock = _Clock()
    calls = {"n": 0}

    def flaky_claim(*_: object, **__: object) -> None:
        calls["n"] += 1
        if sum(clock.waits) < 45.0:  # the database is down for 45 s of the worker's time
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))
        clock.set()  # back: this claim answered (nothing queued); stop
        return None

    monkeypatch.setattr(_worker, "claim", flaky_claim)
    settings = Settings(database_url="sqlite://", workers=0, poll_s=0.5)
    assert _worker.run_worker(settings, stop=clock) == 0
    assert max(clock.waits) <= _worker.MAX_BACKOFF_S <= 2.0, clock.waits
    assert sum(clock.waits) - 45.0 <= 2.0  # the first claim after the outage came within the cap

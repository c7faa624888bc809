"""/metrics: the run time and queue wait of finished searches by outcome, as Prometheus histograms
counted from the stored timestamps, on SQLite and PostgreSQL; searches run by a real worker."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service._worker import run_worker
from service.api import Settings
from service.store import Database, Search, utc_now

BODY = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
        "training": {"global_batch": 64}, "top": 3}


def histogram(text: str, name: str, outcome: str) -> dict[str, float]:
    """``le`` -> cumulative count, plus ``count`` and ``sum``, of one outcome's series."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("outcome") != outcome or not s.name.startswith(name):
                continue
            if s.name == f"{name}_bucket":
                out[s.labels["le"]] = s.value
            else:
                out[s.name.removeprefix(f"{name}_")] = s.value
    return out


def test_search_times_by_outcome(client: TestClient, settings: Settings, app_db: Database,
                                 auth: dict[str, str]) -> None:
    empty = client.get("/metrics").text
    for name in ("autopar_search_duration_seconds", "autopar_search_queue_wait_seconds"):
        for outcome in ("done", "failed", "cancelled"):  # every outcome, zeros included
            assert histogram(empty, name, outcome)["count"] == 0

    # a real search, run by the worker; and one it fails (its stored request is unusable)
    sid = client.post("/v1/searches", json=BODY, headers=auth).json()["id"]
    assert run_worker(settings, once=True) == 1
    now = utc_now()
    with app_db.session() as s:
        s.add(Search(id="unrunnable", request_hash="1" * 64, request={}, model_name="m", cluster_name="c", num_nodes=1,
                     framework="megatron", objective="throughput", autopar_version="0", status="queued",
                     created_at=now - timedelta(seconds=7)))
        # known answers for the arithmetic on each database: waited 2 s, ran 40 s, then cancelled
        s.add(Search(id="cancelled", request_hash="2" * 64, request={}, model_name="m", cluster_name="c", num_nodes=1,
                     framework="megatron", objective="throughput", autopar_version="0", status="cancelled",
                     created_at=now - timedelta(seconds=42), started_at=now - timedelta(seconds=40), finished_at=now))
        # cancelled while queued: never started, so in neither histogram
        s.add(Search(id="never-ran", request_hash="3" * 64, request={}, model_name="m", cluster_name="c", num_nodes=1,
                     framework="megatron", objective="throughput", autopar_version="0", status="cancelled",
                     created_at=now - timedelta(seconds=5), finished_at=now))
    assert run_worker(settings, once=True) == 0  # claims "unrunnable", fails it
    text = client.get("/metrics").text

    timings = client.get(f"/v1/searches/{sid}").json()["timings"]
    run = histogram(text, "autopar_search_duration_seconds", "done")
    assert run["count"] == 1 and run["+Inf"] == 1
    assert timings["search_s"] <= run["sum"] < timings["search_s"] + 5  # claim to stored, around the search
    wait = histogram(text, "autopar_search_queue_wait_seconds", "done")
    assert wait["count"] == 1 and abs(wait["sum"] - timings["queued_s"]) < 0.01
    failed = histogram(text, "autopar_search_queue_wait_seconds", "failed")
    assert failed["count"] == 1 and 7 <= failed["sum"] < 60 and failed["5.0"] == 0 and failed["60.0"] == 1
    cancelled_run = histogram(text, "autopar_search_duration_seconds", "cancelled")
    assert cancelled_run["count"] == 1 and abs(cancelled_run["sum"] - 40) < 0.01
    assert (cancelled_run["30.0"], cancelled_run["60.0"]) == (0, 1)
    cancelled_wait = histogram(text, "autopar_search_queue_wait_seconds", "cancelled")
    assert cancelled_wait["count"] == 1 and abs(cancelled_wait["sum"] - 2) < 0.01
    assert (cancelled_wait["1.0"], cancelled_wait["2.5"]) == (0, 1)

"""The search worker on SQLite and PostgreSQL: a worker process killed mid-search is replaced by
another that finishes the search once; a worker that lost its claim cannot store a result; the
heartbeat thread keeps a quiet search's lease; failures are recorded; a stop request hands the
search back to the queue."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from service._worker import _Lease, execute, run_worker
from service.api import Settings
from service.store import Database, Search, SearchConfig, utc_now
from service.store._jobs import claim, finish

ROOT = Path(__file__).resolve().parents[2]
BODY: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
                        "training": {"global_batch": 64}, "top": 5}
SAMPLED = {**BODY, "budget": {"n_trials": 5000, "timeout_s": 6}}
"""Optuna sampling for 6 s (the trial budget is far from reached), reporting progress per trial."""
WORKER = ("import sys; from service._worker import run_worker; from service.api import Settings; "
          "run_worker(Settings.from_env(), worker_id=sys.argv[1])")


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            output = f"\nworker output:\n{log.read_text()}" if log is not None and log.exists() else ""
            raise TimeoutError(f"{what}: not reached within {timeout_s} s{output}")
        time.sleep(0.05)


def row(db: Database, search_id: str) -> Search:
    with db.session() as s:
        found = s.get(Search, search_id)
    assert found is not None
    return found


def ranks(db: Database, search_id: str) -> list[int]:
    with db.session() as s:
        return list(s.execute(select(SearchConfig.rank).where(SearchConfig.search_id == search_id)
                              .order_by(SearchConfig.rank)).scalars())


@contextmanager
def worker_process(db_url: str, worker_id: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "AUTOPAR_DATABASE_URL": db_url, "AUTOPAR_LEASE_S": "2", "AUTOPAR_POLL_S": "0.1"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", WORKER, worker_id], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_killed_worker_is_replaced_and_the_search_finishes_once(client: TestClient, app_db: Database,
                                                                  db_url: str, auth: dict[str, str],
                                                                  tmp_path: Path) -> None:
    sid = client.post("/v1/searches", json=SAMPLED, headers=auth).json()["id"]
    with worker_process(db_url, "worker-1", tmp_path / "w1.log") as first:
        wait_for(lambda: row(app_db, sid).status == "running" and row(app_db, sid).progress > 0, 30,
                 "the first worker runs the search", tmp_path / "w1.log")
        first.kill()
        first.wait()
    assert row(app_db, sid).status == "running" and ranks(app_db, sid) == []
    with worker_process(db_url, "worker-2", tmp_path / "w2.log") as second:
        wait_for(lambda: row(app_db, sid).status == "done", 60, "the second worker finishes it", tmp_path / "w2.log")
        assert second.poll() is None  # it keeps polling for work
    done = row(app_db, sid)
    assert (done.attempts, done.worker_id, done.progress, done.error) == (2, "worker-2", 1.0, None)
    assert ranks(app_db, sid) == [1, 2, 3, 4, 5]
    assert client.get(f"/v1/searches/{sid}/configs").json()["count"] == 5


def test_a_worker_that_lost_its_claim_stores_nothing(client: TestClient, app_db: Database,
                                                     auth: dict[str, str]) -> None:
    sid = client.post("/v1/searches", json=BODY, headers=auth).json()["id"]
    stale = claim(app_db, "slow-worker", lease_s=30)
    assert stale is not None and stale.search_id == sid
    with app_db.session() as s:  # its lease expires ...
        s.execute(update(Search).values(heartbeat_at=utc_now() - timedelta(hours=1)))
    fresh = claim(app_db, "new-worker", lease_s=30)  # ... and another worker takes the search
    assert fresh is not None and fresh.attempts == 2
    row_dict = {"rank": 1, "framework": "megatron", "config": {}, "prediction": {}, "score": 1.0, "explanation": ""}
    assert finish(app_db, stale, {"n_valid": 1}, [row_dict]) is False
    assert execute(app_db, stale) is False  # the whole run under the stale claim: dropped at the end
    assert ranks(app_db, sid) == [] and row(app_db, sid).status == "running"
    assert execute(app_db, fresh) is True
    done = row(app_db, sid)
    assert (done.status, done.worker_id, ranks(app_db, sid)) == ("done", "new-worker", [1, 2, 3, 4, 5])


def test_the_heartbeat_thread_keeps_a_quiet_search_claimed(client: TestClient, app_db: Database,
                                                           auth: dict[str, str]) -> None:
    client.post("/v1/searches", json=BODY, headers=auth)
    held = claim(app_db, "quiet", lease_s=0.5)
    assert held is not None
    stop = threading.Event()
    with _Lease(app_db, held, 0.5, stop) as lease:  # no progress calls: only the thread beats
        time.sleep(1.0)  # two leases
        assert claim(app_db, "thief", lease_s=0.5) is None
        assert not lease.lost.is_set()
    time.sleep(0.7)  # the thread stopped with the block: the lease runs out
    assert claim(app_db, "thief", lease_s=0.5) is not None


def test_a_search_the_core_refuses_is_failed_with_its_message(client: TestClient, app_db: Database,
                                                              settings: Settings, auth: dict[str, str]) -> None:
    sid = client.post("/v1/searches", json=BODY, headers=auth).json()["id"]
    with app_db.session() as s:  # a stored request that no longer makes sense (cost without a price)
        stored = s.execute(select(Search.request).where(Search.id == sid)).scalar_one()
        s.execute(update(Search).values(request={**stored, "body": {**stored["body"], "objective": "cost"}}))
    assert run_worker(settings, once=True) == 0
    failed = client.get(f"/v1/searches/{sid}").json()
    assert failed["status"] == "failed" and failed["error"].startswith("price_per_gpu_hour:")
    r = client.get(f"/v1/searches/{sid}/configs")
    assert r.status_code == 409 and "POST it again" in r.json()["detail"][0]["fix"]


def test_stopping_a_worker_hands_its_search_back(client: TestClient, app_db: Database, settings: Settings,
                                                 auth: dict[str, str]) -> None:
    sid = client.post("/v1/searches", json={**SAMPLED, "budget": {"n_trials": 5000, "timeout_s": 30}},
                      headers=auth).json()["id"]
    stop = threading.Event()
    completed: list[int] = []
    worker = threading.Thread(target=lambda: completed.append(run_worker(settings, stop=stop)))
    worker.start()
    try:
        wait_for(lambda: row(app_db, sid).progress > 0, 30, "the worker runs the search")
        stop.set()
        worker.join(timeout=5)
        assert not worker.is_alive() and completed == [0]
    finally:
        stop.set()
        worker.join()
    back = row(app_db, sid)
    assert (back.status, back.attempts, back.worker_id, back.claim_token) == ("queued", 0, None, None)


def test_a_worker_backs_off_while_the_database_is_down(caplog: pytest.LogCaptureFixture) -> None:
    """Found by review: a worker without its database logged a traceback every poll (2,100 lines in
    10 s). Now it waits twice as long after each failure and prints the traceback once."""
    import logging

    from service.api import Settings

    settings = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none", workers=0, poll_s=0.05)
    stop = threading.Event()
    timer = threading.Timer(1.6, stop.set)
    timer.start()
    with caplog.at_level(logging.WARNING, logger="autopar.worker"):
        assert run_worker(settings, stop=stop) == 0
    timer.cancel()
    failures = [r for r in caplog.records if "claim failed" in r.getMessage()]
    # waits 0.1, 0.2, 0.4, 0.8 s: at most 5 attempts in 1.6 s (a fixed 0.05 s poll would make ~30)
    assert 2 <= len(failures) <= 5, [r.getMessage() for r in failures]
    assert failures[0].exc_info and not any(r.exc_info for r in failures[1:])


def test_a_search_past_the_service_time_limit_fails_saying_so(client: TestClient, app_db: Database,
                                                              settings: Settings, auth: dict[str, str]) -> None:
    """Found by review: a small n_trials did not bound a huge space's warm start (69 s on one worker).
    The worker now enforces AUTOPAR_MAX_TIMEOUT_S per search, whatever the request's budget."""
    sid = client.post("/v1/searches", json=SAMPLED, headers=auth).json()["id"]
    started = time.monotonic()
    assert run_worker(settings.model_copy(update={"max_timeout_s": 1.0}), once=True) == 0
    assert time.monotonic() - started < 5  # the request's own budget (6 s) was not waited for
    failed = client.get(f"/v1/searches/{sid}").json()
    assert failed["status"] == "failed" and "AUTOPAR_MAX_TIMEOUT_S" in failed["error"], failed
    assert ranks(app_db, sid) == []

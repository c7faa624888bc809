"""The search worker: claims queued searches from the database, runs them, stores the results.

Any number of workers (threads, processes, machines) share one database; the queue itself
(claims with fencing tokens, leases, heartbeats, release) is ``service.store``'s. A worker keeps its
claim alive twice over: the search's progress callback heartbeats (at most every
:data:`PROGRESS_BEAT_S`, recording progress) and a background thread heartbeats every third of
the lease, for the stretches where the search reports no progress. When a heartbeat says the claim
is gone (the search was cancelled, or the lease expired and another worker took it), the next
progress callback aborts the search and nothing is stored; a result that still races to the end
is refused by ``finish`` under the stale claim.

A worker killed mid-search (SIGKILL, OOM, a lost machine) stops heartbeating; once its lease is
older than ``Settings.lease_s`` another worker claims the search again (``attempts`` counts the
claims) and runs it from the start. A search claimed more than :data:`MAX_ATTEMPTS` times is
failed instead, so one that kills its workers cannot take the whole fleet down in turn.

``autopar worker`` / ``autopar serve`` call :func:`run_worker` and set its ``stop`` event on
SIGTERM/SIGINT: the worker then aborts the search it runs, puts it back in the queue for another
worker, and returns.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import Any

from search import SpecError, search
from search._search_result import RankedConfig, SearchResult
from service._search_request import from_stored
from service._settings import Settings
from service.store import DEFAULT_LEASE_S, Claim, Database, StoreError, claim, fail, finish, heartbeat, release

_log = logging.getLogger("autopar.worker")

PROGRESS_BEAT_S = 0.5
"""Least seconds between two heartbeats from the progress callback."""
MAX_ATTEMPTS = 5
"""Claims after which a search that keeps losing its worker is failed."""


class Abandoned(Exception):
    """The search was cancelled, its claim lost, or the worker asked to stop: drop it."""


def default_worker_id() -> str:
    """host:pid:random, unique among the workers of one database."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class _Lease:
    """Keeps one claim alive while its search runs, and tells the search when to give up."""

    def __init__(self, db: Database, c: Claim, lease_s: float, stop: threading.Event,
                 max_s: float | None = None) -> None:
        self.db, self.claim, self.stop = db, c, stop
        self.max_s = max_s
        self.deadline_s = None if max_s is None else time.monotonic() + max_s
        self.interval_s = max(0.05, lease_s / 3)
        self.progress = 0.0
        self.lost = threading.Event()
        self._done = threading.Event()
        self._last_beat_s = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{c.search_id[:8]}", daemon=True)

    def __enter__(self) -> _Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.beat()
            if self.lost.is_set():
                return

    def beat(self) -> None:
        """One heartbeat with the latest progress; a database error is logged and retried at the
        next beat (the lease tolerates a few misses)."""
        self._last_beat_s = time.monotonic()
        try:
            if not heartbeat(self.db, self.claim, self.progress):
                self.lost.set()
        except Exception:
            _log.warning("search %s: heartbeat failed", self.claim.search_id, exc_info=True)

    def on_progress(self, done: int, total: int) -> None:
        """The search's progress callback: record, heartbeat when due, abort when the claim is gone."""
        self.progress = done / total if total > 0 else 0.0
        if not self.lost.is_set() and time.monotonic() - self._last_beat_s >= PROGRESS_BEAT_S:
            self.beat()
        if self.lost.is_set():
            raise Abandoned("the search was cancelled or its claim was taken by another worker")
        if self.stop.is_set():
            raise Abandoned("the worker is stopping")
        if self.deadline_s is not None and time.monotonic() > self.deadline_s:
            raise TooLong(f"the search ran longer than the service's limit of {self.max_s:g} s "
                          "(AUTOPAR_MAX_TIMEOUT_S) without finishing; give budget.n_trials or budget.timeout_s, "
                          "or fewer nodes / a smaller model, and POST it again")


def ranked_rows(top: tuple[RankedConfig, ...]) -> list[dict[str, Any]]:
    """The SearchConfig rows of a result's top-k."""
    rows = []
    for r in top:
        d = r.to_dict()
        rows.append({"rank": d["rank"], "framework": d["framework"], "config": d["config"],
                     "prediction": d["prediction"], "score": d["score"], "explanation": d["explanation"]})
    return rows


def summary(result: SearchResult) -> dict[str, Any]:
    """The Search columns a finished search sets; ``pareto_ranks`` are the ranks of the top-k that
    lie on the Pareto front (tokens/s vs memory headroom)."""
    front = {(r.framework, r.config) for r in result.pareto}
    return {"space_size": result.space_size, "n_valid": result.n_valid, "n_feasible": result.n_feasible,
            "n_evaluated": result.n_evaluated, "exhaustive": result.exhaustive, "search_s": result.elapsed_s,
            "hints": list(result.hints), "pareto": [r.to_dict() for r in result.pareto],
            "pareto_ranks": [r.rank for r in result.top if (r.framework, r.config) in front]}


class TooLong(Exception):
    """A search passed the service's wall-clock limit for one search."""


def execute(db: Database, c: Claim, *, lease_s: float = DEFAULT_LEASE_S, stop: threading.Event | None = None,
            max_s: float | None = None) -> bool:
    """Run one claimed search and store its result under the claim; True when it was stored.

    ``max_s``: wall-clock limit (the service's AUTOPAR_MAX_TIMEOUT_S): a search still running then
    fails with that reason, so one request cannot hold a worker indefinitely whatever its budget.

    A request the search refuses (SpecError) or any other exception fails the search with the
    message; a cancelled search or a lost claim stores nothing; a stop request releases it."""
    stop = stop or threading.Event()
    if c.attempts > MAX_ATTEMPTS:
        fail(db, c, f"gave up after {c.attempts - 1} attempts: the workers running it stopped heartbeating "
             "(killed, out of memory?); reduce the budget or the model/cluster size and POST it again")
        return False
    try:
        resolved = from_stored(c.request, db)
        with _Lease(db, c, lease_s, stop, max_s) as lease:
            result = search(resolved.model, resolved.cluster, resolved.body.training.global_batch,
                            progress=lease.on_progress, **resolved.search_kwargs())
        stored = finish(db, c, summary(result), ranked_rows(result.top))
        if not stored:
            _log.info("search %s: claim lost before the result was stored; dropped", c.search_id)
        return stored
    except Abandoned as why:
        if stop.is_set() and release(db, c):
            _log.info("search %s: released to the queue (worker stopping)", c.search_id)
        else:
            _log.info("search %s: abandoned: %s", c.search_id, why)
        return False
    except (SpecError, TooLong) as err:
        fail(db, c, str(err))
        return False
    except StoreError as err:  # its text (SQL, values, hosts) goes to the log only, never to a client
        _log.exception("search %s: the database refused its result", c.search_id)
        fail(db, c, f"the database refused to store this search's result ({err.cause or type(err).__name__}); the "
             "worker log has the cause: report it to the service's operator with the search id")
        return False
    except Exception as err:
        _log.exception("search %s failed", c.search_id)
        fail(db, c, f"internal error ({type(err).__name__}) while searching; the worker log has the traceback: "
             "report it to the service's operator with the search id")
        return False


MAX_BACKOFF_S = 2.0
"""Longest wait between claims while the database fails: after an outage the worker claims again
within this (a 30 s cap made workers idle 15 s after a 45 s outage); the traceback is logged once."""


def run_worker(settings: Settings, *, worker_id: str | None = None, stop: threading.Event | None = None,
               once: bool = False) -> int:
    """Claim and run searches until ``stop`` is set; returns how many were completed (stored).

    ``once``: run at most one search (none if nothing is claimable) and return, for tests and cron.
    Sleeps ``settings.poll_s`` when the queue is empty; database errors are logged and retried."""
    worker_id = worker_id or default_worker_id()
    stop = stop or threading.Event()
    db = Database(settings.database_url)
    completed = 0
    _log.info("worker %s: polling %s", worker_id, db.safe_url)
    failures = 0  # consecutive failed claims: back off, and log the traceback only the first time
    try:
        while not stop.is_set():
            try:
                c = claim(db, worker_id, settings.lease_s)
                if failures:
                    _log.warning("worker %s: the database answers again after %d failed claims", worker_id, failures)
                failures = 0
            except Exception as exc:
                failures += 1
                wait_s = min(MAX_BACKOFF_S, settings.poll_s * 2 ** min(failures, 16))
                _log.warning("worker %s: claim failed (%s); retrying in %.1f s", worker_id, type(exc).__name__,
                             wait_s, exc_info=failures == 1)
                if once:
                    break
                stop.wait(wait_s)
                continue
            if c is None:
                if once:
                    break
                stop.wait(settings.poll_s)
                continue
            started = time.perf_counter()
            try:
                stored = execute(db, c, lease_s=settings.lease_s, stop=stop, max_s=settings.max_timeout_s)
            except Exception:  # the database failed while recording a failure: the lease will expire
                _log.exception("worker %s: search %s could not be recorded", worker_id, c.search_id)
                stored = False
            if stored:
                completed += 1
                _log.info("search %s done in %.1f s", c.search_id, time.perf_counter() - started)
            if once:
                break
    finally:
        db.dispose()
    return completed

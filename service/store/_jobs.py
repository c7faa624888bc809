"""The search queue: claim, heartbeat, finish, fail, release, cancel.

Any number of workers (threads, processes, machines) share the ``searches`` table:

* **claim** picks the oldest search that is ``queued``, or ``running`` with a heartbeat older
  than the lease (its worker died), and takes it with a compare-and-set UPDATE that also sets a
  fresh ``claim_token``. On PostgreSQL the candidate row is selected ``FOR UPDATE SKIP LOCKED``
  so concurrent workers skip each other's rows instead of queueing behind them; on SQLite the
  database-wide write lock serialises claims, and the compare-and-set alone decides.
* every later write of the worker (heartbeat, progress, result, failure) carries the token in
  its WHERE clause: a worker that lost its claim (lease expired, search re-claimed or
  cancelled) changes nothing, so a result is stored once, by the worker that holds the claim;
* the result (status, counts, ranked rows) is written in one transaction, and
  ``UNIQUE(search_id, rank)`` backs the rule that a rank is stored once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Update, func, select, update

from service.store._db import Database
from service.store._tables import Search, SearchConfig, utc_now
from service.store._update import update_rows

STATUSES = ("queued", "running", "done", "failed", "cancelled")
ACTIVE = ("queued", "running")
DEFAULT_LEASE_S = 30.0


@dataclass(frozen=True, slots=True)
class Claim:
    """A search this worker holds: its id, the fencing token and the stored request."""

    search_id: str
    token: str
    request: dict[str, Any]
    attempts: int


def _stale_before(lease_s: float) -> datetime:
    return utc_now() - timedelta(seconds=lease_s)


def claim(db: Database, worker_id: str, lease_s: float = DEFAULT_LEASE_S) -> Claim | None:
    """Take the oldest claimable search, or None when there is none."""
    stale = _stale_before(lease_s)
    claimable = (Search.status == "queued") | ((Search.status == "running") & (Search.heartbeat_at < stale))
    for _ in range(5):  # another worker may win the compare-and-set; try the next row
        with db.session() as s:
            q = select(Search.id).where(claimable).order_by(Search.created_at, Search.id).limit(1)
            if db.dialect == "postgresql":
                q = q.with_for_update(skip_locked=True)
            search_id = s.execute(q).scalar_one_or_none()
            if search_id is None:
                return None
            token = secrets.token_hex(16)
            now = utc_now()
            claimed = update(Search).where(Search.id == search_id, claimable).values(
                status="running", claim_token=token, worker_id=worker_id, heartbeat_at=now,
                started_at=func.coalesce(Search.started_at, now), attempts=Search.attempts + 1)
            if update_rows(s, claimed) != 1:
                continue
            row = s.execute(select(Search.request, Search.attempts).where(Search.id == search_id)).one()
            return Claim(search_id, token, dict(row.request), int(row.attempts))
    return None


def _held(c: Claim) -> Update:
    """An UPDATE of the claimed search that changes nothing once the claim is lost or the search is
    no longer running (cancelled, or claimed again after the lease ran out)."""
    return update(Search).where(Search.id == c.search_id, Search.claim_token == c.token, Search.status == "running")


def heartbeat(db: Database, c: Claim, progress: float | None = None) -> bool:
    """Renew the lease (and record progress in [0, 1]); False when the claim is lost or cancelled."""
    values: dict[str, Any] = {"heartbeat_at": utc_now()}
    if progress is not None:
        values["progress"] = min(1.0, max(0.0, float(progress)))
    with db.session() as s:
        return update_rows(s, _held(c).values(**values)) == 1


def finish(db: Database, c: Claim, summary: dict[str, Any], ranked: list[dict[str, Any]]) -> bool:
    """Store the result: summary columns and ranked rows, in one transaction, only under the claim.

    ``ranked``: dicts with rank, framework, config, prediction, score, explanation.
    """
    with db.session() as s:
        done = _held(c).values(status="done", progress=1.0, finished_at=utc_now(), error=None, **summary)
        if update_rows(s, done) != 1:
            s.rollback()
            return False
        s.add_all(SearchConfig(search_id=c.search_id, **row) for row in ranked)
        return True


def fail(db: Database, c: Claim, error: str) -> bool:
    """Mark the search failed with ``error``, only under the claim."""
    with db.session() as s:
        return update_rows(s, _held(c).values(status="failed", finished_at=utc_now(), error=error[:4000])) == 1


def release(db: Database, c: Claim) -> bool:
    """Put a running search back in the queue for another worker (this one is stopping). The claim is
    handed back unused, so it does not count as an attempt."""
    with db.session() as s:
        back = _held(c).values(status="queued", claim_token=None, worker_id=None, heartbeat_at=None, progress=0.0,
                               attempts=Search.attempts - 1)
        return update_rows(s, back) == 1


def cancel(db: Database, search_id: str) -> str | None:
    """Cancel a queued or running search; returns its status afterwards, None if it does not exist."""
    with db.session() as s:
        s.execute(update(Search).where(Search.id == search_id, Search.status.in_(ACTIVE))
                  .values(status="cancelled", finished_at=utc_now(), claim_token=None)
                  .execution_options(synchronize_session=False))
        return s.execute(select(Search.status).where(Search.id == search_id)).scalar_one_or_none()


def queue_depth(db: Database) -> dict[str, int]:
    """Searches per status (every status listed, zero included)."""
    with db.session() as s:
        rows = s.execute(select(Search.status, func.count()).group_by(Search.status)).all()
    counts = dict.fromkeys(STATUSES, 0)
    counts.update({status: int(n) for status, n in rows})
    return counts

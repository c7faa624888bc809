"""Read queries behind ``/metrics``: how long finished searches ran and waited, by outcome.

Counted from the stored timestamps at scrape time, like the queue gauges: workers on other machines
finish the searches, and the database is the one place that sees them all. The buckets are summed
in the database (one aggregate row per outcome), so a scrape reads no search rows however many
are stored.

* run time: ``finished_at - started_at`` (``started_at`` is the first claim; a search claimed again
  after its worker died counts the whole stretch);
* queue wait: ``started_at - created_at``.

Searches that never started (cancelled while queued) count in neither. Deleting stored searches
lowers the counts, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from sqlalchemy import case, func, select

from service.store._db import Database
from service.store._tables import Search

Outcome = Literal["done", "failed", "cancelled"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
Span = Literal["run", "queue_wait"]


@dataclass(frozen=True, slots=True)
class OutcomeTimes:
    """A histogram's figures for one outcome: searches with at most each bound, all of them, their sum."""

    outcome: str
    cumulative_counts: tuple[int, ...]
    """Searches whose time is <= each bound of ``bounds_s``, in order."""
    count: int
    sum_s: float


def _seconds(dialect: str, start: Any, end: Any) -> Any:
    """``end - start`` in seconds, as SQL of the database's dialect."""
    if dialect == "sqlite":  # timestamps are ISO text: julianday gives days as a double (~10 us here)
        return (func.julianday(end) - func.julianday(start)) * 86_400.0
    return func.extract("epoch", end - start)


def search_times(db: Database, *, span: Span, bounds_s: tuple[float, ...]) -> list[OutcomeTimes]:
    """The run time or queue wait of every finished search that started, per outcome (each outcome
    listed, zeros included), with the searches at or under each bound."""
    start, end = (Search.started_at, Search.finished_at) if span == "run" else (Search.created_at, Search.started_at)
    seconds = _seconds(db.dialect, start, end)
    buckets = [func.coalesce(func.sum(case((seconds <= bound, 1), else_=0)), 0) for bound in bounds_s]
    query = (select(Search.status, func.count(), func.coalesce(func.sum(seconds), 0.0), *buckets)
             .where(Search.status.in_(OUTCOMES), Search.started_at.is_not(None), Search.finished_at.is_not(None))
             .group_by(Search.status))
    with db.session() as s:
        rows = {row[0]: row for row in s.execute(query).all()}
    out = []
    for outcome in OUTCOMES:
        row = rows.get(outcome)
        if row is None:
            out.append(OutcomeTimes(outcome, (0,) * len(bounds_s), 0, 0.0))
        else:
            out.append(OutcomeTimes(outcome, tuple(int(n) for n in row[3:]), int(row[1]), float(row[2])))
    return out

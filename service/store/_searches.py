"""Data access for searches and their ranked configurations: keyword-only functions over a caller's
session, so the routes hold no SQL (admission to the queue, de-duplication, tenants' interest,
cancellation, pages, ranks).

Admission is atomic on both backends: :func:`count_queued` takes a database-wide admission lock
inside the POST's transaction before it counts the queue, so ``AUTOPAR_MAX_QUEUED`` is exact however
many POSTs race (PostgreSQL: a transaction-scoped advisory lock; SQLite: a no-op UPDATE that takes
the write lock, which SQLite holds to the commit). Without it, concurrent POSTs on PostgreSQL each
counted the queue before any of them committed (63 queued at a limit of 50).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, delete, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.store._tables import Search, SearchConfig, SearchTenant, utc_now

ADMISSION_LOCK_KEY = 0x6175746F7071  # "autopq": the advisory lock of queue admission (PostgreSQL)
ANSWERING = ("queued", "running", "done")
"""A search in one of these answers an identical request; a failed or cancelled one does not."""
ACTIVE = ("queued", "running")


def get_search(s: Session, *, search_id: str) -> Search | None:
    return s.get(Search, search_id)


def add_search(s: Session, *, row: Search) -> Search:
    """Add a new search and write it now (the unique index of identical active requests may refuse it:
    :class:`~service.store.Conflict`)."""
    s.add(row)
    s.flush()
    return row


def find_answering_search(s: Session, *, request_hash: str) -> Search | None:
    """The newest search that answers a request with this hash (queued, running or done)."""
    return s.execute(select(Search).where(Search.request_hash == request_hash, Search.status.in_(ANSWERING))
                     .order_by(Search.created_at.desc()).limit(1)).scalar_one_or_none()


def count_queued(s: Session, *, dialect: str) -> int:
    """How many searches are queued, counted under the admission lock (held to the end of ``s``'s
    transaction): a POST that then inserts one is counted by the next POST exactly."""
    if dialect == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(ADMISSION_LOCK_KEY)))
    else:  # SQLite's write lock, taken by any write statement and held until commit
        s.execute(text("UPDATE searches SET status = status WHERE 0"))
    return int(s.execute(select(func.count()).select_from(Search).where(Search.status == "queued")).scalar_one())


def want_search(s: Session, *, search_id: str, tenant: str, dialect: str) -> None:
    """Record that ``tenant`` wants the search (again); nothing if it already does."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    s.execute(insert(SearchTenant).values(search_id=search_id, tenant=tenant, created_at=utc_now())
              .on_conflict_do_nothing(index_elements=["search_id", "tenant"]))


def is_wanted_by(s: Session, *, search_id: str, tenant: str) -> bool:
    return s.get(SearchTenant, (search_id, tenant)) is not None


def withdraw_search(s: Session, *, search_id: str, tenant: str | None) -> str | None:
    """``tenant`` no longer wants the search (None: every tenant, an admin's cancel); the search is
    cancelled when no tenant wants it any more. Returns its status afterwards, None if there is none."""
    gone = delete(SearchTenant).where(SearchTenant.search_id == search_id)
    s.execute(gone if tenant is None else gone.where(SearchTenant.tenant == tenant))
    still = s.execute(select(func.count()).select_from(SearchTenant)
                      .where(SearchTenant.search_id == search_id)).scalar_one()
    if not still:
        s.execute(update(Search).where(Search.id == search_id, Search.status.in_(ACTIVE))
                  .values(status="cancelled", finished_at=utc_now(), claim_token=None)
                  .execution_options(synchronize_session=False))
    return s.execute(select(Search.status).where(Search.id == search_id)).scalar_one_or_none()


def list_searches(s: Session, *, model: str | None = None, cluster: str | None = None, status: str | None = None,
                  limit: int, offset: int = 0, after: tuple[datetime, str] | None = None
                  ) -> tuple[int, list[Search]]:
    """How many searches match, and at most ``limit`` of them, newest first: from ``offset``, or the
    ones older than ``after`` (a (created_at, id) cursor: stable while new searches arrive)."""
    where: list[ColumnElement[bool]] = []
    if model is not None:
        where.append(Search.model_name == model)
    if cluster is not None:
        where.append(Search.cluster_name == cluster)
    if status is not None:
        where.append(Search.status == status)
    page = select(Search).where(*where).order_by(Search.created_at.desc(), Search.id.desc())
    if after is not None:
        created, after_id = after
        page = page.where((Search.created_at < created) | ((Search.created_at == created) & (Search.id < after_id)))
    else:
        page = page.offset(offset)
    total = int(s.execute(select(func.count()).select_from(Search).where(*where)).scalar_one())
    return total, list(s.execute(page.limit(limit)).scalars())


def get_config(s: Session, *, search_id: str, rank: int) -> SearchConfig | None:
    """The search's configuration of this rank (1 = best)."""
    return s.execute(select(SearchConfig).where(SearchConfig.search_id == search_id, SearchConfig.rank == rank)
                     ).scalar_one_or_none()


def list_configs(s: Session, *, search_id: str, top: int | None = None) -> Sequence[SearchConfig]:
    """The search's ranked configurations, best first (the ``top`` best when given)."""
    q = select(SearchConfig).where(SearchConfig.search_id == search_id).order_by(SearchConfig.rank)
    return s.execute(q if top is None else q.limit(top)).scalars().all()


def count_configs(s: Session, *, search_id: str) -> int:
    return int(s.execute(select(func.count()).where(SearchConfig.search_id == search_id)).scalar_one())

"""Data access for the search endpoints: keyword-only functions over a caller's session, so the
routes hold no SQL (admission to the queue, de-duplication, tenants' interest, cancellation).

Admission is atomic on both backends: :func:`admit` takes a database-wide admission lock inside the
POST's transaction before it counts the queue, so ``AUTOPAR_MAX_QUEUED`` is exact however many POSTs
race (PostgreSQL: a transaction-scoped advisory lock; SQLite: a no-op UPDATE that takes the write
lock, which SQLite holds to the commit). Without it, concurrent POSTs on PostgreSQL each counted
the queue before any of them committed (63 queued at a limit of 50).
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.store._tables import Search, SearchTenant, utc_now

ADMISSION_LOCK_KEY = 0x6175746F7071  # "autopq": the advisory lock of queue admission (PostgreSQL)
ANSWERING = ("queued", "running", "done")
"""A search in one of these answers an identical request; a failed or cancelled one does not."""
ACTIVE = ("queued", "running")


def find_answering(s: Session, *, request_hash: str) -> Search | None:
    """The newest search that answers a request with this hash (queued, running or done)."""
    return s.execute(select(Search).where(Search.request_hash == request_hash, Search.status.in_(ANSWERING))
                     .order_by(Search.created_at.desc()).limit(1)).scalar_one_or_none()


def admit(s: Session, *, dialect: str) -> int:
    """Take the admission lock (held to the end of ``s``'s transaction) and return how many
    searches are queued: a POST that then inserts one is counted by the next POST exactly."""
    if dialect == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(ADMISSION_LOCK_KEY)))
    else:  # SQLite's write lock, taken by any write statement and held until commit
        s.execute(text("UPDATE searches SET status = status WHERE 0"))
    return int(s.execute(select(func.count()).select_from(Search).where(Search.status == "queued")).scalar_one())


def want(s: Session, *, search_id: str, tenant: str, dialect: str) -> None:
    """Record that ``tenant`` wants the search (again); nothing if it already does."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    s.execute(insert(SearchTenant).values(search_id=search_id, tenant=tenant, created_at=utc_now())
              .on_conflict_do_nothing(index_elements=["search_id", "tenant"]))


def wanted_by(s: Session, *, search_id: str, tenant: str) -> bool:
    return s.get(SearchTenant, (search_id, tenant)) is not None


def withdraw(s: Session, *, search_id: str, tenant: str | None) -> str | None:
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

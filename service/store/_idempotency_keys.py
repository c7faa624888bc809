"""Data access for ``Idempotency-Key`` answers: keyword-only functions over a caller's session (the
rules are ``service.api._idempotency``'s)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.orm import Session

from service.store._tables import IdempotencyKey


def get_idempotency_key(s: Session, *, key: str, principal: str) -> IdempotencyKey | None:
    return s.get(IdempotencyKey, (key, principal))


def forget_idempotency_key(s: Session, *, row: IdempotencyKey) -> None:
    s.delete(row)


def forget_idempotency_keys(s: Session, *, principal: str, before: datetime) -> None:
    """Delete the caller's keys stored before ``before`` (expired)."""
    s.execute(delete(IdempotencyKey).where(IdempotencyKey.principal == principal, IdempotencyKey.created_at < before)
              .execution_options(synchronize_session=False))


def add_idempotency_key(s: Session, *, row: IdempotencyKey) -> IdempotencyKey:
    s.add(row)
    return row

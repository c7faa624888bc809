"""Data access for hardware profiles: keyword-only functions over a caller's session."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from service.store._tables import Profile


def add_profile(s: Session, *, row: Profile) -> Profile:
    s.add(row)
    return row


def get_profile(s: Session, *, profile_id: str) -> Profile | None:
    return s.get(Profile, profile_id)


def profile_exists(s: Session, *, profile_id: str) -> bool:
    return s.get(Profile, profile_id) is not None


def profile_body(s: Session, *, profile_id: str) -> dict[str, Any] | None:
    """The profile's JSON (as ``autopar profile`` wrote it), None when there is no such profile."""
    return s.execute(select(Profile.body).where(Profile.id == profile_id)).scalar_one_or_none()


def list_profiles(s: Session, *, limit: int, offset: int = 0) -> tuple[int, Sequence[Row[tuple[Any, ...]]]]:
    """How many profiles there are, and one page of their summaries (every column but the body, which
    can be large), newest upload first."""
    total = int(s.execute(select(func.count()).select_from(Profile)).scalar_one())
    columns = [c for c in Profile.__table__.columns if c.name != "body"]
    rows = s.execute(select(*columns).order_by(Profile.created_at.desc(), Profile.id.desc())
                     .limit(limit).offset(offset)).all()
    return total, rows

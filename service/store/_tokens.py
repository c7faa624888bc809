"""Data access for API tokens (only their SHA-256 is stored): keyword-only functions over a caller's
session. Making and checking tokens is ``service._tokens``'s."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.store._tables import ApiToken, utc_now
from service.store._update import update_rows


def add_token(s: Session, *, row: ApiToken) -> ApiToken:
    s.add(row)
    return row


def get_token(s: Session, *, token_id: str) -> ApiToken | None:
    return s.get(ApiToken, token_id)


def use_token(s: Session, *, token_hash: str) -> ApiToken | None:
    """The token with this SHA-256 (revoked ones included), its last use recorded unless it is revoked."""
    row = s.execute(select(ApiToken).where(ApiToken.token_hash == token_hash)).scalar_one_or_none()
    if row is not None and row.revoked_at is None:
        row.last_used_at = utc_now()
    return row


def list_tokens(s: Session) -> Sequence[ApiToken]:
    """Every token, oldest first."""
    return s.execute(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)).scalars().all()


def revoke_stored_token(s: Session, *, token_id: str) -> bool:
    """Revoke the token; False when there is none or it was revoked already."""
    revoked = (update(ApiToken).where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
               .values(revoked_at=utc_now()))
    return update_rows(s, revoked) == 1

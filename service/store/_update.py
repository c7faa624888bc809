"""Running an UPDATE and counting the rows it changed, typed: ``Session.execute`` of an UPDATE returns
a :class:`sqlalchemy.CursorResult` (which has ``rowcount``), but SQLAlchemy's annotations give every
statement the plain ``Result``."""

from __future__ import annotations

from sqlalchemy import CursorResult, Update
from sqlalchemy.orm import Session


def update_rows(s: Session, statement: Update) -> int:
    """Execute ``statement`` (without synchronising the session's objects: the callers re-read what
    they need) and return how many rows it changed."""
    result = s.execute(statement.execution_options(synchronize_session=False))
    if not isinstance(result, CursorResult):  # every UPDATE answers with a cursor result
        raise TypeError(f"an UPDATE returned {type(result).__name__}, not a CursorResult")
    return result.rowcount

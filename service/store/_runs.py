"""Data access for measured runs: keyword-only functions over a caller's session, so the routes and
the CLI hold no SQL. A run's model is its request's preset, else its custom shape's name (both
databases read the JSON paths)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from service.store._tables import Run


def run_model_name() -> ColumnElement[str]:
    """The run's model: the preset, else the custom shape's name."""
    return func.coalesce(Run.request[("model", "preset")].as_string(),
                         Run.request[("model", "shape", "name")].as_string())


def _where(search_id: str | None, model: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if search_id is not None:
        where.append(Run.search_id == search_id)
    if model is not None:
        where.append(run_model_name() == model)
    return where


def add_run(s: Session, *, row: Run) -> Run:
    s.add(row)
    return row


def get_run(s: Session, *, run_id: str) -> Run | None:
    return s.get(Run, run_id)


def list_runs(s: Session, *, search_id: str | None = None, model: str | None = None, limit: int,
              offset: int = 0) -> tuple[int, Sequence[Run]]:
    """How many runs match (``model``: a preset or custom shape name), and one page of them, newest first."""
    where = _where(search_id, model)
    total = int(s.execute(select(func.count()).select_from(Run).where(*where)).scalar_one())
    rows = s.execute(select(Run).where(*where).order_by(Run.created_at.desc(), Run.id.desc())
                     .limit(limit).offset(offset)).scalars().all()
    return total, rows


def all_runs(s: Session, *, search_id: str | None = None, model: str | None = None) -> Sequence[Run]:
    """Every run that matches, oldest first (what ``autopar runs export`` writes)."""
    return s.execute(select(Run).where(*_where(search_id, model)).order_by(Run.created_at, Run.id)).scalars().all()


class RunFigures(NamedTuple):
    """A run's measured and predicted figures, for accuracy statistics."""

    iteration_time_s: float | None
    predicted_iteration_time_s: float | None
    peak_memory_bytes: float | None
    predicted_peak_memory_bytes: float | None
    oom: bool
    predicted_fits: bool | None
    created_at: datetime


def run_figures(s: Session, *, search_id: str | None = None, model: str | None = None,
                limit: int) -> list[RunFigures]:
    """The measured and predicted figures of the newest ``limit`` matching runs, newest first."""
    q = select(*(getattr(Run, name) for name in RunFigures._fields)).where(*_where(search_id, model))
    return [RunFigures(*row) for row in s.execute(q.order_by(Run.created_at.desc()).limit(limit))]

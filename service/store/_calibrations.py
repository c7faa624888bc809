"""Data access for calibrations (issue 16): keyword-only functions over a caller's session, so the
routes and the CLI hold no SQL. The runs a calibration is fitted on are read here too."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from service.store._runs import run_model_name
from service.store._tables import ClusterCalibration, Run

MAX_CALIBRATION_RUNS = 10_000
"""The newest timed runs (of every cluster) a calibration reads before keeping its cluster's: a fit
predicts each a few hundred times."""


def timed_runs(s: Session, *, profile_id: str | None = None, search_id: str | None = None,
               model: str | None = None, since: datetime | None = None,
               limit: int = MAX_CALIBRATION_RUNS) -> Sequence[Run]:
    """Runs with a measured iteration time that did not run out of memory, newest first;
    ``model``: a model preset or custom shape name."""
    where: list[ColumnElement[bool]] = [Run.iteration_time_s.is_not(None), Run.oom.is_(False)]
    if profile_id is not None:
        where.append(Run.profile_id == profile_id)
    if search_id is not None:
        where.append(Run.search_id == search_id)
    if model is not None:
        where.append(run_model_name() == model)
    if since is not None:
        where.append(Run.created_at >= since)
    return s.execute(select(Run).where(*where).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
                     ).scalars().all()


def add_calibration(s: Session, *, row: ClusterCalibration) -> ClusterCalibration:
    s.add(row)
    return row


def get_calibration(s: Session, *, calibration_id: str) -> ClusterCalibration | None:
    return s.get(ClusterCalibration, calibration_id)


def _where(cluster_name: str | None, profile_id: str | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if cluster_name is not None:
        where.append(ClusterCalibration.cluster_name == cluster_name)
    if profile_id is not None:
        where.append(ClusterCalibration.profile_id == profile_id)
    return where


def list_calibrations(s: Session, *, cluster_name: str | None = None, profile_id: str | None = None, limit: int = 20,
         offset: int = 0) -> tuple[int, Sequence[ClusterCalibration]]:
    """How many calibrations match, and one page of them, newest first."""
    where = _where(cluster_name, profile_id)
    total = int(s.execute(select(func.count()).select_from(ClusterCalibration).where(*where)).scalar_one())
    rows = s.execute(select(ClusterCalibration).where(*where)
                     .order_by(ClusterCalibration.created_at.desc(), ClusterCalibration.id.desc())
                     .limit(limit).offset(offset)).scalars().all()
    return total, rows


def latest_calibration(s: Session, *, cluster_name: str | None = None,
                       profile_id: str | None = None) -> ClusterCalibration | None:
    """The newest calibration of the profile when one is given and has any, else of the cluster."""
    if profile_id is not None:
        row = s.execute(select(ClusterCalibration).where(ClusterCalibration.profile_id == profile_id)
                        .order_by(ClusterCalibration.created_at.desc()).limit(1)).scalar_one_or_none()
        if row is not None or cluster_name is None:
            return row
    if cluster_name is None:
        return None
    return s.execute(select(ClusterCalibration).where(ClusterCalibration.cluster_name == cluster_name,
                                                      ClusterCalibration.profile_id.is_(None))
                     .order_by(ClusterCalibration.created_at.desc()).limit(1)).scalar_one_or_none()


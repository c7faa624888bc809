"""The service's tables (SQLAlchemy 2 declarative). The schema itself exists only through the
Alembic migrations in ``migrations/``; these classes must match them (a test compares them).

Times are timezone-aware UTC. JSON bodies (requests, configurations, predictions, profiles) are
stored as JSON so a stored row can be served again without recomputation.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """A stored moment as an aware UTC datetime: SQLite hands timezone-aware columns back naive (they
    were stored as UTC), PostgreSQL aware."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


DEFAULT_TENANT = "default"
"""The tenant of tokens created without ``--tenant`` and of rows from before tenants existed."""

Counter = BigInteger().with_variant(Integer(), "sqlite")
"""A 64-bit count (migration 0003): BIGINT on PostgreSQL; SQLite's INTEGER is 64-bit already."""

ACTIVE_REQUEST = "status IN ('queued', 'running', 'done')"


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Profile(Base):
    """A hardware profile as ``autopar profile`` wrote it (search.HardwareProfile JSON)."""

    __tablename__ = "profiles"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    schema_version: Mapped[int] = mapped_column(Integer)
    gpu_name: Mapped[str] = mapped_column(String(200))
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    fingerprint: Mapped[str] = mapped_column(String(200))
    measured_at: Mapped[datetime | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    body: Mapped[dict[str, Any]] = mapped_column()
    tenant: Mapped[str] = mapped_column(String(100), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)
    """The tenant whose token uploaded it (migration 0004)."""


class Search(Base):
    """One search request, its queue state and its result summary (ranked rows in SearchConfig)."""

    __tablename__ = "searches"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), index=True)
    request: Mapped[dict[str, Any]] = mapped_column()
    model_name: Mapped[str] = mapped_column(String(200), index=True)
    cluster_name: Mapped[str] = mapped_column(String(200), index=True)
    num_nodes: Mapped[int] = mapped_column(Integer)
    framework: Mapped[str] = mapped_column(String(40))
    objective: Mapped[str] = mapped_column(String(40))
    profile_id: Mapped[str | None] = mapped_column(ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True)
    autopar_version: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20), index=True)
    """queued | running | done | failed | cancelled"""
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """Set on each claim; every later write of the worker must match it (fencing)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    space_size: Mapped[int | None] = mapped_column(Counter, nullable=True)
    """64-bit (migration 0003): gpt-1t on 65,536 nodes passes 2**31 configurations."""
    n_valid: Mapped[int | None] = mapped_column(Counter, nullable=True)
    n_feasible: Mapped[int | None] = mapped_column(Counter, nullable=True)
    n_evaluated: Mapped[int | None] = mapped_column(Counter, nullable=True)
    exhaustive: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    search_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Seconds the search itself took (search.SearchResult.elapsed_s)."""
    hints: Mapped[list[Any] | None] = mapped_column(nullable=True)
    pareto_ranks: Mapped[list[Any] | None] = mapped_column(nullable=True)
    pareto: Mapped[list[Any] | None] = mapped_column(nullable=True)
    tenant: Mapped[str] = mapped_column(String(100), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)
    """The tenant that queued it; SearchTenant lists every tenant that wants it (migration 0004)."""

    __table_args__ = (
        Index("ix_searches_status_created", "status", "created_at"),
        # migration 0002: identical requests share one queued/running/done search
        Index("uq_searches_active_request", "request_hash", unique=True,
              postgresql_where=text(ACTIVE_REQUEST), sqlite_where=text(ACTIVE_REQUEST)),
    )


class SearchConfig(Base):
    """One ranked configuration of a finished search."""

    __tablename__ = "search_configs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    search_id: Mapped[str] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"))
    rank: Mapped[int] = mapped_column(Integer)
    framework: Mapped[str] = mapped_column(String(40))
    config: Mapped[dict[str, Any]] = mapped_column()
    prediction: Mapped[dict[str, Any]] = mapped_column()
    score: Mapped[float] = mapped_column(Float)
    explanation: Mapped[str] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("search_id", "rank", name="uq_search_configs_search_rank"),)


class Run(Base):
    """A measured training run, stored with what the model predicted for it (for calibration)."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    search_id: Mapped[str | None] = mapped_column(ForeignKey("searches.id", ondelete="SET NULL"), nullable=True,
                                                  index=True)
    rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    profile_id: Mapped[str | None] = mapped_column(ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True)
    request: Mapped[dict[str, Any]] = mapped_column()
    """Model, cluster, training and configuration as sent."""
    iteration_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    peak_memory_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    oom: Mapped[bool] = mapped_column(Boolean, default=False)
    predicted_iteration_time_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_peak_memory_bytes: Mapped[float | None] = mapped_column(Float, nullable=True)
    predicted_fits: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    autopar_version: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    tenant: Mapped[str] = mapped_column(String(100), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)


class ClusterCalibration(Base):
    """A cluster's (or profile's) fitted time constants and their cross-validated error (migration 0005).

    Never changed once stored, so a search or prediction that names it can be reproduced."""

    __tablename__ = "calibrations"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(100), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)
    cluster_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    """The cluster its runs ran on (a preset's name, or a custom cluster's gpu x node name)."""
    profile_id: Mapped[str | None] = mapped_column(ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True)
    constants: Mapped[dict[str, Any]] = mapped_column()
    """Every field of search.Calibration."""
    run_ids: Mapped[list[Any]] = mapped_column()
    n_runs: Mapped[int] = mapped_column(Counter)
    k: Mapped[int] = mapped_column(Integer)
    """Folds of the cross-validation."""
    cv_mape_before: Mapped[float] = mapped_column(Float)
    """The published constants' iteration-time MAPE on the runs (a fraction)."""
    cv_mape_after: Mapped[float] = mapped_column(Float)
    """The k-fold cross-validated MAPE of the fitted constants (a fraction)."""
    details: Mapped[dict[str, Any]] = mapped_column()
    """The constants that moved (prior, fitted), the in-sample MAPE, the prior weight, the filter, seconds."""
    fingerprint: Mapped[str] = mapped_column(String(64))
    autopar_version: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

    __table_args__ = (
        Index("ix_calibrations_cluster_created", "cluster_name", "created_at"),
        Index("ix_calibrations_profile_created", "profile_id", "created_at"),
    )


class SearchTenant(Base):
    """A tenant that wants a search: identical requests of several tenants share one search, which
    is cancelled only when none of them wants it any more (migration 0004)."""

    __tablename__ = "search_tenants"
    search_id: Mapped[str] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(100), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)


class ApiToken(Base):
    """An API token: only its SHA-256 is stored; the token itself is shown once at creation."""

    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(100))
    """Space-separated: read, write, admin."""
    tenant: Mapped[str] = mapped_column(String(100), default=DEFAULT_TENANT, server_default=DEFAULT_TENANT)
    """Whose token it is: what it creates records this tenant, and it cancels only this tenant's searches."""
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    last_used_at: Mapped[datetime | None] = mapped_column(nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)


class IdempotencyKey(Base):
    """A POST answered under an ``Idempotency-Key``: the same key and body get the same answer."""

    __tablename__ = "idempotency_keys"
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    principal: Mapped[str] = mapped_column(String(32), primary_key=True)
    """The token id that sent it ('' without a token), so keys of different callers never collide."""
    method: Mapped[str] = mapped_column(String(10))
    path: Mapped[str] = mapped_column(String(500))
    body_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any]] = mapped_column()
    location: Mapped[str | None] = mapped_column(String(500), nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)

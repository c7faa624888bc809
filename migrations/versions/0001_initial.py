"""Initial schema: profiles, searches (queue + result summary), search_configs, runs, api_tokens,
idempotency_keys.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("gpu_name", sa.String(200), nullable=False),
        sa.Column("gpus_per_node", sa.Integer, nullable=False),
        sa.Column("fingerprint", sa.String(200), nullable=False),
        sa.Column("measured_at", TZ, nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
    )
    op.create_table(
        "searches",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("cluster_name", sa.String(200), nullable=False),
        sa.Column("num_nodes", sa.Integer, nullable=False),
        sa.Column("framework", sa.String(40), nullable=False),
        sa.Column("objective", sa.String(40), nullable=False),
        sa.Column("profile_id", sa.String(32), sa.ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True),
        sa.Column("autopar_version", sa.String(40), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("started_at", TZ, nullable=True),
        sa.Column("finished_at", TZ, nullable=True),
        sa.Column("heartbeat_at", TZ, nullable=True),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("claim_token", sa.String(32), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("space_size", sa.Integer, nullable=True),
        sa.Column("n_valid", sa.Integer, nullable=True),
        sa.Column("n_feasible", sa.Integer, nullable=True),
        sa.Column("n_evaluated", sa.Integer, nullable=True),
        sa.Column("exhaustive", sa.Boolean, nullable=True),
        sa.Column("search_s", sa.Float, nullable=True),
        sa.Column("hints", sa.JSON, nullable=True),
        sa.Column("pareto_ranks", sa.JSON, nullable=True),
        sa.Column("pareto", sa.JSON, nullable=True),
    )
    op.create_index("ix_searches_request_hash", "searches", ["request_hash"])
    op.create_index("ix_searches_model_name", "searches", ["model_name"])
    op.create_index("ix_searches_cluster_name", "searches", ["cluster_name"])
    op.create_index("ix_searches_status", "searches", ["status"])
    op.create_index("ix_searches_status_created", "searches", ["status", "created_at"])
    op.create_table(
        "search_configs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("search_id", sa.String(32), sa.ForeignKey("searches.id", ondelete="CASCADE"), nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("framework", sa.String(40), nullable=False),
        sa.Column("config", sa.JSON, nullable=False),
        sa.Column("prediction", sa.JSON, nullable=False),
        sa.Column("score", sa.Float, nullable=False),
        sa.Column("explanation", sa.Text, nullable=False),
        sa.UniqueConstraint("search_id", "rank", name="uq_search_configs_search_rank"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("search_id", sa.String(32), sa.ForeignKey("searches.id", ondelete="SET NULL"), nullable=True),
        sa.Column("rank", sa.Integer, nullable=True),
        sa.Column("profile_id", sa.String(32), sa.ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("iteration_time_s", sa.Float, nullable=True),
        sa.Column("peak_memory_bytes", sa.Float, nullable=True),
        sa.Column("oom", sa.Boolean, nullable=False),
        sa.Column("predicted_iteration_time_s", sa.Float, nullable=True),
        sa.Column("predicted_peak_memory_bytes", sa.Float, nullable=True),
        sa.Column("predicted_fits", sa.Boolean, nullable=True),
        sa.Column("autopar_version", sa.String(40), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
    )
    op.create_index("ix_runs_search_id", "runs", ["search_id"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("scopes", sa.String(100), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("last_used_at", TZ, nullable=True),
        sa.Column("revoked_at", TZ, nullable=True),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("principal", sa.String(32), primary_key=True),
        sa.Column("method", sa.String(10), nullable=False),
        sa.Column("path", sa.String(500), nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("location", sa.String(500), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("api_tokens")
    op.drop_index("ix_runs_search_id", table_name="runs")
    op.drop_table("runs")
    op.drop_table("search_configs")
    for name in ("ix_searches_status_created", "ix_searches_status", "ix_searches_cluster_name",
                 "ix_searches_model_name", "ix_searches_request_hash"):
        op.drop_index(name, table_name="searches")
    op.drop_table("searches")
    op.drop_table("profiles")

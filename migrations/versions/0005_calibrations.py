"""Per-cluster calibrations (issue 16): the cost model's time constants fitted on the stored runs
of one cluster (or hardware profile), with the ids of the runs used, the k-fold cross-validated
iteration-time MAPE before (the published constants) and after, and a fingerprint (SHA-256 of the
constants and the run ids). A calibration is never changed once stored: a search or prediction
that names it is reproducible. ``n_runs`` is a 64-bit counter (BIGINT on PostgreSQL, as in 0003).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COUNTER = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "calibrations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant", sa.String(100), nullable=False, server_default="default"),
        sa.Column("cluster_name", sa.String(200), nullable=True),
        sa.Column("profile_id", sa.String(32), sa.ForeignKey("profiles.id", ondelete="RESTRICT"), nullable=True),
        sa.Column("constants", sa.JSON(), nullable=False),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("n_runs", COUNTER, nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("cv_mape_before", sa.Float(), nullable=False),
        sa.Column("cv_mape_after", sa.Float(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("autopar_version", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_calibrations_cluster_created", "calibrations", ["cluster_name", "created_at"])
    op.create_index("ix_calibrations_profile_created", "calibrations", ["profile_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_calibrations_profile_created", table_name="calibrations")
    op.drop_index("ix_calibrations_cluster_created", table_name="calibrations")
    op.drop_table("calibrations")

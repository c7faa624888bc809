"""Tenants: every token belongs to one (``autopar token create --tenant NAME``); searches, profiles
and runs record the tenant that created them, and ``search_tenants`` records every tenant that
wants a search (identical requests share one search). Cancelling withdraws one's own tenant; the
search itself is cancelled when no tenant wants it any more. Rows from before are tenant
``default``, as are tokens created without ``--tenant``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("api_tokens", "searches", "profiles", "runs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("tenant", sa.String(100), nullable=False, server_default="default"))
    op.create_table(
        "search_tenants",
        sa.Column("search_id", sa.String(32), sa.ForeignKey("searches.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("tenant", sa.String(100), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.execute("INSERT INTO search_tenants (search_id, tenant, created_at) "
               "SELECT id, tenant, created_at FROM searches WHERE status IN ('queued', 'running', 'done')")


def downgrade() -> None:
    op.drop_table("search_tenants")
    for table in reversed(TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("tenant")

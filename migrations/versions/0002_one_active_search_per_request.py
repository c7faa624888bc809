"""One active search per identical request: a partial unique index on request_hash over the
queued, running and done searches (failed and cancelled ones may repeat), so two identical
POSTs racing each other cannot both queue a search.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ACTIVE = sa.text("status IN ('queued', 'running', 'done')")


def upgrade() -> None:
    op.create_index("uq_searches_active_request", "searches", ["request_hash"], unique=True,
                    postgresql_where=ACTIVE, sqlite_where=ACTIVE)


def downgrade() -> None:
    op.drop_index("uq_searches_active_request", table_name="searches")

"""64-bit counters: a search's space size and counts pass 2**31 for large models on many nodes
(gpt-1t on 65,536 nodes with a huge batch: PostgreSQL's INTEGER refused it, "integer out of
range"). SQLite's INTEGER is already 64-bit (it stores up to 8 bytes), so only PostgreSQL changes
(``Counter`` in service/store/_tables.py: BIGINT there, INTEGER on SQLite).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

COUNTERS = ("space_size", "n_valid", "n_feasible", "n_evaluated")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in COUNTERS:
            op.alter_column("searches", name, existing_type=sa.Integer(), type_=sa.BigInteger(), existing_nullable=True)


def downgrade() -> None:
    # a count above 2**31 - 1 cannot go back into INTEGER: PostgreSQL refuses the downgrade then
    if op.get_bind().dialect.name == "postgresql":
        for name in COUNTERS:
            op.alter_column("searches", name, existing_type=sa.BigInteger(), type_=sa.Integer(), existing_nullable=True)

"""Alembic environment for the autopar service database.

Run through ``autopar db upgrade`` (or at ``autopar serve`` start), which builds the Alembic
config in code (service.store._db.alembic_config): the URL comes from ``AUTOPAR_DATABASE_URL`` or
the SQLite file in the data directory. SQLite gets batch mode so later ALTERs work there too.

This folder is not a Python package: Alembic loads its files by path, from here in a source
checkout and from ``service/store/_alembic/`` in an installed wheel (setup.py copies them there).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from service.store._tables import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=bool(url and url.startswith("sqlite")))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,  # type: ignore[arg-type]
                      render_as_batch=connection.dialect.name == "sqlite")  # type: ignore[attr-defined]
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

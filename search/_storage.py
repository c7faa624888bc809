"""Optuna's RDB storage, opened safely by several workers at once.

``optuna.storages.RDBStorage(url)`` creates Optuna's tables (and, on PostgreSQL, its enum types)
and stamps their version when they are missing, without a lock: workers started together on a
database that never held a study all try, and all but one fail on what the first created
(``duplicate key value violates unique constraint "pg_type_typname_nsp_index"``). As the
service's migrations do (``service/store/_db.py``), one opener at a time creates the schema:
PostgreSQL: an advisory lock held in a transaction on a connection of its own; SQLite: an
exclusive flock on a file beside the database. Any other database, or a worker of an older
autopar that takes no lock, is covered by retrying: an "already exists" or duplicate-key error
while opening means another opener won, and the next attempt finds the schema there.
sqlalchemy and optuna are imported where they are used: ``autopar predict`` needs neither.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

SCHEMA_LOCK_KEY = 0x6F7074756E61
"""The PostgreSQL advisory lock taken while opening Optuna's storage ("optuna" in ASCII; the
service's migrations take another key, advisory locks are per database)."""

OPEN_ATTEMPTS = 5
"""Opening attempts when another opener wins a race on the schema (each waits 0.1, 0.2, ... s)."""

_LOST_RACE = ("already exists", "duplicate key", "unique constraint failed")


@contextmanager
def database_lock(url: str, key: int, name: str) -> Iterator[None]:
    """Hold a lock that one process per database holds at a time, across hosts where the
    database is shared: PostgreSQL's advisory lock ``key`` in a transaction on a connection of
    its own (released when the block ends, or when that connection dies with its process); an
    exclusive flock on ``<database>.<name>-lock`` beside a SQLite file (one host by nature).
    In-memory SQLite and other databases: no lock."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    from sqlalchemy.pool import NullPool

    try:
        parsed = make_url(url)
    except ArgumentError:
        yield  # not a database URL: Optuna says what is wrong with it
        return
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        engine = create_engine(parsed, poolclass=NullPool)
        try:
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
                yield
        finally:
            engine.dispose()
    elif backend == "sqlite" and parsed.database and parsed.database != ":memory:":
        path = Path(parsed.database).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{path}.{name}-lock", "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes
            yield
    else:
        yield


def _lost_race(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says another process created the object first."""
    seen: BaseException | None = exc
    while seen is not None:
        if any(marker in str(seen).lower() for marker in _LOST_RACE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at ``url``, its schema created (or found) safely when several
    workers open a fresh database at once."""
    import optuna

    attempt = 0
    while True:
        try:
            with database_lock(url, SCHEMA_LOCK_KEY, "optuna"):
                return optuna.storages.RDBStorage(url)
        except Exception as e:
            attempt += 1
            if attempt == OPEN_ATTEMPTS or not _lost_race(e):
                raise
            time.sleep(0.1 * 2 ** (attempt - 1))

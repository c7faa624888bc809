"""Database access shared by ``autopar serve | worker | db | token``: open the environment's
database and turn 'cannot connect' into an error that names the URL and the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from search import AutoparError, SpecError

if TYPE_CHECKING:
    from service._settings import Settings
    from service.store import Database

_FIX_DB = "check AUTOPAR_DATABASE_URL and that the database server is running"


@contextmanager
def reachable(db: Database) -> Iterator[None]:
    """Turn 'cannot connect' into a SpecError that names the URL (password hidden) and the fix."""
    from sqlalchemy.exc import DatabaseError, InterfaceError, OperationalError

    from service.store import URL_ENV
    from service.store._db import damaged

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        reason = (str(exc.orig or exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SpecError(URL_ENV, f"cannot use the database {db.safe_url}: {reason}", _FIX_DB) from None
    except DatabaseError as exc:  # SQLite: "file is not a database", "database disk image is malformed"
        reason = (str(exc.orig or exc).strip().splitlines() or [type(exc).__name__])[0]
        if db.dialect == "sqlite":
            raise damaged(db.url, reason) from None
        raise SpecError(URL_ENV, f"the database {db.safe_url} refused a request: {reason}", _FIX_DB) from None


def open_database(*, must_exist: bool) -> tuple[Settings, Database]:
    """The settings and database of the environment; with ``must_exist``, a missing SQLite file is an
    error rather than a new empty database (commands that only read or add rows create nothing)."""
    from sqlalchemy.engine import make_url

    from service._settings import Settings
    from service.store import URL_ENV, Database
    from service.store._db import check_url

    settings = Settings.from_env()
    if must_exist and check_url(settings.database_url) == "sqlite":
        path = make_url(settings.database_url).database
        if not path or path == ":memory:" or not Path(path).expanduser().exists():
            raise SpecError(URL_ENV, f"there is no database at {settings.database_url}",
                            "start `autopar serve` or run `autopar db upgrade` first (or set AUTOPAR_DATA_DIR "
                            "or AUTOPAR_DATABASE_URL to the service's database)")
    return settings, Database(settings.database_url)


def current_database() -> tuple[Settings, Database]:
    """An existing database whose schema is at head, else a SpecError that says what to run."""
    settings, db = open_database(must_exist=True)
    try:
        with reachable(db):
            db.check_integrity()
            db.require_current()
    except AutoparError:
        db.dispose()
        raise
    return settings, db



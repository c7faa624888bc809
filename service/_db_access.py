"""Database access shared by ``autopar serve | worker | db | token | runs | calibrate``: open the
environment's database, and say what to run when it is missing or not at the newest schema.

Database errors need no translating here: the store raises its own kinds (``StorageUnavailable``
naming the URL, password hidden, and the fix; ``DatabaseDamaged`` saying what to restore), each an
:class:`search.AutoparError` the command line prints as one ``autopar: error:`` line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search import AutoparError, SpecError

if TYPE_CHECKING:
    from service._settings import Settings
    from service.store import Database


def open_database(*, must_exist: bool) -> tuple[Settings, Database]:
    """The settings and database of the environment; with ``must_exist``, a missing SQLite file is an
    error rather than a new empty database (commands that only read or add rows create nothing)."""
    from service._settings import Settings
    from service.store import URL_ENV, Database, check_url, sqlite_file

    settings = Settings.from_env()
    if must_exist and check_url(settings.database_url) == "sqlite":
        path = sqlite_file(settings.database_url)
        if path is None or not path.exists():
            raise SpecError(URL_ENV, f"there is no database at {settings.database_url}",
                            "start `autopar serve` or run `autopar db upgrade` first (or set AUTOPAR_DATA_DIR "
                            "or AUTOPAR_DATABASE_URL to the service's database)")
    return settings, Database(settings.database_url)


def current_database() -> tuple[Settings, Database]:
    """An existing database whose schema is at head, else an error that says what to run."""
    settings, db = open_database(must_exist=True)
    try:
        db.check_integrity()
        db.require_current()
    except AutoparError:
        db.dispose()
        raise
    return settings, db

"""Database driver exceptions become the store's errors here, and only here.

Every way into the database (``Database.session``, its migrations, checks and counts) runs under
:func:`translated`, so the layers above see :class:`~service.store.StoreError` kinds, never
SQLAlchemy's or a driver's exceptions (optuna's ``_rdb/storage.py::_create_scoped_session``):

* ``IntegrityError`` (a unique key or foreign key refused the write) -> :class:`Conflict`;
* ``DataError`` (PostgreSQL refuses a NUL in text, even in a WHERE clause) -> :class:`InvalidValue`,
  the answer SQLite's engine gives too (``service.store._db``);
* SQLite's words for a damaged file ("malformed", "not a database") -> :class:`DatabaseDamaged`;
* anything else the database raised (down, restarting, locked, a table dropped under us) and a
  connection pool that ran dry -> :class:`StorageUnavailable`.

The message is for the operator (it names the database, password hidden, and the driver's first
line); the translated exception keeps the driver's as ``__cause__`` for the log, and
``StoreError.cause`` names its class for answers that must not show its text (the API's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    DatabaseError,
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.store._errors import (
    Conflict,
    DatabaseDamaged,
    StorageUnavailable,
    StoreError,
    nul_refused,
)

URL_ENV = "AUTOPAR_DATABASE_URL"
FIX_UNREACHABLE = "check AUTOPAR_DATABASE_URL and that the database server is running"


def safe_url(url: str) -> str:
    """``url`` with any password hidden, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


def damaged(url: str, reason: str) -> DatabaseDamaged:
    """The error of a SQLite file that is damaged or not a database, saying what to do."""
    path = make_url(url).database or url
    return DatabaseDamaged(URL_ENV, f"the SQLite database {path} is damaged or is not a database ({reason}); "
                           "retrying will not help",
                           f"stop autopar, then restore {path} from a backup (with its -wal file), or move it "
                           "away to start with an empty database (`autopar db upgrade`); `sqlite3 FILE .recover` "
                           "may save the rows a damaged file still holds")


def _reason(exc: Exception) -> str:
    """The driver's first line (SQLAlchemy appends the SQL and a link on later lines)."""
    orig = getattr(exc, "orig", None)
    return (str(orig or exc).strip().splitlines() or [type(exc).__name__])[0]


def is_damage(exc: DatabaseError) -> bool:
    """SQLite's words for a damaged file (permanent: a retry cannot help)."""
    text = str(exc.orig or exc).lower()
    return "malformed" in text or "not a database" in text


def translate(exc: DBAPIError | PoolTimeout, url: str) -> StoreError:
    """The store's error for a database exception raised while using the database at ``url``."""
    error: StoreError
    if isinstance(exc, IntegrityError):
        error = Conflict("request", "it conflicts with data stored meanwhile", "send the request again")
    elif isinstance(exc, DataError):
        error = nul_refused()
    elif (isinstance(exc, DatabaseError) and not isinstance(exc, OperationalError) and is_damage(exc)
          and make_url(url).get_backend_name() == "sqlite"):
        error = damaged(url, _reason(exc))
    elif isinstance(exc, OperationalError | InterfaceError | PoolTimeout):
        error = StorageUnavailable(URL_ENV, f"cannot use the database {safe_url(url)}: {_reason(exc)}",
                                   FIX_UNREACHABLE)
    else:  # a table dropped under us (ProgrammingError on PostgreSQL), an internal error of the server
        error = StorageUnavailable(URL_ENV, f"the database {safe_url(url)} refused a request: {_reason(exc)}",
                                   FIX_UNREACHABLE)
    error.cause = type(exc).__name__
    return error


@contextmanager
def translated(url: str) -> Iterator[None]:
    """Raise the store's error in place of any database exception the block raises."""
    try:
        yield
    except (DBAPIError, PoolTimeout) as exc:
        raise translate(exc, url) from exc

"""Where the service's database lives, its engine, sessions and migrations.

The embedded default is a SQLite file, ``autopar.db`` in the data directory
(``AUTOPAR_DATA_DIR``, else ``$XDG_DATA_HOME/autopar``, else ``~/.local/share/autopar``).
``AUTOPAR_DATABASE_URL`` (``postgresql+psycopg://user@host/db`` or ``sqlite:///path``) replaces
it. The schema is created and changed only by the Alembic migrations in ``migrations/``.

SQLite runs in WAL mode with a busy timeout, so the API process and worker processes can share
the file; foreign keys are enforced on both databases.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

from search import SpecError
from service._version import autopar_version
from service.store._errors import SchemaMismatch, nul_refused
from service.store._translate import URL_ENV, damaged, safe_url, translate, translated

DATA_DIR_ENV = "AUTOPAR_DATA_DIR"
_DIALECTS = ("sqlite", "postgresql")
MIGRATION_LOCK_KEY = 0x6175746F706172  # "autopar": the advisory lock taken while migrating
_ALEMBIC_LOCK = threading.Lock()


def data_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The directory of the embedded database (and other service state)."""
    if env.get(DATA_DIR_ENV):
        return Path(env[DATA_DIR_ENV]).expanduser()
    base = Path(env["XDG_DATA_HOME"]).expanduser() if env.get("XDG_DATA_HOME") else Path.home() / ".local" / "share"
    return base / "autopar"


def database_url(env: Mapping[str, str] = os.environ) -> str:
    """``AUTOPAR_DATABASE_URL``, or the SQLite file in :func:`data_dir`."""
    url = env.get(URL_ENV, "").strip()
    if url:
        return url
    return f"sqlite:///{data_dir(env) / 'autopar.db'}"


def check_url(url: str) -> str:
    """The URL's dialect (``sqlite`` or ``postgresql``), or a SpecError saying what to give."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SpecError(URL_ENV, f"{url!r} is not a database URL",
                        "use postgresql+psycopg://USER@HOST:5432/DB or sqlite:///PATH") from None
    dialect = parsed.get_backend_name()
    if dialect not in _DIALECTS:
        raise SpecError(URL_ENV, f"the {dialect!r} database is not supported",
                        "use postgresql+psycopg://USER@HOST:5432/DB or sqlite:///PATH")
    if dialect == "postgresql" and parsed.get_driver_name() not in ("psycopg", "psycopg2"):
        raise SpecError(URL_ENV, f"driver {parsed.get_driver_name()!r} is not installed with autopar",
                        "use postgresql+psycopg://... (pip install 'autopar[postgres]')")
    return dialect


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for an in-memory database or another dialect)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).expanduser()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def _refuse_nul(_conn: Any, _cursor: Any, _statement: str, parameters: Any, _context: Any, _many: bool) -> None:
    """SQLite stores a NUL in text; PostgreSQL refuses it. Refused here too, so both answer alike."""
    if _has_nul(parameters):
        raise nul_refused()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; a SQLite file's directory is created on first use."""
    dialect = check_url(url)
    if dialect == "sqlite":
        database = make_url(url).database
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "before_cursor_execute", _refuse_nul)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


MIGRATIONS_PACKAGED = Path(__file__).with_name("_alembic")
"""Where a wheel carries the Alembic scripts (setup.py copies ``migrations/`` there at build)."""
MIGRATIONS_SOURCE = Path(__file__).resolve().parents[2] / "migrations"
"""The repository's ``migrations/``, for a source checkout or an editable install."""


def migrations_dir() -> Path:
    """The Alembic scripts: the packaged copy of an installed wheel, else the source tree's."""
    for folder in (MIGRATIONS_PACKAGED, MIGRATIONS_SOURCE):
        if (folder / "env.py").is_file():
            return folder
    raise RuntimeError(f"the Alembic scripts are missing (looked in {MIGRATIONS_PACKAGED} and {MIGRATIONS_SOURCE}): "
                       "reinstall autopar")


def alembic_config(url: str) -> Any:
    """The Alembic config of the migration scripts for ``url`` (built in code: no alembic.ini)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The newest migration."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise RuntimeError("migrations/ has no revisions")
    return head


def revisions() -> list[str]:
    """Every revision in ``migrations/``, oldest first."""
    from alembic.script import ScriptDirectory

    return [rev.revision for rev in ScriptDirectory.from_config(alembic_config("sqlite://")).walk_revisions()][::-1]


def known_revisions() -> set[str]:
    """Every revision in ``migrations/``."""
    return set(revisions())




class Database:
    """One database: its URL, engine and session factory."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or database_url()
        self.dialect = check_url(self.url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed when the block ends normally, rolled back otherwise; a database
        exception (in the block or at the commit) leaves it as a :class:`StoreError` kind."""
        with translated(self.url), self._sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    @contextmanager
    def _migrating(self) -> Iterator[Any]:
        """A connection in a transaction that only one migrator of this database holds at a time.

        Several replicas of ``autopar serve`` starting at once each migrate: the later ones must
        wait and then find the schema at head, not fail on tables that now exist. PostgreSQL: a
        transaction-scoped advisory lock. SQLite (one host by nature): an exclusive flock on a file
        beside the database. In one process, Alembic's module-global context also needs a lock."""
        with translated(self.url), _ALEMBIC_LOCK, ExitStack() as stack:
            if self.dialect == "sqlite":
                database = make_url(self.url).database
                if database and database != ":memory:":
                    lock_file = stack.enter_context(open(f"{Path(database).expanduser()}.migrate-lock", "a"))
                    fcntl.flock(lock_file, fcntl.LOCK_EX)
            conn = stack.enter_context(self.engine.begin())
            if self.dialect == "postgresql":
                from sqlalchemy import text

                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            yield conn

    def check_integrity(self) -> None:
        """Raise :class:`DatabaseDamaged` unless the database reads as sound.

        SQLite: ``PRAGMA quick_check`` (every page and index entry is well formed; it reads the whole
        file, a second or so per GB) and "file is not a database" for a file that is something else.
        PostgreSQL keeps its own checksums and WAL: nothing to check from here."""
        if self.dialect != "sqlite":
            return
        from sqlalchemy import text
        from sqlalchemy.exc import DatabaseError, OperationalError

        try:
            with self.engine.connect() as conn:
                problems = [str(row[0]) for row in conn.execute(text("PRAGMA quick_check(5)"))]
        except OperationalError as exc:  # locked, unreachable: not damage
            raise translate(exc, self.url) from exc
        except DatabaseError as exc:
            problems = [str(exc.orig or exc)]
        if problems != ["ok"]:
            raise damaged(self.safe_url, "; ".join(problems)[:500])

    def check_known(self, conn: Any = None) -> None:
        """Raise unless this autopar knows the database's revision (a newer autopar may have
        migrated it: this one would misread its tables, and cannot downgrade it). ``conn``: read it
        on that connection (a migrator's, under its lock)."""
        current = self.current_revision(conn)
        if current is not None and current not in known_revisions():
            raise SchemaMismatch(URL_ENV, f"the database {self.safe_url} was migrated by a newer autopar (revision "
                                 f"{current}); this autopar {autopar_version()} knows up to {head_revision()}",
                                 "run the newer autopar against it, or downgrade it with that version first")

    def row_counts(self) -> dict[str, int]:
        """Rows per table of the service (tables that exist), to say what a downgrade would drop."""
        from sqlalchemy import func, inspect, select

        from service.store._tables import Base

        counts: dict[str, int] = {}
        with translated(self.url):
            present = set(inspect(self.engine).get_table_names())
            with self.engine.connect() as conn:
                for table in Base.metadata.sorted_tables:
                    if table.name in present:
                        counts[table.name] = int(conn.execute(select(func.count()).select_from(table)).scalar_one())
        return counts

    def upgrade(self, revision: str = "head") -> None:
        """Apply migrations up to ``revision``."""
        self._migrate("upgrade", revision)

    def downgrade(self, revision: str) -> None:
        """Revert migrations down to ``revision`` (``base`` removes every table)."""
        self._migrate("downgrade", revision)

    def _migrate(self, direction: Literal["upgrade", "downgrade"], revision: str) -> None:
        """Run Alembic's upgrade or downgrade under the migration lock; SpecError naming ``REV`` for a
        revision the scripts do not have."""
        from alembic import command
        from alembic.util import CommandError

        with self._migrating() as conn:
            # Read under the migration lock: a replica that connects while another migrates a new SQLite
            # file can meet its journal-mode switch and fail as "database is locked".
            self.check_known(conn)
            cfg = alembic_config(self.url)
            cfg.attributes["connection"] = conn
            try:
                getattr(command, direction)(cfg, revision)
            except CommandError as exc:
                raise SpecError("REV", f"{revision!r}: {exc}",
                                f"use head, base or one of: {', '.join(revisions())}") from None

    def current_revision(self, conn: Any = None) -> str | None:
        """The revision the database is at, None before the first migration (on ``conn`` if given)."""
        from alembic.runtime.migration import MigrationContext

        with translated(self.url):
            if conn is not None:
                return MigrationContext.configure(conn).get_current_revision()
            with self.engine.connect() as own:
                return MigrationContext.configure(own).get_current_revision()

    def require_current(self) -> None:
        """Raise unless the schema is at the newest migration (what the code expects)."""
        self.check_known()
        current, head = self.current_revision(), head_revision()
        if current != head:
            raise SchemaMismatch(URL_ENV, f"the database {self.safe_url} is at revision {current or 'none'}, "
                                 f"this autopar expects {head}", "run `autopar db upgrade` (or start `autopar serve`)")

    @property
    def safe_url(self) -> str:
        """The URL with any password hidden, for messages and logs."""
        return safe_url(self.url)

    def dispose(self) -> None:
        self.engine.dispose()

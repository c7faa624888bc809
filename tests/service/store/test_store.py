"""The schema exists only through the migrations: up and down on SQLite and PostgreSQL, and the
migrated schema equals the ORM tables."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from search import SpecError
from service.store import Base, Database, SchemaMismatch, data_dir, database_url, head_revision

TABLES = {"profiles", "searches", "search_configs", "runs", "api_tokens", "idempotency_keys"}


def test_migrations_up_down_up(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert db.current_revision() is None
        db.upgrade()
        assert db.current_revision() == head_revision()
        assert set(inspect(db.engine).get_table_names()) >= TABLES
        db.downgrade("base")
        assert db.current_revision() is None
        assert not TABLES & set(inspect(db.engine).get_table_names())
        db.upgrade()
        assert db.current_revision() == head_revision()
    finally:
        db.dispose()


def test_migrated_schema_matches_the_orm_tables(db_url: str) -> None:
    db = Database(db_url)
    try:
        db.upgrade()
        with db.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
        assert diff == []
    finally:
        db.dispose()


def test_require_current_says_to_upgrade(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    with pytest.raises(SchemaMismatch, match="autopar db upgrade"):
        db.require_current()
    db.upgrade()
    db.require_current()
    db.dispose()


def test_default_url_is_a_sqlite_file_in_the_data_dir(tmp_path: object) -> None:
    env = {"AUTOPAR_DATA_DIR": "/srv/autopar"}
    assert database_url(env) == "sqlite:////srv/autopar/autopar.db"
    assert str(data_dir({"XDG_DATA_HOME": "/x"})) == "/x/autopar"
    assert database_url({"AUTOPAR_DATABASE_URL": "postgresql+psycopg://u@h/d"}) == "postgresql+psycopg://u@h/d"


@pytest.mark.parametrize(("url", "needle"), [
    ("mysql://root@localhost/x", "not supported"),
    ("not a url", "not a database URL"),
    ("postgresql+asyncpg://u@h/d", "driver"),
])
def test_bad_database_urls_say_what_to_use(url: str, needle: str) -> None:
    with pytest.raises(SpecError, match=needle) as err:
        Database(url)
    assert err.value.field == "AUTOPAR_DATABASE_URL"


def test_settings_read_the_environment_and_name_the_variable_on_bad_values() -> None:
    from service.api import Settings

    s = Settings.from_env({"AUTOPAR_MAX_TOP": "20", "AUTOPAR_OPEN_READS": "no", "AUTOPAR_WORKERS": "0"})
    assert (s.max_top, s.open_reads, s.workers) == (20, False, 0)
    for name, value in (("AUTOPAR_MAX_TRIALS", "lots"), ("AUTOPAR_LEASE_S", "0"), ("AUTOPAR_OPEN_READS", "maybe")):
        with pytest.raises(SpecError) as err:
            Settings.from_env({name: value})
        assert err.value.field == name


def test_replicas_migrating_one_database_at_once_do_not_collide(db_url: str) -> None:
    """Several `autopar serve` replicas (processes) starting together each migrate: the later ones
    wait and find the schema at head instead of failing on tables that now exist."""
    import subprocess
    import sys

    code = "import sys; from service.store import Database; Database(sys.argv[1]).upgrade()"
    procs = [subprocess.Popen([sys.executable, "-c", code, db_url], stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    db = Database(db_url)
    assert db.current_revision() == head_revision()
    db.dispose()

"""Fixtures for the REST service: a fresh database per test on SQLite and on the local
PostgreSQL (a throwaway database created on the server and dropped after), an in-process
client, and tokens.

PostgreSQL: ``AUTOPAR_TEST_POSTGRES_ADMIN_URL`` (default the local server's ``test`` database)
is used to CREATE/DROP the throwaway databases. Tests on it are marked ``postgres``; they fail,
not skip, when the server does not answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import Settings, create_app
from service.api._auth import create_token
from service.store import Database

ADMIN_URL = os.environ.get("AUTOPAR_TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_database() -> Iterator[str]:
    import psycopg

    name = f"autopar_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database (no tables yet) on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'autopar.db'}"
    else:
        yield from _pg_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autopar.db'}"


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, workers=0, lease_s=2.0, poll_s=0.05)


@pytest.fixture
def app_db(settings: Settings) -> Iterator[Database]:
    db = Database(settings.database_url)
    db.upgrade()
    yield db
    db.dispose()


@pytest.fixture
def client(settings: Settings, app_db: Database) -> Iterator[TestClient]:
    """An in-process client of a migrated app (no worker processes: see the worker fixtures)."""
    with TestClient(create_app(settings, db=app_db, migrate=False)) as c:
        yield c


@pytest.fixture
def write_token(app_db: Database) -> str:
    return create_token(app_db, "test-writer", ["write"])[1]


@pytest.fixture
def read_token(app_db: Database) -> str:
    return create_token(app_db, "test-reader", ["read"])[1]


@pytest.fixture
def auth(write_token: str) -> dict[str, str]:
    """Headers of a caller with the write scope."""
    return {"Authorization": f"Bearer {write_token}"}


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database shared by one test module (for module-scoped apps)."""
    yield from _pg_database()

"""Fixtures for the service's tests (the store's, the worker's and the API's): a fresh database per
test on SQLite and on the local PostgreSQL (a throwaway database created on the server and dropped
after), an in-process client of the API, and tokens.

PostgreSQL databases come from tests/conftest.py (``pg_url``, ``module_pg_url``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service._tokens import create_token
from service.api import Settings, create_app
from service.store import Database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database (no tables yet) on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'autopar.db'}"
    else:
        yield request.getfixturevalue("pg_url")


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


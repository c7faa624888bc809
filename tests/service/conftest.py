"""Throwaway PostgreSQL databases for the service tests (the CLI, the API, the workers).

``AUTOPAR_TEST_POSTGRES_ADMIN_URL`` (default the local server's ``test`` database) is used to
CREATE and DROP them. Tests on PostgreSQL are marked ``postgres``; they fail, not skip, when the
server does not answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

ADMIN_URL = os.environ.get("AUTOPAR_TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _throwaway_database() -> Iterator[str]:
    """Create a database on the server, yield its SQLAlchemy URL, drop it (connections included)."""
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


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database for one test."""
    yield from _throwaway_database()


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database shared by one test module (for module-scoped apps)."""
    yield from _throwaway_database()

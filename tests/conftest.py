"""Throwaway PostgreSQL databases for every test that needs one (search's shared storage, the
service's CLI, API and workers).

Each database is new: a test never meets what another test (or an earlier run) left behind,
so what happens on a fresh server -- creating a schema, several processes at once -- is what
the tests see. ``AUTOPAR_TEST_POSTGRES_ADMIN_URL`` (default the local server's ``test``
database) is used only to CREATE and DROP them. Tests on PostgreSQL are marked ``postgres``;
they fail, not skip, when the server does not answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

ADMIN_URL = os.environ.get("AUTOPAR_TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")


class ThrowawayDatabases:
    """Databases created on the server one by one, all dropped (connections included) at the end."""

    def __init__(self, admin_url: str = ADMIN_URL) -> None:
        self.admin_url = admin_url
        self.names: list[str] = []

    def new(self) -> str:
        """Create a database and return its SQLAlchemy URL."""
        import psycopg

        name = f"autopar_t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        base = self.admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
        return f"{base}/{name}"

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while self.names:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.names.pop()}" WITH (FORCE)')


def _throwaway_database() -> Iterator[str]:
    databases = ThrowawayDatabases()
    try:
        yield databases.new()
    finally:
        databases.drop_all()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database for one test."""
    yield from _throwaway_database()


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database shared by one test module (for module-scoped apps)."""
    yield from _throwaway_database()


@pytest.fixture
def new_pg_url() -> Iterator[Callable[[], str]]:
    """Call it for each fresh PostgreSQL database a test needs; all are dropped after the test."""
    databases = ThrowawayDatabases()
    try:
        yield databases.new
    finally:
        databases.drop_all()


@pytest.fixture(scope="session")
def case_search() -> Callable[[str], Any]:
    """The search of a ``benchmarks/search_speed.py`` case by name, run once per session: several
    test modules check the same answers (the supported top ten, their launch files), and the MoE
    cases take 10-20 s each on this machine. A search is deterministic, so sharing it hides nothing."""
    import sys
    from functools import cache
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.search_speed import cases
    from search._search import search

    by_name = {c.name: c for c in cases()}

    @cache
    def run(name: str) -> Any:
        c = by_name[name]
        return search(c.model, c.cluster, c.global_batch, precision=c.precision, framework=c.framework, top_k=10,
                      allow_untested=c.allow_untested)

    return run

"""Property-based API test: schemathesis generates requests from the app's own OpenAPI 3.1
schema (valid and invalid bodies, queries and paths) and checks every answer: no 5xx, status
codes the schema documents, bodies and content types that match the schema. Bounded examples
per operation, on SQLite, with a write token (so the write paths run too), and a done search in
the database so its read paths answer 200 as well as 404."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from service._tokens import create_token
from service._worker import run_worker
from service.api import Settings, create_app
from service.store import Database

MAX_EXAMPLES = 25
_state: dict[str, Any] = {}


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database for the module, on each backend (SQLite and PostgreSQL differ in integer
    ranges and JSON paths, so both are fuzzed)."""
    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("schemathesis") / "autopar.db"
        yield f"sqlite:///{path}"
    else:
        yield request.getfixturevalue("module_pg_url")


@pytest.fixture(scope="module")
def api_app(database_url: str) -> Iterator[FastAPI]:
    settings = Settings(database_url=database_url, workers=0, max_trials=50, max_timeout_s=5.0, max_top=5)
    db = Database(settings.database_url)
    db.upgrade()
    app = create_app(settings, db=db, migrate=False)
    _state["token"] = create_token(db, "schemathesis", ["write"])[1]
    from fastapi.testclient import TestClient

    with TestClient(app) as client:  # one done search, so /configs and /launch have something to serve
        r = client.post("/v1/searches", headers={"Authorization": f"Bearer {_state['token']}"},
                        json={"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb"},
                              "training": {"global_batch": 64}, "top": 3})
        assert r.status_code == 202, r.text
        _state["search_id"] = r.json()["id"]
    run_worker(settings, once=True)
    yield app
    db.dispose()


@pytest.fixture(scope="module")
def api_schema(api_app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", api_app)


def _operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.slow
def test_every_answer_matches_the_schema_and_none_is_a_server_error(api_schema: Any) -> None:
    """Each operation gets MAX_EXAMPLES valid and MAX_EXAMPLES invalid generated cases
    (schemathesis's own pytest plugin does not run under this pytest, so hypothesis drives the
    operation strategies directly)."""
    operations = _operations(api_schema)
    assert len(operations) >= 15, [op.label for op in operations]
    headers = {"Authorization": f"Bearer {_state['token']}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    failures: list[str] = []
    runs = [(op, mode, None) for op in operations for mode in GenerationMode]
    # and the done search's own id, so its configurations and launch files answer 200 too
    runs += [(op, GenerationMode.POSITIVE, {"search_id": _state["search_id"]}) for op in operations
             if "{search_id}" in op.path]
    for op, mode, path_parameters in runs:

        @given(case=op.as_strategy(generation_mode=mode, path_parameters=path_parameters))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=checks)

        try:
            run()
        except Unsatisfiable:
            if mode is GenerationMode.POSITIVE:  # only a parameterless operation has no invalid input
                raise
        except Exception as exc:
            failures.append(f"{op.label} ({mode.value} data): {exc}")
    assert not failures, "\n\n".join(failures)

"""The FastAPI application: ``create_app(settings)``.

Routes live in ``_routes_*.py`` (one module per resource, each an ``APIRouter``); request bodies and
their conversion to search specs in ``service.request``; the data access in ``service.store``. The schema is
migrated here unless the caller says otherwise (``autopar serve`` migrates once before it
starts the API and the workers).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from service._settings import Settings
from service._version import autopar_version
from service.api import _errors, _request_id
from service.api._body_limit import BodyLimit
from service.api._state import AppState
from service.store import Database


def _document_app_wide_answers(app: FastAPI) -> None:
    """Add the answers no single route produces to the OpenAPI document: 413 from the body limit on
    every operation with a body, 503 from the database error handler on every /v1 operation."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = build()
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
        for path, operations in spec.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                if "requestBody" in operation:
                    responses.setdefault("413", {"description": "The body is larger than AUTOPAR_MAX_BODY_BYTES.",
                                                 "content": error})
                if path.startswith("/v1/"):
                    responses.setdefault("503", {"description": "The database is unavailable; retry after the "
                                                                "Retry-After seconds (GET /readyz says when).",
                                                 "content": error})
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


OPERATION_IDS = {"predict_one": "predict", "get_configs": "listConfigs", "get_launch": "getLaunchFiles",
                 "accuracy": "getRunsAccuracy", "healthz": "getHealth", "readyz": "getReadiness",
                 "metrics": "getMetrics"}
"""Where a route function's name does not read as an SDK method; the rest are camel-cased."""


def operation_id(route: APIRoute) -> str:
    """The OpenAPI operationId of a route as an SDK would name the method: ``createSearch``,
    ``listConfigs``, ... (FastAPI's default is ``create_search_v1_searches_post``)."""
    if route.name in OPERATION_IDS:
        return OPERATION_IDS[route.name]
    head, *rest = route.name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def create_app(settings: Settings | None = None, *, db: Database | None = None, migrate: bool = True) -> FastAPI:
    """The service for ``settings`` (default: from the environment)."""
    from service.api import (
        _routes_calibrations,
        _routes_docs,
        _routes_health,
        _routes_predict,
        _routes_presets,
        _routes_profiles,
        _routes_runs,
        _routes_searches,
        _routes_ui,
        _routes_whatif,
    )

    settings = settings or Settings.from_env()
    db = db or Database(settings.database_url)
    if migrate:
        db.upgrade()
    app = FastAPI(
        title="autopar",
        generate_unique_id_function=operation_id,
        docs_url=None,  # /docs and /redoc are served offline by _routes_docs (vendored assets, no CDN)
        redoc_url=None,
        version=autopar_version(),
        summary="Auto-parallel configuration search for large-model training.",
        description="Store hardware profiles, run searches over data/tensor/pipeline/context parallel degrees, "
                    "ZeRO stages, offload and recompute, and fetch ranked configurations with their launch files.",
    )
    app.state.autopar = AppState(settings=settings, db=db)
    _errors.install(app)
    for module in (_routes_health, _routes_presets, _routes_profiles, _routes_predict, _routes_searches,
                   _routes_runs, _routes_calibrations, _routes_docs, _routes_ui, _routes_whatif):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       timeout_s=settings.body_timeout_s)
    _document_app_wide_answers(app)
    _routes_health.install(app)  # request metrics, outside the body limit: the 413s above count too
    _request_id.install(app)  # outermost: every log line of a request has its id, a 500 included
    return app

"""Error answers. Every 4xx body is ``{"detail": [{"field", "msg", "fix", "loc", "type"}]}``:
``field`` names what to change (a dotted request path, a header or a spec field) and ``fix``
says how, so a CI log line is enough to correct the call."""

from __future__ import annotations

import logging
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from search import AutoparError, SpecError, UnknownPresetError
from search._cluster_spec import BOUNDS as HARDWARE_BOUNDS
from service.store import (
    Conflict,
    DatabaseDamaged,
    InvalidValue,
    NotFound,
    SchemaMismatch,
    StorageUnavailable,
    StoreError,
)

# pydantic error type -> how to fix it
_FIXES = {
    "missing": "add this field",
    "extra_forbidden": "remove this field (see the schema at /openapi.json)",
    "int_type": "give an integer", "int_parsing": "give an integer", "int_from_float": "give a whole number",
    "float_type": "give a number", "float_parsing": "give a number", "bool_type": "give true or false",
    "bool_parsing": "give true or false", "string_type": "give a string",
    "literal_error": "use one of the listed values",
    "greater_than": "give a larger value", "greater_than_equal": "give a larger value",
    "less_than": "give a smaller value", "less_than_equal": "give a smaller value",
    "string_too_long": "give a shorter string", "string_too_short": "give a longer string",
    "model_type": "give a JSON object", "dict_type": "give a JSON object", "list_type": "give a JSON array",
    "model_attributes_type": "give a JSON object",
    "json_invalid": "send valid JSON with Content-Type: application/json",
    "finite_number": "give a finite number", "union_tag_invalid": "use one of the listed values",
}


TOO_LARGE_FLAG = "autopar.body_too_large"
"""Set in the ASGI scope by _body_limit when a streamed body passes the limit."""


TIMEOUT_FLAG = "autopar.body_timeout"
"""Set in the ASGI scope by _body_limit when a body did not arrive within the body timeout."""


def too_slow_detail(timeout_s: float) -> dict[str, Any]:
    return detail("body", f"the request body did not arrive completely within {timeout_s:g} s",
                  "send the whole body at once (AUTOPAR_BODY_TIMEOUT_S sets the limit)", "timeout")


def too_large_detail(max_bytes: int) -> dict[str, Any]:
    return detail("body", f"the request body is larger than {max_bytes} bytes",
                  "send a smaller body (AUTOPAR_MAX_BODY_BYTES sets the limit)", "too_large")


class ApiError(Exception):
    """An error with its HTTP status, the field to change and the fix."""

    def __init__(self, status: int, field: str, msg: str, fix: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{field}: {msg}; {fix}")
        self.status, self.field, self.msg, self.fix, self.headers = status, field, msg, fix, headers


def detail(field: str, msg: str, fix: str, kind: str, loc: list[Any] | None = None) -> dict[str, Any]:
    return {"field": field, "msg": msg, "fix": fix, "type": kind, "loc": loc if loc is not None else [field]}


def error_body(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"detail": items}


def _validation(_: Request, exc: Exception) -> JSONResponse:
    exc = cast(RequestValidationError, exc)
    items = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        path = [p for p in loc if p not in ("body", "query", "path", "header")]
        kind = str(err.get("type", "value_error"))
        # json_invalid's loc is ["body", <character offset>]: the field is the body itself.
        field = "body" if kind == "json_invalid" else ".".join(path) or (loc[0] if loc else "body")
        fix = _FIXES.get(kind, "see the schema at /openapi.json")
        ctx = err.get("ctx") or {}
        if kind == "literal_error" and "expected" in ctx:
            fix = f"use one of: {ctx['expected']}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and path[-1:] and (
                path[-1] in HARDWARE_BOUNDS):
            low, high = HARDWARE_BOUNDS[path[-1]]
            fix = f"give a value in [{low:g}, {high:g}], the physical range of {path[-1]} (SI units)"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and ctx:
            fix = f"give a value {err.get('msg', '').split('should be ', 1)[-1]}"
        items.append(detail(field, str(err.get("msg", "invalid")), fix, kind, loc))
    return JSONResponse(error_body(items), status_code=422)


def _spec(_: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, SpecError):
        body = detail(exc.field, exc.problem, exc.fix, "spec_error")
    elif isinstance(exc, UnknownPresetError):
        body = detail(exc.kind, f"unknown {exc.kind} preset {exc.name!r}",
                      f"choose one of: {', '.join(exc.known)} (GET /v1/presets/{exc.kind}s)", "unknown_preset")
    else:
        body = detail("request", str(exc), "see the schema at /openapi.json", "autopar_error")
    return JSONResponse(error_body([body]), status_code=422)


def _api(_: Request, exc: Exception) -> JSONResponse:
    exc = cast(ApiError, exc)
    kind = {401: "unauthorized", 403: "forbidden", 404: "not_found", 409: "conflict", 413: "too_large",
            429: "busy"}.get(
        exc.status, "error")
    return JSONResponse(error_body([detail(exc.field, exc.msg, exc.fix, kind)]), status_code=exc.status,
                        headers=exc.headers)


def _http(request: Request, exc: Exception) -> JSONResponse:
    exc = cast(StarletteHTTPException, exc)
    if exc.status_code == 404:
        item = detail("path", "no such endpoint", "see /docs for the endpoints", "not_found")
    elif exc.status_code == 400 and request.scope.get(TIMEOUT_FLAG):
        item = too_slow_detail(request.app.state.autopar.settings.body_timeout_s)
        return JSONResponse(error_body([item]), status_code=408, headers={"Connection": "close"})
    elif exc.status_code == 400 and request.scope.get(TOO_LARGE_FLAG):
        item = too_large_detail(request.app.state.autopar.settings.max_body_bytes)
        return JSONResponse(error_body([item]), status_code=413)
    elif exc.status_code == 400:  # FastAPI: "There was an error parsing the body"
        item = detail("body", f"the body could not be read ({exc.detail})",
                      "send a JSON body with Content-Type: application/json", "json_invalid")
        return JSONResponse(error_body([item]), status_code=422)
    elif exc.status_code == 405:
        item = detail("method", "method not allowed on this endpoint", "see /docs for the methods", "method")
    else:
        item = detail("request", str(exc.detail), "see /docs", "http")
    return JSONResponse(error_body([item]), status_code=exc.status_code, headers=getattr(exc, "headers", None))


_log = logging.getLogger("autopar.api")


_STORE_STATUS: dict[type[StoreError], tuple[int, str]] = {
    StorageUnavailable: (503, "unavailable"), DatabaseDamaged: (503, "damaged"), SchemaMismatch: (503, "not_ready"),
    Conflict: (409, "conflict"), InvalidValue: (422, "invalid_value"), NotFound: (404, "not_found")}
"""Each kind of store error and its status: the one place they are mapped."""


def _store(_: Request, exc: Exception) -> JSONResponse:
    """A store error: its status, the field and the fix. What the database said (it may name hosts,
    paths or SQL) goes to the log only, and nothing was half-written (the session rolled back)."""
    exc = cast(StoreError, exc)
    if exc.__cause__ is not None:  # translated from a database exception
        _log.error("database error: %s", exc.__cause__, exc_info=exc.__cause__)
    status, kind = next((v for k, v in _STORE_STATUS.items() if isinstance(exc, k)), (503, "unavailable"))
    headers = {"Retry-After": "5"} if isinstance(exc, StorageUnavailable) else None
    field = exc.field if isinstance(exc, Conflict | InvalidValue | NotFound) else "database"
    problem, fix = exc.problem, exc.fix
    if isinstance(exc, DatabaseDamaged):  # the file's path is the operator's business, not the client's
        problem, fix = ("the service's database is damaged; retrying will not help",
                        "tell the service's operator: GET /readyz and the service log say what to restore")
    elif isinstance(exc, StorageUnavailable):  # the URL and the driver's words are the operator's too
        problem = f"the service cannot use its database right now ({exc.cause or type(exc).__name__})"
        fix = "retry later; GET /readyz says when the database and its schema are usable again"
    return JSONResponse(error_body([detail(field, problem, fix, kind)]), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(AutoparError, _spec)
    app.add_exception_handler(ApiError, _api)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(StoreError, _store)

"""Routes: health and metrics, for load balancers, orchestrators and Prometheus.

``/healthz`` says the process answers (no database: a slow database must not get a healthy
process restarted); ``/readyz`` says the database answers, reads as sound (SQLite's quick_check,
at most once a minute) and its schema is the one this code expects, so traffic waits while a
migration runs and a damaged file is reported with what to do; ``/metrics`` is the Prometheus text format
(service.api._metrics says what it counts).
None of them needs a token: probes and scrapers carry none, and they reveal no stored data.
"""

from __future__ import annotations

import logging
import time
from functools import lru_cache
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from service.api._errors import detail, error_body
from service.api._metrics import EXTRAS_KEY, Metrics, install_metrics
from service.api._state import AppState, State
from service.store import URL_ENV, DatabaseDamaged, StoreError, head_revision

router = APIRouter(tags=["health"])
_log = logging.getLogger("autopar.api")

_NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"description": "The database does not answer, or its schema is not the one this autopar expects; "
                         "`detail` says what to do."}}


class Health(BaseModel):
    status: Literal["ok"]
    version: str


class Ready(BaseModel):
    status: Literal["ready"]
    database: str
    """sqlite or postgresql (never the URL: these endpoints answer without a token)."""
    revision: str


@lru_cache(maxsize=1)
def _head() -> str:
    """The newest migration, read once: the migration scripts do not change while running."""
    return head_revision()


def install(app: FastAPI) -> None:
    """Add the request metrics (``create_app`` calls it after its other middleware: outermost)."""
    install_metrics(app)


@router.get("/healthz", response_model=Health, summary="The process is alive (does not touch the database).")
async def healthz(request: Request) -> dict[str, str]:
    return {"status": "ok", "version": request.app.version}


@router.get("/readyz", response_model=Ready, responses=_NOT_READY,
            summary="The database answers and its schema is at the newest migration.")
def readyz(state: State) -> Any:
    try:
        _integrity(state)
        current = state.db.current_revision()
    except DatabaseDamaged as exc:  # the file's path goes to the log only (this answers without a token)
        _log.error("readyz: %s", exc)
        return _not_ready("the SQLite database is damaged or is not a database; retrying will not help",
                          "stop autopar, restore the file the service log names from a backup (with its -wal "
                          "file), or move it away to start empty; `sqlite3 FILE .recover` may save its rows")
    except StoreError as exc:  # the reason (hosts, ports) goes to the log, not to unauthenticated callers
        _log.warning("readyz: the database %s does not answer: %s", state.db.safe_url, exc.__cause__ or exc)
        return _not_ready(f"the {state.db.dialect} database does not answer ({exc.cause or type(exc).__name__})",
                          "check AUTOPAR_DATABASE_URL and that the database server is running (the service log "
                          "says why)")
    head = _head()
    if current != head:
        return _not_ready(f"the database schema is at revision {current or 'none'}, this autopar expects {head}",
                          "run `autopar db upgrade` (or restart `autopar serve`, which migrates at start)")
    return {"status": "ready", "database": state.db.dialect, "revision": current}


INTEGRITY_EVERY_S = 60.0
"""/readyz checks the SQLite file's integrity at most this often (it reads the whole file)."""
_INTEGRITY_KEY = "health.integrity_checked_at"


def _integrity(state: AppState) -> None:
    """DatabaseDamaged while the database reads as damaged; a sound answer is trusted for a minute."""
    now = time.monotonic()
    checked = state.extras.get(_INTEGRITY_KEY)
    if checked is not None and now - checked < INTEGRITY_EVERY_S:
        return
    state.db.check_integrity()
    state.extras[_INTEGRITY_KEY] = now


def _not_ready(msg: str, fix: str) -> JSONResponse:
    return JSONResponse(error_body([detail(URL_ENV, msg, fix, "not_ready")]), status_code=503)


@router.get("/metrics", summary="Prometheus metrics: requests, latency, searches by status, finished searches' "
                                "run time and queue wait by outcome, build.",
            response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(state: State) -> Response:
    registry: Metrics = state.extras[EXTRAS_KEY]
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)

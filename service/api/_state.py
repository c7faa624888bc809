"""What every request handler shares: settings, database, token cache, metrics, caches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service._settings import Settings
from service.api._auth import ANONYMOUS, Principal, TokenCache, authorize, bearer_token
from service.store import Database


@dataclass
class AppState:
    settings: Settings
    db: Database
    tokens: TokenCache = field(default_factory=TokenCache)
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-app objects other modules attach (metrics registry, response caches)."""


POOL_THREADS = {"read": 16, "write": 1}
"""Threads per pool. Writes (POST /v1/searches resolves and enumerates the request: tens of ms of
CPU each) get few threads, so a burst of them waits as coroutines, not as threads contending for
the GIL; reads get their own threads, so a GET never queues behind the writes (a 200-POST burst
held one GET for 10.4 s when both shared FastAPI's default pool of 40)."""
T = TypeVar("T")


async def in_pool(state: AppState, pool: Literal["read", "write"], fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in the app's read or write thread pool."""
    key = f"pool.{pool}"
    limiter = state.extras.get(key)
    if limiter is None:  # made on the event loop, on first use (anyio needs a running loop)
        limiter = state.extras.setdefault(key, anyio.CapacityLimiter(POOL_THREADS[pool]))
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)


async def app_state(request: Request) -> AppState:
    """Async on purpose: FastAPI runs sync dependencies in its thread pool, a hop per request."""
    state: AppState = request.app.state.autopar
    return state


State = Annotated[AppState, Depends(app_state)]
_bearer = HTTPBearer(auto_error=False, description="A token from `autopar token create`.")


def _credentials_text(creds: HTTPAuthorizationCredentials | None) -> str | None:
    return f"{creds.scheme} {creds.credentials}" if creds is not None else None


async def _authenticate(state: AppState, creds: HTTPAuthorizationCredentials | None, scope: str) -> Principal:
    """On the event loop when the answer needs no database (open reads, a cached token), else the
    token lookup runs in the thread pool: the hot GET paths then cost no thread hop."""
    token = bearer_token(_credentials_text(creds), scope, state.settings.open_reads)
    if token is None:
        return ANONYMOUS
    hit = state.tokens.cached(token)
    principal = hit[0] if hit is not None else await run_in_threadpool(state.tokens.lookup, state.db, token)
    return authorize(principal, scope)


async def require_read(state: State,
                       creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    return await _authenticate(state, creds, "read")


async def require_write(state: State,
                        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    return await _authenticate(state, creds, "write")


Reader = Annotated[Principal, Depends(require_read)]
Writer = Annotated[Principal, Depends(require_write)]

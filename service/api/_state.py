"""What every request handler shares: settings, database, token cache, metrics, caches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api._auth import Principal, TokenCache, authenticate
from service.api._settings import Settings
from service.store import Database


@dataclass
class AppState:
    settings: Settings
    db: Database
    tokens: TokenCache = field(default_factory=TokenCache)
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-app objects other modules attach (metrics registry, response caches)."""


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.autopar
    return state


State = Annotated[AppState, Depends(app_state)]
_bearer = HTTPBearer(auto_error=False, description="A token from `autopar token create`.")


def _credentials_text(creds: HTTPAuthorizationCredentials | None) -> str | None:
    return f"{creds.scheme} {creds.credentials}" if creds is not None else None


def require_read(state: State, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    return authenticate(state.db, state.tokens, _credentials_text(creds), "read", state.settings.open_reads)


def require_write(state: State, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
    return authenticate(state.db, state.tokens, _credentials_text(creds), "write", state.settings.open_reads)


Reader = Annotated[Principal, Depends(require_read)]
Writer = Annotated[Principal, Depends(require_write)]

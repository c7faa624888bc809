"""Who is calling: bearer tokens checked against the stored ones (``service._tokens`` makes them),
each with scopes read / write / admin and one tenant.

A token is sent as ``Authorization: Bearer <token>``. Reads may be left open
(``AUTOPAR_OPEN_READS``, default on); writes always need the write scope. Lookups are cached for a
few seconds so a hot GET costs no database round trip; a revoked token stops working within that
time.

Tenants: what a token creates records its tenant; it cancels only searches its tenant wants (a
search shared by identical requests of several tenants is cancelled when none wants it any more).
The admin scope (which includes write and read) cancels any search outright.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from service._tokens import SCOPES, check_tenant, create_token, hash_token, revoke_token
from service.api._errors import ApiError
from service.store import DEFAULT_TENANT, Database, use_token

__all__ = ["ANONYMOUS", "SCOPES", "Principal", "TokenCache", "authorize", "bearer_token", "check_tenant",
           "create_token", "hash_token", "revoke_token"]
_CACHE_S = 5.0


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token id with its scopes and tenant, or anonymous (id '', tenant '')."""

    token_id: str
    scopes: frozenset[str]
    tenant: str = DEFAULT_TENANT

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes


ANONYMOUS = Principal("", frozenset(), "")


class TokenCache:
    """token hash -> (Principal or None, expiry), so hot paths skip the database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[Principal | None, float]] = {}

    def _fresh(self, digest: str) -> tuple[Principal | None] | None:
        with self._lock:
            hit = self._entries.get(digest)
        return (hit[0],) if hit is not None and hit[1] > time.monotonic() else None

    def cached(self, token: str) -> tuple[Principal | None] | None:
        """``(principal or None,)`` when a fresh answer for ``token`` is cached, else None (ask the database)."""
        return self._fresh(hash_token(token))

    def lookup(self, db: Database, token: str) -> Principal | None:
        digest = hash_token(token)
        hit = self._fresh(digest)
        if hit is not None:
            return hit[0]
        now = time.monotonic()
        with db.session() as s:
            row = use_token(s, token_hash=digest)
            principal = None
            if row is not None and row.revoked_at is None:
                principal = Principal(row.id, frozenset(row.scopes.split()), row.tenant)
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (principal, now + _CACHE_S)
        return principal


_WWW = {"WWW-Authenticate": "Bearer"}


def bearer_token(authorization: str | None, scope: str, open_reads: bool) -> str | None:
    """The token of an ``Authorization`` header; None for an anonymous read while reads are open;
    ApiError 401 saying what to send otherwise."""
    if not authorization:
        if scope == "read" and open_reads:
            return None
        raise ApiError(401, "Authorization", f"this endpoint needs a token with the {scope} scope",
                       f"create one with `autopar token create --scope {scope}` and send "
                       "'Authorization: Bearer <token>'", _WWW)
    kind, _, token = authorization.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise ApiError(401, "Authorization", "not a bearer token", "send 'Authorization: Bearer <token>'", _WWW)
    return token.strip()


def authorize(principal: Principal | None, scope: str) -> Principal:
    """``principal`` when it exists and has ``scope``, else ApiError 401/403 saying what to do."""
    if principal is None:
        raise ApiError(401, "Authorization", "unknown or revoked token",
                       "create a new one with `autopar token create`", _WWW)
    if scope not in principal.scopes:
        raise ApiError(403, "Authorization", f"the token's scopes ({' '.join(sorted(principal.scopes))}) "
                       f"do not include {scope}", f"create a token with `autopar token create --scope {scope}`")
    return principal


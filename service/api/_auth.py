"""API tokens: created by ``autopar token create``, stored as SHA-256 only, scopes read / write /
admin, each token belonging to one tenant (``--tenant``).

A token is ``ap_`` + 32 random bytes (urlsafe base64): high-entropy, so one SHA-256 per check
is enough (no slow password hash). It is sent as ``Authorization: Bearer <token>``. Reads may
be left open (``AUTOPAR_OPEN_READS``, default on); writes always need the write scope. Lookups
are cached for a few seconds so a hot GET costs no database round trip; a revoked token stops
working within that time.

Tenants: what a token creates records its tenant; it cancels only searches its tenant wants (a
search shared by identical requests of several tenants is cancelled when none wants it any more).
The admin scope (which includes write and read) cancels any search outright.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select, update

from search import SpecError
from service.api._errors import ApiError
from service.store import DEFAULT_TENANT, ApiToken, Database, utc_now

SCOPES = ("read", "write", "admin")
_IMPLIED = {"admin": ("write", "read"), "write": ("read",)}
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A tenant's name: letters, digits, '.', '_' and '-', at most 100 characters."""
PREFIX = "ap_"
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


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_tenant(tenant: str) -> str:
    if TENANT.fullmatch(tenant) is None:
        raise SpecError("--tenant", f"{tenant!r} is not a tenant name",
                        "use letters, digits, '.', '_' and '-' (at most 100 characters), e.g. team-nlp")
    return tenant


def create_token(db: Database, name: str, scopes: list[str], tenant: str = DEFAULT_TENANT) -> tuple[str, str]:
    """Store a new token of ``tenant``; returns (token id, the token itself, shown once)."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise SpecError("--scope", f"{', '.join(unknown) or 'nothing'} is not a scope", "use read, write or admin")
    check_tenant(tenant)
    granted = set(scopes)
    for scope in scopes:  # an admin writes; a writer can read what it wrote
        granted.update(_IMPLIED.get(scope, ()))
    token = PREFIX + secrets.token_urlsafe(32)
    token_id = secrets.token_hex(8)
    with db.session() as s:
        s.add(ApiToken(id=token_id, name=name, token_hash=hash_token(token), scopes=" ".join(sorted(granted)),
                       tenant=tenant))
    return token_id, token


def revoke_token(db: Database, token_id: str) -> bool:
    with db.session() as s:
        res = s.execute(update(ApiToken).where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
                        .values(revoked_at=utc_now()).execution_options(synchronize_session=False))
        return res.rowcount == 1  # type: ignore[attr-defined]


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
            row = s.execute(select(ApiToken).where(ApiToken.token_hash == digest)).scalar_one_or_none()
            principal = None
            if row is not None and row.revoked_at is None:
                principal = Principal(row.id, frozenset(row.scopes.split()), row.tenant)
                row.last_used_at = utc_now()
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


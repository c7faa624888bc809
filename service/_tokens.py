"""API tokens: made by ``autopar token create``, stored as SHA-256 only, scopes read / write /
admin, each token belonging to one tenant (``--tenant``).

A token is ``ap_`` + 32 random bytes (urlsafe base64): high-entropy, so one SHA-256 per check
is enough (no slow password hash). Shared by the CLI (create, list, revoke) and the API (which
checks them: ``service.api._auth``).
"""

from __future__ import annotations

import hashlib
import re
import secrets

from search import SpecError
from service.store import DEFAULT_TENANT, ApiToken, Database, add_token, revoke_stored_token

SCOPES = ("read", "write", "admin")
_IMPLIED = {"admin": ("write", "read"), "write": ("read",)}
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A tenant's name: letters, digits, '.', '_' and '-', at most 100 characters."""
PREFIX = "ap_"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_scopes(scopes: list[str]) -> list[str]:
    """``scopes`` when each is a scope, else a SpecError naming ``--scope``."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise SpecError("--scope", f"{', '.join(unknown) or 'nothing'} is not a scope", "use read, write or admin")
    return scopes


def check_tenant(tenant: str) -> str:
    if TENANT.fullmatch(tenant) is None:
        raise SpecError("--tenant", f"{tenant!r} is not a tenant name",
                        "use letters, digits, '.', '_' and '-' (at most 100 characters), e.g. team-nlp")
    return tenant


def granted_scopes(scopes: list[str]) -> list[str]:
    """The scopes a token asked for ``scopes`` holds, sorted: an admin writes; a writer can read what it wrote."""
    granted = set(check_scopes(scopes))
    for scope in scopes:
        granted.update(_IMPLIED.get(scope, ()))
    return sorted(granted)


def create_token(db: Database, name: str, scopes: list[str], tenant: str = DEFAULT_TENANT) -> tuple[str, str]:
    """Store a new token of ``tenant``; returns (token id, the token itself, shown once)."""
    granted = granted_scopes(scopes)
    check_tenant(tenant)
    token = PREFIX + secrets.token_urlsafe(32)
    token_id = secrets.token_hex(8)
    with db.session() as s:
        add_token(s, row=ApiToken(id=token_id, name=name, token_hash=hash_token(token), scopes=" ".join(granted),
                                  tenant=tenant))
    return token_id, token


def revoke_token(db: Database, token_id: str) -> bool:
    """Revoke a token; False when there is none or it was revoked already."""
    with db.session() as s:
        return revoke_stored_token(s, token_id=token_id)

"""``Idempotency-Key`` on POST: a retried request gets the first answer instead of a second resource.

A client that lost the answer to a POST (timeout, dropped connection) sends it again with the same
key and gets the stored status code, body and Location back, marked ``Idempotent-Replayed: true``.
The same key with a different body (or endpoint) is a client bug, answered 422 naming the header.
Keys belong to the token that sent them, so two callers' keys never collide. The key row is
written in the transaction that writes the resource: either both exist or neither; when two
requests with one key race, the primary key lets one commit and the other replays its answer.

Only successful answers are stored: a request refused with 4xx wrote nothing, so retrying it after
fixing the body with the same key is allowed. Keys expire after 24 hours (``KEY_TTL``, as Stripe's
do): a retry comes within minutes, and an old key may then be used for a new request.

Use from a POST route::

    def create(body: XIn, state: State, idem: Idempotency) -> Response:
        return idem.respond(state.db, body, lambda session: Answer(201, {...}, "/v1/x/1"))
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from service import store
from service.api._errors import ApiError
from service.api._state import Writer
from service.store import Conflict, Database, IdempotencyKey, Session, utc_now

HEADER = "Idempotency-Key"
KEY_TTL = timedelta(hours=24)
REPLAYED = "Idempotent-Replayed"
_HEADER_DOC = ("Any unique string (a UUID) per logical request. Sending the same request again with the "
               "same key returns the first answer (status, body, Location) with `Idempotent-Replayed: true` "
               "instead of creating a second resource; the same key with a different body is a 422. Keys expire "
               "after 24 hours.")

KeyHeader = Annotated[str | None, Header(alias=HEADER, min_length=1, max_length=200, description=_HEADER_DOC)]


@dataclass(frozen=True, slots=True)
class Answer:
    """A POST's successful answer: what is sent, and stored under the key."""

    status_code: int
    body: dict[str, Any]
    location: str | None = None

    def response(self, replayed: bool = False) -> JSONResponse:
        headers = {"Location": self.location} if self.location else {}
        if replayed:
            headers[REPLAYED] = "true"
        return JSONResponse(self.body, status_code=self.status_code, headers=headers)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def body_hash(payload: BaseModel | dict[str, Any]) -> str:
    """SHA-256 of the validated body as canonical JSON: the same request spelled with other
    whitespace, key order or explicit defaults is the same request."""
    data = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    """The key (None without the header), the caller (token id and tenant) and the endpoint of one POST."""

    key: str | None
    principal: str
    method: str
    path: str
    tenant: str = ""
    """The caller's tenant: what the POST creates records it."""

    def replay(self, db: Database, digest: str) -> Response | None:
        """The stored answer under this key, None when there is none; 422 when the key was used for
        another request."""
        if self.key is None:
            return None
        with db.session() as s:
            row = store.get_idempotency_key(s, key=self.key, principal=self.principal)
            if row is not None and _aware(row.created_at) < utc_now() - KEY_TTL:
                store.forget_idempotency_key(s, row=row)  # expired: the key is free again
                row = None
            if row is None:
                return None
            same = (row.body_hash, row.method, row.path) == (digest, self.method, self.path)
            answer = Answer(row.status_code, dict(row.response), row.location)
        if not same:
            raise ApiError(422, HEADER, f"this key was already used for a different request "
                           f"({row.method} {row.path} with another body)",
                           "send a new Idempotency-Key for a new request; reuse a key only to retry the same one")
        return answer.response(replayed=True)

    def remember(self, s: Session, digest: str, answer: Answer) -> None:
        """Store ``answer`` under the key in session ``s`` (the resource's transaction)."""
        if self.key is None:
            return
        # this caller's expired keys go with each new one, so the table does not grow without bound
        store.forget_idempotency_keys(s, principal=self.principal, before=utc_now() - KEY_TTL)
        store.add_idempotency_key(s, row=IdempotencyKey(
            key=self.key, principal=self.principal, method=self.method, path=self.path, body_hash=digest,
            status_code=answer.status_code, response=answer.body, location=answer.location, created_at=utc_now()))

    def respond(self, db: Database, payload: BaseModel | dict[str, Any],
                create: Callable[[Session], Answer]) -> Response:
        """Replay the stored answer, or run ``create`` and store its answer in the same transaction.

        ``create`` writes the resource into the session it is given and returns the answer; it may
        raise (SpecError, ApiError) to refuse the request, and then nothing is written."""
        digest = body_hash(payload)
        replayed = self.replay(db, digest)
        if replayed is not None:
            return replayed
        try:
            with db.session() as s:
                answer = create(s)
                response = answer.response()  # rendered before the commit: an answer that cannot be sent stores nothing
                self.remember(s, digest, answer)
        except Conflict:
            # Another request with this key committed first: answer as it did. Any other integrity
            # error is not ours to explain.
            replayed = self.replay(db, digest)
            if replayed is None:
                raise
            return replayed
        return response


def idempotent_request(request: Request, principal: Writer, key: KeyHeader = None) -> IdempotentRequest:
    return IdempotentRequest(key, principal.token_id, request.method, request.url.path, principal.tenant)


Idempotency = Annotated[IdempotentRequest, Depends(idempotent_request)]
"""The dependency of a POST route that honours ``Idempotency-Key`` (it also requires the write scope)."""

"""Request ids: each HTTP request runs with an id, taken from its ``X-Request-ID`` header or made for
it, echoed in the response's ``X-Request-ID`` and set in :data:`service._logging.REQUEST_ID` while the
request is handled, so every log line it causes carries the id (a proxy's id joins its logs to ours).

An incoming id is kept only when it is short and plain (at most 128 of ``A-Z a-z 0-9 - _ . : /``):
anything else could forge log lines or fill them, and is replaced by a new id.
"""

from __future__ import annotations

import contextlib
import re
import uuid

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service._logging import EXCEPTION_ATTR, REQUEST_ID

HEADER = "X-Request-ID"
_HEADER_KEY = HEADER.lower().encode("latin-1")
_PLAIN = re.compile(r"[A-Za-z0-9._:/-]{1,128}")


def request_id(scope: Scope) -> str:
    """The request's own id when it is plain, else a new one (32 hex digits)."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])  # ASGI: (lower-case name, value) byte pairs
    for key, value in headers:
        if key == _HEADER_KEY:
            text = value.decode("latin-1")
            if _PLAIN.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class RequestId:
    """Pure ASGI middleware: the request's id in the context while it runs and in the answer's headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        token = REQUEST_ID.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # the server logs it after this context ends: the record finds the id here
            with contextlib.suppress(AttributeError):
                setattr(exc, EXCEPTION_ATTR, rid)
            raise
        finally:
            REQUEST_ID.reset(token)


def install(app: FastAPI) -> None:
    """Make :class:`RequestId` the outermost layer, outside Starlette's ServerErrorMiddleware, so that
    the 500 of an unhandled error carries the id too (``add_middleware`` would place it inside)."""
    build = app.build_middleware_stack

    def build_with_id() -> ASGIApp:
        return RequestId(build())

    app.build_middleware_stack = build_with_id  # type: ignore[method-assign]  # Starlette has no hook outside it

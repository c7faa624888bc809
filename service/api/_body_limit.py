"""Request limits checked before routing (pure ASGI, no buffering): bodies above
``Settings.max_body_bytes`` get 413, a body that has not arrived completely within
``Settings.body_timeout_s`` of the request gets 408 and its connection back (a client that never
finishes its body held a connection for over 90 s), and a NUL character in the path or query string
gets 422 on every backend alike (PostgreSQL refuses NUL in text even in a WHERE clause; SQLite would
not)."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio

from service.api._errors import TIMEOUT_FLAG, TOO_LARGE_FLAG, detail, error_body, too_large_detail, too_slow_detail

Scope = dict[str, Any]


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


_NUL_BODY = json.dumps(error_body([detail(
    "request", "the path or query string contains a NUL character (%00)",
    "remove NUL and other control characters from the URL", "invalid_value")])).encode()


def _has_nul(scope: Scope) -> bool:
    query: bytes = scope.get("query_string", b"")
    return "\x00" in scope.get("path", "") or b"%00" in query.lower() or b"\x00" in query

class BodyLimit:
    def __init__(self, app: Any, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def _refuse(self, send: Any, status: int = 413) -> None:
        item = too_large_detail(self.max_bytes) if status == 413 else too_slow_detail(self.timeout_s)
        body = json.dumps(error_body([item])).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _has_nul(scope):
            await send({"type": "http.response.start", "status": 422,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(_NUL_BODY)).encode())]})
            await send({"type": "http.response.body", "body": _NUL_BODY})
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(send)
                    return
        seen = 0
        started = False
        body_done = False
        deadline = time.monotonic() + self.timeout_s

        async def limited_receive() -> Any:
            nonlocal seen, body_done
            if body_done:  # after the body: waiting for a disconnect is not bounded
                return await receive()
            try:
                with anyio.fail_after(max(0.0, deadline - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                scope[TIMEOUT_FLAG] = True  # FastAPI's body parsing makes this a 400; the handler answers 408
                raise BodyTimeout from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI's body parsing turns any receive error into a 400; this flag lets the
                    # error handler answer 413 instead (chunked bodies have no Content-Length to check).
                    scope[TOO_LARGE_FLAG] = True
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)
        except BodyTimeout:
            if not started:
                await self._refuse(send, 408)

"""One log format for ``autopar serve`` and ``autopar worker``: text for people, JSON lines for machines.

Every record is written by this module's formatters: uvicorn's access lines on stdout (where
uvicorn writes them), everything else on stderr, uvicorn's error log included (``autopar serve``
runs uvicorn with ``log_config=None`` and routes its loggers here). A request's id (the
``X-Request-ID`` it came with, or one made for it: see :mod:`service.api._request_id`) lives in a
context variable for the request's duration; a filter copies it onto each record, so every line a
request causes carries it, whichever thread or logger writes it (anyio copies the context into the
thread pools).

Text::

    2026-12-01T03:40:00.123Z INFO [4711] autopar.api [9f2c...]: message

JSON (one object per line; ``request_id`` only inside a request, ``exception`` only with a traceback;
uvicorn's access lines add ``client``, ``method``, ``path`` and ``status``)::

    {"time": "2026-12-01T03:40:00.123Z", "level": "info", "logger": "uvicorn.access", "pid": 4711,
     "message": "...", "request_id": "9f2c...", "method": "GET", "path": "/healthz", "status": 200}
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

REQUEST_ID: ContextVar[str | None] = ContextVar("autopar_request_id", default=None)
"""The id of the request being handled in this context (None outside requests)."""
EXCEPTION_ATTR = "autopar_request_id"
"""The attribute an unhandled error carries its request's id in (the server logs it after the
request's context ended, so the id cannot come from :data:`REQUEST_ID` then)."""
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def _timestamp(record: logging.LogRecord) -> str:
    """UTC, ISO 8601 with milliseconds."""
    seconds = int(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(record.msecs):03d}Z"


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` to the current request's id, or None outside a request."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        if rid is None and record.exc_info and record.exc_info[1] is not None:
            # an unhandled error, logged by the server after the request's context ended
            rid = getattr(record.exc_info[1], EXCEPTION_ATTR, None)
        record.request_id = rid
        return True


class TextFormatter(logging.Formatter):
    """``time LEVEL [pid] logger [request id]: message``, then any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", None)
        line = (f"{_timestamp(record)} {record.levelname} [{record.process}] {record.name}"
                f"{f' [{rid}]' if rid else ''}: {record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (tracebacks are a string field, newlines escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": _timestamp(record), "level": record.levelname.lower(), "logger": record.name,
                               "pid": record.process, "message": record.getMessage()}
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _http_version, status = record.args  # uvicorn's access-log arguments
            out.update(client=client, method=method, path=path, status=status)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _SysStreamHandler(logging.StreamHandler[IO[str]]):
    """Writes to whatever ``sys.stdout`` or ``sys.stderr`` is when a record comes (a test's capture
    replaces them, then closes its stream)."""

    def __init__(self, name: str) -> None:
        self._sys_attr = name
        super().__init__(getattr(sys, name))

    @property
    def stream(self) -> IO[str]:
        stream: IO[str] = getattr(sys, self._sys_attr)
        return stream

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


FORMATTERS: dict[str, type[logging.Formatter]] = {"text": TextFormatter, "json": JsonFormatter}


QUIET_LOGGERS = ("alembic",)
"""Loggers that say routine things at info (Alembic's "Context impl SQLiteImpl." per migration check):
shown from debug on."""


ACCESS_LOGGER = "uvicorn.access"


def _handler(log_format: str, stream: IO[str] | None, default: str) -> logging.Handler:
    handler = logging.StreamHandler(stream) if stream is not None else _SysStreamHandler(default)
    handler.setFormatter(FORMATTERS[log_format]())
    handler.addFilter(RequestIdFilter())
    return handler


@contextmanager
def service_logging(level: str = "info", log_format: str = "text", stream: IO[str] | None = None) -> Iterator[None]:
    """While the block runs, every record at ``level`` or above is written in ``log_format`` (text or
    json): uvicorn's access lines on stdout (where uvicorn puts them), every other line, uvicorn's
    error log included, on stderr; both to ``stream`` when one is given.

    What it changes (the root's handler and level, uvicorn's and the quiet loggers') is put back when
    the block ends, so a command run in process (tests, an embedding program) leaves logging as it was."""
    handler, access_handler = _handler(log_format, stream, "stderr"), _handler(log_format, stream, "stdout")
    root = logging.getLogger()
    saved_root = root.level
    touched = [logging.getLogger(name) for name in (*UVICORN_LOGGERS, *QUIET_LOGGERS)]
    saved = [(logger, list(logger.handlers), logger.propagate, logger.level) for logger in touched]
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [access_handler] if name == ACCESS_LOGGER else []
        logger.propagate = name != ACCESS_LOGGER
        logger.setLevel(logging.NOTSET)  # the root's level applies
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if level.lower() == "debug" else logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_root)
        for logger, handlers, propagate, logger_level in saved:
            logger.handlers[:] = handlers
            logger.propagate, logger.level = propagate, logger_level

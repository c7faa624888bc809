"""POST /v1/runs:import's request: the logs of a text/plain or multipart body and the defaults beside
them (each log becomes its run by :func:`service.runs.log_run`, as ``autopar runs import``'s do)."""

from __future__ import annotations

import email.policy
import json
from email.parser import BytesParser
from typing import Any

from fastapi import Request

from search import SpecError
from service.api._errors import detail
from service.logs import AUTO, FORMATS, LogParseError

LOG_FORMATS: tuple[str, ...] = (AUTO, *FORMATS)
MAX_LOGS = 100
"""Logs one import takes (each is predicted; the body limit bounds their bytes)."""
_DEFAULTS = ("cluster", "nodes", "model", "format", "profile_id", "notes")
"""What a log does not print, given as query parameters or as form fields beside the files."""


def spec_object(text: str, field: str) -> dict[str, Any]:
    """A model or cluster default: a preset name, or a JSON object as POST /v1/runs takes it."""
    if not text.lstrip().startswith("{"):
        return {"preset": text}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(field, f"is not valid JSON ({exc.msg} at column {exc.colno})",
                        f"give a preset name or a JSON object as the {field} of POST /v1/runs") from None
    if not isinstance(value, dict):
        raise SpecError(field, "is not a JSON object", f"give a preset name or the {field} object of POST /v1/runs")
    return value


def file_error(name: str, err: SpecError) -> dict[str, Any]:
    """A 422 detail item naming the file (and line) of ``err``."""
    if isinstance(err, LogParseError):
        return detail(err.field, err.problem, err.fix, "invalid_log", [name, err.line] if err.line else [name])
    return detail(f"{name}: {err.field}", err.problem, err.fix, "invalid_value", [name, err.field])


class Refused(Exception):
    """Files whose runs the cost model refused (422 detail items): the import stores nothing."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        super().__init__(items)
        self.items = items


def multipart(content_type: str, body: bytes) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """The files and the form fields of a multipart/form-data body (read with the standard library's
    MIME parser: RFC 7578 parts are MIME parts)."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise SpecError("body", "is not a multipart/form-data body with a boundary",
                        "send the logs as multipart/form-data files, or one log as text/plain")
    files: list[tuple[str, bytes]] = []
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        field = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename == "" and not data:  # a form's file input left empty
            continue
        if filename is not None:
            files.append((filename, data))
        elif field in _DEFAULTS:
            fields[str(field)] = data.decode("utf-8", errors="replace")
        else:
            raise SpecError(f"form.{field}", "is neither a file nor a known field",
                            f"send logs as files and only the fields {', '.join(_DEFAULTS)}")
    return files, fields


async def logs_of(request: Request, name: str) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    content_type = request.headers.get("content-type", "")
    body = await request.body()
    if content_type.startswith("multipart/form-data"):
        files, fields = multipart(content_type, body)
    elif content_type.startswith("text/plain") or not content_type:
        files, fields = [(name, body)], {}
    else:
        raise SpecError("Content-Type", f"{content_type.split(';')[0]!r} is not a log upload",
                        "send one log as text/plain, or logs as multipart/form-data files")
    if not files:
        raise SpecError("body", "holds no log file", "send one log as text/plain, or logs as multipart/form-data files")
    if len(files) > MAX_LOGS:
        raise SpecError("body", f"holds {len(files)} logs, more than {MAX_LOGS}", "import them in several requests")
    return files, fields


IMPORT_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    "text/plain": {"schema": {"type": "string", "description": "One training log (its file name: `name`)."}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "files": {"type": "array", "items": {"type": "string", "format": "binary"},
                  "description": "Training logs, one run each."},
        **{field: {"type": "string", "description": "As the query parameter of that name."}
           for field in _DEFAULTS}}, "required": ["files"]}}}}}

"""Routes: the web explorer (issue 7), a page to browse searches before committing GPUs to one.

``/`` and ``/searches/{id}`` answer the same ``index.html`` (the page reads the id from its URL,
so a search can be shared by link); ``/static/explorer/{name}`` its scripts and style. Plain
HTML, ES modules and CSS from ``static/explorer/``, no build step and nothing fetched from
another origin (the Content-Security-Policy says so to the browser too).

Only the files found in that folder when this module is imported are served, looked up by
name in a dict: a path that tries to leave the folder (``..``, ``%2F``, a backslash) is not a
key and answers 404. Everything is sent ``no-cache`` (revalidated with its ETag on every load),
so an edited file shows on the next reload without hashed names.
"""

from __future__ import annotations

import os
import re
from pathlib import Path as FilePath

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from service.api._errors import ApiError

router = APIRouter(include_in_schema=False)

STATIC_DIR = FilePath(__file__).parent / "static" / "explorer"
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}
_ASSETS: dict[str, tuple[FilePath, str]] = {
    p.name: (p, _TYPES[p.suffix]) for p in sorted(STATIC_DIR.glob("*")) if p.is_file() and p.suffix in _TYPES
} if STATIC_DIR.is_dir() else {}
"""name -> (file, content type): the only files this router serves."""

_SEARCH_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""What a search id can look like (the API's ids are 32 hex digits; the path allows at most 32)."""
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'")
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
_PAGE_HEADERS = {**_HEADERS, "Content-Security-Policy": _CSP, "Referrer-Policy": "no-referrer"}


def _not_found(name: str) -> ApiError:
    return ApiError(404, "path", f"no explorer file {name!r}", "open / for the explorer")


def _file(request: Request, name: str, headers: dict[str, str]) -> Response:
    """The asset ``name``, or 304 when the browser's copy (If-None-Match) is still current."""
    asset = _ASSETS.get(name)
    if asset is None:
        raise _not_found(name)
    path, media_type = asset
    response = FileResponse(path, media_type=media_type, headers=headers, stat_result=os.stat(path))
    etag = response.headers["etag"]
    if etag in (t.strip() for t in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers={"ETag": etag, **headers})
    return response


@router.api_route("/", methods=["GET", "HEAD"])
def explorer(request: Request) -> Response:
    """The explorer: a search form, its ranked configurations, charts, comparisons and launch files."""
    return _file(request, "index.html", _PAGE_HEADERS)


@router.api_route("/searches/{search_id}", methods=["GET", "HEAD"])
def explorer_search(request: Request, search_id: str) -> Response:
    """The same page; its script loads the search named in the URL (GET /v1/searches/{id})."""
    if not _SEARCH_ID.fullmatch(search_id):
        raise _not_found(f"searches/{search_id}")
    return _file(request, "index.html", _PAGE_HEADERS)


@router.api_route("/static/explorer/{name}", methods=["GET", "HEAD"])
def explorer_asset(request: Request, name: str) -> Response:
    return _file(request, name, _HEADERS)

"""Routes: the API docs, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), working offline.

Training clusters are often air-gapped, so the pages load nothing from a CDN: their scripts,
styles and icon are vendored under ``static/vendor/`` (pinned npm packages, re-created by
``scripts/vendor_web_assets.sh``; see its README.md) and served here under versioned paths with
a year-long, immutable cache. Each page also carries a Content-Security-Policy that lets the
browser load only same-origin resources: ReDoc 2.5.4's sidebar footer always asks for
``https://cdn.redoc.ly/redoc/logo-mini.svg`` (no option turns it off), and the policy blocks that
request before it leaves the browser (the image then hides itself).

Swagger UI's "Authorize" takes a token from ``autopar token create`` for the ``HTTPBearer``
scheme and keeps it across reloads (``persistAuthorization``: the browser's localStorage).
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

from service.api._errors import ApiError

router = APIRouter(include_in_schema=False)

VENDOR_DIR = Path(__file__).parent / "static" / "vendor"
VENDOR_URL = "/static/vendor"
SWAGGER_UI = "swagger-ui-dist-5.35.0"
REDOC = "redoc-2.5.4"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"

_MEDIA_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
    "": "text/plain; charset=utf-8",  # LICENSE, NOTICE
}
_IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"}

# Swagger UI: persistAuthorization keeps the bearer token in localStorage; validatorUrl None turns off
# the badge that would send the spec to validator.swagger.io.
SWAGGER_UI_PARAMETERS = {"persistAuthorization": True, "validatorUrl": None}


@cache
def vendored_files() -> dict[str, Path]:
    """``"<package dir>/<file>"`` -> the file, for every vendored file: the only paths served."""
    return {f"{p.parent.name}/{p.name}": p for p in VENDOR_DIR.glob("*/*")
            if p.is_file() and p.suffix in _MEDIA_TYPES}


def _prefix(request: Request) -> str:
    """The root path the app is mounted under (behind a proxy), for absolute URLs in the pages."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _inline_script_hashes(html: str) -> list[str]:
    """CSP sources for the page's own inline scripts (``<script>`` without attributes)."""
    return [f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
            for s in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)]


def _same_origin_only(page: HTMLResponse) -> HTMLResponse:
    """Add a Content-Security-Policy: same-origin loads only; inline scripts only those of the page
    itself (by hash); inline styles allowed (ReDoc's styled-components write <style> elements);
    ReDoc's search runs in a worker made from a blob: URL."""
    script_src = " ".join(["'self'", *_inline_script_hashes(bytes(page.body).decode())])
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src {script_src}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
    page.headers["Cache-Control"] = "no-cache"
    return page


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    root, assets = _prefix(request), f"{_prefix(request)}{VENDOR_URL}/{SWAGGER_UI}"
    return _same_origin_only(get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{assets}/swagger-ui-bundle.js",
        swagger_css_url=f"{assets}/swagger-ui.css",
        swagger_favicon_url=f"{assets}/favicon-32x32.png",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    ))


@router.get(OAUTH2_REDIRECT_URL)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return _same_origin_only(get_swagger_ui_oauth2_redirect_html())


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root = _prefix(request)
    return _same_origin_only(get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{VENDOR_URL}/{REDOC}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{VENDOR_URL}/{SWAGGER_UI}/favicon-32x32.png",
        with_google_fonts=False,
    ))


@router.api_route(VENDOR_URL + "/{name:path}", methods=["GET", "HEAD"])
def vendored(name: str) -> FileResponse:
    """A vendored file, looked up by exact name among the files shipped (no path is joined, so
    nothing outside ``static/vendor/`` can be reached)."""
    path = vendored_files().get(name)
    if path is None:
        raise ApiError(404, "path", f"no vendored file {name!r}", "the docs pages link the files they need: see /docs")
    return FileResponse(path, media_type=_MEDIA_TYPES[path.suffix], headers=_IMMUTABLE)

"""The explorer's routes in process: the page at ``/`` and ``/searches/{id}``, its assets with
their content types, nothing referenced outside the service, and no way out of the folder."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import Settings, create_app
from service.api._routes_ui import STATIC_DIR

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("ui") / "autopar.db"
    with TestClient(create_app(Settings(database_url=f"sqlite:///{db}", workers=0))) as c:
        yield c


def explorer_files() -> list[Path]:
    return sorted(p for p in STATIC_DIR.rglob("*") if p.is_file())


def test_the_page_answers_at_root_and_at_every_search_url(client: TestClient) -> None:
    index = (STATIC_DIR / "index.html").read_bytes()
    for path in ("/", "/searches/5b29f81544684138b6aea12eb2efb790", "/searches/any-id_1"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.content == index
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.headers["cache-control"] == "no-cache"  # revalidated on every load: edits show at once
        assert "default-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    assert client.head("/").status_code == 200
    assert b'<script type="module" src="/static/explorer/explorer.js">' in index


def test_the_page_is_not_part_of_the_api_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if not p.startswith(("/v1/", "/healthz", "/readyz", "/metrics"))]


def referenced_assets() -> set[str]:
    """Asset names the page links and the scripts import, followed from index.html."""
    index = (STATIC_DIR / "index.html").read_text()
    todo = re.findall(r'(?:src|href)="/static/explorer/([^"]+)"', index)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.endswith(".js"):
            todo += re.findall(r"""(?:from|import)\s*\(?\s*['"]\./([^'"]+)['"]""", (STATIC_DIR / name).read_text())
    return seen


def test_every_asset_loads_with_its_content_type(client: TestClient) -> None:
    names = referenced_assets()
    assert {"explorer.js", "explorer.css"} <= names
    assert names | {"index.html"} == {p.name for p in explorer_files()}, "a file nothing loads, or a missing one"
    for name in sorted(names):
        r = client.get(f"/static/explorer/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"] == TYPES[Path(name).suffix], name
        assert r.headers["cache-control"] == "no-cache"
        assert r.content == (STATIC_DIR / name).read_bytes()
        assert client.get(f"/static/explorer/{name}", headers={"If-None-Match": r.headers["etag"]}).status_code == 304


# An absolute URL, or a protocol-relative one where a browser would fetch it (attribute, CSS
# url(), import, fetch); a JavaScript comment "// ..." is neither.
ABSOLUTE = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)
PROTOCOL_RELATIVE = re.compile(
    r"""(?:(?:src|href|action|srcset|poster|data)\s*=\s*["']?|url\(\s*["']?|(?:from|import|fetch)\s*\(?\s*["'])//""",
    re.IGNORECASE)


@pytest.mark.parametrize("path", explorer_files(), ids=lambda p: p.name)
def test_explorer_files_fetch_nothing_from_outside(path: Path) -> None:
    text = path.read_text()
    assert not ABSOLUTE.findall(text), f"{path.name} names an absolute URL"
    assert not PROTOCOL_RELATIVE.findall(text), f"{path.name} names a protocol-relative URL"
    assert "@import" not in text


@pytest.mark.parametrize("path", [
    "/static/explorer/../_routes_ui.py",
    "/static/explorer/..%2F_routes_ui.py",
    "/static/explorer/%2e%2e%2f_routes_ui.py",
    "/static/explorer/..%5C_routes_ui.py",
    "/static/explorer/%2E%2E/%2E%2E/_app.py",
    "/static/explorer/....//_app.py",
    "/static/explorer/.",
    "/static/explorer/",
    "/static/explorer/index.html%00.js",
    "/static/explorer/missing.js",
    "/static/explorer//etc/passwd",
    "/static/explorer/%2Fetc%2Fpasswd",
    "/searches/..%2F..%2Fservice%2Fapi%2F_app.py",
    "/searches/a.b",
    "/searches/" + "a" * 33,
    "/searches/",
])
def test_paths_out_of_the_folder_are_not_found(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.headers["content-type"] == "application/json"
    if "%00" in path:  # refused before routing, on every backend alike
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "invalid_value", path
        return
    assert r.status_code == 404, path
    assert r.json()["detail"][0]["type"] == "not_found"

"""/docs (Swagger UI) and /redoc (ReDoc) work offline: every asset comes from the service itself.

In-process: the pages reference only same-origin URLs, each is served with its content type and
a long cache, the licenses sit beside the vendored files, and nothing outside the vendor folder
can be fetched. In a real browser (Debian's Chromium driven by Playwright, against a uvicorn
server in a thread): every request to another host is aborted and recorded, and the pages must
render with none; Swagger UI's "Authorize" sends the bearer token and keeps it across a reload.
The browser tests skip when Playwright or Chromium is missing, except under CI=true, where they fail.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from service._tokens import create_token
from service.api import Settings, create_app
from service.api._routes_docs import REDOC, SWAGGER_UI, VENDOR_DIR, vendored_files
from service.store import Database

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Route

CHROMIUM = Path("/usr/lib/chromium/chromium")
ROOT = Path(__file__).resolve().parents[3]
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"  # ReDoc 2.5.4's sidebar footer, always rendered
CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


def _browser_missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed: pip install -e '.[test]'"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM}: apt-get install chromium"
    return None


BROWSER_MISSING = _browser_missing()
needs_browser = pytest.mark.skipif(BROWSER_MISSING is not None and os.environ.get("CI") != "true",
                                   reason=BROWSER_MISSING or "")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('docs') / 'autopar.db'}")
    db.upgrade()
    yield db
    db.dispose()


@pytest.fixture(scope="module")
def client(db: Database) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db.url, workers=0), db=db, migrate=False)) as c:
        yield c


class _References(HTMLParser):
    """Every URL a page refers to: src/href/*-url attributes, url(...) in styles, Swagger UI's ``url:``."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if v is not None and (k in ("src", "href") or k.endswith("-url"))]

    def handle_data(self, data: str) -> None:
        self.urls += re.findall(r"""url\(\s*['"]?([^'")\s]+)""", data)
        self.urls += re.findall(r"""\burl:\s*['"]([^'"]+)['"]""", data)


def references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_pages_reference_only_same_origin_urls_and_each_is_served(client: TestClient, page: str) -> None:
    resp = client.get(page)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    urls = references(resp.text)
    assert "/openapi.json" in urls
    assert any(u.endswith(".js") for u in urls) and any(u.endswith(".png") for u in urls)
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} refers to {url}, not same-origin"
    assert not re.search(r"https?://|//[a-z]", resp.text), f"{page} names another host"
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert asset.headers["content-type"].startswith(CONTENT_TYPES[Path(url).suffix]), url
        if url.startswith("/static/vendor/"):
            assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
            assert asset.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("page", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_pages_let_the_browser_load_same_origin_resources_only(client: TestClient, page: str) -> None:
    csp = client.get(page).headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["img-src"] == "'self' data:"  # blocks ReDoc's logo from cdn.redoc.ly
    assert not re.search(r"https?:|\*", csp)
    assert "'unsafe-inline'" not in directives["script-src"] and "'unsafe-eval'" not in directives["script-src"]


def test_swagger_ui_keeps_the_bearer_token_and_has_no_validator_badge(client: TestClient) -> None:
    html = client.get("/docs").text
    assert '"persistAuthorization": true' in html
    assert '"validatorUrl": null' in html
    assert "oauth2RedirectUrl: window.location.origin + '/docs/oauth2-redirect'" in html
    assert client.get("/docs/oauth2-redirect").status_code == 200
    assert client.get("/openapi.json").json()["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_licenses_are_shipped_beside_the_vendored_assets(client: TestClient) -> None:
    for package in (SWAGGER_UI, REDOC):
        resp = client.get(f"/static/vendor/{package}/LICENSE")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        assert "Permission is hereby granted" in resp.text or "Apache License" in resp.text
    assert "SmartBear" in client.get(f"/static/vendor/{SWAGGER_UI}/NOTICE").text
    for bundle in (f"{SWAGGER_UI}/swagger-ui-bundle.js", f"{REDOC}/redoc.standalone.js"):
        first_line = vendored_files()[bundle].read_text(encoding="utf-8").split("\n", 1)[0]
        notice = re.fullmatch(r"/\*! For license information please see (\S+) \*/", first_line)
        assert notice, f"{bundle} no longer names its third-party licenses file"
        third_party = client.get(f"/static/vendor/{Path(bundle).parent}/{notice[1]}")
        assert third_party.status_code == 200 and "MIT" in third_party.text


def test_the_vendor_folder_is_what_the_script_writes() -> None:
    script = (ROOT / "scripts" / "vendor_web_assets.sh").read_text(encoding="utf-8")
    pins = dict(re.findall(r"^(SWAGGER_VERSION|REDOC_VERSION)=(\S+)$", script, re.M))
    assert (f"swagger-ui-dist-{pins['SWAGGER_VERSION']}", f"redoc-{pins['REDOC_VERSION']}") == (SWAGGER_UI, REDOC)
    assert set(vendored_files()) == {
        f"{SWAGGER_UI}/{n}" for n in ("swagger-ui-bundle.js", "swagger-ui-bundle.js.LICENSE.txt", "swagger-ui.css",
                                      "favicon-32x32.png", "LICENSE", "NOTICE")
    } | {f"{REDOC}/{n}" for n in ("redoc.standalone.js", "redoc.standalone.js.LICENSE.txt", "LICENSE")}
    readme = (VENDOR_DIR / "README.md").read_text(encoding="utf-8")
    for package in (SWAGGER_UI, REDOC):
        assert f"`{package}/`" in readme
    assert readme.count("`sha512-") == 2


@pytest.mark.parametrize("name", [
    "../_routes_docs.py", "%2e%2e/_routes_docs.py", f"{SWAGGER_UI}/../../_app.py",
    f"{SWAGGER_UI}/%2e%2e/%2e%2e/_app.py", "README.md", f"{SWAGGER_UI}", f"{SWAGGER_UI}/",
    f"{SWAGGER_UI}/swagger-ui.js.map", "/etc/passwd",
])
def test_only_the_vendored_files_are_served(client: TestClient, name: str) -> None:
    resp = client.get(f"/static/vendor/{name}")
    assert resp.status_code == 404
    assert resp.json()["detail"][0]["type"] == "not_found"


# ---------------------------------------------------------------------------------------- browser


@dataclass
class Offline:
    """A browser page whose requests to any other host than the server's are aborted and recorded."""

    page: Page
    base: str
    off_host: list[str] = field(default_factory=list)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # "METHOD path" -> request headers
    errors: list[str] = field(default_factory=list)

    def csp_violations(self) -> list[str]:
        return list(self.page.evaluate("window.__cspViolations"))


@pytest.fixture(scope="module")
def server(db: Database) -> Iterator[str]:
    import uvicorn

    app = create_app(Settings(database_url=db.url, workers=0), db=db, migrate=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if BROWSER_MISSING:
        pytest.fail(f"{BROWSER_MISSING} (CI=true: the browser tests must run)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def offline(browser: Browser, server: str) -> Iterator[Offline]:
    context = browser.new_context()
    context.set_default_timeout(15_000)
    page = context.new_page()
    off = Offline(page, server)

    def guard(route: Route) -> None:
        request = route.request
        if request.url.startswith(server + "/"):
            off.headers[f"{request.method} {request.url.removeprefix(server)}"] = request.headers
            route.continue_()
        else:
            off.off_host.append(request.url)
            route.abort()

    context.route("**/*", guard)
    context.add_init_script("window.__cspViolations = [];"
                            "document.addEventListener('securitypolicyviolation', e => window.__cspViolations.push("
                            "e.violatedDirective + ' ' + e.blockedURI));")
    page.on("pageerror", lambda exc: off.errors.append(str(exc)))
    try:
        yield off
    finally:
        context.close()


@needs_browser
def test_swagger_ui_renders_offline_and_authorizes_with_a_token(offline: Offline, db: Database) -> None:
    page, token = offline.page, create_token(db, "docs-browser", ["write"])[1]
    page.goto(offline.base + "/docs")
    op = page.locator("#operations-searches-createSearch")
    op.locator(".opblock-summary-path[data-path='/v1/searches']").wait_for()
    assert op.locator(".opblock-summary-method").inner_text() == "POST"

    authorize = page.locator(".auth-wrapper .btn.authorize")
    assert "unlocked" in (authorize.get_attribute("class") or "")
    authorize.click()
    modal = page.locator(".modal-ux")
    modal.get_by_text("A token from autopar token create").wait_for()
    modal.locator("input").fill(token)
    modal.locator("button.authorize").click()
    modal.get_by_text("Authorized").wait_for()
    modal.locator("button.btn-done").click()

    op.locator(".opblock-summary").click()  # expand: the request body and its "Try it out"
    op.locator(".opblock-body").get_by_text("Request body").wait_for()
    op.locator("button.try-out__btn").click()
    op.locator("button.execute").click()
    status = op.locator(".live-responses-table .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() != "401"  # the example body may not validate, but it got past auth
    assert offline.headers["POST /v1/searches"]["authorization"] == f"Bearer {token}"

    page.reload()  # persistAuthorization: the token survives (localStorage, no server round trip)
    op.locator(".opblock-summary-path").wait_for()
    assert "locked" in (authorize.get_attribute("class") or "").replace("unlocked", "")

    assert offline.off_host == []
    assert offline.csp_violations() == []
    assert offline.errors == []


@needs_browser
def test_redoc_renders_offline(offline: Offline) -> None:
    page = offline.page
    page.goto(offline.base + "/redoc")
    page.locator("h2", has_text="Queue a search").wait_for()
    titles = page.locator("h2").all_inner_texts()
    assert "Predict one configuration's iteration time, throughput and memory" in titles
    search = page.locator("[role=search]")
    search.locator("input").fill("cancel")  # ReDoc's search index runs in a worker made from a blob: URL
    search.locator("[data-role='search:results'] li", has_text="Cancel a queued or running search.").wait_for()

    assert offline.off_host == []
    # The one thing ReDoc asks another host for, its logo, is refused by the page's policy before it leaves.
    assert offline.csp_violations() == [f"img-src {REDOC_LOGO}"]
    assert offline.errors == []

"""The explorer in a real browser (Playwright + Debian's Chromium) against a real ``autopar serve``
on SQLite: fill the form by its labels, run a search, sort and select from the keyboard, read the
charts, compare two configurations, copy a launch command, open the shared URL in a fresh
context. Every request to a host other than 127.0.0.1 is aborted, recorded and fails the test.

Needs the ``playwright`` package and ``/usr/lib/chromium/chromium`` (``apt-get install chromium``;
``AUTOPAR_CHROMIUM`` names another binary). Without them the tests skip here and fail under CI.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path(os.environ.get("AUTOPAR_CHROMIUM", "/usr/lib/chromium/chromium"))
SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_WORKERS", "AUTOPAR_LEASE_S", "AUTOPAR_POLL_S", "AUTOPAR_OPEN_READS",
                "AUTOPAR_MAX_BODY_BYTES", "AUTOPAR_MAX_TOP")
TOP = 10
TIMEOUT_MS = 15_000


def unavailable(reason: str) -> None:
    """Skip, except under CI, where a missing browser is a broken machine: fail."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: the explorer's browser tests must run)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


@dataclass
class Server:
    base: str
    token: str
    proc: subprocess.Popen[str]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``autopar serve --workers 1`` on a fresh SQLite data directory and a free port, with a write token."""
    home = tmp_path_factory.mktemp("explorer")
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    env["AUTOPAR_DATA_DIR"] = str(home / "data")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "service.cli"]
    log = home / "serve.log"  # a file, not a pipe: nobody reads the log while the tests run
    with log.open("w") as out:
        proc = subprocess.Popen([*cli, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"autopar serve exited with {proc.returncode}: {log.read_text()}")
            try:
                if get_json(f"{base}/readyz")["status"] == "ready":
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError("autopar serve was not ready within 30 s")
            time.sleep(0.1)
        made = subprocess.run([*cli, "token", "create", "--scope", "write", "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True, check=True, timeout=60)
        yield Server(base, json.loads(made.stdout)["token"], proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")
    if not CHROMIUM.is_file():
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set AUTOPAR_CHROMIUM)")
    with sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        except Error as err:
            unavailable(f"Chromium at {CHROMIUM} does not start: {err}")
        yield chromium
        chromium.close()


@dataclass
class Watch:
    """What a browser context did that it must not: leave 127.0.0.1, or throw."""

    outside: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def check(self, *, allow_console: tuple[str, ...] = ()) -> None:
        assert self.outside == [], f"requests left 127.0.0.1: {self.outside}"
        assert self.page_errors == [], f"uncaught errors in the page: {self.page_errors}"
        unexpected = [e for e in self.console_errors if not any(a in e for a in allow_console)]
        assert unexpected == [], f"console errors: {unexpected}"


def new_page(browser: Any, server: Server, watch: Watch, **context_args: Any) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, **context_args)
    context.set_default_timeout(TIMEOUT_MS)

    def guard(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname != "127.0.0.1":
            watch.outside.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("pageerror", lambda err: watch.page_errors.append(str(err)))
    page.on("console", lambda msg: watch.console_errors.append(msg.text) if msg.type == "error" else None)
    return context, page


def open_explorer(browser: Any, server: Server, watch: Watch, loaded: str = "gpt-1.7b",
                  **context_args: Any) -> tuple[Any, Any]:
    """A page of the explorer once its presets are loaded (the ``loaded`` model among them), with the
    write token filled in."""
    from playwright.sync_api import expect

    context, page = new_page(browser, server, watch, **context_args)
    page.goto(f"{server.base}/")
    expect(page.get_by_label("Model preset")).to_contain_text(loaded)
    page.get_by_label("API token").fill(server.token)
    return context, page


def ask(page: Any, model: str, cluster: str, nodes: int, global_batch: int) -> None:
    """Fill in the question: model and cluster presets, node count and global batch."""
    page.get_by_label("Model preset").select_option(model)
    page.get_by_label("Cluster preset").select_option(cluster)
    page.get_by_label("Nodes", exact=True).fill(str(nodes))
    page.get_by_label("Global batch").fill(str(global_batch))


def column(page: Any, key: str) -> list[str]:
    return [str(t) for t in page.locator(f"#configs-table tbody [data-key='{key}']").all_inner_texts()]


def ranks(page: Any) -> list[int]:
    found = page.locator("#configs-table tbody tr").evaluate_all("rows => rows.map(r => r.dataset.rank)")
    return [int(r) for r in found]


def test_search_compare_and_launch_in_the_explorer(browser: Any, server: Server) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    watch = Watch()
    context, page = open_explorer(browser, server, watch, permissions=["clipboard-read", "clipboard-write"])
    ask(page, "gpt-1.7b", "dgx-a100-80gb", 1, 64)
    page.get_by_label("Precision").select_option("bf16")
    page.get_by_label("Framework", exact=True).select_option("any")
    page.get_by_label("Objective").select_option("throughput")
    page.get_by_label("Top k").fill(str(TOP))
    page.get_by_role("button", name="Start search").click()

    page.wait_for_url("**/searches/*")
    search_id = page.url.rsplit("/", 1)[1]
    rows = page.locator("#configs-table tbody tr")
    expect(rows).to_have_count(TOP, timeout=60_000)  # the worker's first search imports the search stack
    expect(page.locator("#status-badge")).to_have_text("done")
    expect(page.locator("#progress")).to_have_js_property("value", 1)
    expect(page.locator("#status-text")).to_contain_text(f"Done: {TOP} configurations")
    configs = {c["rank"]: c for c in get_json(f"{server.base}/v1/searches/{search_id}/configs")["configs"]}
    assert ranks(page) == list(range(1, TOP + 1))
    assert column(page, "rank")[0] == "1"

    # Sort by peak memory from the keyboard: ascending, then descending (ties keep rank order).
    by_memory = sorted(configs.values(), key=lambda c: (c["prediction"]["peak_memory_bytes_per_gpu"], c["rank"]))
    header = page.get_by_role("button", name="Peak memory per GPU")
    header.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#configs-table thead th[data-key='peak_memory']")).to_have_attribute("aria-sort", "ascending")
    assert ranks(page) == [c["rank"] for c in by_memory]
    assert ranks(page) != list(range(1, TOP + 1)), "these configurations differ in memory"
    page.keyboard.press("Enter")
    expect(page.locator("#configs-table thead th[data-key='peak_memory']")).to_have_attribute("aria-sort", "descending")
    by_memory_desc = sorted(configs.values(), key=lambda c: (-c["prediction"]["peak_memory_bytes_per_gpu"], c["rank"]))
    assert ranks(page) == [c["rank"] for c in by_memory_desc]
    expect(page.locator("#configs-table thead th[data-key='rank']")).to_have_attribute("aria-sort", "none")
    page.get_by_role("button", name="Rank").press("Enter")
    assert ranks(page) == list(range(1, TOP + 1))

    # Rows: the first is focusable; ↓ ↓ Enter selects the third.
    page.locator("#configs-table tbody tr[tabindex='0']").focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(rows.nth(2)).to_have_attribute("aria-selected", "true")
    expect(page.locator("#configs-table tbody tr[aria-selected='true']")).to_have_count(1)
    expect(page.locator("#detail-title")).to_have_text("Selected: #3")

    # The scatter: one point per row, the HBM line; the selected configuration's two stacked bars.
    expect(page.locator("#scatter .point")).to_have_count(TOP)
    expect(page.locator("#scatter [data-role='hbm-line']")).to_have_count(1)
    expect(page.locator("#scatter .point.selected")).to_have_attribute("data-rank", "3")
    third = configs[3]["prediction"]
    time_parts = [k for k, v in third["time_breakdown_s"].items() if v > 0]
    memory_parts = [k for k, v in third["memory_breakdown_bytes"].items() if v > 0]
    bars = page.locator("#detail-body figure.stack")
    expect(bars).to_have_count(2)
    assert bars.nth(0).locator(".seg").evaluate_all("s => s.map(e => e.dataset.key)") == time_parts
    assert bars.nth(1).locator(".seg").evaluate_all("s => s.map(e => e.dataset.key)") == memory_parts
    expect(bars.nth(1).locator("[data-role='capacity']")).to_have_count(1)
    # A point selects from the keyboard too.
    page.locator("#scatter .point[data-rank='1']").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-title")).to_have_text("Selected: #1")
    expect(rows.nth(0)).to_have_attribute("aria-selected", "true")

    # Side by side: A = #1, B = #4; two columns, differences marked.
    page.get_by_label("Configuration B").select_option("4")
    columns = page.locator("#compare-body .compare-col")
    expect(columns).to_have_count(2)
    expect(columns.nth(0)).to_contain_text("#1")
    expect(columns.nth(1)).to_contain_text("#4")
    expect(page.locator("#compare-body thead th")).to_have_count(3)
    assert page.locator("#compare-body tr.differs").count() >= 1
    expect(columns.nth(0).locator("figure.stack")).to_have_count(2)
    expect(columns.nth(1).locator("figure.stack")).to_have_count(2)

    # Launch files of #1: copy the torchrun command, download its script.
    launch_body = page.locator("#launch-body")
    page.get_by_label("Launch target").select_option("torchrun")
    expect(launch_body).not_to_have_attribute("aria-busy", "true")
    copy = page.locator("#copy-command")
    expect(copy).to_have_text("Copy command")
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("torchrun "), copied
    with page.expect_download() as download:
        page.get_by_role("link", name="Download launch_torchrun.sh").click()
    assert download.value.suggested_filename == "launch_torchrun.sh"
    launch = get_json(f"{server.base}/v1/searches/{search_id}/configs/1/launch?target=torchrun")
    assert Path(download.value.path()).read_text() == launch["files"]["launch_torchrun.sh"]
    assert copied == launch["command"]
    # A target that cannot run it says why (the emitter's 422): no ds_config for Megatron or FSDP,
    # no Megatron arguments for DeepSpeed.
    framework = configs[1]["framework"]
    refuses = "deepspeed" if framework in ("megatron", "fsdp") else "megatron"
    page.get_by_label("Launch target").select_option(refuses)
    # The launch-target registry refuses a framework the target does not serve, naming the ones that do.
    alert = page.locator("#launch-body [role='alert']")
    expect(alert).to_contain_text(f"target '{refuses}' does not run {framework} configurations")
    expect(alert).to_contain_text("use target")
    expect(page.locator("#copy-command")).to_have_count(0)

    ARTIFACTS.mkdir(exist_ok=True)
    page.get_by_label("Launch target").select_option("torchrun")
    expect(launch_body).not_to_have_attribute("aria-busy", "true")
    expect(copy).to_be_visible()
    # As tall as the page, so the form (which scrolls on its own) shows whole too.
    page.set_viewport_size({"width": 1440, "height": page.evaluate("document.documentElement.scrollHeight")})
    page.locator(".sidebar").evaluate("el => { el.scrollTop = 0; }")
    page.screenshot(path=str(ARTIFACTS / "explorer.png"), full_page=True)
    table_text = page.locator("#configs-table tbody").inner_text()
    context.close()

    # The shared URL in a fresh context (no token, nothing stored) shows the same table.
    shared_watch = Watch()
    context, page = new_page(browser, server, shared_watch)
    page.goto(f"{server.base}/searches/{search_id}")
    expect(page.locator("#configs-table tbody tr")).to_have_count(TOP)
    assert page.locator("#configs-table tbody").inner_text() == table_text
    expect(page.get_by_label("Model preset")).to_have_value("gpt-1.7b")
    expect(page.get_by_label("Global batch")).to_have_value("64")
    context.close()

    watch.check(allow_console=("status of 422",))  # the deepspeed target's refusal
    shared_watch.check()


def test_refusals_are_shown_where_they_belong(browser: Any, server: Server) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    watch = Watch()
    context, page = new_page(browser, server, watch)
    page.goto(f"{server.base}/")
    expect(page.get_by_label("Model preset")).to_contain_text("gpt-1.7b")

    # No token: the 401 says which token to create, next to the token field.
    page.get_by_label("API token").fill("")
    page.get_by_role("button", name="Start search").click()
    token = page.get_by_label("API token")
    expect(token).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#token-error")).to_contain_text("autopar token create --scope write")
    expect(page).to_have_url(f"{server.base}/")

    # A custom shape the API refuses: the 422 sits next to the field it names.
    token.fill(server.token)
    expect(token).not_to_have_attribute("aria-invalid", "true")
    page.get_by_label("Custom shape").check()
    page.get_by_label("Hidden size").fill("100")
    page.get_by_label("Attention heads").fill("3")
    page.get_by_label("KV heads").fill("")
    page.get_by_role("button", name="Start search").click()
    heads = page.get_by_label("Attention heads")
    expect(heads).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#shape-heads-error")).to_contain_text("does not divide hidden")
    expect(heads).to_be_focused()

    # A pydantic bound (global batch 0) names training.global_batch.
    page.get_by_label("Preset", exact=True).check()
    page.get_by_label("Global batch").fill("0")
    page.get_by_role("button", name="Start search").click()
    expect(page.locator("#global-batch-error")).to_contain_text("greater than or equal to 1")

    # An unknown calibration (issue 16) names calibration_id, next to its field in the options section.
    page.get_by_label("Global batch").fill("64")
    page.locator("details.options summary").click()
    page.get_by_label("Calibration", exact=True).fill("nosuchcalibration")
    page.get_by_role("button", name="Start search").click()
    expect(page.locator("#calibration-id-error")).to_contain_text("no calibration")
    page.get_by_label("Calibration", exact=True).fill("")

    # An unknown search id says so.
    page.goto(f"{server.base}/searches/{'0' * 32}")
    expect(page.locator("#status-title")).to_contain_text("No search")
    context.close()
    watch.check(allow_console=("status of 401", "status of 422", "status of 404"))


def test_gradient_reduction_in_bf16_is_a_checkbox_of_the_training(browser: Any, server: Server) -> None:
    """Megatron-Core's --grad-reduce-in-bf16: refused next to the box for DeepSpeed, a search of Megatron-Core
    configurations otherwise, said in the status line and ticked again when the search's page is opened."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    watch = Watch()
    context, page = open_explorer(browser, server, watch)
    ask(page, "gpt-1.7b", "dgx-a100-80gb", 1, 64)
    page.get_by_label("Top k").fill("3")
    box = page.get_by_label("Reduce gradients in bf16 (Megatron-Core only)")
    expect(box).not_to_be_checked()
    box.check()
    page.get_by_label("Framework", exact=True).select_option("deepspeed")
    page.get_by_role("button", name="Start search").click()
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#grad-reduce-in-bf16-error")).to_contain_text("is a Megatron-Core option, not deepspeed's")
    expect(page).to_have_url(f"{server.base}/")

    page.get_by_label("Framework", exact=True).select_option("megatron")
    page.get_by_role("button", name="Start search").click()
    page.wait_for_url("**/searches/*")
    search_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#status-sub")).to_contain_text("bf16 (gradients reduced in bf16) · megatron")
    expect(page.locator("#status-badge")).to_have_text("done", timeout=60_000)
    stored = get_json(f"{server.base}/v1/searches/{search_id}")
    assert stored["request"]["training"]["grad_reduce_in_bf16"] is True
    configs = get_json(f"{server.base}/v1/searches/{search_id}/configs")["configs"]
    assert configs and {c["framework"] for c in configs} == {"megatron"}
    context.close()

    again_watch = Watch()
    again, shared = new_page(browser, server, again_watch)
    shared.goto(f"{server.base}/searches/{search_id}")
    expect(shared.get_by_label("Global batch")).to_have_value("64")
    expect(shared.get_by_label("Reduce gradients in bf16 (Megatron-Core only)")).to_be_checked()
    again.close()
    watch.check(allow_console=("status of 422",))
    again_watch.check()

"""Logs in one format with the request id: in process (the id crosses into the thread pool), and
``autopar serve --log-format json`` as a real program (uvicorn's access lines in the same format,
on stdout as uvicorn writes them)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service._logging import service_logging
from service.api import Settings, create_app
from service.store import Database

REPO = Path(__file__).resolve().parents[3]
UNREACHABLE = "postgresql+psycopg://nobody@127.0.0.1:1/nothing"  # port 1: refused at once


def json_lines(text: str) -> list[dict[str, object]]:
    """Every line parsed as one JSON object (fails on any other line)."""
    return [json.loads(line) for line in text.splitlines() if line]


def test_every_log_line_of_a_request_carries_its_id() -> None:
    """/readyz logs why the database does not answer, from a thread-pool thread: each such line has
    the id of the request that caused it; a forged id (a newline in it) is replaced by a fresh one."""
    db = Database(UNREACHABLE)
    out = io.StringIO()
    try:
        with TestClient(create_app(Settings(database_url=UNREACHABLE, workers=0), db=db, migrate=False)) as c, \
                service_logging("info", "json", stream=out):
            first = c.get("/readyz", headers={"X-Request-ID": "probe-1"})
            second = c.get("/readyz", headers={"X-Request-ID": "probe-2"})
            forged = c.get("/readyz", headers={"X-Request-ID": "x\", \"level\": \"info"})
            plain = c.get("/healthz")
    finally:
        db.dispose()
    assert (first.status_code, second.status_code) == (503, 503)
    assert first.headers["X-Request-ID"] == "probe-1" and second.headers["X-Request-ID"] == "probe-2"
    made = forged.headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", made) and re.fullmatch(r"[0-9a-f]{32}", plain.headers["X-Request-ID"])
    lines = [line for line in json_lines(out.getvalue()) if line["logger"] != "httpx2"]  # the client's own
    by_id: dict[object, list[dict[str, object]]] = {}
    for line in lines:
        by_id.setdefault(line.get("request_id"), []).append(line)
    assert set(by_id) == {"probe-1", "probe-2", made}, lines  # no line without an id, none mixed up
    for rid in ("probe-1", "probe-2", made):
        (line,) = by_id[rid]
        assert line["logger"] == "autopar.api" and line["level"] == "warning"
        assert "does not answer" in str(line["message"])


def test_log_lines_outside_requests_have_no_id_and_text_names_the_id() -> None:
    out = io.StringIO()
    with service_logging("warning", "text", stream=out):
        logging.getLogger("autopar.test").info("below the level: not written")
        logging.getLogger("autopar.test").warning("outside any request")
    (line,) = out.getvalue().splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(stamp + r" WARNING \[\d+\] autopar.test: outside any request", line), line
    assert not any(getattr(h, "stream", None) is out for h in logging.getLogger().handlers)  # put back


def test_serve_writes_json_lines_with_the_request_id_on_uvicorns_access_lines(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOPAR_")}
    env |= {"AUTOPAR_DATA_DIR": str(tmp_path / "data"), "AUTOPAR_LOG_FORMAT": "json"}
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--workers", "0",
                               "--stop-timeout", "1"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "autopar serve did not start"
                time.sleep(0.1)
        ask = urllib.request.Request(f"http://127.0.0.1:{port}/v1/presets/models", headers={"X-Request-ID": "trace-7"})
        with urllib.request.urlopen(ask, timeout=10) as answer:
            assert answer.headers["X-Request-ID"] == "trace-7"
    finally:
        server.terminate()
        out, err = server.communicate(timeout=20)
    lines = json_lines(err)  # every line, uvicorn's included, is one JSON object
    assert any(line["logger"] == "uvicorn.error" for line in lines), err  # its start/stop lines
    assert any(line["logger"] == "autopar.serve" and "serving on" in str(line["message"]) for line in lines), err
    access = json_lines(out)  # uvicorn's access lines, on stdout as uvicorn writes them; no banner
    assert {line["logger"] for line in access} == {"uvicorn.access"}, out
    (line,) = [line for line in access if line.get("request_id") == "trace-7"]
    assert (line["method"], line["path"], line["status"]) == ("GET", "/v1/presets/models", 200)


def test_an_unhandled_error_keeps_its_request_id_on_the_500_and_in_the_servers_log(app_db: Database,
                                                                                    settings: Settings) -> None:
    """The 500 of an unhandled error carries the id, and the traceback the server logs after the request's
    context ended (uvicorn's 'Exception in ASGI application', reproduced here) finds it on the exception."""
    app = create_app(settings, db=app_db, migrate=False)

    @app.get("/test/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    with TestClient(app, raise_server_exceptions=False) as c:
        answer = c.get("/test/boom", headers={"X-Request-ID": "boom-1"})
    assert answer.status_code == 500 and answer.headers["X-Request-ID"] == "boom-1"
    out = io.StringIO()
    with TestClient(app) as c, service_logging("info", "json", stream=out), pytest.raises(RuntimeError) as err:
        c.get("/test/boom", headers={"X-Request-ID": "boom-2"})
    with service_logging("info", "json", stream=out):
        logging.getLogger("uvicorn.error").error("Exception in ASGI application", exc_info=err.value)
    (line,) = [line for line in json_lines(out.getvalue()) if line["logger"] == "uvicorn.error"]
    assert line["request_id"] == "boom-2" and "RuntimeError: boom" in str(line["exception"])

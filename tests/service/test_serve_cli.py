"""``autopar serve | worker | db | token``: the database and token commands in process, the worker
pool with real processes, and ``autopar serve`` as a real program on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url

from service._serve_cli import WorkerPool
from service.api._auth import TokenCache
from service.cli import main
from service.store import ApiToken, Database, Search, head_revision

REPO = Path(__file__).resolve().parents[2]
SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_WORKERS", "AUTOPAR_LEASE_S", "AUTOPAR_POLL_S", "AUTOPAR_OPEN_READS",
                "AUTOPAR_MAX_BODY_BYTES")


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data directory as the service's home; no other AUTOPAR_* setting leaks in."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "data"
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(home))
    return home


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tokens(db_url: str) -> list[ApiToken]:
    db = Database(db_url)
    try:
        with db.session() as s:
            return list(s.execute(select(ApiToken)).scalars())
    finally:
        db.dispose()


# --- db ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_db_upgrade_current_downgrade(backend: str, data_dir: Path, capsys: pytest.CaptureFixture[str],
                                      request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "postgresql":
        monkeypatch.setenv("AUTOPAR_DATABASE_URL", request.getfixturevalue("pg_url"))
    else:
        code, _, err = run(capsys, "db", "current")
        assert code == 2 and "there is no database" in err and "autopar db upgrade" in err
        assert not data_dir.exists()  # reading created nothing
    head = head_revision()
    code, out, _ = run(capsys, "db", "upgrade")
    assert code == 0 and f"none -> {head} (head)" in out
    assert run(capsys, "db", "current")[1].startswith(f"{head} (head) on ")
    code, out, _ = run(capsys, "db", "upgrade")
    assert code == 0 and f"already at {head}" in out
    code, _, err = run(capsys, "db", "downgrade", "nonsense")
    assert code == 2 and err.startswith("autopar: error: REV: 'nonsense': ") and "one of: 0001" in err and head in err
    assert run(capsys, "token", "create", "--scope", "read")[0] == 0
    code, _, err = run(capsys, "db", "downgrade", "base")  # found by review: it dropped every token silently
    assert code == 2 and "--yes" in err and "1 api_tokens" in err
    assert run(capsys, "db", "current")[1].startswith(f"{head} (head) on ")  # nothing dropped
    code, out, _ = run(capsys, "db", "downgrade", "base", "--yes")
    assert code == 0 and f"{head} -> none" in out
    code, out, _ = run(capsys, "db", "current")
    assert code == 0 and out.startswith(f"none (the newest is {head}: `autopar db upgrade`)")
    db = Database(os.environ.get("AUTOPAR_DATABASE_URL") or f"sqlite:///{data_dir / 'autopar.db'}")
    assert not {"searches", "api_tokens"} & set(inspect(db.engine).get_table_names())
    db.dispose()


def test_a_database_migrated_by_a_newer_autopar_is_refused_clearly(data_dir: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy import text

    assert run(capsys, "db", "upgrade")[0] == 0
    db = Database(f"sqlite:///{data_dir / 'autopar.db'}")
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    db.dispose()
    for argv in (["db", "current"], ["db", "upgrade"], ["db", "downgrade", "base", "--yes"], ["worker", "--once"],
                 ["serve", "--port", str(free_port()), "--workers", "0"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "migrated by a newer autopar (revision 9999)" in err, (argv, err)
        assert "Traceback" not in err


# --- token ---------------------------------------------------------------------------------


def test_token_create_list_revoke(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "token", "create", "--scope", "write")
    assert code == 2 and "autopar db upgrade" in err  # no database yet: refused, none created
    assert not data_dir.exists()
    assert run(capsys, "db", "upgrade")[0] == 0
    url = f"sqlite:///{data_dir / 'autopar.db'}"

    code, out, _ = run(capsys, "token", "create", "--scope", "write", "--name", "ci", "--json")
    assert code == 0
    writer = json.loads(out)
    assert writer["scopes"] == ["read", "write"] and writer["name"] == "ci"
    assert writer["token"].startswith("ap_") and writer["header"] == f"Authorization: Bearer {writer['token']}"
    code, out, _ = run(capsys, "token", "create", "--scope", "read")
    assert code == 0 and "Authorization: Bearer ap_" in out
    reader_token = next(line for line in out.splitlines() if line.startswith("ap_"))

    db = Database(url)
    cache = TokenCache()
    principal = cache.lookup(db, writer["token"])
    assert principal is not None and principal.token_id == writer["id"]
    assert principal.scopes == frozenset({"read", "write"})
    reader = TokenCache().lookup(db, reader_token)
    assert reader is not None and reader.scopes == frozenset({"read"})

    code, out, _ = run(capsys, "token", "list", "--json")
    listed = json.loads(out)
    assert code == 0 and [t["id"] for t in listed] == [writer["id"], reader.token_id]
    assert writer["token"] not in out and reader_token not in out and "hash" not in out
    assert listed[0]["last_used_at"] is not None and listed[0]["revoked_at"] is None  # the lookup above used it
    code, out, _ = run(capsys, "token", "list")
    assert code == 0 and writer["id"] in out and "ci" in out and writer["token"] not in out

    code, out, _ = run(capsys, "token", "revoke", writer["id"])
    assert code == 0 and f"revoked {writer['id']}" in out
    assert TokenCache().lookup(db, writer["token"]) is None
    code, out, _ = run(capsys, "token", "revoke", writer["id"])
    assert code == 0 and "already revoked" in out
    code, _, err = run(capsys, "token", "revoke", "nope")
    assert code == 2 and err == "autopar: error: ID: there is no token 'nope'; see the ids with `autopar token list`\n"
    assert json.loads(run(capsys, "token", "list", "--json")[1])[0]["revoked_at"] is not None
    db.dispose()


# --- bad input -----------------------------------------------------------------------------


def test_bad_input_exits_2_and_touches_nothing(data_dir: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert run(capsys, "db", "upgrade")[0] == 0
    url = f"sqlite:///{data_dir / 'autopar.db'}"

    code, _, err = run(capsys, "token", "create", "--scope", "owner")
    assert (code, err) == (2, "autopar: error: --scope: owner is not a scope; use read, write or admin\n")
    assert tokens(url) == []

    elsewhere = data_dir.parent / "elsewhere"
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(elsewhere))
    cases: list[tuple[dict[str, str], list[str], str]] = [
        ({"AUTOPAR_DATABASE_URL": "mysql://u@h/db"}, ["db", "upgrade"],
         "AUTOPAR_DATABASE_URL: the 'mysql' database is not supported; use postgresql+psycopg://"),
        ({"AUTOPAR_DATABASE_URL": "not a url"}, ["serve"], "AUTOPAR_DATABASE_URL: 'not a url' is not a database URL"),
        ({"AUTOPAR_WORKERS": "lots"}, ["serve"], "AUTOPAR_WORKERS: 'lots' is not a number; give a number in [0, 64]"),
        ({"AUTOPAR_LEASE_S": "0"}, ["worker"], "AUTOPAR_LEASE_S: 0 is outside [1, 3600]"),
        ({"AUTOPAR_OPEN_READS": "maybe"}, ["token", "list"], "AUTOPAR_OPEN_READS: 'maybe' is not a boolean"),
        ({}, ["serve", "--workers", "-1"], "--workers: -1 is outside [0, 64]"),
        ({}, ["serve", "--port", "70000"], "--port: 70000 is not a TCP port; give a port in [1, 65535]"),
        ({}, ["worker"], "AUTOPAR_DATABASE_URL: there is no database at sqlite:///"),
        ({"AUTOPAR_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/x"}, ["db", "upgrade"],
         "AUTOPAR_DATABASE_URL: cannot use the database postgresql+psycopg://nobody@127.0.0.1:1/x: "),
    ]
    for env, argv, message in cases:
        with monkeypatch.context() as m:
            for name, text in env.items():
                m.setenv(name, text)
            code, out, err = run(capsys, *argv)
        assert code == 2, argv
        assert err.startswith(f"autopar: error: {message}"), (argv, err)
        assert out == ""
    assert not elsewhere.exists()


def test_port_in_use_is_refused_before_the_database_is_created(data_dir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(capsys, "serve", "--port", str(port), "--workers", "0")
    assert code == 2 and err.startswith(f"autopar: error: --port: cannot listen on 127.0.0.1:{port} (")
    assert not data_dir.exists()


def test_worker_refuses_a_schema_behind_head(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir.mkdir()
    sqlite3.connect(data_dir / "autopar.db").close()  # a database without the schema
    code, _, err = run(capsys, "worker", "--once")
    assert code == 2
    assert err.startswith("autopar: error: AUTOPAR_DATABASE_URL: the database sqlite:///") and "revision none" in err
    assert "run `autopar db upgrade`" in err
    assert run(capsys, "db", "upgrade")[0] == 0
    assert run(capsys, "worker", "--once")[0] == 0  # an empty queue: one look, then exit


def test_worker_program_stops_on_sigterm(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "db", "upgrade")[0] == 0
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    with subprocess.Popen([sys.executable, "-m", "service.cli", "worker"], cwd=REPO, env=env, text=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as worker:
        assert worker.stderr is not None
        for line in worker.stderr:  # the worker's log: it polls the queue
            if "polling" in line:
                break
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    assert "SIGTERM: stopping" in err and "stopped after 0 searches" in err


# --- the worker pool -----------------------------------------------------------------------


def wait_for(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


def test_worker_pool_stops_kills_and_restarts(tmp_path: Path) -> None:
    """Targets are ``exec`` of a snippet (spawn pickles the target by name; exec is always importable)."""
    ready = tmp_path / "ready"
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"open({str(ready)!r}, 'w').close(); time.sleep(60)")
    pools = [WorkerPool(2, exec, ("import time; time.sleep(60)",)), WorkerPool(1, exec, (stubborn,)),
             WorkerPool(1, exec, ("raise SystemExit(3)",), restart_every_s=0.2)]
    for pool in pools:
        pool.start()
    try:
        wait_for(ready.exists)
        wait_for(lambda: pools[2].restarts >= 1)
        started = time.monotonic()
        pools[0].stop(timeout_s=10.0)
        assert time.monotonic() - started < 5.0
        assert [p.exitcode for p in pools[0].procs] == [-signal.SIGTERM] * 2  # asked to stop, not killed
        pools[1].stop(timeout_s=0.5)
        assert [p.exitcode for p in pools[1].procs] == [-signal.SIGKILL]  # ignored SIGTERM: killed after 0.5 s
    finally:
        for pool in pools:
            pool.stop(timeout_s=0.5)
    assert not any(p.is_alive() for pool in pools for p in pool.procs)


# --- autopar serve as a real program -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_serve_as_a_real_program(backend: str, tmp_path: Path, request: pytest.FixtureRequest,
                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    env["AUTOPAR_DATA_DIR"] = str(tmp_path / "data")
    if backend == "postgresql":
        env["AUTOPAR_DATABASE_URL"] = request.getfixturevalue("pg_url")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "service.cli"]
    started = time.monotonic()
    workers = "1" if backend == "sqlite" else "0"  # one run shows the worker process at work
    server = subprocess.Popen([*cli, "serve", "--port", str(port), "--workers", workers], cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"autopar serve exited with {server.returncode}: {server.stderr.read()}")
            try:
                return http("GET", f"{base}/readyz")[0] == 200
            except OSError:
                return False

        wait_for(ready, timeout_s=30.0)
        startup_s = time.monotonic() - started
        assert http("GET", f"{base}/healthz")[0] == 200
        status, body = http("GET", f"{base}/v1/presets/models")
        assert status == 200 and b"gpt3-175b" in body

        with monkeypatch.context() as m:  # the CLI in process (a second program would cost seconds here)
            for name in SETTINGS_ENV:
                m.delenv(name, raising=False)
            for name in ("AUTOPAR_DATA_DIR", "AUTOPAR_DATABASE_URL"):
                if name in env:
                    m.setenv(name, env[name])
            code, out, _ = run(capsys, "token", "create", "--scope", "write", "--json")
        assert code == 0
        token = json.loads(out)["token"]
        status, body = http("POST", f"{base}/v1/profiles", b"{}")
        assert status == 401 and b"autopar token create" in body
        status, body = http("POST", f"{base}/v1/profiles", b"{}", {"Authorization": f"Bearer {token}"})
        assert status == 422, body  # past authentication, refused for the empty body
        status, body = http("GET", f"{base}/metrics")
        assert status == 200 and b'route="/v1/presets/models",status="200"' in body
        if workers == "1":  # a queued search the worker cannot run: it claims it and marks it failed
            db = Database(env.get("AUTOPAR_DATABASE_URL", f"sqlite:///{tmp_path / 'data' / 'autopar.db'}"))
            with db.session() as s:
                s.add(Search(id="unrunnable", request_hash="0" * 64, request={}, model_name="m", cluster_name="c",
                             num_nodes=1, framework="megatron", objective="throughput", autopar_version="0",
                             status="queued"))
            wait_for(lambda: b'autopar_searches{status="failed"} 1.0' in http("GET", f"{base}/metrics")[1])
            with db.session() as s:
                assert s.get_one(Search, "unrunnable").worker_id
            db.dispose()
    finally:
        server.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        code = server.wait(timeout=20)
        out, err = server.communicate()
    assert code == 0, err
    assert time.monotonic() - stopping < 5.0
    assert f"with {'1 worker process' if workers == '1' else 'no worker processes'}" in out
    assert f"{base}/docs" in out and f"curl {base}/v1/presets/models" in out
    database = env.get("AUTOPAR_DATABASE_URL", f"sqlite:///{tmp_path / 'data' / 'autopar.db'}")
    assert f"database: {make_url(database).render_as_string(hide_password=True)} (schema {head_revision()})" in out
    assert startup_s < 20.0

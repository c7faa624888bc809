"""``autopar serve | worker | db | token``: run the REST service and look after its database.

    autopar serve [--host 127.0.0.1] [--port 8000] [--workers N]   # API + N worker processes
    autopar worker [--once]                   # one more worker, on any machine that reaches the database
    autopar db upgrade [REV] | downgrade REV | current
    autopar token create --scope read|write [--name NAME] [--json] | list [--json] | revoke ID

``serve`` migrates the database once, starts the workers (spawned, so they share nothing with
the API process but the database), then runs uvicorn in the main process. SIGINT or SIGTERM
stops uvicorn, then asks each worker to stop (SIGTERM: it abandons its current search and puts it
back in the queue) and kills the ones still running after ``--stop-timeout``: a killed worker's
search is claimed again by another worker once its lease expires, so nothing is lost. Everything that
reads the environment or the database checks it first and exits 2 with ``autopar: error: ...``
before anything stored changes. Heavy imports (uvicorn, the app) happen inside the commands so
that ``autopar predict`` does not pay for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search import SpecError

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from service.api import Settings
    from service.store import Database

_FIX_DB = "check AUTOPAR_DATABASE_URL and that the database server is running"
_RESTART_EVERY_S = 5.0
"""A worker process that died is started again, at most this often per slot."""


def add_serve_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve``, ``worker``, ``db`` and ``token`` to ``autopar``'s subparsers."""
    p = sub.add_parser("serve", help="run the REST service and its search workers",
                       description="Migrate the database, start the search workers and serve the REST API "
                                   "(AUTOPAR_DATABASE_URL, AUTOPAR_DATA_DIR and the other AUTOPAR_* settings apply).")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 for every interface "
                                                       "(default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="search worker processes beside the API; 0 leaves searches to `autopar worker` "
                        "(default: AUTOPAR_WORKERS, else 1)")
    p.add_argument("--stop-timeout", type=float, default=8.0, metavar="SECONDS",
                   help="on shutdown, how long open requests may finish and workers may take to put their "
                        "searches back in the queue before they are killed (default: 8)")
    p.add_argument("--no-access-log", action="store_true", help="do not log each request")
    p.set_defaults(handler=_serve)

    w = sub.add_parser("worker", help="run searches from the shared queue (scale out on other machines)",
                       description="Claim queued searches from AUTOPAR_DATABASE_URL and run them until stopped "
                                   "(SIGTERM or Ctrl+C: the current search goes back to the queue).")
    w.add_argument("--once", action="store_true", help="run at most one search, then exit")
    w.set_defaults(handler=_worker)

    d = sub.add_parser("db", help="migrate the service database", description="Alembic migrations of the service "
                       "database (AUTOPAR_DATABASE_URL, else the SQLite file in AUTOPAR_DATA_DIR).")
    dsub = d.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = dsub.add_parser("upgrade", help="apply migrations (default: up to head)")
    up.add_argument("revision", nargs="?", default="head", metavar="REV")
    down = dsub.add_parser("downgrade", help="revert migrations down to REV (base: drop every table)")
    down.add_argument("revision", metavar="REV")
    down.add_argument("--yes", action="store_true", help="drop tables even when they hold data (back it up first)")
    dsub.add_parser("current", help="the revision the database is at, and the newest one")
    d.set_defaults(handler=_db)

    t = sub.add_parser("token", help="create, list and revoke API tokens",
                       description="API tokens for the REST service: send one as 'Authorization: Bearer <token>'.")
    tsub = t.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="create a token (printed once)")
    create.add_argument("--scope", required=True, metavar="read|write", help="write includes read")
    create.add_argument("--name", default="unnamed", help="what the token is for (default: unnamed)")
    create.add_argument("--json", action="store_true", help="print the token and its id as JSON")
    tlist = tsub.add_parser("list", help="list tokens (ids, names, scopes, dates; never the tokens)")
    tlist.add_argument("--json", action="store_true", help="print the list as JSON")
    revoke = tsub.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("token_id", metavar="ID")
    t.set_defaults(handler=_token)


# --- database access shared by the commands -------------------------------------------------


@contextmanager
def reachable(db: Database) -> Iterator[None]:
    """Turn 'cannot connect' into a SpecError that names the URL (password hidden) and the fix."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        from service.store import URL_ENV

        reason = (str(exc.orig or exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SpecError(URL_ENV, f"cannot use the database {db.safe_url}: {reason}", _FIX_DB) from None


def open_database(*, must_exist: bool) -> tuple[Settings, Database]:
    """The settings and database of the environment; with ``must_exist``, a missing SQLite file is an
    error rather than a new empty database (commands that only read or add rows create nothing)."""
    from sqlalchemy.engine import make_url

    from service.api import Settings
    from service.store import URL_ENV, Database
    from service.store._db import check_url

    settings = Settings.from_env()
    if must_exist and check_url(settings.database_url) == "sqlite":
        path = make_url(settings.database_url).database
        if not path or path == ":memory:" or not Path(path).expanduser().exists():
            raise SpecError(URL_ENV, f"there is no database at {settings.database_url}",
                            "start `autopar serve` or run `autopar db upgrade` first (or set AUTOPAR_DATA_DIR "
                            "or AUTOPAR_DATABASE_URL to the service's database)")
    return settings, Database(settings.database_url)


def _current_database() -> tuple[Settings, Database]:
    """An existing database whose schema is at head, else a SpecError that says what to run."""
    settings, db = open_database(must_exist=True)
    try:
        with reachable(db):
            db.require_current()
    except SpecError:
        db.dispose()
        raise
    return settings, db


# --- serve and worker ----------------------------------------------------------------------


def _listen(host: str, port: int) -> socket.socket:
    """Bind the API's socket before anything else, so a port in use fails before the database changes."""
    if not 0 < port < 65536:
        raise SpecError("--port", f"{port} is not a TCP port", "give a port in [1, 65535]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise SpecError("--host", f"{host!r} does not resolve ({exc.strerror})",
                        "use 127.0.0.1, 0.0.0.0 (every interface) or a name of this machine") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise SpecError("--port", f"cannot listen on {host}:{port} ({exc.strerror})",
                        "choose another --port or --host, or stop the program that uses it") from None
    return sock


def _worker_process(settings: Settings, parent_pid: int) -> None:
    """A worker process of ``autopar serve``: SIGTERM (from the parent) stops it; Ctrl+C in the terminal
    reaches the whole process group, so SIGINT is left to the parent, which then sends SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def orphaned() -> None:  # the parent was killed without stopping us
        while not stop.wait(1.0):
            if os.getppid() != parent_pid:
                stop.set()

    threading.Thread(target=orphaned, name="autopar-orphan-check", daemon=True).start()
    _log_to_stderr()
    from service._worker import run_worker

    run_worker(settings, stop=stop)  # returns once stop is set, its current search put back in the queue


class WorkerPool:
    """``n`` spawned processes running ``target(*args)``; one that dies is started again, at most every
    ``restart_every_s`` per slot, so a crashing worker does not leave the service without workers."""

    def __init__(self, n: int, target: Callable[..., object], args: tuple[object, ...] = (), *,
                 restart_every_s: float = _RESTART_EVERY_S) -> None:
        import multiprocessing

        self._ctx = multiprocessing.get_context("spawn")  # nothing of the API process (engine, threads) is shared
        self.n, self._target, self._args, self._restart_every_s = n, target, args, restart_every_s
        self.procs: list[BaseProcess] = []
        self.restarts = 0
        self._started_at: list[float] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def _spawn(self) -> BaseProcess:
        proc = self._ctx.Process(target=self._target, args=self._args, name="autopar-worker")
        proc.start()
        return proc

    def start(self) -> None:
        with self._lock:
            for _ in range(self.n):
                self.procs.append(self._spawn())
                self._started_at.append(time.monotonic())
        if self.n:
            threading.Thread(target=self._watch, name="autopar-worker-watch", daemon=True).start()

    def _watch(self) -> None:
        while not self._stopping.wait(min(1.0, self._restart_every_s)):
            with self._lock:
                for i, proc in enumerate(self.procs):
                    if self._stopping.is_set() or proc.is_alive():
                        continue
                    if time.monotonic() - self._started_at[i] < self._restart_every_s:
                        continue
                    print(f"autopar serve: worker process {proc.pid} exited with {proc.exitcode}; starting "
                          "another", file=sys.stderr, flush=True)
                    self.procs[i], self._started_at[i] = self._spawn(), time.monotonic()
                    self.restarts += 1

    def stop(self, timeout_s: float) -> None:
        """SIGTERM every worker, wait up to ``timeout_s`` for all of them, kill the rest."""
        self._stopping.set()
        with self._lock:
            procs = list(self.procs)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                print(f"autopar serve: worker process {proc.pid} still busy after {timeout_s:g} s; killed (its "
                      "search is claimed again after the lease)", file=sys.stderr, flush=True)
                proc.kill()
                proc.join(5.0)


def _log_to_stderr() -> None:
    """Worker log lines (claims, finished and failed searches) on stderr, as uvicorn logs the API's."""
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [{os.getpid()}] %(name)s: %(message)s")


def _browser_host(host: str) -> str:
    """Where a browser on this machine reaches ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.api import Settings, autopar_version, create_app
    from service.store import Database
    from service.store._db import check_url

    settings = Settings.from_env()
    check_url(settings.database_url)
    workers = settings.workers if args.workers is None else args.workers
    if not 0 <= workers <= 64:
        raise SpecError("--workers", f"{workers} is outside [0, 64]", "give a number of worker processes in [0, 64]")
    if not 0 <= args.stop_timeout <= 3600:
        raise SpecError("--stop-timeout", f"{args.stop_timeout:g} is outside [0, 3600]", "give seconds in [0, 3600]")
    settings = dataclasses.replace(settings, workers=workers)
    sock = _listen(args.host, args.port)
    db = Database(settings.database_url)
    try:
        with reachable(db):
            db.upgrade()
            revision = db.current_revision()
        app = create_app(settings, db=db, migrate=False)
        # Everything loaded so far (FastAPI, pydantic schemas, presets) lives as long as the
        # process: freezing it keeps full garbage collections from rescanning it, which was the
        # p99 tail of the hot GET endpoints (58 ms -> 21 ms paced at 540 requests/s).
        gc.collect()
        gc.freeze()
        server = uvicorn.Server(uvicorn.Config(
            app, host=args.host, port=args.port, access_log=not args.no_access_log,
            timeout_graceful_shutdown=max(1, round(args.stop_timeout))))

        def request_stop(*_: Any) -> None:
            server.should_exit = True

        # ours until uvicorn takes them over, and again when it hands them back (it re-raises what it caught)
        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        pool = WorkerPool(workers, _worker_process, (settings, os.getpid()))
        try:
            pool.start()
            url = f"http://{_browser_host(args.host)}:{args.port}"
            print(f"autopar {autopar_version()} serving on {args.host}:{args.port} with "
                  f"{workers or 'no'} worker process{'es' if workers != 1 else ''}"
                  f"{'' if workers else ' (searches wait for `autopar worker`)'}\n"
                  f"  database: {db.safe_url} (schema {revision})\n"
                  f"  API docs: {url}/docs\n"
                  f"  try:      curl {url}/v1/presets/models\n"
                  f"  writes:   autopar token create --scope write, then send 'Authorization: Bearer <token>'\n"
                  f"  stop:     Ctrl+C or SIGTERM", flush=True)
            if not server.should_exit:
                server.run(sockets=[sock])
        finally:
            pool.stop(args.stop_timeout)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        sock.close()
        db.dispose()
    return 0


def _worker(args: argparse.Namespace) -> int:
    settings, db = _current_database()
    db.dispose()
    stop = threading.Event()

    def request_stop(sig: int, _frame: Any) -> None:
        print(f"autopar worker: {signal.Signals(sig).name}: stopping; the current search goes back to the queue "
              "(again to stop now)", file=sys.stderr, flush=True)
        stop.set()
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)

    from service._worker import run_worker

    _log_to_stderr()
    print(f"autopar worker on {db.safe_url}{' (one search)' if args.once else ''}; SIGTERM or Ctrl+C stops it",
          file=sys.stderr, flush=True)
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        done = run_worker(settings, stop=stop, once=args.once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"autopar worker: stopped after {done} search{'' if done == 1 else 'es'}", file=sys.stderr, flush=True)
    return 0


# --- db ------------------------------------------------------------------------------------


def _revisions() -> list[str]:
    from alembic.script import ScriptDirectory

    from service.store._db import alembic_config

    return [r.revision for r in ScriptDirectory.from_config(alembic_config("sqlite://")).walk_revisions()][::-1]


def _db(args: argparse.Namespace) -> int:
    from alembic.util import CommandError

    from service.store import head_revision

    _, db = open_database(must_exist=args.db_command != "upgrade")
    head = head_revision()
    try:
        with reachable(db):
            db.check_known()
            before = db.current_revision()
            try:
                if args.db_command == "upgrade":
                    db.upgrade(args.revision)
                elif args.db_command == "downgrade":
                    rows = {table: n for table, n in db.row_counts().items() if n and table != "alembic_version"}
                    if rows and not args.yes:
                        held = ", ".join(f"{n} {table}" for table, n in rows.items())
                        raise SpecError("--yes", f"downgrading to {args.revision} may drop tables that hold data "
                                        f"({held}), tokens included", "back the database up, stop the servers and "
                                        "workers using it, then repeat with --yes")
                    db.downgrade(args.revision)
            except CommandError as exc:
                raise SpecError("REV", f"{args.revision!r}: {exc}",
                                f"use head, base or one of: {', '.join(_revisions())}") from None
            after = db.current_revision()
    finally:
        db.dispose()
    state = "head" if after == head else f"the newest is {head}: `autopar db upgrade`"
    if args.db_command == "current":
        print(f"{after or 'none'} ({state}) on {db.safe_url}")
    else:
        change = f"{before or 'none'} -> {after or 'none'}" if before != after else f"already at {after or 'none'}"
        print(f"{args.db_command}: {change} ({state}) on {db.safe_url}")
    return 0


# --- token ---------------------------------------------------------------------------------


def _when(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC (SQLite hands back naive datetimes; they are UTC)."""
    if moment is None:
        return None
    return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)).isoformat(
        timespec="seconds")


def _token(args: argparse.Namespace) -> int:
    from service.api._auth import SCOPES

    if args.token_command == "create":
        scopes = [s.strip() for s in args.scope.split(",") if s.strip()]
        unknown = [s for s in scopes if s not in SCOPES]
        if unknown or not scopes:  # checked before the database is opened: nothing is touched
            raise SpecError("--scope", f"{', '.join(unknown) or 'nothing'} is not a scope", "use read or write")
        args.scopes = scopes
    _, db = _current_database()
    try:
        return {"create": _token_create, "list": _token_list, "revoke": _token_revoke}[args.token_command](db, args)
    finally:
        db.dispose()


def _token_create(db: Database, args: argparse.Namespace) -> int:
    from service.api._auth import create_token
    from service.store import ApiToken

    token_id, token = create_token(db, args.name, args.scopes)
    with db.session() as s:
        scopes = s.get_one(ApiToken, token_id).scopes.split()
    if args.json:
        print(json.dumps({"id": token_id, "name": args.name, "scopes": scopes, "token": token,
                          "header": f"Authorization: Bearer {token}"}, indent=2))
        return 0
    print(f"token {token_id} ({args.name}, scopes: {' '.join(scopes)}); shown only now, store it:\n{token}\n"
          f"use it as:  curl -H 'Authorization: Bearer {token}' http://127.0.0.1:8000/v1/...\n"
          f"revoke it:  autopar token revoke {token_id}")
    return 0


def _token_list(db: Database, args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from service.store import ApiToken

    with db.session() as s:
        rows = s.execute(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)).scalars().all()
    tokens = [{"id": r.id, "name": r.name, "scopes": r.scopes.split(), "created_at": _when(r.created_at),
               "last_used_at": _when(r.last_used_at), "revoked_at": _when(r.revoked_at)} for r in rows]
    if args.json:
        print(json.dumps(tokens, indent=2))
        return 0
    if not tokens:
        print("no tokens: create one with `autopar token create --scope read|write`")
        return 0
    header = ("id", "name", "scopes", "created", "last used", "revoked")
    table = [header, *((r.id, r.name, r.scopes, _when(r.created_at) or "-", _when(r.last_used_at) or "-",
                        _when(r.revoked_at) or "-") for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _token_revoke(db: Database, args: argparse.Namespace) -> int:
    from service.api._auth import revoke_token
    from service.store import ApiToken

    if revoke_token(db, args.token_id):
        print(f"revoked {args.token_id}: the API refuses it within seconds (its token cache)")
        return 0
    with db.session() as s:
        row = s.get(ApiToken, args.token_id)
    if row is None:
        raise SpecError("ID", f"there is no token {args.token_id!r}", "see the ids with `autopar token list`")
    print(f"{args.token_id} was already revoked at {_when(row.revoked_at)}")
    return 0

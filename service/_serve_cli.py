"""``autopar serve | worker``: run the REST service and its search workers.

    autopar serve [--host 127.0.0.1] [--port 8000] [--workers N]   # API + N worker processes
    autopar worker [--once]                   # one more worker, on any machine that reaches the database
    ... [--log-level info] [--log-format text|json]                # both; settings: AUTOPAR_* (--help)

(``autopar db`` and ``autopar token`` live in ``service/_admin_cli.py``.)

``serve`` migrates the database once, starts the workers (spawned, so they share nothing with
the API process but the database), then runs uvicorn in the main process. SIGINT or SIGTERM
stops uvicorn, then asks each worker to stop (SIGTERM: it abandons its current search and puts it
back in the queue) and kills the ones still running after ``--stop-timeout``: a killed worker's
search is claimed again by another worker once its lease expires, so nothing is lost. Everything that
reads the environment or the database checks it first and exits 2 with ``autopar: error: ...``
before anything stored changes. Settings come from ``service._settings`` and logs go through
``service._logging`` (uvicorn's too, in the same format) while a command runs. Heavy imports
(uvicorn, the app, pydantic-settings) happen inside the commands so that ``autopar predict`` does
not pay for them.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from search import SpecError
from service._db_access import current_database
from service._logging import service_logging

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from service._settings import Settings

_log = logging.getLogger("autopar.serve")
SWITCH_INTERVAL_S = 0.001
"""The API process's GIL switch interval (Python's default is 5 ms)."""
_RESTART_EVERY_S = 5.0
"""A worker process that died is started again, at most this often per slot."""


_SETTINGS = "<the AUTOPAR_* settings>"


class _SettingsHelp(argparse.RawDescriptionHelpFormatter):
    """Ends ``--help`` with the table of settings, built only when help is asked (it imports pydantic)."""

    def add_text(self, text: str | None) -> None:
        if text == _SETTINGS:
            from service._settings import settings_help

            text = settings_help()
        super().add_text(text)


def add_serve_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` and ``worker`` to ``autopar``'s subparsers."""
    p = sub.add_parser("serve", help="run the REST service and its search workers",
                       formatter_class=_SettingsHelp, epilog=_SETTINGS,
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
    _add_log_arguments(p)
    p.set_defaults(handler=_serve)

    w = sub.add_parser("worker", help="run searches from the shared queue (scale out on other machines)",
                       formatter_class=_SettingsHelp, epilog=_SETTINGS,
                       description="Claim queued searches from AUTOPAR_DATABASE_URL and run them until stopped "
                                   "(SIGTERM or Ctrl+C: the current search goes back to the queue).")
    w.add_argument("--once", action="store_true", help="run at most one search, then exit")
    _add_log_arguments(w)
    w.set_defaults(handler=_worker)


def _add_log_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", metavar="LEVEL", help="debug, info, warning, error or critical "
                   "(default: AUTOPAR_LOG_LEVEL, else info)")
    p.add_argument("--log-format", metavar="FORMAT", help="text (for people) or json (one object per line, "
                   "with the request id; default: AUTOPAR_LOG_FORMAT, else text)")


def _log_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The --log-* flags given, checked (they win over AUTOPAR_LOG_LEVEL / AUTOPAR_LOG_FORMAT)."""
    from service._settings import LOG_FORMATS, LOG_LEVELS

    overrides = {}
    for flag, name, choices in (("--log-level", "log_level", LOG_LEVELS), ("--log-format", "log_format", LOG_FORMATS)):
        value = getattr(args, name)
        if value is None:
            continue
        if value.lower() not in choices:
            raise SpecError(flag, f"{value!r} is not one of {', '.join(choices)}", f"use one of {', '.join(choices)}")
        overrides[name] = value.lower()
    return overrides


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
    from service._worker import run_worker

    with service_logging(settings.log_level, settings.log_format):
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
                    _log.warning("worker process %s exited with %s; starting another", proc.pid, proc.exitcode)
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
                _log.warning("worker process %s still busy after %g s; killed (its search is claimed again after "
                             "the lease)", proc.pid, timeout_s)
                proc.kill()
                proc.join(5.0)


def _browser_host(host: str) -> str:
    """Where a browser on this machine reaches ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _serve(args: argparse.Namespace) -> int:
    from service._settings import Settings
    from service.store._db import check_url

    settings = Settings.from_env(**_log_overrides(args))
    check_url(settings.database_url)
    workers = settings.workers if args.workers is None else args.workers
    if not 0 <= workers <= 64:
        raise SpecError("--workers", f"{workers} is outside [0, 64]", "give a number of worker processes in [0, 64]")
    if not 0 <= args.stop_timeout <= 3600:
        raise SpecError("--stop-timeout", f"{args.stop_timeout:g} is outside [0, 3600]", "give seconds in [0, 3600]")
    settings = settings.model_copy(update={"workers": workers})
    with service_logging(settings.log_level, settings.log_format):
        return _run_serve(args, settings)


def _run_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from service._version import autopar_version
    from service.api import create_app
    from service.store import Database

    workers = settings.workers
    sock = _listen(args.host, args.port)
    db = Database(settings.database_url)
    try:
        db.check_integrity()  # a damaged file fails here, with what to do, not at the first request
        db.upgrade()
        revision = db.current_revision()
        app = create_app(settings, db=db, migrate=False)
        # Everything loaded so far (FastAPI, pydantic schemas, presets) lives as long as the
        # process: freezing it keeps full garbage collections from rescanning it, which was the
        # p99 tail of the hot GET endpoints (58 ms -> 21 ms paced at 540 requests/s).
        gc.collect()
        gc.freeze()
        # Threads holding the GIL for CPU work (a POST resolving its search) hand it over every
        # 5 ms by default; a GET waiting behind them paid that several times per request. At 1 ms
        # a GET's p99 during a 200-POST burst fell within 100 ms (benchmarks/service_load.py).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        server = uvicorn.Server(uvicorn.Config(
            app, host=args.host, port=args.port, access_log=not args.no_access_log, log_config=None,
            log_level=settings.log_level,
            timeout_graceful_shutdown=max(1, round(args.stop_timeout))))

        def request_stop(*_: Any) -> None:
            server.should_exit = True

        # ours until uvicorn takes them over, and again when it hands them back (it re-raises what it caught)
        previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        pool = WorkerPool(workers, _worker_process, (settings, os.getpid()))
        try:
            pool.start()
            url = f"http://{_browser_host(args.host)}:{args.port}"
            if settings.log_format == "text":  # for people; with json, stdout holds only JSON lines
                print(f"autopar {autopar_version()} serving on {args.host}:{args.port} with "
                      f"{workers or 'no'} worker process{'es' if workers != 1 else ''}"
                      f"{'' if workers else ' (searches wait for `autopar worker`)'}\n"
                      f"  database: {db.safe_url} (schema {revision})\n"
                      f"  explorer: {url}/\n"
                      f"  API docs: {url}/docs\n"
                      f"  try:      curl {url}/v1/presets/models\n"
                      f"  writes:   autopar token create --scope write, then send 'Authorization: Bearer <token>'\n"
                      f"  stop:     Ctrl+C or SIGTERM", flush=True)
            else:
                _log.info("autopar %s serving on %s:%s with %d worker processes; database %s (schema %s)",
                          autopar_version(), args.host, args.port, workers, db.safe_url, revision)
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
    overrides = _log_overrides(args)
    settings, db = current_database()
    settings = settings.model_copy(update=overrides)
    db.dispose()
    stop = threading.Event()

    def request_stop(sig: int, _frame: Any) -> None:
        _log.warning("%s: stopping; the current search goes back to the queue (again to stop now)",
                     signal.Signals(sig).name)
        stop.set()
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)


    with service_logging(settings.log_level, settings.log_format):
        return _run_worker(args, settings, db.safe_url, stop, request_stop)


def _run_worker(args: argparse.Namespace, settings: Settings, safe_url: str, stop: threading.Event,
                request_stop: Callable[[int, Any], None]) -> int:
    from service._worker import run_worker

    _log.info("autopar worker on %s%s; SIGTERM or Ctrl+C stops it", safe_url, " (one search)" if args.once else "")
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        done = run_worker(settings, stop=stop, once=args.once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _log.info("stopped after %d search%s", done, "" if done == 1 else "es")
    return 0



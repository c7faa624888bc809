"""A Python client generated from the service's OpenAPI document (openapi-python-client) round-trips a
search against a running app, on SQLite and PostgreSQL: create, poll, list configurations.

The client is generated once per session (about 1.5 s) from ``create_app().openapi()``; its method
names are the operation ids (``create_search``, ``get_search``, ``list_configs``), and it talks to
uvicorn over a real socket with its own httpx client. What this holds: the document describes the
answers the service gives (the generated models parse them, typed), and the SDK names read as such.
"""

from __future__ import annotations

import importlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import uvicorn

from service._worker import run_worker
from service.api import Settings, create_app
from service.store import Database

PACKAGE = "autopar_generated_client"
BODY = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
        "training": {"global_batch": 64}, "top": 3}


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The client package, generated from the document of an app (no database is touched for it)."""
    work = tmp_path_factory.mktemp("client")
    app = create_app(Settings(database_url=f"sqlite:///{work / 'unused.db'}", workers=0), migrate=False)
    (work / "openapi.json").write_text(json.dumps(app.openapi()))
    generator = Path(sys.executable).with_name("openapi-python-client")
    done = subprocess.run([str(generator), "generate", "--path", "openapi.json", "--output-path", PACKAGE,
                           "--meta", "none"], cwd=work, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(work))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(work))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture
def base_url(settings: Settings, app_db: Database) -> Iterator[str]:
    """The app served by uvicorn in a thread, on a free port of this machine."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings, db=app_db, migrate=False), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def sdk(generated: ModuleType, module: str) -> Any:
    return importlib.import_module(f"{generated.__name__}.{module}")


def test_a_generated_client_round_trips_a_search(generated: ModuleType, base_url: str, settings: Settings,
                                                 write_token: str) -> None:
    searches = {name: sdk(generated, f"api.searches.{name}")
                for name in ("create_search", "get_search", "list_searches", "list_configs")}
    models = sdk(generated, "models")
    with generated.AuthenticatedClient(base_url=base_url, token=write_token) as client:
        created = searches["create_search"].sync_detailed(client=client, body=models.SearchIn.from_dict(BODY))
        assert created.status_code == 202, created.content
        search = created.parsed
        assert isinstance(search, models.SearchOut) and search.status.value == "queued"

        assert run_worker(settings, once=True) == 1
        deadline = time.monotonic() + 30
        while (polled := searches["get_search"].sync(client=client, search_id=search.id)).status.value != "done":
            assert polled.status.value in ("queued", "running") and time.monotonic() < deadline, polled
            time.sleep(0.05)
        assert polled.counts.n_feasible > 0 and polled.timings.search_s > 0

        listed = searches["list_searches"].sync(client=client)
        assert search.id in [s.id for s in listed.data]

        configs = searches["list_configs"].sync(client=client, search_id=search.id, top=3)
        assert isinstance(configs, models.ConfigsOut)
        ranked = configs.configs
        assert [r.rank for r in ranked] == [1, 2, 3]
        assert all(isinstance(r.prediction.iteration_time_s, float) for r in ranked)
        times = [r.prediction.tokens_per_s for r in ranked]
        assert times == sorted(times, reverse=True)  # ranked by throughput, the default objective

        missing = searches["get_search"].sync_detailed(client=client, search_id="0" * 32)
        assert missing.status_code == 404 and isinstance(missing.parsed, models.ErrorOut)

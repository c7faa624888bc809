"""Issue 17, item 3: a damaged SQLite file. Before, `autopar serve` and `autopar db current` exited 1
with a 111-line traceback on a file that is not a database, and with a page corrupted mid-file the
server started, /readyz said ready and searches answered 503 "retry later" for permanent damage.
Now each command prints one `autopar: error:` line saying what to do and exits 2, the check runs at
start and in /readyz, and the API's answer says retrying will not help."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api import Settings, create_app
from service.cli import main
from service.store import Database, DatabaseDamaged, Profile

REPO = Path(__file__).resolve().parents[2]


def _garbage(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(256)) * 160)  # 40 KB that is no SQLite file


def _damaged_mid_file(path: Path, every_page: bool = False) -> None:
    """A migrated database with rows over many pages, then one page in the middle overwritten (or
    every page after the schema's first: any read of a table meets the damage)."""
    db = Database(f"sqlite:///{path}")
    db.upgrade()
    with db.session() as s:
        s.add_all(Profile(id=f"p{i}", name="x" * 150, schema_version=1, gpu_name="g", gpus_per_node=8,
                          fingerprint="f", body={}) for i in range(400))
    db.dispose()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    pages = path.stat().st_size // 4096
    with path.open("r+b") as f:
        for page in range(1, pages) if every_page else (pages // 2,):
            f.seek(4096 * page)
            f.write(b"\xa5" * 4096)


@pytest.fixture(params=["not-a-database", "page-corrupted"])
def damaged_home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("AUTOPAR_DATABASE_URL", "AUTOPAR_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "data"
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(home))
    (_garbage if request.param == "not-a-database" else _damaged_mid_file)(home / "autopar.db")
    return home


@pytest.mark.parametrize("argv", [["db", "current"], ["db", "upgrade"], ["token", "list"]])
def test_commands_say_what_to_do_in_one_line_and_exit_2(damaged_home: Path, capsys: pytest.CaptureFixture[str],
                                                         argv: list[str]) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autopar: error: AUTOPAR_DATABASE_URL:"), err
    assert "damaged or is not a database" in err and "restore" in err and "Traceback" not in err


def test_serve_refuses_to_start_on_a_damaged_file(damaged_home: Path) -> None:
    env = {**os.environ, "AUTOPAR_DATA_DIR": str(damaged_home), "AUTOPAR_WORKERS": "0"}
    env.pop("AUTOPAR_DATABASE_URL", None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--port", str(port)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autopar: error:") and "restore" in lines[0], done.stderr


def test_readyz_reports_damage_found_after_start(tmp_path: Path) -> None:
    path = tmp_path / "autopar.db"
    _damaged_mid_file(path)
    db = Database(f"sqlite:///{path}")
    with pytest.raises(DatabaseDamaged, match="malformed"):
        db.check_integrity()
    app = create_app(Settings(database_url=db.url, workers=0), db=db, migrate=False)  # started before the damage
    with TestClient(app) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        [item] = r.json()["detail"]
        assert "damaged" in item["msg"] and "retrying will not help" in item["msg"] and "restore" in item["fix"]
        assert str(path) not in r.text  # the path is in the log, not in an unauthenticated answer
    db.dispose()


def test_a_damaged_table_is_not_answered_retry_later(tmp_path: Path) -> None:
    """The request that meets the damage is told it is permanent (no Retry-After)."""
    path = tmp_path / "autopar.db"
    _damaged_mid_file(path, every_page=True)  # listing the profiles meets the damage
    db = Database(f"sqlite:///{path}")
    app = create_app(Settings(database_url=db.url, workers=0), db=db, migrate=False)
    with TestClient(app) as client:
        r = client.get("/v1/profiles")
        assert r.status_code == 503, r.text
        assert "retry-after" not in r.headers
        [item] = r.json()["detail"]
        assert item["type"] == "damaged" and "retrying will not help" in item["msg"], item
    db.dispose()

"""Issue 17, item 5: tenants. Before, any write token could cancel any search, and identical requests
of two clients shared one search, so one client's cancel cancelled the other's. Now tokens belong
to a tenant; searches, profiles and runs record it; a tenant cancels only what it asked for, and a
shared search is cancelled only when no tenant still wants it; an admin token cancels any."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service._tokens import create_token
from service.store import Database, Profile, Run, Search, SearchTenant

BODY: dict[str, Any] = {"model": {"preset": "llama2-7b"}, "cluster": {"preset": "dgx-a100-80gb", "nodes": 1},
                        "training": {"global_batch": 64}, "top": 3, "budget": {"n_trials": 20}}


def _auth(db: Database, tenant: str, scope: str = "write") -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(db, f'{tenant}-token', [scope], tenant)[1]}"}


def test_a_shared_search_is_cancelled_only_when_no_tenant_wants_it(client: TestClient, app_db: Database) -> None:
    a, b = _auth(app_db, "team-a"), _auth(app_db, "team-b")
    first = client.post("/v1/searches", json=BODY, headers=a)
    second = client.post("/v1/searches", json=BODY, headers=b)
    assert first.status_code == second.status_code == 202
    sid = first.json()["id"]
    assert second.json()["id"] == sid  # de-duplicated: one search, two tenants want it
    r = client.delete(f"/v1/searches/{sid}", headers=a)
    assert r.status_code == 200 and r.json()["status"] == "queued", r.text  # team-b still wants it
    assert client.delete(f"/v1/searches/{sid}", headers=a).status_code == 403  # no longer team-a's
    r = client.delete(f"/v1/searches/{sid}", headers=b)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    with app_db.session() as s:
        row = s.get(Search, sid)
        assert row is not None and row.tenant == "team-a"
        assert s.execute(select(SearchTenant).where(SearchTenant.search_id == sid)).first() is None


def test_another_tenants_search_cannot_be_cancelled_but_an_admin_can(client: TestClient, app_db: Database) -> None:
    a, b, admin = _auth(app_db, "team-a"), _auth(app_db, "team-b"), _auth(app_db, "ops", "admin")
    sid = client.post("/v1/searches", json=BODY, headers=a).json()["id"]
    client.post("/v1/searches", json=BODY, headers=_auth(app_db, "team-c"))  # shared with team-c
    r = client.delete(f"/v1/searches/{sid}", headers=b)
    assert r.status_code == 403, r.text
    [item] = r.json()["detail"]
    assert "team-b" in item["msg"] and "admin" in item["fix"]
    assert client.get(f"/v1/searches/{sid}").json()["status"] == "queued"  # reads follow AUTOPAR_OPEN_READS
    r = client.delete(f"/v1/searches/{sid}", headers=admin)
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text  # whoever else wanted it


def test_asking_again_after_cancelling_wants_the_search_again(client: TestClient, app_db: Database) -> None:
    a, b = _auth(app_db, "team-a"), _auth(app_db, "team-b")
    sid = client.post("/v1/searches", json=BODY, headers=a).json()["id"]
    client.post("/v1/searches", json=BODY, headers=b)
    assert client.delete(f"/v1/searches/{sid}", headers=a).json()["status"] == "queued"
    assert client.post("/v1/searches", json=BODY, headers=a).json()["id"] == sid
    assert client.delete(f"/v1/searches/{sid}", headers=b).json()["status"] == "queued"  # team-a wants it again
    assert client.delete(f"/v1/searches/{sid}", headers=a).json()["status"] == "cancelled"


def test_profiles_and_runs_record_their_tenant(client: TestClient, app_db: Database) -> None:
    from tests.service.api.test_profiles import profile

    a = _auth(app_db, "team-a")
    r = client.post("/v1/profiles", content=profile().to_json(), headers={**a, "Content-Type": "application/json"})
    assert r.status_code == 201, r.text
    run = {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100"}, "training": {"global_batch": 64},
           "framework": "megatron", "config": {"tp": 8}, "iteration_time_s": 2.0}
    r = client.post("/v1/runs", json=run, headers=a)
    assert r.status_code == 201, r.text
    with app_db.session() as s:
        assert [p.tenant for p in s.execute(select(Profile)).scalars()] == ["team-a"]
        assert [x.tenant for x in s.execute(select(Run)).scalars()] == ["team-a"]


def test_token_create_takes_a_tenant_and_list_shows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main

    monkeypatch.delenv("AUTOPAR_DATABASE_URL", raising=False)
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path))
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    assert main(["token", "create", "--scope", "admin", "--tenant", "ops", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["tenant"] == "ops" and created["scopes"] == ["admin", "read", "write"]
    assert main(["token", "list", "--json"]) == 0
    assert [t["tenant"] for t in json.loads(capsys.readouterr().out)] == ["ops"]
    assert main(["token", "create", "--scope", "write", "--tenant", "no spaces"]) == 2
    assert "--tenant" in capsys.readouterr().err

"""/v1/profiles: upload exactly what ``autopar profile`` writes, list, fetch; every bad profile a 422
naming the field, nothing stored; tokens. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from search import Fingerprint, GemmSample, HardwareProfile, LinkFit
from service.api import Settings, create_app
from service.store import Database

# What service._profile_cli.upload sends besides the body.
UPLOAD_HEADERS = {"Content-Type": "application/json"}


def profile(gpu_name: str = "NVIDIA H100 80GB HBM3", hosts: tuple[str, ...] = ("node01",),
            age_days: float = 1.0) -> HardwareProfile:
    created = (datetime.now(UTC) - timedelta(days=age_days)).isoformat(timespec="seconds")
    return HardwareProfile(
        fingerprint=Fingerprint(gpu_name, 8 * len(hosts), 8, created, driver="550.54.15", cuda="12.4",
                                nccl="2.21.5", torch="2.13.0", cpu_model="Xeon", cpu_memory_bytes=2.2e12,
                                hostnames=hosts),
        gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0016), GemmSample(4096, 4096, 4096, "bf16", 0.00022)),
        links=(LinkFit("all_reduce", "intra_node", 8, 2.5e-5, 3.9e11, ((1 << 20, 6e-5), (1 << 30, 0.0028)), 8),),
        host_to_device_bytes_per_s=2.2e10, cpu_adam_params_per_s=1.9e9, aio={"block_size": 1048576})


def upload(client: TestClient, auth: dict[str, str], p: HardwareProfile, query: str = "") -> dict:
    r = client.post(f"/v1/profiles{query}", content=p.to_json(), headers={**UPLOAD_HEADERS, **auth})
    assert r.status_code == 201, r.text
    return r.json()


def test_upload_round_trips_what_the_profiler_wrote(client: TestClient, auth: dict[str, str]) -> None:
    p = profile()
    r = client.post("/v1/profiles", content=p.to_json(), headers={**UPLOAD_HEADERS, **auth})
    assert r.status_code == 201, r.text
    created = r.json()
    assert r.headers["Location"] == f"/v1/profiles/{created['id']}" and len(created["id"]) == 32
    got = client.get(r.headers["Location"])
    assert got.status_code == 200
    body = got.json()
    assert body == created
    assert body["body"] == json.loads(p.to_json())
    assert HardwareProfile.from_dict(body["body"]) == p
    assert body["name"] == "node01 (8 x NVIDIA H100 80GB HBM3)"
    assert (body["gpu_name"], body["gpus_per_node"], body["schema_version"]) == ("NVIDIA H100 80GB HBM3", 8, 2)
    assert "driver 550.54.15" in body["fingerprint"] and "NCCL 2.21.5" in body["fingerprint"]
    assert datetime.fromisoformat(body["measured_at"]) == datetime.fromisoformat(p.fingerprint.created_at)
    named = upload(client, auth, profile(hosts=("a", "b", "c")), "?name=rack-7")
    assert named["name"] == "rack-7"
    assert upload(client, auth, profile(hosts=("a", "b")))["name"] == "a +1 hosts (16 x NVIDIA H100 80GB HBM3)"


def test_list_is_newest_first_and_paged(client: TestClient, auth: dict[str, str]) -> None:
    ids = [upload(client, auth, profile(), f"?name=p{i}")["id"] for i in range(3)]
    page = client.get("/v1/profiles", params={"limit": 2}).json()
    assert [p["id"] for p in page["data"]] == ids[::-1][:2]
    assert (page["count"], page["limit"], page["offset"]) == (3, 2, 0)
    assert "body" not in page["data"][0]
    rest = client.get("/v1/profiles", params={"limit": 2, "offset": 2}).json()
    assert [p["name"] for p in rest["data"]] == ["p0"] and rest["count"] == 3
    r = client.get("/v1/profiles", params={"limit": 0})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "limit"


def test_unknown_profile_is_404_saying_where_to_look(client: TestClient) -> None:
    r = client.get("/v1/profiles/0123456789abcdef")
    assert r.status_code == 404
    item = r.json()["detail"][0]
    assert item["field"] == "profile_id" and "0123456789abcdef" in item["msg"] and "GET /v1/profiles" in item["fix"]


def _with(changes: dict, **fingerprint: object) -> str:
    data = json.loads(profile().to_json())
    data["fingerprint"].update(fingerprint)
    data.update(changes)
    return json.dumps(data)


def test_bad_profiles_are_422_naming_the_field_and_nothing_is_stored(client: TestClient,
                                                                      auth: dict[str, str]) -> None:
    good = json.loads(profile().to_json())
    link = {**good["links"][0], "ranks_per_node": 16}
    cases = [  # (body, field, a word of the message or fix)
        (_with({"schema_version": 3}), "HardwareProfile.schema_version", "re-run `autopar profile`"),
        (json.dumps({k: v for k, v in good.items() if k != "schema_version"}), "HardwareProfile.schema_version",
         "re-run `autopar profile`"),
        (json.dumps({"schema_version": 1}), "fingerprint", "add this field"),
        (_with({}, gpu_count="8"), "fingerprint.gpu_count", "integer"),
        (_with({}, created_at="last tuesday"), "fingerprint.created_at", "ISO 8601"),
        (_with({"colour": "green"}), "colour", "remove this field"),
        (_with({"gemm": [{**good["gemm"][0], "time_s": -1.0}]}), "gemm.0.time_s", "greater than 0"),
        (_with({"links": [link]}), "HardwareProfile.links.ranks_per_node", "GPUs per node"),
        (_with({}).replace('"host_to_device_bytes_per_s": 22000000000.0', '"host_to_device_bytes_per_s": Infinity'),
         "host_to_device_bytes_per_s", "finite"),
        ("[1, 2]", "body", "dictionary"),
    ]
    for text, field, word in cases:
        r = client.post("/v1/profiles", content=text, headers={**UPLOAD_HEADERS, **auth})
        assert r.status_code == 422, (field, r.text)
        item = r.json()["detail"][0]
        assert item["field"] == field, (field, item)
        assert word in item["msg"] + " " + item["fix"], (word, item)
    r = client.post("/v1/profiles", content="{not json", headers={**UPLOAD_HEADERS, **auth})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    assert client.get("/v1/profiles").json()["count"] == 0


def test_upload_needs_a_write_token(client: TestClient, read_token: str) -> None:
    text = profile().to_json()
    r = client.post("/v1/profiles", content=text, headers=UPLOAD_HEADERS)  # what `--upload` sends today
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert "autopar token create --scope write" in r.json()["detail"][0]["fix"]
    r = client.post("/v1/profiles", content=text, headers={**UPLOAD_HEADERS, "Authorization": f"Bearer {read_token}"})
    assert r.status_code == 403 and r.json()["detail"][0]["field"] == "Authorization"
    assert client.get("/v1/profiles").json()["count"] == 0


def test_reads_need_a_token_when_open_reads_is_off(settings: Settings, app_db: Database, read_token: str) -> None:
    closed = settings.model_copy(update={"open_reads": False})
    with TestClient(create_app(closed, db=app_db, migrate=False)) as c:
        for path in ("/v1/profiles", "/v1/profiles/x"):
            assert c.get(path).status_code == 401
        assert c.get("/v1/profiles", headers={"Authorization": f"Bearer {read_token}"}).status_code == 200

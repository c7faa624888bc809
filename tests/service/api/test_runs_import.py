"""POST /v1/runs:import: training logs (text/plain or multipart files) are stored as measured runs
through the same path as POST /v1/runs, on SQLite and PostgreSQL; a log that cannot be read is a
422 naming its file and line and nothing of the request is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.logs import parse_log, run_request

DATA = Path(__file__).parents[1] / "logs" / "data"
LLAMA = "megatron_llama3-8b_tp2_pp2_dp4.log"
TITAN = "torchtitan_llama3-8b_fsdp8_2025.log"
OOM = "megatron_llama2-7b_dp8_oom.log"
URL = "/v1/runs:import"


def _files(*names: str) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [("files", (name, (DATA / name).read_bytes(), "text/plain")) for name in names]


def _stored(client: TestClient, auth: dict[str, str]) -> int:
    count: int = client.get("/v1/runs", headers=auth).json()["count"]
    return count


def test_a_text_log_is_stored_as_post_v1_runs_stores_its_body(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(URL, params={"cluster": "dgx-h100", "name": LLAMA}, content=(DATA / LLAMA).read_bytes(),
                    headers={**auth, "Content-Type": "text/plain"})
    assert r.status_code == 201, r.text
    [item] = r.json()["data"]
    assert (item["file"], item["format"], item["iterations"], item["steady_iterations"]) == (LLAMA, "megatron", 11, 9)
    run = item["run"]
    assert run == client.get(f"/v1/runs/{run['id']}", headers=auth).json()
    assert run["iteration_time_s"] == pytest.approx(7.9024) and run["cluster"]["nodes"] == 2
    assert run["config"]["tp"] == 2 and run["config"]["pp"] == 2 and run["config"]["dp"] == 4
    # the same body through POST /v1/runs: the same prediction and errors
    body = run_request(parse_log((DATA / LLAMA).read_text(), name=LLAMA), cluster={"preset": "dgx-h100"})
    posted = client.post("/v1/runs", json=body, headers=auth).json()
    for key in ("predicted_iteration_time_s", "predicted_peak_memory_bytes", "time_error", "memory_error", "config",
                "model", "training", "framework", "notes"):
        assert posted[key] == run[key], key


def test_multipart_logs_with_form_fields_are_stored_in_order(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post(URL, data={"cluster": "dgx-h100", "notes": "nightly"}, files=_files(TITAN, OOM, LLAMA),
                    headers=auth)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["count"] == 3 and [d["file"] for d in body["data"]] == [TITAN, OOM, LLAMA]
    titan, oom, _ = (d["run"] for d in body["data"])
    assert titan["model"]["preset"] == "llama3-8b" and titan["framework"] == "fsdp"
    assert titan["notes"].startswith("nightly; imported from torchtitan_llama3-8b_fsdp8_2025.log (torchtitan log)")
    assert oom["oom"] is True and oom["iteration_time_s"] is None and oom["oom_agrees"] is not None
    assert _stored(client, auth) == 3


def test_a_bad_log_is_422_naming_each_file_and_line_and_nothing_is_stored(client: TestClient,
                                                                        auth: dict[str, str]) -> None:
    cut = "\n".join((DATA / LLAMA).read_text().splitlines()[:40])
    files = [*_files(TITAN), ("files", ("cut.log", cut.encode(), "text/plain")),
             ("files", ("junk.bin", b"\x89PNG\r\n\x1a\n\x00\x00", "application/octet-stream"))]
    r = client.post(URL, params={"cluster": "dgx-h100"}, files=files, headers=auth)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert [(d["field"], d["loc"]) for d in detail] == [("cut.log:40", ["cut.log", 40]),
                                                         ("junk.bin:1", ["junk.bin", 1])]
    assert "ends inside the argument dump" in detail[0]["msg"] and detail[0]["fix"]
    # a log the cost model refuses (its degrees do not fit the cluster given) stores nothing either
    r = client.post(URL, params={"cluster": "dgx-h100", "nodes": 1}, files=_files(TITAN, LLAMA), headers=auth)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == f"{LLAMA}"
    assert "16 GPUs" in r.json()["detail"][0]["msg"]
    assert _stored(client, auth) == 0


def test_the_defaults_are_checked(client: TestClient, auth: dict[str, str]) -> None:
    def post(params: dict[str, Any], **kw: Any) -> dict[str, Any]:
        r = client.post(URL, params=params, content=(DATA / TITAN).read_bytes(),
                        headers={**auth, "Content-Type": kw.get("content_type", "text/plain")})
        assert r.status_code == 422, r.text
        item: dict[str, Any] = r.json()["detail"][0]
        return item

    assert post({})["field"] == "cluster"
    assert post({"cluster": "dgx-h900"})["field"] == "log: cluster.preset"
    assert post({"cluster": "{not json"})["field"] == "cluster"
    assert post({"cluster": "dgx-h100", "format": "nemo"})["field"] == "format"
    assert post({"cluster": "dgx-h100"}, content_type="application/json")["field"] == "Content-Type"
    assert post({"cluster": "dgx-h100", "model": "llama2-13b"})["msg"].startswith("the log's model is not llama2-13b")
    assert _stored(client, auth) == 0


def test_the_import_route_does_not_collide_with_a_run_id(client: TestClient, auth: dict[str, str],
                                                        read_token: str) -> None:
    assert client.get(URL, headers=auth).status_code == 405  # POST only, not GET /v1/runs/{run_id}
    r = client.get("/v1/runs/:import", headers=auth)
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "run_id"
    body = (DATA / TITAN).read_bytes()
    assert client.post(URL, params={"cluster": "dgx-h100"}, content=body).status_code == 401
    assert client.post(URL, params={"cluster": "dgx-h100"}, content=body,
                       headers={"Authorization": f"Bearer {read_token}"}).status_code == 403


def test_a_retried_import_with_its_key_is_answered_once(client: TestClient, auth: dict[str, str]) -> None:
    headers = {**auth, "Idempotency-Key": "import-1"}
    first = client.post(URL, params={"cluster": "dgx-h100"}, files=_files(TITAN), headers=headers)
    again = client.post(URL, params={"cluster": "dgx-h100"}, files=_files(TITAN), headers=headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers.get("Idempotent-Replayed") == "true" and again.json() == first.json()
    other = client.post(URL, params={"cluster": "dgx-h100"}, files=_files(LLAMA), headers=headers)
    assert other.status_code == 422 and other.json()["detail"][0]["field"] == "Idempotency-Key"
    assert _stored(client, auth) == 1

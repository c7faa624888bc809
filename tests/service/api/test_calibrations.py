"""/v1/calibrations (issue 16): a calibration is fitted on one cluster's stored runs with its
cross-validated error, listed and served; predictions then use the cluster's latest and say so."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from search import (
    Fingerprint,
    GemmSample,
    HardwareProfile,
    ParallelConfig,
    TrainingSpec,
    cluster_preset,
    model_preset,
    predict,
)
from search._calibration import calibration_from_dict
from search._fit import scale_gpu_rates
from service._worker import run_worker
from service.api import Settings
from service.api._calibration_models import CalibrationOut

CLUSTER = {"preset": "dgx-a100-80gb", "nodes": 1}
MODEL = {"preset": "gpt-1.7b"}
SHAPES = [({"tp": 1, "micro_batch": 1}, 64), ({"tp": 2, "micro_batch": 2}, 64), ({"tp": 1, "pp": 2}, 128),
          ({"tp": 4}, 128), ({"tp": 2, "pp": 2, "micro_batch": 2}, 256), ({"tp": 8}, 64)]
SLOWER = 1.3
"""The synthetic cluster runs everything 30 % slower than the published constants predict."""


def _store_runs(client: TestClient, auth: dict[str, str], n: int, cluster: dict = CLUSTER,
                slower: float = SLOWER) -> list[str]:
    ids = []
    for config, batch in SHAPES[:n]:
        spec = {"model": MODEL, "cluster": cluster, "training": {"global_batch": batch}, "config": config}
        published = client.post("/v1/predict", json={**spec, "calibration_id": "published"}).json()
        predicted = published["prediction"]["iteration_time_s"]
        r = client.post("/v1/runs", json={**spec, "iteration_time_s": predicted * slower}, headers=auth)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


def test_a_calibration_is_fitted_stored_listed_and_used_by_predict(client: TestClient, auth: dict[str, str]) -> None:
    run_ids = _store_runs(client, auth, 6)
    _store_runs(client, auth, 2, {"preset": "dgx-h100"})  # another cluster's runs are not used
    spec = {"model": MODEL, "cluster": CLUSTER, "training": {"global_batch": 64}, "config": {"tp": 2}}
    before = client.post("/v1/predict", json=spec).json()
    assert before["calibration"] == {"id": "published", "cv_mape": None, "cluster": None, "n_runs": None,
                                     "defaulted": True, "gpu_rate_scale": 1.0}

    r = client.post("/v1/calibrations", json={"cluster": "dgx-a100-80gb", "k": 3}, headers=auth)
    assert r.status_code == 201, r.text
    cal = CalibrationOut.model_validate(r.json())
    assert r.headers["Location"] == f"/v1/calibrations/{cal.id}"
    assert sorted(cal.run_ids) == sorted(run_ids) and cal.n_runs == 6 and cal.k == 3
    assert cal.cv_mape_before == pytest.approx(1 - 1 / SLOWER, rel=1e-6)  # every run 30 % slower
    assert cal.cv_mape_after < cal.cv_mape_before / 2
    assert cal.moved and "zero3_efficiency" not in cal.moved  # nothing here informs ZeRO-3
    assert len(cal.fingerprint) == 64 and cal.cluster == "dgx-a100-80gb"
    assert client.get(f"/v1/calibrations/{cal.id}").json() == r.json()
    page = client.get("/v1/calibrations", params={"cluster": "dgx-a100-80gb"}).json()
    assert page["count"] == 1 and page["data"][0]["id"] == cal.id
    assert client.get("/v1/calibrations", params={"cluster": "dgx-h100"}).json()["count"] == 0

    after = client.post("/v1/predict", json=spec).json()
    assert after["calibration"]["id"] == cal.id and after["calibration"]["defaulted"] is True
    assert after["calibration"]["cv_mape"] == cal.cv_mape_after
    assert after["prediction"]["iteration_time_s"] > before["prediction"]["iteration_time_s"] * 1.1
    published = client.post("/v1/predict", json={**spec, "calibration_id": "published"}).json()
    assert published["calibration"]["id"] == "published" and published["calibration"]["defaulted"] is False
    assert published["prediction"] == before["prediction"]
    named = client.post("/v1/predict", json={**spec, "calibration_id": cal.id}).json()
    assert named["calibration"]["defaulted"] is False and named["prediction"] == after["prediction"]
    # another cluster has no calibration: the published constants
    other = client.post("/v1/predict", json={**spec, "cluster": {"preset": "dgx-h100"}}).json()
    assert other["calibration"]["id"] == "published"


def test_refusals_name_the_field_and_the_runs_needed(client: TestClient, auth: dict[str, str]) -> None:
    _store_runs(client, auth, 3)
    r = client.post("/v1/calibrations", json={"cluster": "dgx-a100-80gb"}, headers=auth)
    assert r.status_code == 422
    item = r.json()["detail"][0]
    assert item["field"] == "from_runs"
    assert "3 timed runs of cluster 'dgx-a100-80gb' match; a calibration needs at least 5" in item["msg"]
    assert "store 2 more" in item["fix"]
    for body, field in [({}, "cluster"), ({"cluster": "x", "profile_id": "y"}, "cluster"),
                        ({"cluster": "dgx-a100-80gb", "from_runs": "color=red"}, "from_runs"),
                        ({"cluster": "dgx-a100-80gb", "from_runs": "since=yesterday"}, "from_runs"),
                        ({"cluster": "dgx-a100-80gb", "from_runs": "last=0"}, "from_runs")]:
        r = client.post("/v1/calibrations", json=body, headers=auth)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, (body, r.text)
    assert client.post("/v1/calibrations", json={"profile_id": "nope"}, headers=auth).status_code == 404
    assert client.post("/v1/calibrations", json={"cluster": "dgx-a100-80gb"}).status_code == 401
    assert client.get("/v1/calibrations/nope").status_code == 404
    r = client.post("/v1/predict", json={"model": MODEL, "cluster": CLUSTER, "training": {"global_batch": 64},
                                         "calibration_id": "nope"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "calibration_id"
    assert client.get("/v1/calibrations").json()["count"] == 0  # nothing stored by a refusal


def test_searches_carry_their_calibration_to_the_worker_and_are_not_shared_across_calibrations(
        client: TestClient, auth: dict[str, str], settings: Settings) -> None:
    _store_runs(client, auth, 5)
    cal = client.post("/v1/calibrations", json={"cluster": "dgx-a100-80gb", "k": 2}, headers=auth).json()
    body = {"model": MODEL, "cluster": CLUSTER, "training": {"global_batch": 64}, "framework": "megatron", "top": 3}
    first = client.post("/v1/searches", json=body, headers=auth).json()
    assert first["calibration"]["id"] == cal["id"] and first["calibration"]["defaulted"] is True
    assert any(n.startswith(f"calibration: {cal['id']} (the latest of this cluster") for n in first["notes"])
    named = client.post("/v1/searches", json={**body, "calibration_id": cal["id"]}, headers=auth).json()
    assert named["id"] == first["id"]  # the same constants: the same search
    published = client.post("/v1/searches", json={**body, "calibration_id": "published"}, headers=auth).json()
    assert published["id"] != first["id"] and published["calibration"]["id"] == "published"
    assert run_worker(settings, once=True) == 1 and run_worker(settings, once=True) == 1
    ranked = {s["id"]: client.get(f"/v1/searches/{s['id']}/configs").json()["configs"] for s in (first, published)}
    best, best_published = ranked[first["id"]][0], ranked[published["id"]][0]
    constants = calibration_from_dict(cal["constants"])
    spec = (model_preset("gpt-1.7b"), scale_gpu_rates(cluster_preset("dgx-a100-80gb"), cal["gpu_rate_scale"]),
            ParallelConfig(**best["config"]), TrainingSpec(global_batch=64, framework="megatron"))
    assert best["prediction"]["iteration_time_s"] == pytest.approx(predict(*spec, constants).iteration_time_s)
    assert best["prediction"]["iteration_time_s"] > best_published["prediction"]["iteration_time_s"]
    assert client.get(f"/v1/searches/{first['id']}").json()["calibration"]["id"] == cal["id"]


def test_accuracy_reports_error_by_week_and_a_cluster_drifting_from_its_calibration(
        client: TestClient, auth: dict[str, str]) -> None:
    _store_runs(client, auth, 6)
    got = client.get("/v1/runs/accuracy", params={"cluster": "dgx-a100-80gb"}).json()
    assert [w["runs"] for w in got["by_week"]] == [6]
    assert got["by_week"][0]["time_bias"] == pytest.approx(1 / SLOWER - 1)
    assert got["drift"]["calibration_id"] == "published" and not got["drift"]["drifting"]
    assert "autopar calibrate --cluster dgx-a100-80gb" in got["drift"]["advice"]
    assert client.get("/v1/runs/accuracy").json()["drift"] is None

    cal = client.post("/v1/calibrations", json={"cluster": "dgx-a100-80gb", "k": 2}, headers=auth).json()
    got = client.get("/v1/runs/accuracy", params={"cluster": "dgx-a100-80gb"}).json()["drift"]
    assert got["runs"] == 0 and not got["drifting"] and "drift is judged from 3" in got["advice"]
    _store_runs(client, auth, 3)  # the cluster keeps its speed: its new runs match the calibration
    got = client.get("/v1/runs/accuracy", params={"cluster": "dgx-a100-80gb"}).json()["drift"]
    assert got["runs"] == 3 and got["calibration_id"] == cal["id"] and not got["drifting"]
    assert got["recent_time_mape"] <= got["threshold"] and got["advice"].startswith("no drift")
    _store_runs(client, auth, 3, slower=2.0)  # then a software upgrade makes it much slower
    got = client.get("/v1/runs/accuracy", params={"cluster": "dgx-a100-80gb", "window": 3}).json()["drift"]
    assert got["runs"] == 3 and got["drifting"] and got["recent_time_bias"] < -0.2
    assert got["threshold"] == pytest.approx(cal["cv_mape_after"] + max(cal["cv_mape_after"] / 2, 0.03))
    assert "recalibrate with `autopar calibrate --cluster dgx-a100-80gb`" in got["advice"]


def test_a_profile_calibration_is_fitted_on_the_profile_runs_and_used_with_the_profile(
        client: TestClient, auth: dict[str, str]) -> None:
    profile = HardwareProfile(Fingerprint("NVIDIA A100 SXM4 80GB", 8, 8, datetime.now(UTC).isoformat()),
                              gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0030),))
    r = client.post("/v1/profiles", content=profile.to_json(), headers={"Content-Type": "application/json", **auth})
    assert r.status_code == 201, r.text
    profile_id = r.json()["id"]
    profiled = {**CLUSTER, "profile_id": profile_id}
    _store_runs(client, auth, 5, profiled)
    _store_runs(client, auth, 5)  # the same cluster without the profile: not this calibration's runs
    r = client.post("/v1/calibrations", json={"profile_id": profile_id, "k": 2}, headers=auth)
    assert r.status_code == 201, r.text
    cal = r.json()
    assert cal["profile_id"] == profile_id and cal["n_runs"] == 5 and cal["cluster"] == "dgx-a100-80gb"
    spec = {"model": MODEL, "training": {"global_batch": 64}, "config": {"tp": 2}}
    assert client.post("/v1/predict", json={**spec, "cluster": profiled}).json()["calibration"]["id"] == cal["id"]
    # without the profile the cluster has no calibration of its own yet
    assert client.post("/v1/predict", json={**spec, "cluster": CLUSTER}).json()["calibration"]["id"] == "published"
    assert client.get("/v1/calibrations", params={"profile_id": profile_id}).json()["count"] == 1

"""POST /v1/predict: the prediction search.predict (and ``autopar predict --json``) gives, a 422
naming the field for every invalid combination, and an uploaded profile applied as apply_profile
says."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from search import (
    Fingerprint,
    GemmSample,
    HardwareProfile,
    LinkFit,
    ParallelConfig,
    TrainingSpec,
    apply_profile,
    cluster_preset,
    model_preset,
    predict,
    staleness,
)
from service.api import Settings, create_app
from service.cli import main
from service.store import Database

BODY = {"model": {"preset": "llama3-70b"}, "cluster": {"preset": "dgx-h100", "nodes": 8},
        "training": {"global_batch": 512}, "framework": "megatron",
        "config": {"tp": 8, "pp": 2, "sp": True, "micro_batch": 1, "zero_stage": 1, "recompute": "selective"}}
CONFIG = ParallelConfig(dp=4, tp=8, pp=2, sp=True, micro_batch=1, zero_stage=1, recompute="selective")


def test_prediction_is_search_predict_and_the_cli(client: TestClient, auth: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    r = client.post("/v1/predict", json=BODY, headers=auth)
    assert r.status_code == 200, r.text
    out = r.json()
    expected = predict(model_preset("llama3-70b"), cluster_preset("dgx-h100", 8), CONFIG, TrainingSpec(512))
    assert out["prediction"] == expected.to_dict()
    assert out["prediction"]["feasible"] and out["prediction"]["iteration_time_s"] > 0
    assert out["config"] == {**BODY["config"], "dp": 4, "vp": 1, "cp": 1, "ep": 1, "etp": 1,
                             "offload_optimizer": "none", "offload_param": "none", "tp_comm_overlap": False,
                             "stage_layers": None, "placement": "tp-cp-ep-dp-pp", "tiles": 1,
                             "optimizer_offload_fraction": 1.0, "recompute_layers": None,
                             "activation_offload_layers": 0, "moe_dispatcher": "alltoall", "moe_a2a_overlap": False,
                             "cuda_graphs": "none"}
    assert (out["model"], out["cluster"], out["num_nodes"], out["world_size"]) == ("llama3-70b", "dgx-h100", 8, 64)
    assert out["profile_id"] is None and out["profile_notes"] == out["profile_warnings"] == []
    assert main(["predict", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "8", "--tp", "8", "--pp",
                 "2", "--sp", "--zero-stage", "1", "--recompute", "selective", "--global-batch", "512",
                 "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli.pop("calibration") == out["calibration"] and cli == out["prediction"]
    again = client.post("/v1/predict", json={**BODY, "config": out["config"]}, headers=auth)
    assert again.json() == out, "the resolved config posts back to the same prediction"


def _body(**changes: object) -> dict:
    return {**BODY, **changes}


def test_invalid_combinations_are_422_naming_the_field(client: TestClient, auth: dict[str, str]) -> None:
    cases = [  # (body, the field named, a word of the message or fix)
        (_body(model={"preset": "llama2-13b"}, cluster={"preset": "dgx-h100", "nodes": 2}, config={"tp": 16}),
         "config.tp", "heads=40"),
        (_body(config={"tp": 8, "pp": 3}), "config.dp", "divide"),
        (_body(config={"dp": 2, "tp": 8, "pp": 2}), "config", "64 GPUs"),
        (_body(training={"global_batch": 510}), "training.global_batch", "multiple of 4"),
        (_body(config={"sp": True}), "config.sp", "tp > 1"),
        (_body(config={"pp": 1, "vp": 2, "tp": 8}), "config.vp", "pp"),
        (_body(framework="deepspeed"), "framework", "tensor"),
        (_body(model={"preset": "gpt-5"}), "model.preset", "llama3-70b"),
        (_body(cluster={"preset": "dgx-z", "nodes": 8}), "cluster.preset", "/v1/presets/clusters"),
        (_body(cluster={"preset": "dgx-a100-80gb", "nodes": 8}, training={"global_batch": 512, "precision": "fp8"}),
         "training.precision", "bf16"),
        (_body(cluster={"preset": "dgx-h100", "nodes": 8, "profile_id": "nope"}), "cluster.profile_id", "upload"),
        (_body(model={"preset": "llama3-70b", "shape": {"layers": 2, "hidden": 64, "heads": 4, "ffn": 256,
                                                        "vocab": 100, "seq_len": 128}}), "model", "exactly one"),
        (_body(model={"shape": {"layers": 2, "hidden": 64, "heads": 5, "ffn": 256, "vocab": 100, "seq_len": 128}}),
         "model.shape.heads", "hidden"),
        (_body(config={"tpp": 2}), "config.tpp", "remove this field"),
        (_body(colour="green"), "colour", "remove this field"),
        (_body(config={"tp": -1}), "config.tp", "greater than or equal to 1"),
        (_body(cluster={"preset": "dgx-h100", "nodes": 0}), "cluster.nodes", "greater than or equal to 1"),
        (_body(training={"global_batch": 1.5}), "training.global_batch", "integer"),
        (_body(training={"global_batch": True}), "training.global_batch", "integer"),  # strict: true is not 1
        (_body(training={"global_batch": "512"}), "training.global_batch", "integer"),
        ({k: v for k, v in BODY.items() if k != "training"}, "training", "add this field"),
    ]
    for body, field, word in cases:
        r = client.post("/v1/predict", json=body, headers=auth)
        assert r.status_code == 422, (field, r.text)
        item = r.json()["detail"][0]
        assert item["field"] == field, (field, item)
        assert word in item["msg"] + " " + item["fix"], (word, item)


def _h100_profile(age_days: float, gpu_name: str) -> HardwareProfile:
    created = (datetime.now(UTC) - timedelta(days=age_days)).isoformat(timespec="seconds")
    return HardwareProfile(
        fingerprint=Fingerprint(gpu_name, 8, 8, created, hostnames=("node01",)),
        gemm=(GemmSample(8192, 8192, 8192, "bf16", 0.0016), GemmSample(2048, 2048, 2048, "bf16", 0.00004)),
        links=(LinkFit("all_reduce", "intra_node", 8, 2.5e-5, 3.1e11, (), 8),
               LinkFit("all_reduce", "inter_node", 16, 4e-5, 4.0e10, (), 2)),
        host_to_device_bytes_per_s=2.2e10)


def test_an_uploaded_profile_changes_the_prediction_as_apply_profile_says(client: TestClient,
                                                                           auth: dict[str, str]) -> None:
    fresh = _h100_profile(1, "NVIDIA H100 SXM5 80GB")
    r = client.post("/v1/profiles", content=fresh.to_json(), headers={"Content-Type": "application/json", **auth})
    assert r.status_code == 201, r.text
    profile_id = r.json()["id"]
    cluster = {"preset": "dgx-h100", "nodes": 8, "profile_id": profile_id}
    out = client.post("/v1/predict", json=_body(cluster=cluster), headers=auth).json()
    measured, notes = apply_profile(cluster_preset("dgx-h100", 8), fresh)
    expected = predict(model_preset("llama3-70b"), measured, CONFIG, TrainingSpec(512))
    plain = predict(model_preset("llama3-70b"), cluster_preset("dgx-h100", 8), CONFIG, TrainingSpec(512))
    assert out["prediction"] == expected.to_dict()
    assert out["prediction"]["iteration_time_s"] != plain.iteration_time_s
    assert out["profile_id"] == profile_id and out["profile_notes"] == list(notes) and notes
    assert out["profile_warnings"] == []

    old = _h100_profile(400, "NVIDIA A100-SXM4-80GB")
    old_id = client.post("/v1/profiles", content=old.to_json(),
                         headers={"Content-Type": "application/json", **auth}).json()["id"]
    out = client.post("/v1/predict", json=_body(cluster={**cluster, "profile_id": old_id}), headers=auth).json()
    assert out["profile_warnings"] == list(staleness(old, cluster_preset("dgx-h100", 8)))
    assert any("days ago" in w for w in out["profile_warnings"])
    assert any("A100" in w for w in out["profile_warnings"])


def test_predict_is_a_read(client: TestClient, read_token: str, settings: Settings, app_db: Database) -> None:
    """Predict stores nothing: a read token suffices, and no token while reads are open."""
    assert client.post("/v1/predict", json=BODY).status_code == 200
    assert client.post("/v1/predict", json=BODY, headers={"Authorization": f"Bearer {read_token}"}).status_code == 200
    closed = settings.model_copy(update={"open_reads": False})
    with TestClient(create_app(closed, db=app_db, migrate=False)) as c:
        r = c.post("/v1/predict", json=BODY)
        assert r.status_code == 401 and r.json()["detail"][0]["field"] == "Authorization"
        assert c.post("/v1/predict", json=BODY, headers={"Authorization": f"Bearer {read_token}"}).status_code == 200

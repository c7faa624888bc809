"""The API takes the fine-grained memory policies, tiling and the host safety factor (issues 18, 20)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

GPT_2T = {"name": "gpt-2t", "layers": 160, "hidden": 32768, "heads": 256, "ffn": 131072, "vocab": 51200,
          "seq_len": 1024}
ZERO3_CPU = {"zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "cpu", "recompute": "full"}


def _predict(client: TestClient, auth: dict[str, str], **extra: Any) -> Any:
    body = {"model": {"shape": GPT_2T}, "cluster": {"preset": "dgx-2", "nodes": 32},
            "training": {"global_batch": 512, "precision": "fp16"}, "framework": "deepspeed",
            "config": ZERO3_CPU, **extra}
    return client.post("/v1/predict", json=body, headers=auth)


def test_host_memory_and_its_safety_factor(client: TestClient, auth: dict[str, str]) -> None:
    plain = _predict(client, auth)
    assert plain.status_code == 200, plain.text
    p = plain.json()["prediction"]
    assert p["feasible"] and p["host_estimator_margin_bytes"] > 0
    assert set(p["cpu_memory_breakdown_bytes"]) >= {"optimizer_states", "parameters", "runtime_reserved"}
    strict = _predict(client, auth, host_safety_factor=1.5)
    assert strict.status_code == 200 and not strict.json()["prediction"]["feasible"]
    bad = _predict(client, auth, host_safety_factor=0.5)
    assert bad.status_code == 422 and "host_safety_factor" in bad.text


def test_a_partial_policy_is_refused_where_the_runtime_lacks_it(client: TestClient, auth: dict[str, str]) -> None:
    answer = _predict(client, auth, config={**ZERO3_CPU, "zero_stage": 2, "offload_param": "none",
                                           "optimizer_offload_fraction": 0.5})
    assert answer.status_code == 422 and "optimizer_offload_fraction" in answer.text
    tiled = _predict(client, auth, config={**ZERO3_CPU, "tiles": 4})
    assert tiled.status_code == 200 and tiled.json()["config"]["tiles"] == 4

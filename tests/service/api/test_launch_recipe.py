"""The launch endpoint's training recipe (query parameters -> the framework's flags, placeholders and notes
for what is missing) and models given as a Hugging Face config.json (``model.hf_config``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service._worker import run_worker
from service.api import Settings
from service.api._search_models import LaunchOut

ROOT = Path(__file__).parents[3]
LLAMA31 = json.loads((ROOT / "examples/hf/llama-3.1-8b/config.json").read_text())
MIXTRAL = json.loads((ROOT / "examples/hf/mixtral-8x7b/config.json").read_text())


def search(client: TestClient, settings: Settings, auth: dict[str, str], model: dict[str, Any],
           framework: str = "megatron") -> str:
    r = client.post("/v1/searches", headers=auth, json={"model": model, "cluster": {"preset": "dgx-h100", "nodes": 1},
                                                        "training": {"global_batch": 64}, "framework": framework,
                                                        "top": 2})
    assert r.status_code == 202, r.text
    assert run_worker(settings, once=True) == 1
    return f"{r.headers['location']}/configs/1/launch"


def test_recipe_from_query_parameters(client: TestClient, settings: Settings, auth: dict[str, str]) -> None:
    launch = search(client, settings, auth, {"preset": "llama3-8b"})
    params = {"target": "megatron", "data_path": ["0.7", "/data/a_text_document", "0.3", "/data/b_text_document"],
              "tokenizer": "meta-llama/Meta-Llama-3-8B", "lr": 3e-4, "min_lr": 3e-5, "train_iters": 5000,
              "save": "/ckpt/run", "save_interval": 250, "lr_schedule": "linear"}
    out = LaunchOut.model_validate(client.get(launch, params=params).json())
    args = out.files["megatron_args.txt"].splitlines()
    assert args[args.index("--data-path") + 1:args.index("--split")] == params["data_path"]
    for flag, value in (("--tokenizer-model", "meta-llama/Meta-Llama-3-8B"), ("--lr", "0.0003"),
                        ("--min-lr", "3e-05"), ("--train-iters", "5000"), ("--lr-decay-style", "linear"),
                        ("--save", "/ckpt/run"), ("--save-interval", "250"), ("--load", "/ckpt/run"),
                        ("--rotary-base", "500000"), ("--lr-warmup-iters", "50")):
        assert args[args.index(flag) + 1] == value, flag
    assert out.notes == []  # nothing left to the environment
    bare = LaunchOut.model_validate(client.get(launch, params={"target": "torchrun"}).json())
    assert "${LR:?autopar: set LR" in bare.files["launch_torchrun.sh"]
    assert bare.notes and "DATA_PATH, TOKENIZER, LR, TRAIN_ITERS" in bare.notes[0]
    refused = client.get(launch, params={"target": "megatron", "lr": 1e-4, "min_lr": 1e-3})
    assert refused.status_code == 422 and refused.json()["detail"][0]["field"] == "min_lr"
    assert client.get(launch, params={"target": "megatron", "lr": -1}).status_code == 422


def test_models_from_a_config_json(client: TestClient, settings: Settings, auth: dict[str, str]) -> None:
    launch = search(client, settings, auth, {"hf_config": LLAMA31, "name": "llama-3.1-8b", "seq_len": 8192})
    args = client.get(launch, params={"target": "megatron"}).json()["files"]["megatron_args.txt"].splitlines()
    assert "--use-rope-scaling" in args and args[args.index("--rope-scaling-factor") + 1] == "8.0"
    assert args[args.index("--seq-length") + 1] == "8192"
    r = client.post("/v1/searches", headers=auth, json={"model": {"hf_config": {**MIXTRAL, "sliding_window": 1024},
                                                                  "seq_len": 4096},
                                                        "cluster": {"preset": "dgx-h100"},
                                                        "training": {"global_batch": 64}})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["field"] == "model.hf_config.sliding_window" and "window" in detail["msg"]
    moe = client.post("/v1/searches", headers=auth, json={"model": {"hf_config": MIXTRAL, "seq_len": 4096},
                                                          "cluster": {"preset": "dgx-h100"},
                                                          "training": {"global_batch": 64}})
    assert moe.status_code == 202, moe.text  # a mixture of experts is read, not refused
    both = client.post("/v1/searches", headers=auth, json={"model": {"preset": "llama3-8b", "hf_config": LLAMA31},
                                                           "cluster": {"preset": "dgx-h100"},
                                                           "training": {"global_batch": 64}})
    assert both.status_code == 422
    predicted = client.post("/v1/predict", json={"model": {"preset": "llama3-8b", "seq_len": 4096},
                                                 "cluster": {"preset": "dgx-h100"}, "training": {"global_batch": 64},
                                                 "config": {"tp": 1}})
    assert predicted.status_code == 200, predicted.text

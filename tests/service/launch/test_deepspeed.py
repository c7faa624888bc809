"""ds_config emission: every emitted config passes autopar's rules and DeepSpeed's own classes (run on CPU);
what DeepSpeed's classes refuse, autopar's rules (which emission uses, without DeepSpeed) refuse too."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

import search
from service.launch._base import LaunchRequest
from service.launch._deepspeed import (
    check_ds_config,
    deepspeed_classes_check,
    ds_config,
    emit_deepspeed,
    refuse_ds_config,
)
from service.launch._recipe import TrainingRecipe
from tests.service.launch.enumerated import DEEPSPEED_MODEL, deepspeed_grid

GOLDEN = Path(__file__).parent / "golden"
SMALL = DEEPSPEED_MODEL


def _request(framework: str, config: search.ParallelConfig, precision: str = "bf16",
             profile: search.HardwareProfile | None = None, recipe: TrainingRecipe | None = None) -> LaunchRequest:
    return LaunchRequest(model=SMALL, cluster=search.cluster_preset("dgx-h100"), config=config,
                         training=search.TrainingSpec(global_batch=32, precision=precision,  # type: ignore[arg-type]
                                                      framework=framework),  # type: ignore[arg-type]
                         profile=profile, recipe=recipe or TrainingRecipe())


@pytest.mark.parametrize(("framework", "config"), deepspeed_grid())
def test_grid_accepted_by_deepspeed(framework: str, config: search.ParallelConfig) -> None:
    precision = "fp16" if config.micro_batch == 2 else "bf16"
    out = emit_deepspeed(_request(framework, config, precision))
    assert out.command == "" and out.env == {}
    cfg = json.loads(out.files["ds_config.json"])
    assert cfg["train_batch_size"] == 32
    assert cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * config.dp == 32
    assert cfg["zero_optimization"]["stage"] == config.zero_stage
    assert ("aio" in cfg) == ("nvme" in (config.offload_optimizer, config.offload_param))
    assert ("activation_checkpointing" in cfg) == (config.recompute != "none")
    check_ds_config(cfg, config.dp)  # runs DeepSpeedZeroConfig and DeepSpeedConfig(mpu=dp) again


def _base() -> dict[str, Any]:
    return ds_config(_request("deepspeed", search.ParallelConfig(dp=8, micro_batch=2, zero_stage=3)))


def _bad(path: str, value: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(_base())
    *parents, leaf = path.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value
    return cfg


@pytest.mark.parametrize(("cfg", "key"), [
    (_bad("zero_optimization", {"stage": 2, "offload_param": {"device": "cpu"}}), "offload_param"),
    (_bad("zero_optimization", {"stage": 0, "offload_optimizer": {"device": "cpu"}}), "offload_optimizer"),
    (_bad("zero_optimization.offload_optimizer", {"device": "nvme"}), "offload_optimizer.nvme_path"),
    (_bad("zero_optimization.offload_param", {"device": "nvme"}), "offload_param.nvme_path"),
    (_bad("train_batchsize", 32), "train_batchsize"),
    (_bad("bf16.enabled", "yes"), "bf16.enabled"),
])
def test_refuses_what_deepspeed_silently_accepts(cfg: dict[str, Any], key: str) -> None:
    check_ds_config(_base(), 8)
    with pytest.raises(search.SpecError, match=key.replace(".", r"\.")) as info:
        check_ds_config(cfg, 8)
    assert key in info.value.field


@pytest.mark.parametrize(("cfg", "words", "ours"), [
    (_bad("zero_optimization.stage", 4), "stage", "zero_optimization.stage"),
    (_bad("train_batch_size", 64), "train_batch_size is not equal", "train_batch_size"),
    (_bad("zero_optimization.offload_optimizer", {"device": "disk"}), "device",
     "zero_optimization.offload_optimizer.device"),
    (_bad("fp16", {"enabled": True}), "cannot be simultaneously enabled", "bf16"),
    (_bad("train_micro_batch_size_per_gpu", 0), "Micro batch size", "train_batch_size"),
])
def test_what_deepspeed_refuses_autopar_refuses_without_it(cfg: dict[str, Any], words: str, ours: str) -> None:
    """The rules emission runs without DeepSpeed cover what DeepSpeed's own classes refuse here."""
    with pytest.raises(search.SpecError, match=words) as info:
        deepspeed_classes_check(cfg, 8)
    assert info.value.field == "ds_config"
    with pytest.raises(search.SpecError) as info:
        refuse_ds_config(cfg, 8)
    assert info.value.field == f"ds_config.{ours}"


def test_a_misspelt_zero_key_is_refused_by_deepspeed() -> None:
    cfg = _bad("zero_optimization.stage3_prefetch_bucket_sise", 1)
    with pytest.raises(search.SpecError, match="stage3_prefetch_bucket_sise") as info:
        check_ds_config(cfg, 8)
    assert info.value.field == "ds_config"


def test_batch_checked_against_real_dp() -> None:
    cfg = _base()
    check_ds_config(cfg, 8)
    with pytest.raises(search.SpecError, match="train_batch_size is not equal"):
        deepspeed_classes_check(cfg, 4)
    with pytest.raises(search.SpecError, match="data-parallel size 4"):
        refuse_ds_config(cfg, 4)


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_plain_deepspeed_optimizer_and_schedule_from_the_recipe(schedule: str) -> None:
    """Plain DeepSpeed: the ds_config is where its optimizer lives (once); none without a learning rate."""
    config = search.ParallelConfig(dp=8, micro_batch=2, zero_stage=2)
    bare = emit_deepspeed(_request("deepspeed", config))
    assert "optimizer" not in json.loads(bare.files["ds_config.json"])
    assert any("no optimizer" in note for note in bare.notes)
    recipe = TrainingRecipe(lr=3e-4, min_lr=3e-5, lr_schedule=schedule, train_iters=1000,  # type: ignore[arg-type]
                            tensorboard_dir="tb", log_interval=5, clip_grad=0.5)
    out = emit_deepspeed(_request("deepspeed", config, recipe=recipe))
    cfg = json.loads(out.files["ds_config.json"])
    check_ds_config(cfg, 8)
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                            "weight_decay": 0.1}}
    assert cfg["scheduler"]["type"] == {"cosine": "WarmupCosineLR", "linear": "WarmupDecayLR",
                                        "constant": "WarmupLR"}[schedule]
    assert cfg["scheduler"]["params"]["warmup_num_steps"] == 10
    assert (cfg["steps_per_print"], cfg["gradient_clipping"], cfg["tensorboard"]["output_path"]) == (5, 0.5, "tb")
    from deepspeed.runtime import lr_schedules

    torch = pytest.importorskip("torch")
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    scheduler = getattr(lr_schedules, cfg["scheduler"]["type"])(optimizer, **cfg["scheduler"]["params"])
    for _ in range(11):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(3e-4, rel=1e-2)  # warmed up to the peak
    # Megatron-DeepSpeed builds the optimizer from its own arguments: none in the ds_config
    md = emit_deepspeed(_request("megatron-deepspeed", config, recipe=recipe))
    assert {"optimizer", "scheduler"}.isdisjoint(json.loads(md.files["ds_config.json"])) and md.notes == ()


def test_aio_from_profile() -> None:
    fp = search.Fingerprint(gpu_name="H100", gpu_count=8, gpus_per_node=8, created_at="2026-01-01T00:00:00Z")
    profile = search.HardwareProfile(fingerprint=fp, aio={"block_size": 262144, "queue_depth": 32,
                                                          "intra_op_parallelism": 4, "single_submit": False,
                                                          "overlap_events": True})
    config = search.ParallelConfig(dp=8, micro_batch=1, zero_stage=3, offload_optimizer="nvme", offload_param="nvme")
    cfg = json.loads(emit_deepspeed(_request("deepspeed", config, profile=profile)).files["ds_config.json"])
    assert cfg["aio"] == profile.aio
    assert "thread_count" not in cfg["aio"]


def test_refuses_what_deepspeed_cannot_express() -> None:
    with pytest.raises(search.SpecError, match="framework"):
        emit_deepspeed(_request("deepspeed", search.ParallelConfig(dp=4, tp=2)))
    with pytest.raises(search.SpecError, match="fp8"):
        emit_deepspeed(_request("deepspeed", search.ParallelConfig(dp=8), precision="fp8"))
    emit_deepspeed(_request("megatron-deepspeed", search.ParallelConfig(dp=4, tp=2)))


def _golden_13b() -> LaunchRequest:
    model = search.ModelSpec(name="gpt-13b", layers=40, hidden=5120, heads=40, ffn=20480, vocab=50257, seq_len=1024)
    cluster = search.cluster_preset("dgx-2")
    cluster = dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, gpus_per_node=1))
    config = search.ParallelConfig(dp=1, micro_batch=4, zero_stage=2, offload_optimizer="cpu", recompute="full")
    return LaunchRequest(model=model, cluster=cluster, config=config,
                         training=search.TrainingSpec(global_batch=4, precision="fp16", framework="deepspeed"))


def _golden_1t() -> LaunchRequest:
    config = search.ParallelConfig(dp=16, micro_batch=1, zero_stage=3, offload_optimizer="nvme",
                                   offload_param="nvme", recompute="full")
    return LaunchRequest(model=search.model_preset("gpt-1t"), cluster=search.cluster_preset("dgx-2"), config=config,
                         training=search.TrainingSpec(global_batch=16, precision="fp16", framework="deepspeed"))


@pytest.mark.parametrize(("name", "request_"), [("ds_13b_zero2_cpu_offload_1gpu.json", _golden_13b()),
                                                ("ds_1t_zero3_nvme_dgx2.json", _golden_1t())])
def test_golden(name: str, request_: LaunchRequest) -> None:
    text = emit_deepspeed(request_).files["ds_config.json"]
    path = GOLDEN / name
    if os.environ.get("AUTOPAR_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text()


def test_tiling_is_a_note_for_the_model_code_and_the_config_stays_valid() -> None:
    """ds_config has no tiling key: the launch says the model code must use TiledLinear (issue 20)."""
    tiled = dataclasses.replace(_golden_1t().config, tiles=16)
    request_ = dataclasses.replace(_golden_1t(), config=tiled)
    out = emit_deepspeed(request_)
    assert out.files["ds_config.json"] == emit_deepspeed(_golden_1t()).files["ds_config.json"]
    assert any("TiledLinear" in n and "a*b = 16" in n for n in out.notes)
    assert not any("TiledLinear" in n for n in emit_deepspeed(_golden_1t()).notes)
    check_ds_config(json.loads(out.files["ds_config.json"]), tiled.dp)

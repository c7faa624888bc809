"""The fine-grained memory policies in each runtime's own flags and keys (issue 18): Megatron's
arguments pass the pinned flag list and autopar's offline copy of validate_args; DeepSpeed's
ds_config passes DeepSpeed's own config classes."""

from __future__ import annotations

import dataclasses
import json

import pytest

import search
from service.launch._base import LaunchRequest
from service.launch._deepspeed import check_ds_config, emit_deepspeed
from service.launch._megatron import megatron_args
from service.launch._megatron_checks import check_megatron_args
from service.launch._megatron_flags import megatron_flags


def _megatron(config: search.ParallelConfig) -> list[str]:
    model = dataclasses.replace(search.model_preset("llama3-70b"), seq_len=8192)
    request = LaunchRequest(model=model, cluster=search.cluster_preset("dgx-a100-40gb", 2), config=config,
                            training=search.TrainingSpec(512))
    argv = megatron_args(request)
    check_megatron_args(argv, config.world_size)
    assert all(a in megatron_flags() for a in argv if a.startswith("--"))
    return argv


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_block_recomputation_of_k_layers() -> None:
    argv = _megatron(search.ParallelConfig(dp=1, tp=8, pp=2, sp=True, zero_stage=1, recompute="full",
                                           recompute_layers=17))
    assert (_after(argv, "--recompute-granularity"), _after(argv, "--recompute-method"),
            _after(argv, "--recompute-num-layers")) == ("full", "block", "17")
    every = _megatron(search.ParallelConfig(dp=1, tp=8, pp=2, sp=True, zero_stage=1, recompute="full"))
    assert _after(every, "--recompute-method") == "uniform" and _after(every, "--recompute-num-layers") == "1"


def test_partial_optimizer_offload_fraction() -> None:
    argv = _megatron(search.ParallelConfig(dp=1, tp=8, pp=2, sp=True, zero_stage=1, offload_optimizer="cpu",
                                           optimizer_offload_fraction=0.35, recompute="full"))
    assert "--optimizer-cpu-offload" in argv and _after(argv, "--optimizer-offload-fraction") == "0.35"
    whole = _megatron(search.ParallelConfig(dp=1, tp=8, pp=2, sp=True, zero_stage=1, offload_optimizer="cpu",
                                            recompute="full"))
    assert "--optimizer-offload-fraction" not in whole


def test_activation_offload_layers() -> None:
    argv = _megatron(search.ParallelConfig(dp=2, tp=8, sp=True, zero_stage=1, activation_offload_layers=40))
    assert _after(argv, "--cpu-offloading-num-layers") == "40"
    assert "--recompute-granularity" not in argv


@pytest.mark.parametrize("ratio", [0.25, 0.9])
def test_deepspeed_offload_ratio_passes_deepspeeds_config_classes(ratio: float) -> None:
    config = search.ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu", optimizer_offload_fraction=ratio,
                                   recompute="full")
    request = LaunchRequest(model=search.model_preset("gpt-7.5b"), cluster=search.cluster_preset("dgx-a100-80gb"),
                            config=config, training=search.TrainingSpec(64, framework="deepspeed"))
    cfg = json.loads(emit_deepspeed(request).files["ds_config.json"])
    assert cfg["zero_optimization"]["offload_optimizer"]["ratio"] == ratio
    check_ds_config(cfg, 8)  # DeepSpeedZeroConfig / DeepSpeedConfig when DeepSpeed is installed (it is in CI)
    cfg["zero_optimization"]["stage"] = 2
    with pytest.raises(Exception, match="Stage 3"):
        check_ds_config(cfg, 8)  # DeepSpeed's own rule: partial offloading only with ZeRO-3

"""Megatron-DeepSpeed: flags exist at the pinned commit, values pass the fork's validate_args rules,
the ds_config beside them is accepted by DeepSpeed and agrees with them."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

import search
from search import SpecError
from service.launch import check_ds_config
from service.launch._base import LaunchRequest
from service.launch._megatron_deepspeed import (
    FLAGS_FILE,
    check_megatron_deepspeed_args,
    emit_megatron_deepspeed,
    megatron_deepspeed_args,
    megatron_deepspeed_flags,
)
from tests.service.launch.enumerated import megatron_deepspeed_sample

GOLDEN = Path(__file__).parent / "golden" / "megatron_deepspeed_llama2_70b_tp8_pp4.txt"
FW = "megatron-deepspeed"

# Flags of examples_deepspeed/pretrain_llama2_distributed.sh and frameworks.md §5 (Megatron-DeepSpeed).
EXPECTED = ["--deepspeed", "--deepspeed_config", "--zero-stage", "--no-pipeline-parallel",
            "--deepspeed-activation-checkpointing", "--recompute-granularity", "--recompute-method",
            "--recompute-num-layers", "--tensor-model-parallel-size", "--pipeline-model-parallel-size",
            "--sequence-parallel", "--micro-batch-size", "--global-batch-size", "--num-key-value-heads",
            "--use-rotary-position-embeddings", "--no-position-embedding", "--normalization", "--swiglu",
            "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--remote-device", "--use-pin-memory",
            "--use-flash-attn-v2", "--bf16", "--fp16"]
ABSENT = ["--context-parallel-size", "--overlap-grad-reduce", "--overlap-param-gather",
          "--num-layers-per-virtual-pipeline-stage-not-a-flag"]


def test_flag_list_is_sorted_pinned_and_has_the_fork_flags() -> None:
    lines = FLAGS_FILE.read_text().splitlines()
    assert lines[0].startswith("# Megatron-DeepSpeed 4efb479d5317ce9b86096b9d8e3e8030b0b5263b megatron/arguments.py")
    flags = lines[1:]
    assert flags == sorted(flags) and len(flags) == len(set(flags))
    for flag in EXPECTED:
        assert flag in megatron_deepspeed_flags(), flag
    for flag in ABSENT:
        assert flag not in megatron_deepspeed_flags(), flag


def _request(model: str, nodes: int, config: search.ParallelConfig, batch: int,
             precision: str = "bf16") -> LaunchRequest:
    return LaunchRequest(model=search.model_preset(model), cluster=search.cluster_preset("dgx-a100-80gb", nodes),
                         config=config, training=search.TrainingSpec(batch, precision, framework=FW))  # type: ignore[arg-type]


@pytest.mark.parametrize("req", megatron_deepspeed_sample(), ids=lambda r: f"{r.model.name}-{r.config}")
def test_enumerated_configs_emit_valid_args_and_ds_config(req: LaunchRequest) -> None:
    out = emit_megatron_deepspeed(req)
    argv = out.files["megatron_deepspeed_args.txt"].splitlines()
    assert argv == megatron_deepspeed_args(req)
    c = req.config
    check_megatron_deepspeed_args(argv, c.world_size, c.zero_stage)
    ds = json.loads(out.files["ds_config.json"])
    check_ds_config(ds, c.dp)
    assert ds["zero_optimization"]["stage"] == c.zero_stage
    assert argv[argv.index("--zero-stage") + 1] == str(c.zero_stage)
    assert argv[argv.index("--deepspeed_config") + 1] == "${LAUNCH_DIR:-.}/ds_config.json"  # no emitting-host path
    assert ds["train_batch_size"] == int(argv[argv.index("--global-batch-size") + 1])
    assert ds["train_micro_batch_size_per_gpu"] == int(argv[argv.index("--micro-batch-size") + 1])
    assert ("--no-pipeline-parallel" in argv) == (c.pp == 1)
    assert ("--deepspeed-activation-checkpointing" in argv) == (c.recompute == "full")
    assert ("--sequence-parallel" in argv) == c.sp
    assert ("--remote-device" in argv) == (c.offload_param != "none")
    assert all(a in megatron_deepspeed_flags() for a in argv if a.startswith("--"))
    words = shlex.split(out.command)
    assert words[0] == "torchrun" and words[words.index("pretrain_gpt.py") + 1:] == argv
    if c.tp > 1:
        assert out.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"  # the fork raises without it when SP is on


def test_zero3_cpu_offload_without_pipeline() -> None:
    cfg = search.ParallelConfig(dp=64, micro_batch=1, zero_stage=3, offload_optimizer="cpu", offload_param="cpu",
                                recompute="full")
    out = emit_megatron_deepspeed(_request("llama2-70b", 8, cfg, 512))
    argv = out.files["megatron_deepspeed_args.txt"].splitlines()
    assert argv[argv.index("--remote-device") + 1] == "cpu" and "--use-pin-memory" in argv
    assert "--no-pipeline-parallel" in argv and argv[argv.index("--zero-stage") + 1] == "3"
    ds = json.loads(out.files["ds_config.json"])
    assert ds["zero_optimization"]["offload_param"]["device"] == "cpu"


BASE = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--num-layers", "8",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--num-attention-heads", "8",
        "--deepspeed", "--deepspeed_config", "ds_config.json", "--zero-stage", "1"]


@pytest.mark.parametrize(("extra", "world", "stage", "needle"), [
    (["--context-parallel-size", "2"], 8, None, "not an argument"),
    (["--overlap-grad-reduce"], 8, None, "not an argument"),
    (["--tensor-model-parallel-size", "3"], 8, None, "not divisible by tensor parallel size"),
    (["--global-batch-size", "7"], 8, None, "global batch size"),
    (["--no-pipeline-parallel"], 8, None, "pipeline parallel is disabled"),
    (["--zero-stage", "2"], 8, None, "pipeline engine"),
    ([], 8, 0, "differs from the ds_config"),
    (["--num-layers-per-virtual-pipeline-stage", "2"], 8, None, "interleaved"),
    (["--recompute-granularity", "selective", "--recompute-method", "uniform"], 8, None, "selective"),
    (["--tensor-model-parallel-size", "1", "--sequence-parallel"], 8, None, "--sequence-parallel"),
    (["--num-key-value-heads", "3"], 8, None, "num_key_value_heads"),
    (["--fp16", "--bf16"], 8, None, "exclusive"),
    (["--lr", "1e-4", "--min-lr", "1e-3"], 8, None, "--min-lr"),
    (["--save", "/ckpt"], 8, None, "--save-interval"),
    (["--lr-warmup-iters", "10", "--lr-warmup-fraction", "0.01"], 8, None, "lr-warmup"),
    (["--rotary-position-embeddings-theta", "5e5"], 8, None, "not an integer"),
])
def test_validate_rules_refuse(extra: list[str], world: int, stage: int | None, needle: str) -> None:
    check_megatron_deepspeed_args(BASE, 8, 1)
    with pytest.raises(SpecError, match="megatron_deepspeed_args") as err:
        check_megatron_deepspeed_args([*BASE, *extra], world, stage)
    assert needle in str(err.value)


def test_deepspeed_flags_are_required() -> None:
    with pytest.raises(SpecError, match="--deepspeed"):
        check_megatron_deepspeed_args([*BASE[:-5], "--zero-stage", "1"], 8)


@pytest.mark.parametrize(("cfg", "precision", "field"), [
    (search.ParallelConfig(dp=32, cp=2, micro_batch=1), "bf16", "ParallelConfig.cp"),
    (search.ParallelConfig(dp=16, pp=4, vp=2, micro_batch=1), "bf16", "ParallelConfig.vp"),
    (search.ParallelConfig(dp=16, pp=4, micro_batch=1, zero_stage=2), "bf16", "ParallelConfig.zero_stage"),
    (search.ParallelConfig(dp=64, micro_batch=1), "fp8", "TrainingSpec.precision"),
])
def test_refuses_what_the_fork_cannot_run(cfg: search.ParallelConfig, precision: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        megatron_deepspeed_args(_request("llama2-70b", 8, cfg, 512, precision))
    assert err.value.field == field


def test_refuses_alibi_and_other_frameworks() -> None:
    bloom = LaunchRequest(model=search.model_preset("bloom-176b"), cluster=search.cluster_preset("dgx-a100-80gb", 48),
                          config=search.ParallelConfig(dp=8, tp=4, pp=12, micro_batch=2, zero_stage=1),
                          training=search.TrainingSpec(2048, framework=FW))
    with pytest.raises(SpecError, match="ALiBi") as err:
        megatron_deepspeed_args(bloom)
    assert err.value.field == "ModelSpec.position_embedding"
    req = _request("gpt-7.5b", 1, search.ParallelConfig(dp=8), 64)
    other = LaunchRequest(model=req.model, cluster=req.cluster, config=req.config,
                          training=search.TrainingSpec(64, framework="megatron"))
    with pytest.raises(SpecError, match="framework"):
        megatron_deepspeed_args(other)


def test_golden_llama2_70b_tp8_pp4() -> None:
    """Llama 2 70B on 16 DGX A100 nodes through the DeepSpeed pipeline engine, ZeRO-1, full recompute;
    compared by hand with examples_deepspeed/pretrain_llama2_distributed.sh (same flag spellings for
    GQA, RoPE, RMSNorm, SwiGLU, untied head, no bias, recompute and the --deepspeed trio)."""
    cfg = search.ParallelConfig(dp=4, tp=8, pp=4, sp=True, micro_batch=1, zero_stage=1, recompute="full")
    out = emit_megatron_deepspeed(_request("llama2-70b", 16, cfg, 1024))
    text = (out.files["megatron_deepspeed_args.txt"] + "# ds_config.json\n" + out.files["ds_config.json"]
            + "# command\n" + out.command + "\n")
    if os.environ.get("AUTOPAR_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()

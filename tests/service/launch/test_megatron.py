"""Megatron-LM pretrain_gpt.py arguments: flags exist at the pinned release, values pass validate_args' rules."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

import search
from search import SpecError
from service.launch._base import LaunchRequest
from service.launch._megatron import emit_megatron, megatron_args
from service.launch._megatron_checks import check_megatron_args
from service.launch._megatron_flags import FLAGS_FILE, megatron_flags
from tests.service.launch.enumerated import megatron_sample

GOLDEN = Path(__file__).parent / "golden" / "megatron_gpt3_175b_tp8_pp8.txt"

EXPECTED = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
            "--sequence-parallel", "--context-parallel-size", "--micro-batch-size", "--global-batch-size",
            "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--use-distributed-optimizer",
            "--overlap-grad-reduce", "--overlap-param-gather", "--bf16", "--fp16", "--num-layers", "--hidden-size",
            "--num-attention-heads", "--ffn-hidden-size", "--seq-length", "--max-position-embeddings",
            "--num-query-groups", "--group-query-attention", "--swiglu", "--normalization",
            "--position-embedding-type", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
            "--attention-dropout", "--hidden-dropout"]


def test_flag_list_is_sorted_pinned_and_complete() -> None:
    lines = FLAGS_FILE.read_text().splitlines()
    assert lines[0] == "# megatron-core 0.19.2 megatron/training/arguments.py"
    flags = lines[1:]
    assert flags == sorted(flags) and len(flags) == len(set(flags))
    assert all(f.startswith("--") for f in flags)
    for flag in EXPECTED:
        assert flag in megatron_flags(), flag
    assert "--virtual-pipeline-model-parallel-size" not in megatron_flags()


@pytest.mark.parametrize("req", megatron_sample(), ids=lambda r: f"{r.model.name}-{r.config}")
def test_enumerated_configs_emit_valid_args(req: LaunchRequest) -> None:
    out = emit_megatron(req)
    argv = out.files["megatron_args.txt"].splitlines()
    assert argv == megatron_args(req)
    check_megatron_args(argv, req.config.world_size)
    assert all(a in megatron_flags() for a in argv if a.startswith("--"))
    words = shlex.split(out.command)
    assert words[0] == "torchrun" and words[words.index("pretrain_gpt.py") + 1:] == argv
    c = req.config
    vp_flags = {"--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                "--pipeline-model-parallel-layout"}
    assert bool(vp_flags & set(argv)) == (c.vp > 1 or "--pipeline-model-parallel-layout" in argv)
    split_flags = {"--decoder-first-pipeline-num-layers", "--account-for-embedding-in-pipeline-split",
                   "--pipeline-model-parallel-layout"}
    assert bool(split_flags & set(argv)) == (c.stage_layers is not None)  # an uneven layout is spelled
    assert ("--sequence-parallel" in argv) == c.sp
    assert ("--use-distributed-optimizer" in argv) == (c.zero_stage >= 1)
    assert ("--overlap-param-gather" in argv) == (c.zero_stage >= 1 and c.dp > 1)
    # validate_args: 1 with tp/cp > 1, but Megatron-FSDP (zero >= 2) refuses 1.
    if c.zero_stage >= 2:
        assert out.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}
    elif c.tp > 1 or c.cp > 1:
        assert out.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    else:
        assert out.env == {}


BASE = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--num-layers", "8",
        "--micro-batch-size", "1", "--global-batch-size", "8", "--num-attention-heads", "8"]


@pytest.mark.parametrize(("extra", "world", "needle"), [
    (["--virtual-pipeline-model-parallel-size", "2"], 8, "not an argument"),
    (["--tensor-model-parallel-size", "3"], 8, "not divisible by tp*pp*cp"),
    (["--context-parallel-size", "4"], 8, "not divisible by tp*pp*cp"),
    (["--global-batch-size", "7"], 8, "global batch size"),
    (["--num-layers", "7", "--num-layers-per-virtual-pipeline-stage", "1"], 8, "pipeline size"),
    (["--num-layers-per-virtual-pipeline-stage", "3"], 8, "virtual-pipeline-stage"),
    (["--num-layers-per-virtual-pipeline-stage", "2", "--global-batch-size", "6"], 8, "multiple of the pipeline"),
    (["--tensor-model-parallel-size", "1", "--sequence-parallel"], 8, "--sequence-parallel"),
    (["--overlap-grad-reduce", "--overlap-param-gather"], 8, "distributed optimizer"),
    (["--lr", "1e-4", "--min-lr", "1e-3"], 8, "--min-lr"),
    (["--save", "/ckpt"], 8, "--save-interval"),
    (["--lr-warmup-iters", "10", "--lr-warmup-fraction", "0.01"], 8, "lr-warmup"),
    (["--train-iters", "10", "--train-samples", "640"], 8, "iteration-based"),
    (["--mock-data", "--data-path", "/d"], 8, "single data source"),
    (["--rotary-base", "5e5"], 8, "not an integer"),
    (["--norm-epsilon", "tiny"], 8, "not a number"),
])
def test_validate_rules_refuse(extra: list[str], world: int, needle: str) -> None:
    check_megatron_args(BASE, 8)
    with pytest.raises(SpecError, match="megatron_args") as err:
        check_megatron_args([*BASE, *extra], world)
    assert needle in str(err.value)


def test_flag_error_names_release() -> None:
    with pytest.raises(SpecError, match=r"megatron-core 0\.19\.2"):
        check_megatron_args(["--no-such-flag"], 8)


def test_refuses_other_frameworks() -> None:
    req = LaunchRequest(model=search.model_preset("gpt-7.5b"), cluster=search.cluster_preset("dgx-a100-80gb", 1),
                        config=search.ParallelConfig(dp=8), training=search.TrainingSpec(64, framework="deepspeed"))
    with pytest.raises(SpecError, match="framework"):
        emit_megatron(req)


def test_golden_gpt3_175b_tp8_pp8() -> None:
    req = LaunchRequest(model=search.model_preset("gpt3-175b"), cluster=search.cluster_preset("dgx-a100-80gb", 128),
                        config=search.ParallelConfig(dp=16, tp=8, pp=8, sp=True, micro_batch=1, zero_stage=1,
                                                     recompute="selective"),
                        training=search.TrainingSpec(1536, "bf16"))
    out = emit_megatron(req)
    text = out.files["megatron_args.txt"] + "# command\n" + out.command + "\n"
    if os.environ.get("AUTOPAR_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_uneven_layouts_in_megatrons_own_terms() -> None:
    """Llama 3 405B's split (7, 8 x 14, 7) with vp 8 is the account-for form; a first/last split with
    even middles uses the decoder-first/last flags; any other split the layout string; each passes the
    validate_args rules, and a wrong count is refused."""
    from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset
    from service.launch import LaunchRequest
    from service.launch._pipeline_split import megatron_layout_string

    model, cluster = model_preset("llama3-405b"), cluster_preset("dgx-h100", 128)
    paper = (7,) + (8,) * 14 + (7,)

    def args_for(layout: tuple[int, ...], vp: int) -> list[str]:
        config = ParallelConfig(dp=8, tp=8, pp=16, vp=vp, micro_batch=1, zero_stage=1, stage_layers=layout)
        req = LaunchRequest(model=model, cluster=cluster, config=config, training=TrainingSpec(2048))
        argv = megatron_args(req)
        check_megatron_args(argv, config.world_size)
        return argv

    assert {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"} <= set(
        args_for(paper, 8))
    argv = args_for((6,) + (8,) * 14 + (8,), 1)
    assert "--pipeline-model-parallel-layout" in argv or "--decoder-first-pipeline-num-layers" in argv
    assert megatron_layout_string((2, 1), 1) == "Et*2|tL"
    with pytest.raises(SpecError, match="num layers"):
        check_megatron_args(["--num-layers", "126", "--pipeline-model-parallel-size", "16"], 128)
    with pytest.raises(SpecError):
        check_megatron_args(["--num-layers", "126", "--pipeline-model-parallel-size", "16",
                             "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
                             "--account-for-embedding-in-pipeline-split"], 128)


@pytest.mark.parametrize(("stage", "strategy"), [(2, "optim_grads"), (3, "optim_grads_params")])
def test_megatron_fsdp_writes_the_user_guides_required_flags_and_its_double_buffer(stage: int, strategy: str) -> None:
    """Megatron's ZeRO-2/3 is Megatron-FSDP: the user guide's required flags (sharding strategy,
    fsdp_dtensor checkpoints, no gradient-accumulation fusion) and, for ZeRO-3, the double buffer the
    memory model holds (the running and the prefetched block's gathered parameters)."""
    req = LaunchRequest(model=search.model_preset("llama3-70b"), cluster=search.cluster_preset("gb200-nvl72", 16),
                        config=search.ParallelConfig(dp=64, micro_batch=1, zero_stage=stage, recompute="full"),
                        training=search.TrainingSpec(256, "bf16"))
    argv = megatron_args(req)
    check_megatron_args(argv, 64)
    joined = " ".join(argv)
    assert f"--use-megatron-fsdp --data-parallel-sharding-strategy {strategy}" in joined
    assert "--ckpt-format fsdp_dtensor" in joined and "--use-distributed-optimizer" in argv
    assert "--no-gradient-accumulation-fusion" in argv
    # The double buffer holds the running and the prefetched block's gathered parameters: ZeRO-3's.
    assert ("--fsdp-double-buffer" in argv) is (stage == 3)
    plain = megatron_args(LaunchRequest(model=req.model, cluster=req.cluster, training=req.training,
                                        config=search.ParallelConfig(dp=64, micro_batch=1, zero_stage=1,
                                                                     recompute="full")))
    assert "--fsdp-double-buffer" not in plain and "--no-gradient-accumulation-fusion" not in plain

"""Low-precision recipes in the launch files: Megatron-LM's FP8 (per tensor), MXFP8 and NVFP4 flags,
checked by the project's Megatron argument rules; the recipes Blackwell alone runs are refused on
Hopper and on the runtimes that do not emit them."""

from __future__ import annotations

from pathlib import Path

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, cluster_preset, model_preset
from service.launch._base import LaunchRequest
from service.launch._megatron import emit_megatron, megatron_args
from service.launch._megatron_checks import arg_values, check_megatron_args
from service.launch._targets import emit_target

LLAMA = model_preset("llama3-8b")


def _request(precision: str, cluster: str = "dgx-b200", framework: str = "megatron") -> LaunchRequest:
    return LaunchRequest(model=LLAMA, cluster=cluster_preset(cluster, 1), config=ParallelConfig(dp=8, zero_stage=1),
                         training=TrainingSpec(64, precision, framework=framework))  # type: ignore[arg-type]


@pytest.mark.parametrize(("precision", "expected", "absent"), [
    ("fp8", {"--fp8-format": "hybrid", "--bf16": None}, ("--fp8-recipe", "--fp4-format")),
    ("mxfp8", {"--fp8-format": "e4m3", "--fp8-recipe": "mxfp8", "--bf16": None}, ("--fp4-format",)),
    ("nvfp4", {"--fp4-format": "e2m1", "--fp4-recipe": "nvfp4", "--bf16": None}, ("--fp8-format",)),
])
def test_each_recipe_writes_megatrons_flags(precision: str, expected: dict[str, str | None],
                                            absent: tuple[str, ...]) -> None:
    req = _request(precision)
    args = megatron_args(req)
    values = arg_values(args)
    for flag, value in expected.items():
        assert values[flag] == value, flag
    assert not set(absent) & set(values)
    check_megatron_args(args, req.cluster.world_size)
    assert emit_megatron(req).files


def test_the_checks_refuse_what_megatron_refuses() -> None:
    args = megatron_args(_request("nvfp4"))
    with pytest.raises(SpecError, match="cannot be used simultaneously"):
        check_megatron_args([*args, "--fp8-format", "e4m3"], 8)
    with pytest.raises(SpecError, match="fp8-recipe"):
        check_megatron_args([*megatron_args(_request("fp8")), "--fp8-recipe", "rowwise"], 8)


def test_block_scaled_recipes_need_blackwell_and_megatron() -> None:
    with pytest.raises(SpecError, match=r"TrainingSpec\.precision.*Blackwell"):
        megatron_args(_request("mxfp8", cluster="dgx-h100"))
    for framework, target in (("deepspeed", "deepspeed"), ("fsdp", "torchtitan")):
        with pytest.raises(SpecError, match=r"TrainingSpec\.precision.*Megatron-Core only"):
            emit_target(_request("nvfp4", framework=framework), target)


def test_bf16_gradient_reduction_is_emitted_and_passes_the_checks() -> None:
    req = LaunchRequest(model=LLAMA, cluster=cluster_preset("dgx-h100", 1), config=ParallelConfig(dp=8, zero_stage=1),
                        training=TrainingSpec(64, "fp8", grad_reduce_in_bf16=True))
    args = megatron_args(req)
    assert "--grad-reduce-in-bf16" in arg_values(args)
    check_megatron_args(args, req.cluster.world_size)
    assert "--grad-reduce-in-bf16" not in arg_values(megatron_args(_request("fp8", cluster="dgx-h100")))


def test_fp8_attention_is_refused_by_the_megatron_lm_launch() -> None:
    # megatron-core 0.19's pretrain_gpt.py has no --fp8-dot-product-attention (the pinned flag list has none):
    # a launch file that dropped it would run BF16 attention under a prediction costed with FP8's.
    flags = (Path(__file__).resolve().parents[3] / "service" / "launch" / "megatron_flags.txt").read_text()
    assert "--fp8-format" in flags and "--fp8-dot-product-attention" not in flags
    req = LaunchRequest(model=LLAMA, cluster=cluster_preset("dgx-b200", 1), config=ParallelConfig(dp=8, zero_stage=1),
                        training=TrainingSpec(64, "mxfp8", fp8_attention=True))
    with pytest.raises(SpecError) as err:
        megatron_args(req)
    assert err.value.field == "TrainingSpec.fp8_attention" and "pretrain_gpt.py" in err.value.problem

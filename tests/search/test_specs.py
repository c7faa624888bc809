"""Spec validation: every invalid field raises SpecError naming the field and a fix; specs are frozen."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import pytest

from search import (
    ClusterSpec,
    GPUSpec,
    ModelSpec,
    NodeSpec,
    ParallelConfig,
    SpecError,
    TrainingSpec,
    check_compatible,
    cluster_preset,
    gpu_preset,
    node_preset,
)


def gpt(**overrides: Any) -> ModelSpec:
    """A small GPT block stack: 24 layers, h=2048, 16 heads, s=2048 (MHA)."""
    fields: dict[str, Any] = dict(name="gpt-test", layers=24, hidden=2048, heads=16, ffn=8192, vocab=51200,
                                  seq_len=2048)
    fields.update(overrides)
    return ModelSpec(**fields)


def gqa(**overrides: Any) -> ModelSpec:
    """A Llama-style GQA model: 64 query heads, 8 KV heads."""
    fields: dict[str, Any] = dict(name="gqa-test", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                                  vocab=128256, seq_len=8192, activation="swiglu", bias=False, norm="rmsnorm",
                                  position_embedding="rope", attention="flash")
    fields.update(overrides)
    return ModelSpec(**fields)


def raises_spec_error(field: str, call: Callable[[], object], *also: str) -> SpecError:
    """Run ``call``; it must raise SpecError for ``field`` whose message also gives a fix."""
    with pytest.raises(SpecError, match=rf"^{re.escape(field)}: ") as info:
        call()
    err = info.value
    assert err.field == field
    assert err.fix.strip(), "the message must say how to fix the field"
    assert str(err).endswith(err.fix)
    for text in also:
        assert text in str(err), f"{text!r} not in {str(err)!r}"
    return err


TRAIN = TrainingSpec(global_batch=512)


# ---------------------------------------------------------------- the error class


def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)
    with pytest.raises(ValueError):
        ParallelConfig(tp=0)


def test_spec_error_message_is_field_problem_fix() -> None:
    err = SpecError("ParallelConfig.tp", "3 does not divide heads=32", "use a tp that divides 32")
    assert str(err) == "ParallelConfig.tp: 3 does not divide heads=32; use a tp that divides 32"
    assert (err.field, err.problem, err.fix) == ("ParallelConfig.tp", "3 does not divide heads=32",
                                                 "use a tp that divides 32")


# ---------------------------------------------------------------- check_compatible


def test_world_size_mismatch_names_every_factor() -> None:
    config = ParallelConfig(dp=4, tp=2, pp=1, cp=1)  # 8 GPUs
    err = raises_spec_error("ParallelConfig", lambda: check_compatible(gpt(), 16, config, TRAIN),
                            "dp*tp*pp*cp", "4*2*1*1 = 8", "16 GPUs")
    assert "dp=8" in err.fix  # the suggested dp makes the product 16


def test_world_size_match_passes() -> None:
    check_compatible(gpt(), 16, ParallelConfig(dp=2, tp=4, pp=2), TRAIN)


def test_tp_must_divide_heads() -> None:
    raises_spec_error("ParallelConfig.tp",
                      lambda: check_compatible(gpt(), 6, ParallelConfig(dp=2, tp=3), TRAIN),
                      "heads=16", "use a tp that divides 16")


def test_tp_must_divide_kv_heads_of_a_gqa_model() -> None:
    model = gqa()
    assert model.heads % 16 == 0  # heads alone would allow tp=16
    raises_spec_error("ParallelConfig.tp",
                      lambda: check_compatible(model, 16, ParallelConfig(tp=16), TRAIN),
                      "kv_heads=8", "use a tp that divides 8")


def test_tp_dividing_kv_heads_passes() -> None:
    check_compatible(gqa(), 8, ParallelConfig(tp=8), TRAIN)


def test_pp_must_divide_layers() -> None:
    raises_spec_error("ParallelConfig.pp",
                      lambda: check_compatible(gpt(), 5, ParallelConfig(pp=5), TRAIN),
                      "layers=24", "use a pp that divides 24")


def test_pp_times_vp_must_divide_layers() -> None:
    # pp=4 divides 24 layers, but 4 * vp=4 = 16 does not.
    raises_spec_error("ParallelConfig.vp",
                      lambda: check_compatible(gpt(), 4, ParallelConfig(pp=4, vp=4), TRAIN),
                      "pp*vp = 16", "layers=24", "divides 6")


def test_cp_must_divide_seq_len() -> None:
    raises_spec_error("ParallelConfig.cp",
                      lambda: check_compatible(gpt(), 3, ParallelConfig(cp=3), TRAIN),
                      "seq_len=2048")


def test_global_batch_must_be_divisible_by_dp_times_micro_batch() -> None:
    config = ParallelConfig(dp=8, micro_batch=4)
    raises_spec_error("TrainingSpec.global_batch",
                      lambda: check_compatible(gpt(), 8, config, TrainingSpec(global_batch=48)),
                      "8*4", "multiple of 32")
    check_compatible(gpt(), 8, config, TrainingSpec(global_batch=64))


def test_check_compatible_rejects_a_non_model() -> None:
    raises_spec_error("model", lambda: check_compatible("gpt-7.5b", 1, ParallelConfig(), TRAIN))


# ---------------------------------------------------------------- ParallelConfig on its own


def test_offload_param_needs_zero3() -> None:
    for stage in (0, 1, 2):
        raises_spec_error("ParallelConfig.offload_param",
                          lambda stage=stage: ParallelConfig(zero_stage=stage, offload_param="cpu"),
                          f"zero_stage={stage}", "zero_stage=3")
    ParallelConfig(zero_stage=3, offload_param="cpu", offload_optimizer="cpu")


def test_nvme_optimizer_offload_needs_zero3() -> None:
    for stage in (1, 2):
        raises_spec_error("ParallelConfig.offload_optimizer",
                          lambda stage=stage: ParallelConfig(zero_stage=stage, offload_optimizer="nvme"),
                          "nvme", "zero_stage=3")
    ParallelConfig(zero_stage=3, offload_optimizer="nvme")
    ParallelConfig(zero_stage=2, offload_optimizer="cpu")  # ZeRO-Offload works with stage 1-2


def test_optimizer_offload_needs_some_zero_stage() -> None:
    raises_spec_error("ParallelConfig.offload_optimizer",
                      lambda: ParallelConfig(zero_stage=0, offload_optimizer="cpu"))


def test_sequence_parallelism_needs_tp() -> None:
    raises_spec_error("ParallelConfig.sp", lambda: ParallelConfig(tp=1, sp=True), "tp > 1")
    ParallelConfig(tp=2, sp=True)


def test_sp_must_be_a_boolean() -> None:
    raises_spec_error("ParallelConfig.sp", lambda: ParallelConfig(tp=2, sp=1))  # type: ignore[arg-type]


def test_virtual_stages_need_pipeline_parallelism() -> None:
    raises_spec_error("ParallelConfig.vp", lambda: ParallelConfig(pp=1, vp=2), "pp > 1")
    ParallelConfig(pp=2, vp=2)


@pytest.mark.parametrize("stage", [4, -1, True, 1.0, "3", None])
def test_zero_stage_must_be_0_to_3(stage: object) -> None:
    raises_spec_error("ParallelConfig.zero_stage", lambda: ParallelConfig(zero_stage=stage))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["dp", "tp", "pp", "vp", "cp", "micro_batch"])
@pytest.mark.parametrize("value", [-2, 0, True, False, 2.0, "2", None])
def test_degrees_must_be_positive_integers(name: str, value: object) -> None:
    raises_spec_error(f"ParallelConfig.{name}", lambda: ParallelConfig(**{name: value}), "positive integer")


@pytest.mark.parametrize("name", ["offload_optimizer", "offload_param", "recompute"])
def test_unknown_policy_values(name: str) -> None:
    raises_spec_error(f"ParallelConfig.{name}", lambda: ParallelConfig(zero_stage=3, **{name: "gpu"}), "use one of")


def test_parallel_config_derived_sizes() -> None:
    c = ParallelConfig(dp=3, tp=4, pp=2, cp=5)
    assert c.model_parallel_size == 40
    assert c.world_size == 120


# ---------------------------------------------------------------- TrainingSpec


@pytest.mark.parametrize("precision", ["fp32", "tf32", "BF16", "int8", ""])
def test_unknown_precision(precision: str) -> None:
    raises_spec_error("TrainingSpec.precision",
                      lambda: TrainingSpec(global_batch=8, precision=precision),  # type: ignore[arg-type]
                      "bf16, fp16, fp8")


@pytest.mark.parametrize("framework", ["jax", "colossalai", "DeepSpeed", ""])
def test_unknown_framework(framework: str) -> None:
    raises_spec_error("TrainingSpec.framework",
                      lambda: TrainingSpec(global_batch=8, framework=framework),  # type: ignore[arg-type]
                      "deepspeed", "megatron")


def test_unknown_optimizer() -> None:
    raises_spec_error("TrainingSpec.optimizer", lambda: TrainingSpec(global_batch=8, optimizer="sgd"))  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -8, True, 8.0])
def test_global_batch_must_be_a_positive_integer(value: object) -> None:
    raises_spec_error("TrainingSpec.global_batch", lambda: TrainingSpec(global_batch=value))  # type: ignore[arg-type]


# ---------------------------------------------------------------- ModelSpec


@pytest.mark.parametrize("activation", ["relu", "geglu", "GELU", ""])
def test_unknown_activation(activation: str) -> None:
    raises_spec_error("ModelSpec.activation", lambda: gpt(activation=activation), "gelu, quick-geglu, swiglu")


@pytest.mark.parametrize(("name", "value"), [("attention", "sparse"), ("norm", "batchnorm"),
                                             ("position_embedding", "sinusoidal")])
def test_unknown_model_choices(name: str, value: str) -> None:
    raises_spec_error(f"ModelSpec.{name}", lambda: gpt(**{name: value}), "use one of")


def test_hidden_must_be_divisible_by_heads() -> None:
    raises_spec_error("ModelSpec.heads", lambda: gpt(hidden=2048, heads=24), "hidden=2048", "head dimension")


def test_kv_heads_must_divide_heads() -> None:
    raises_spec_error("ModelSpec.kv_heads", lambda: gqa(kv_heads=6), "heads=64")


@pytest.mark.parametrize("name", ["layers", "hidden", "heads", "ffn", "vocab", "seq_len", "kv_heads"])
@pytest.mark.parametrize("value", [0, -1, True])
def test_model_sizes_must_be_positive_integers(name: str, value: object) -> None:
    raises_spec_error(f"ModelSpec.{name}", lambda: gpt(**{name: value}), "positive integer")


def test_model_name_must_not_be_empty() -> None:
    raises_spec_error("ModelSpec.name", lambda: gpt(name="  "))


def test_kv_heads_defaults_to_heads() -> None:
    assert gpt().kv_heads == 16
    assert gpt().kv_dim == 2048
    assert gqa().kv_dim == 8 * 128


# ---------------------------------------------------------------- hardware specs


def test_gpu_efficiency_outside_unit_interval() -> None:
    base = gpu_preset("a100-sxm4-80gb")
    for value in (0.0, 1.5, -0.1):
        raises_spec_error(f"GPUSpec({base.name}).matmul_efficiency",
                          lambda value=value: dataclasses.replace(base, matmul_efficiency=value))


def test_node_bandwidth_must_be_positive() -> None:
    base = node_preset("dgx-a100-80gb")
    raises_spec_error(f"NodeSpec({base.name}).inter_node_bytes_per_s",
                      lambda: dataclasses.replace(base, inter_node_bytes_per_s=0.0), "number > 0")
    raises_spec_error(f"NodeSpec({base.name}).gpus_per_node", lambda: dataclasses.replace(base, gpus_per_node=0))


def test_cluster_needs_at_least_one_node() -> None:
    base = cluster_preset("dgx-a100-80gb")
    raises_spec_error("ClusterSpec.num_nodes", lambda: dataclasses.replace(base, num_nodes=0))


def test_missing_tensor_core_type_names_precision() -> None:
    raises_spec_error("TrainingSpec.precision", lambda: gpu_preset("v100-32gb").peak_flop_per_s("bf16"), "fp16")


# ---------------------------------------------------------------- frozen


FROZEN_CASES: list[tuple[object, str, object]] = [
    (gpt(), "layers", 12),
    (gpt(), "kv_heads", 2),
    (ParallelConfig(), "tp", 2),
    (ParallelConfig(), "zero_stage", 3),
    (TrainingSpec(global_batch=8), "global_batch", 16),
    (gpu_preset("h100-sxm5-80gb"), "memory_bytes", 1.0),
    (node_preset("dgx-h100"), "gpus_per_node", 4),
    (cluster_preset("dgx-h100", 2), "num_nodes", 4),
]


@pytest.mark.parametrize(("spec", "name", "value"), FROZEN_CASES,
                         ids=[f"{type(s).__name__}.{n}" for s, n, _ in FROZEN_CASES])
def test_specs_are_frozen(spec: object, name: str, value: object) -> None:
    before = getattr(spec, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(spec, name, value)
    assert getattr(spec, name) == before


def test_specs_are_hashable_values() -> None:
    assert ParallelConfig(dp=2, tp=4) == ParallelConfig(dp=2, tp=4)
    assert len({ParallelConfig(dp=2), ParallelConfig(dp=2), ParallelConfig(dp=4)}) == 2
    assert gpt() == gpt()
    assert isinstance(cluster_preset("dgx-h100"), ClusterSpec)
    assert isinstance(gpu_preset("h100-sxm5-80gb"), GPUSpec)
    assert isinstance(node_preset("dgx-h100"), NodeSpec)


# ---------------------------------------------------------------- runtime rules and argument types


def _check(model: ModelSpec, config: ParallelConfig, framework: str, global_batch: int = 64) -> None:
    check_compatible(model, config.world_size, config, TrainingSpec(global_batch, framework=framework))


@pytest.mark.parametrize(("framework", "config", "field", "needle"), [
    ("deepspeed", ParallelConfig(dp=4, tp=2), "TrainingSpec.framework", "megatron-deepspeed"),
    ("deepspeed", ParallelConfig(dp=4, pp=2), "TrainingSpec.framework", "megatron-deepspeed"),
    ("megatron-deepspeed", ParallelConfig(dp=4, pp=2, zero_stage=2), "ParallelConfig.zero_stage", "pipeline"),
    ("megatron-deepspeed", ParallelConfig(dp=2, pp=2, vp=2), "ParallelConfig.vp", "interleaved"),
    ("fsdp", ParallelConfig(dp=8, zero_stage=1), "ParallelConfig.zero_stage", "SHARD_GRAD_OP"),
    ("fsdp", ParallelConfig(dp=8, zero_stage=3, offload_optimizer="nvme"), "ParallelConfig.offload_optimizer",
     "to CPU"),
    ("fsdp", ParallelConfig(dp=8, zero_stage=3, offload_optimizer="cpu"), "ParallelConfig.offload_optimizer",
     "together"),
    ("fsdp", ParallelConfig(dp=8, zero_stage=0), "ParallelConfig.zero_stage", "ZeRO-2 or ZeRO-3"),
    ("deepspeed", ParallelConfig(dp=4, cp=2), "TrainingSpec.framework", "context"),
    ("megatron-deepspeed", ParallelConfig(dp=4, cp=2), "ParallelConfig.cp", "context-parallel"),
    ("megatron-deepspeed", ParallelConfig(dp=4, pp=2, zero_stage=1, offload_optimizer="cpu"),
     "ParallelConfig.offload_optimizer", "without offload"),
    ("megatron", ParallelConfig(dp=8, zero_stage=3, offload_param="cpu"), "ParallelConfig.offload_param",
     "only the optimizer"),
])
def test_runtime_refuses_what_it_cannot_run(framework: str, config: ParallelConfig, field: str, needle: str) -> None:
    with pytest.raises(SpecError, match=re.escape(field)) as info:
        _check(gpt(), config, framework)
    assert needle in str(info.value)


@pytest.mark.parametrize(("framework", "config"), [
    ("megatron-deepspeed", ParallelConfig(dp=4, pp=2, zero_stage=1)),
    ("deepspeed", ParallelConfig(dp=8, zero_stage=3, offload_optimizer="nvme", offload_param="nvme")),
    ("fsdp", ParallelConfig(dp=4, pp=2, vp=2, zero_stage=3)),
    ("megatron", ParallelConfig(dp=4, pp=2, vp=2, zero_stage=1, offload_optimizer="cpu")),
])
def test_runtime_accepts_what_it_can_run(framework: str, config: ParallelConfig) -> None:
    _check(gpt(), config, framework)


def test_tp_must_divide_the_mlp_width() -> None:
    with pytest.raises(SpecError, match=r"ParallelConfig\.tp: 8 does not divide ffn=11004"):
        _check(gpt(ffn=11004), ParallelConfig(tp=8), "megatron")


def test_context_parallelism_needs_2cp_to_divide_the_sequence_and_flash_attention() -> None:
    with pytest.raises(SpecError, match=r"ParallelConfig\.cp: seq_len=2050 is not a multiple of 2\*cp = 4"):
        _check(gpt(seq_len=2050), ParallelConfig(dp=1, cp=2), "megatron", 2)
    with pytest.raises(SpecError, match=r"ParallelConfig\.cp: .*flash"):
        _check(gpt(attention="standard"), ParallelConfig(cp=2), "megatron", 2)
    _check(gpt(), ParallelConfig(cp=2), "megatron", 2)


def test_world_size_hint_is_a_valid_dp() -> None:
    with pytest.raises(SpecError, match=r"set dp=4 for tp\*pp\*cp = 2"):
        check_compatible(gpt(), 8, ParallelConfig(dp=2, tp=2), TrainingSpec(64))
    with pytest.raises(SpecError, match=r"tp\*pp\*cp = 3 does not divide 8"):
        check_compatible(gpt(heads=48, hidden=3072, ffn=12288), 8, ParallelConfig(dp=2, tp=3), TrainingSpec(64))


@pytest.mark.parametrize(("argument", "value", "field"), [
    ("cluster", "dgx-h100", "cluster"),
    ("config", {"dp": 8}, "config"),
    ("training", None, "training"),
    ("model", "gpt3-175b", "model"),
])
def test_predict_names_an_argument_of_the_wrong_type(argument: str, value: object, field: str) -> None:
    from search import predict

    args: dict[str, Any] = dict(model=gpt(), cluster=cluster_preset("dgx-a100-80gb"), config=ParallelConfig(dp=8),
                                training=TrainingSpec(64))
    args[argument] = value
    with pytest.raises(SpecError, match=rf"^{field}: "):
        predict(**args)


def test_fp8_on_a_gpu_without_fp8_names_the_supported_precisions() -> None:
    from search import predict

    with pytest.raises(SpecError, match=r"TrainingSpec\.precision: .* no fp8 .*use one of: bf16, fp16"):
        predict(gpt(), cluster_preset("dgx-a100-80gb"), ParallelConfig(dp=8), TrainingSpec(64, "fp8"))
    with pytest.raises(SpecError, match=r"no bf16 .*use one of: fp16"):
        predict(gpt(), cluster_preset("dgx-2"), ParallelConfig(dp=16), TrainingSpec(64, "bf16"))


@pytest.mark.parametrize(("name", "value"), [
    ("hbm_efficiency", 0.0), ("attention_efficiency", 1.5), ("zero3_overlap", 2.0), ("microbatch_overhead_s", -1.0),
    ("fp8_gemm_speedup", 0.5), ("dp_overlap", float("nan")),
])
def test_calibration_constants_are_validated(name: str, value: float) -> None:
    from search import Calibration

    with pytest.raises(SpecError, match=r"Calibration"):
        Calibration(**{name: value})


# ---------------------------------------------------------------- the support matrix


def test_megatron_fsdp_with_pipeline_is_refused_with_its_evidence() -> None:
    with pytest.raises(SpecError, match=re.escape("ParallelConfig.zero_stage")) as info:
        _check(gpt(), ParallelConfig(dp=4, pp=2, zero_stage=2), "megatron")
    assert "Megatron-FSDP" in str(info.value) and "zero_stage 0 or 1" in str(info.value)
    _check(gpt(), ParallelConfig(dp=8, zero_stage=2), "megatron")  # pp = 1: supported


def test_every_matrix_entry_is_cited_and_applies_to_something() -> None:
    from search._support import SUPPORT_MATRIX, SUPPORT_STATUSES

    names = [e.name for e in SUPPORT_MATRIX]
    assert len(names) == len(set(names))
    for e in SUPPORT_MATRIX:
        assert e.runtime in ("megatron", "deepspeed", "megatron-deepspeed", "fsdp")
        assert e.status in SUPPORT_STATUSES and e.status != "supported"
        assert e.citation and e.fix and e.what
        assert e.field.split(".")[0] in ("ParallelConfig", "TrainingSpec")


def test_untested_combinations_are_predicted_with_a_warning() -> None:
    from search import cluster_preset, predict
    from search._support import support_status

    config = ParallelConfig(dp=8, zero_stage=2, offload_optimizer="cpu")
    assert support_status("megatron", config) == "untested"
    pred = predict(gpt(), cluster_preset("dgx-a100-80gb", 1), config, TrainingSpec(64, framework="megatron"))
    assert any("not shown to run" in w for w in pred.warnings)
    supported = ParallelConfig(dp=8, zero_stage=1, offload_optimizer="cpu")
    assert support_status("megatron", supported) == "supported"
    pred = predict(gpt(), cluster_preset("dgx-a100-80gb", 1), supported, TrainingSpec(64, framework="megatron"))
    assert not any("not shown to run" in w for w in pred.warnings)


def test_tp_comm_overlap_needs_sequence_parallelism_and_megatron() -> None:
    with pytest.raises(SpecError, match=re.escape("ParallelConfig.tp_comm_overlap")):
        ParallelConfig(dp=4, tp=2, tp_comm_overlap=True)
    for framework in ("fsdp", "megatron-deepspeed"):
        with pytest.raises(SpecError, match=re.escape("ParallelConfig.tp_comm_overlap")):
            _check(gpt(), ParallelConfig(dp=4, tp=2, sp=True, zero_stage=2, tp_comm_overlap=True), framework)
    _check(gpt(), ParallelConfig(dp=4, tp=2, sp=True, tp_comm_overlap=True), "megatron")

"""GPT-OSS's clamped quick-GeLU GLU and YaRN RoPE in ModelSpec: validated by field, the GLU's function and
offset launch-only (a quick-GeGLU model costs exactly what the same SwiGLU model costs; the clamp and YaRN
are costed, tests/search/test_unfused_paths.py), and readable from a JSON file."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import search
from search import LAUNCH_ONLY_FIELDS, ModelSpec, ParallelConfig, SpecError, TrainingSpec
from search._model_presets import model_preset
from search._rope_spec import YarnSpec

GPT_OSS = model_preset("gpt-oss-120b")
LLAMA = model_preset("llama3-8b")


def _refused(spec: ModelSpec, **changes: Any) -> SpecError:
    with pytest.raises(SpecError) as err:
        dataclasses.replace(spec, **changes)
    return err.value


def test_the_preset_carries_megatron_bridges_gpt_oss_settings() -> None:
    # Megatron-Bridge gpt_oss_provider.py @ v0.3.0 lines 59-84: yarn 32 over 4096, betas 32 / 1, no rounding,
    # quick_gelu GLU with offset 1.0 and clamp 7.0.
    assert (GPT_OSS.activation, GPT_OSS.glu_linear_offset, GPT_OSS.glu_clamp) == ("quick-geglu", 1.0, 7.0)
    assert GPT_OSS.rope_yarn == YarnSpec(32.0, 4096, 32.0, 1.0, False)
    assert GPT_OSS.gated_mlp and GPT_OSS.mlp_matrices == 3


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"glu_clamp": -7.0}, "ModelSpec.glu_clamp", "positive"),
    ({"glu_clamp": 0}, "ModelSpec.glu_clamp", "positive"),
    ({"glu_clamp": float("inf")}, "ModelSpec.glu_clamp", "positive"),
    ({"glu_clamp": True}, "ModelSpec.glu_clamp", "positive"),
    ({"glu_linear_offset": float("nan")}, "ModelSpec.glu_linear_offset", "finite"),
    ({"glu_linear_offset": "1"}, "ModelSpec.glu_linear_offset", "finite"),
    ({"activation": "swiglu"}, "ModelSpec.glu_linear_offset", "quick-GeLU"),  # the offset stays 1.0
    ({"activation": "swiglu", "glu_linear_offset": 0.0}, "ModelSpec.glu_clamp", "quick-GeLU"),
    ({"activation": "gelu", "glu_linear_offset": 0.0}, "ModelSpec.glu_clamp", "quick-GeLU"),
    ({"rope_yarn": {"factor": 0.5, "original_max_positions": 4096}}, "ModelSpec.rope_yarn.factor", ">= 1"),
    ({"rope_yarn": {"factor": 32, "original_max_positions": 0}}, "ModelSpec.rope_yarn.original_max_positions",
     "positive"),
    ({"rope_yarn": {"factor": 32, "original_max_positions": 4096, "beta_fast": 1, "beta_slow": 32}},
     "ModelSpec.rope_yarn.beta_fast", "beta_slow"),
    ({"rope_yarn": {"factor": 32, "original_max_positions": 4096, "correction_range_round_to_int": 0}},
     "ModelSpec.rope_yarn.correction_range_round_to_int", "boolean"),
    ({"rope_yarn": {"factor": 32, "original_max_positions": 4096, "mscale": 1.0}}, "ModelSpec.rope_yarn.mscale",
     "not a YaRN setting autopar records"),
    ({"rope_yarn": 32}, "ModelSpec.rope_yarn", "not an object"),
    ({"position_embedding": "learned"}, "ModelSpec.rope_yarn", "YaRN scales RoPE"),
    ({"rope_scaling_factor": 8.0}, "ModelSpec.rope_yarn", "one scaling"),
])
def test_bad_glu_and_yarn_values_are_refused_naming_the_field(changes: dict[str, Any], field: str,
                                                               says: str) -> None:
    err = _refused(GPT_OSS, **changes)
    assert err.field == field and says in str(err), str(err)
    assert err.fix


def test_yarn_is_not_recorded_with_latent_attention() -> None:
    err = _refused(model_preset("deepseek-v3"), rope_yarn=YarnSpec(40.0, 4096))
    assert err.field == "ModelSpec.rope_yarn" and "latent" in err.problem


def test_a_quick_geglu_model_costs_what_the_same_swiglu_model_costs() -> None:
    # The GLU's function and offset change no number of a prediction: the same GEMMs, tensors and elementwise
    # bytes. The clamp and YaRN do (tests/search/test_unfused_paths.py).
    swiglu = dataclasses.replace(GPT_OSS, activation="swiglu", glu_linear_offset=0.0, glu_clamp=None, rope_yarn=None)
    unclamped = dataclasses.replace(GPT_OSS, glu_clamp=None, rope_yarn=None)
    assert "glu_linear_offset" in LAUNCH_ONLY_FIELDS and not {"glu_clamp", "rope_yarn"} & set(LAUNCH_ONLY_FIELDS)
    cluster = search.cluster_preset("dgx-h100", 8)
    config = ParallelConfig(dp=16, tp=1, pp=4, ep=8, micro_batch=4, zero_stage=1)
    ours, theirs = (search.predict(m, cluster, config, TrainingSpec(512)).to_dict() for m in (unclamped, swiglu))
    assert {k: v for k, v in ours.items() if k != "warnings"} == {k: v for k, v in theirs.items() if k != "warnings"}
    dense = dataclasses.replace(LLAMA, activation="quick-geglu", glu_linear_offset=1.0)
    assert dense.params == LLAMA.params


@pytest.mark.parametrize("model", [
    dataclasses.replace(LLAMA, activation="quick-geglu"),  # a dense model
    dataclasses.replace(model_preset("qwen3-235b-a22b"), activation="quick-geglu"),  # no dense layer: runs
    dataclasses.replace(model_preset("deepseek-v3"), activation="quick-geglu"),  # dense-first layers, shared expert
])
def test_megatron_runs_a_quick_geglu_only_in_the_experts(model: ModelSpec) -> None:
    # megatron-core 0.19 mlp.py:276-318: --quick-geglu's bias_activation_fusion (from --bias-gelu-fusion) has no
    # dense kernel ("Only support fusion of gelu and swiglu"); the experts' weighted_bias_quick_geglu_impl has one.
    dense = model.moe is None or model.moe.first_dense_layers > 0 or model.moe.shared_expert_ffn > 0
    cluster = search.cluster_preset("dgx-h100", 8)
    config = ParallelConfig(dp=64, micro_batch=1, zero_stage=1, ep=8 if model.moe else 1)
    if not dense:
        assert search.predict(model, cluster, config, TrainingSpec(512)).iteration_time_s > 0  # not refused
        return
    with pytest.raises(SpecError) as err:
        search.predict(model, cluster, config, TrainingSpec(512))
    assert err.value.field == "ModelSpec.activation" and "Only support fusion of gelu and swiglu" in str(err.value)
    assert err.value.fix
    for runtime in ("deepspeed", "fsdp"):  # refused there for the GLU itself
        with pytest.raises(SpecError):
            search.predict(model, cluster, config, TrainingSpec(512, framework=runtime))  # type: ignore[arg-type]


def test_yarn_reads_from_a_json_object_and_keeps_its_defaults() -> None:
    spec = dataclasses.replace(LLAMA, rope_yarn={"factor": 4, "original_max_positions": 8192})
    assert spec.rope_yarn == YarnSpec(4.0, 8192, 32.0, 1.0, True)
    assert isinstance(spec.rope_yarn, YarnSpec) and spec.rope_yarn.factor == 4.0

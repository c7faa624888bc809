"""Sliding-window attention (GPT-OSS): spec validation, the attention core's work and FLOPs."""

from __future__ import annotations

import dataclasses

import pytest

from search import ModelSpec, SpecError
from search._compute_time import Kernels, attention_core_times, windowed_keys_per_query
from search._flops import layer_attention_flop, model_flop_per_iteration
from search._model_presets import model_preset

KERNELS = Kernels(matmul_flop_per_s=1e15, cuda_core_flop_per_s=1e13, attention_flop_per_s=5e14,
                  hbm_bytes_per_s=3e12, gemm_overhead_s=1e-5)


def _full(spec: ModelSpec) -> ModelSpec:  # the same model without its window
    return dataclasses.replace(spec, attention_window=None, window_skip_freq=None)


@pytest.mark.parametrize(("changes", "field"), [
    ({"attention_window": 0}, "ModelSpec.attention_window"),
    ({"attention_window": 128.0}, "ModelSpec.attention_window"),
    ({"attention_window": None, "window_skip_freq": 2}, "ModelSpec.window_skip_freq"),
    ({"window_skip_freq": 1}, "ModelSpec.window_skip_freq"),
    ({"window_skip_freq": True}, "ModelSpec.window_skip_freq"),
    ({"softmax_sinks": "yes"}, "ModelSpec.softmax_sinks"),
])
def test_window_fields_are_validated_by_name(changes: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as err:
        dataclasses.replace(model_preset("gpt-oss-120b"), **changes)
    assert err.value.field == field


def test_megatron_skip_frequency_makes_every_nth_layer_full() -> None:
    spec = model_preset("gpt-oss-120b")
    assert spec.windowed_layers == 18  # layers 1, 3, ..., 35 (1-based) windowed, 2, 4, ..., 36 full
    assert dataclasses.replace(spec, window_skip_freq=3).windowed_layers == 24
    assert dataclasses.replace(spec, window_skip_freq=None).windowed_layers == 36
    assert _full(spec).windowed_layers == 0


def test_a_window_of_the_whole_sequence_is_the_causal_half() -> None:
    assert windowed_keys_per_query(4096, 4096) == 2048
    assert windowed_keys_per_query(10**6, 4096) == 2048
    assert windowed_keys_per_query(128, 4096) == 128 - 128 * 128 / 8192


def test_a_windowed_layer_runs_a_band_instead_of_the_causal_half() -> None:
    spec = dataclasses.replace(model_preset("gpt-oss-120b"), window_skip_freq=None)  # every layer windowed
    full = _full(spec)
    tokens, kv_len = 4096.0, 4096.0
    fwd, bwd = attention_core_times(spec, tokens, kv_len, 1, KERNELS)
    full_fwd, full_bwd = attention_core_times(full, tokens, kv_len, 1, KERNELS)
    assert fwd / full_fwd == pytest.approx(windowed_keys_per_query(128, kv_len) / 2048)
    assert bwd / fwd == full_bwd / full_fwd
    # Half the layers windowed (GPT-OSS): the average of the two per block.
    alternate = attention_core_times(model_preset("gpt-oss-120b"), tokens, kv_len, 1, KERNELS)[0]
    assert alternate == pytest.approx((fwd + full_fwd) / 2)


def test_model_flops_count_the_band_on_windowed_layers() -> None:
    spec = model_preset("gpt-oss-120b")
    full = _full(spec)
    tokens = 4096.0
    per_key = 2.0 * tokens * (spec.q_dim + spec.attention_out_dim)
    assert layer_attention_flop(full, tokens, 4096) == per_key * 4096
    assert layer_attention_flop(spec, tokens, 4096) == per_key * (0.5 * 128 + 0.5 * 4096)
    assert model_flop_per_iteration(spec, 8) < model_flop_per_iteration(full, 8)


def test_a_model_without_window_is_costed_as_before() -> None:
    spec = model_preset("qwen3-30b-a3b")
    expected = 0.5 * 2.0 * 4096 * 4096 * (spec.q_dim + spec.attention_out_dim) / KERNELS.attention_flop_per_s
    assert attention_core_times(spec, 4096.0, 4096.0, 1, KERNELS)[0] == expected


def test_context_parallelism_is_refused_with_a_window_or_sinks() -> None:
    # Transformer Engine runs sinks under CP with its all-to-all exchange only, and windows not with the p2p
    # ring the cost model costs (attention/dot_product_attention/utils.py get_attention_backend).
    from search import ParallelConfig, TrainingSpec, check_compatible
    from search._space import enumerate_space

    config = ParallelConfig(dp=32, cp=2, ep=8, micro_batch=1, zero_stage=1)
    for spec in (model_preset("gpt-oss-120b"), dataclasses.replace(model_preset("gpt-oss-120b"), softmax_sinks=False),
                 dataclasses.replace(model_preset("gpt-oss-120b"), attention_window=None, window_skip_freq=None)):
        with pytest.raises(SpecError) as err:
            check_compatible(spec, 64, config, TrainingSpec(512))
        assert err.value.field == "ParallelConfig.cp" and "a2a" in err.value.problem
    space = enumerate_space(model_preset("gpt-oss-120b"), 64, 512, "megatron", micro_batches=[1],
                            allow_untested=True)
    assert space.n_valid and {c.config.cp for c in space.candidates} == {1}
    plain = dataclasses.replace(model_preset("gpt-oss-120b"), attention_window=None, window_skip_freq=None,
                                softmax_sinks=False)
    check_compatible(plain, 64, config, TrainingSpec(512))  # the same layout without them: CP as before

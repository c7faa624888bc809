"""Sliding-window attention (GPT-OSS): spec validation, the attention core's work and FLOPs."""

from __future__ import annotations

import dataclasses

import pytest

from search import ModelSpec, SpecError
from search._compute_time import (
    ATTENTION_KEY_TILE,
    FUSED_ATTENTION_HEAD_DIM_64_FACTOR,
    Kernels,
    attention_core_times,
    fused_attention_head_dim_factor,
    windowed_keys_per_query,
)
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
    assert windowed_keys_per_query(4096 - ATTENTION_KEY_TILE // 2, 4096) == 2048  # its blocks span it


def test_a_narrow_window_runs_its_edge_blocks_whole() -> None:
    # A 128-key window spans two 128-key blocks per query block, the diagonal one half masked, as on a
    # full causal layer: 192 keys charged per query at 4K tokens, not the 128 the band holds.
    band = 128 + ATTENTION_KEY_TILE / 2
    assert windowed_keys_per_query(128, 4096) == band - band * band / 8192
    assert windowed_keys_per_query(128, 4096) > 1.45 * (128 - 128 * 128 / 8192)
    # Wide windows barely notice it (a 1,024-key band: 6 % more keys).
    assert windowed_keys_per_query(1024, 65536) / (1024 - 1024 * 1024 / 131072) == pytest.approx(1.0625, rel=1e-3)


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


def test_fused_attention_runs_64_wide_heads_slower() -> None:
    fused = dataclasses.replace(KERNELS, fused_attention=True)
    gpt_oss = _full(model_preset("gpt-oss-120b"))  # 64-wide heads
    qwen = model_preset("qwen3-30b-a3b")  # 128-wide heads
    assert gpt_oss.dim_per_head == 64 and qwen.dim_per_head == 128
    for spec, factor in ((gpt_oss, FUSED_ATTENTION_HEAD_DIM_64_FACTOR), (qwen, 1.0)):
        fwd, bwd = attention_core_times(spec, 4096.0, 4096.0, 1, fused)
        ref_fwd, ref_bwd = attention_core_times(spec, 4096.0, 4096.0, 1, KERNELS)
        assert fwd == pytest.approx(ref_fwd / factor)
        assert bwd == pytest.approx(ref_bwd / factor)
    # FlashAttention-2's fitted rate (not fused) is one rate for every head dim.
    assert not KERNELS.fused_attention
    assert fused_attention_head_dim_factor(64) == fused_attention_head_dim_factor(32) == 0.6
    assert fused_attention_head_dim_factor(96) == pytest.approx(0.8)
    assert fused_attention_head_dim_factor(128) == fused_attention_head_dim_factor(192) == 1.0


def test_megatron_core_attention_is_fused_on_hopper_and_blackwell_only() -> None:
    from search import Calibration
    from search._cluster_presets import GPUS
    from search._predict import _kernels
    cal = Calibration()
    assert _kernels(GPUS["gb300-nvl72"], "bf16", cal, "megatron")[0].fused_attention
    assert _kernels(GPUS["h100-sxm5-80gb"], "bf16", cal, "megatron")[0].fused_attention
    assert not _kernels(GPUS["a100-sxm4-80gb"], "bf16", cal, "megatron")[0].fused_attention
    assert not _kernels(GPUS["h100-sxm5-80gb"], "bf16", cal, "fsdp")[0].fused_attention


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

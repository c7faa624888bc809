"""FP8 attention (Transformer Engine's fp8_dpa, TrainingSpec.fp8_attention): where it is valid, what it costs
(cuDNN's measured FP8 speed by attention shape, and a windowed layer's backward over the whole causal
triangle), how a runs record and
an erratum carry it (the Megatron-LM launch, which has no flag for it, is tested in
tests/service/launch/test_precision_recipes.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks._errata import read_corrected
from search import ParallelConfig, SpecError, TrainingSpec, cluster_preset, model_preset, predict
from search._compute_time import CAUSAL_EXECUTED_FRACTION, FLASH_BACKWARD_TO_FORWARD, Kernels, attention_core_times
from search._fp8_attention import (
    FP8_ATTENTION_TIME_FACTOR,
    HOPPER_FP8_ATTENTION_TIME_FACTOR,
    fp8_attention_time_factors,
)
from search._runs_file import RecordRefused, run_from_record

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
KERNELS = Kernels(matmul_flop_per_s=1e15, cuda_core_flop_per_s=1e13, attention_flop_per_s=5e14,
                  hbm_bytes_per_s=3e12, gemm_overhead_s=1e-5)
MXFP8 = dataclasses.replace(KERNELS, fp8_attention=True,
                            fp8_attention_time_factors=fp8_attention_time_factors(True, "mxfp8"))
GPT_OSS = model_preset("gpt-oss-120b")
GPT_OSS_LAYOUT = ParallelConfig(dp=64, ep=16, micro_batch=4, zero_stage=1, moe_dispatcher="flex-hybridep",
                                moe_a2a_overlap=True, cuda_graphs="full-iteration")


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"fp8_attention": 1}, "not a boolean"),
    ({"fp8_attention": True, "precision": "bf16"}, "FP8 recipe"),
    ({"fp8_attention": True, "precision": "nvfp4"}, "NVFP4's is not"),
    ({"fp8_attention": True, "precision": "fp8", "framework": "fsdp"}, "Megatron-Core"),
])
def test_the_spec_refuses_fp8_attention_where_transformer_engine_has_none(kwargs: dict[str, object],
                                                                           needle: str) -> None:
    with pytest.raises(SpecError) as err:
        TrainingSpec(64, **kwargs)  # type: ignore[arg-type]
    assert err.value.field == "TrainingSpec.fp8_attention"
    assert needle in err.value.problem


def test_a_windowed_layers_fp8_backward_runs_the_causal_half() -> None:
    windowed = dataclasses.replace(GPT_OSS, window_skip_freq=None)  # every layer windowed
    full = dataclasses.replace(GPT_OSS, attention_window=None, window_skip_freq=None)
    tokens = kv = 4096.0
    factor = FP8_ATTENTION_TIME_FACTOR[(False, "mxfp8")]
    fwd, bwd = attention_core_times(windowed, tokens, kv, 1, KERNELS)
    fp8_fwd, fp8_bwd = attention_core_times(windowed, tokens, kv, 1, MXFP8)
    full_bwd = attention_core_times(full, tokens, kv, 1, KERNELS)[1]
    assert fp8_fwd == pytest.approx(fwd * factor)  # the forward keeps the window
    assert fp8_bwd == pytest.approx(full_bwd * factor)  # the backward does not
    assert fp8_bwd > 8 * bwd  # a 128-token band against 2,048 keys per query at 4K
    expected = FLASH_BACKWARD_TO_FORWARD * CAUSAL_EXECUTED_FRACTION * 2.0 * tokens * kv * (
        full.q_dim + full.attention_out_dim) / KERNELS.attention_flop_per_s * factor
    assert fp8_bwd == pytest.approx(expected)


def test_fp8_attention_runs_at_cudnns_measured_speed_for_its_shape() -> None:
    mla, llama = model_preset("deepseek-v3"), model_preset("llama3-8b")
    assert mla.mla is not None and llama.mla is None
    for blackwell, recipe in ((True, "fp8"), (True, "mxfp8"), (False, "fp8")):
        factors = fp8_attention_time_factors(blackwell, recipe)
        fp8 = dataclasses.replace(KERNELS, fp8_attention=True, fp8_attention_time_factors=factors)
        for model, factor in ((llama, factors[0]), (mla, factors[1])):
            ref = attention_core_times(model, 4096.0, 4096.0, 1, KERNELS)
            assert attention_core_times(model, 4096.0, 4096.0, 1, fp8) == pytest.approx(
                (ref[0] * factor, ref[1] * factor))
    # Published: MLA's shape gains from FP8 on Blackwell (0.71-0.80 MXFP8), 128-wide heads barely (0.95-1.10).
    assert FP8_ATTENTION_TIME_FACTOR[(True, "mxfp8")] < 0.8 < FP8_ATTENTION_TIME_FACTOR[(False, "mxfp8")]
    assert FP8_ATTENTION_TIME_FACTOR[(True, "fp8")] < FP8_ATTENTION_TIME_FACTOR[(True, "mxfp8")]
    assert fp8_attention_time_factors(False, "fp8") == (HOPPER_FP8_ATTENTION_TIME_FACTOR,) * 2


def test_the_predictor_picks_the_gpus_fp8_attention_figures() -> None:
    from search import Calibration
    from search._cluster_presets import GPUS
    from search._predict import _kernels
    cal = Calibration()
    assert _kernels(GPUS["gb300-nvl72"], "mxfp8", cal, "megatron", True)[0].fp8_attention_time_factors == (
        FP8_ATTENTION_TIME_FACTOR[(False, "mxfp8")], FP8_ATTENTION_TIME_FACTOR[(True, "mxfp8")])
    hopper = _kernels(GPUS["h100-sxm5-80gb"], "fp8", cal, "megatron", True)[0]
    assert hopper.fp8_attention and hopper.fp8_attention_time_factors[0] == HOPPER_FP8_ATTENTION_TIME_FACTOR
    bf16 = _kernels(GPUS["h100-sxm5-80gb"], "fp8", cal, "megatron")[0]
    assert not bf16.fp8_attention and bf16.fp8_attention_time_factors == (1.0, 1.0)


def test_fp8_attention_slows_a_windowed_model_in_a_prediction() -> None:
    cluster = cluster_preset("gb300-nvl72", 16)
    plain = predict(GPT_OSS, cluster, GPT_OSS_LAYOUT, TrainingSpec(1280, "mxfp8"))
    fp8 = predict(GPT_OSS, cluster, GPT_OSS_LAYOUT, TrainingSpec(1280, "mxfp8", fp8_attention=True))
    assert fp8.iteration_time_s > plain.iteration_time_s * 1.05
    assert fp8.time_breakdown_s["compute"] > plain.time_breakdown_s["compute"]


def test_hopper_runs_fp8_attention_on_128_wide_heads_only() -> None:
    h100 = cluster_preset("dgx-h100", 8)
    layout = ParallelConfig(dp=16, ep=8, pp=4, micro_batch=1, zero_stage=1, recompute="full")
    with pytest.raises(SpecError) as err:
        predict(GPT_OSS, h100, layout, TrainingSpec(512, "fp8", fp8_attention=True))
    assert err.value.field == "TrainingSpec.fp8_attention" and "128-wide" in err.value.problem
    llama = model_preset("llama3-8b")
    assert predict(llama, cluster_preset("dgx-h100", 1), ParallelConfig(dp=8, zero_stage=1),
                   TrainingSpec(64, "fp8", fp8_attention=True)).iteration_time_s > 0


def _record(fp8_attention: object) -> dict[str, object]:
    import json
    rows = json.loads((DATA / "runs_2024_2026.json").read_text())
    rows = rows["runs"] if isinstance(rows, dict) else rows
    rec = next(r for r in rows if r["id"].startswith("mbridge-26.08-gb300-gpt-oss"))
    rec = json.loads(json.dumps(rec))
    rec["config"].update(moe_dispatcher="flex-hybridep", moe_a2a_overlap=True, cuda_graphs="full-iteration",
                         fp8_attention=fp8_attention)
    return rec


def test_a_runs_record_carries_fp8_attention_and_refuses_a_non_boolean() -> None:
    assert run_from_record(_record(True)).training.fp8_attention is True
    assert run_from_record(_record(None)).training.fp8_attention is False
    with pytest.raises(RecordRefused) as err:
        run_from_record(_record("yes"))
    assert "config.fp8_attention" in str(err.value)


def test_the_fp8_attention_recipes_rows_are_read_with_it() -> None:
    # Megatron-Bridge set fp8_dot_product_attention from v0.5.0 (the 26.06 container) in its GB300 DeepSeek-V3,
    # GB200 Qwen3-30B-A3B and GB300 GPT-OSS MXFP8 recipes, and in no release before (benchmarks/data/errata.json).
    runs, applied = read_corrected(DATA / "runs_2024_2026.json")
    fp8 = sorted(r.id for r in runs.runs if r.training.fp8_attention)
    assert len(fp8) == 10
    assert all(i.split("-")[1] in ("26.06", "26.06.01", "26.08") and "-mxfp8-" in i for i in fp8)
    families = {i.split("-mxfp8")[0].split("-", 2)[2] for i in fp8}
    assert families == {"gb300-deepseek-v3", "gb200-qwen3-30b-a3b", "gb300-gpt-oss-120b"}
    assert {e.id for e in applied if "fp8_attention" in e.corrected} == set(fp8)

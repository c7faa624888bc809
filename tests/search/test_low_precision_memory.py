"""What low-precision training keeps in memory and sends: Transformer Engine's quantized copies of
the linear-layer inputs (Megatron-Core), and Megatron's gradient buffer in bf16
(``--grad-reduce-in-bf16``, which Megatron-Bridge's performance recipes set)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks._tuned import completions
from search import ParallelConfig, SpecError, TrainingSpec, cluster_preset, model_preset, predict
from search._memory import QUANTIZED_LINEAR_INPUT_BYTES, layer_activation_bytes, saved_linear_input_bytes
from search._moe_terms import expert_load_factor, moe_layer_activation_bytes, routed_copies_per_gpu
from search._runs_file import read_runs, run_from_record

LLAMA_70B = model_preset("llama3-70b")
H100_16 = cluster_preset("dgx-h100", 2)
LAYOUT = ParallelConfig(dp=2, tp=4, pp=2, sp=True, micro_batch=1, zero_stage=1)
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "runs_2024_2026.json"


def test_quantized_linear_inputs_save_exactly_their_bytes() -> None:
    """Known answer: per token, the QKV and first-MLP inputs (h each) and the second MLP input (f)
    are kept at 1 byte under FP8 instead of 2; nothing else changes (tp = 1, no SP, so nothing is split)."""
    m, s = LLAMA_70B, LLAMA_70B.seq_len
    bf16 = layer_activation_bytes(m, 1, 1, 1, False, "none")
    fp8 = layer_activation_bytes(m, 1, 1, 1, False, "none", linear_input_bytes=1.0)
    assert bf16 - fp8 == pytest.approx(s * (2 * m.hidden + m.ffn))
    # Full recomputation keeps the 16-bit block input only, whatever the recipe.
    assert layer_activation_bytes(m, 1, 1, 1, False, "full", linear_input_bytes=1.0) == \
        layer_activation_bytes(m, 1, 1, 1, False, "full")


def test_routed_experts_keep_quantized_grouped_gemm_inputs() -> None:
    """Known answer: per routed token copy, the first grouped GEMM's input (h) and the second's (f_e)
    are kept at 1 byte under FP8 instead of 2 (Transformer Engine's _GroupedLinear saves its quantized
    inputs); the attention part changes as a dense block's, the router buffers not at all."""
    m = model_preset("qwen3-30b-a3b")
    assert m.moe is not None
    bf16 = moe_layer_activation_bytes(m, 1, 1, 1, False, 1, "none")
    fp8 = moe_layer_activation_bytes(m, 1, 1, 1, False, 1, "none", 1.0)
    copies = routed_copies_per_gpu(m, 1, 1, 1, 1) * expert_load_factor(m)
    attention = (layer_activation_bytes(m, 1, 1, 1, False, "none", ffn=m.moe.shared_expert_ffn)
                 - layer_activation_bytes(m, 1, 1, 1, False, "none", ffn=m.moe.shared_expert_ffn,
                                          linear_input_bytes=1.0))
    assert bf16 - fp8 == pytest.approx(copies * (m.hidden + m.moe.expert_ffn) + attention)


@pytest.mark.parametrize(("framework", "precision", "expected"), [
    ("megatron", "bf16", 2.0), ("megatron", "fp16", 2.0), ("megatron", "fp8", 1.0),
    ("megatron", "mxfp8", 1.0 + 1 / 32), ("megatron", "nvfp4", 0.5 + 1 / 16),
    # torchao's Float8Linear (torchtitan) and DeepSpeed keep the 16-bit input
    ("fsdp", "fp8", 2.0), ("deepspeed", "fp8", 2.0), ("megatron-deepspeed", "fp8", 2.0),
])
def test_saved_linear_input_width_per_runtime_and_recipe(framework: str, precision: str, expected: float) -> None:
    assert saved_linear_input_bytes(framework, precision) == expected
    assert set(QUANTIZED_LINEAR_INPUT_BYTES) == {"fp8", "mxfp8", "nvfp4"}


def test_fp8_on_megatron_holds_fewer_activation_bytes_than_bf16() -> None:
    bf16 = predict(LLAMA_70B, H100_16, LAYOUT, TrainingSpec(64, "bf16"))
    fp8 = predict(LLAMA_70B, H100_16, LAYOUT, TrainingSpec(64, "fp8"))
    saved = bf16.memory_breakdown_bytes["activations"] - fp8.memory_breakdown_bytes["activations"]
    assert saved > 0
    # The model states do not depend on the recipe.
    for part in ("weights", "gradients", "optimizer_states"):
        assert fp8.memory_breakdown_bytes[part] == bf16.memory_breakdown_bytes[part]


def test_bf16_gradient_reduction_halves_megatrons_gradient_buffer_and_traffic() -> None:
    fp32 = predict(LLAMA_70B, H100_16, LAYOUT, TrainingSpec(64, "bf16"))
    bf16 = predict(LLAMA_70B, H100_16, LAYOUT, TrainingSpec(64, "bf16", grad_reduce_in_bf16=True))
    assert bf16.memory_breakdown_bytes["gradients"] == pytest.approx(fp32.memory_breakdown_bytes["gradients"] / 2)
    assert bf16.memory_breakdown_bytes["optimizer_states"] == fp32.memory_breakdown_bytes["optimizer_states"]
    assert bf16.peak_memory_bytes_per_gpu < fp32.peak_memory_bytes_per_gpu
    # Half the bytes on the wire: the exposed data-parallel time cannot grow, and the step gets no slower.
    assert bf16.time_breakdown_s["dp_comm"] <= fp32.time_breakdown_s["dp_comm"]
    assert bf16.iteration_time_s <= fp32.iteration_time_s
    # fp16 training already reduces in fp16: the same 2 bytes per parameter without the flag.
    fp16 = predict(LLAMA_70B, H100_16, LAYOUT, TrainingSpec(64, "fp16"))
    assert fp16.memory_breakdown_bytes["gradients"] == bf16.memory_breakdown_bytes["gradients"]


def test_bf16_gradient_reduction_costs_less_dp_time_where_it_is_exposed() -> None:
    """ZeRO-1 on one micro-batch per step: nothing hides the reduction, so half the bytes is less time."""
    config = replace(LAYOUT, dp=8, pp=1, tp=2, micro_batch=8)
    fp32 = predict(LLAMA_70B, H100_16, config, TrainingSpec(64, "bf16"))
    bf16 = predict(LLAMA_70B, H100_16, config, TrainingSpec(64, "bf16", grad_reduce_in_bf16=True))
    assert fp32.time_breakdown_s["dp_comm"] > 0
    assert bf16.time_breakdown_s["dp_comm"] < fp32.time_breakdown_s["dp_comm"]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"framework": "deepspeed", "grad_reduce_in_bf16": True}, r"grad_reduce_in_bf16: is a Megatron-Core option"),
    ({"framework": "fsdp", "grad_reduce_in_bf16": True}, r"grad_reduce_in_bf16: is a Megatron-Core option"),
    ({"precision": "fp16", "grad_reduce_in_bf16": True}, r"fp16 training already reduces"),
    ({"grad_reduce_in_bf16": "yes"}, r"grad_reduce_in_bf16: 'yes' is not a boolean"),
])
def test_bf16_gradient_reduction_is_refused_where_it_is_not_modelled(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        TrainingSpec(64, **kwargs)


def _record(run_id: str) -> dict[str, Any]:
    records = json.loads(DATA.read_text())
    return next(r for r in (records["runs"] if isinstance(records, dict) else records) if r["id"] == run_id)


def test_megatron_bridge_rows_reduce_in_bf16_unless_they_say_otherwise(tmp_path: Path) -> None:
    mb = _record("mbridge-26.04-gb200-llama3.1-405b-fp8-256g-gbs1536-mbs1-tp4pp16cp1vp4")
    other = next(r for r in json.loads(DATA.read_text()) if "bridge" not in str(r.get("software")).lower()
                 and (r["config"].get("framework") or "megatron") == "megatron")
    stated = json.loads(json.dumps(mb))
    stated["id"] += "-stated"
    stated["config"]["grad_reduce_in_bf16"] = False
    bad = json.loads(json.dumps(mb))
    bad["id"] += "-bad"
    bad["config"]["grad_reduce_in_bf16"] = "sometimes"
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([mb, other, stated, bad]))
    runs = read_runs(path)
    by_id = {r.id: r for r in runs.runs}
    assert by_id[mb["id"]].training.grad_reduce_in_bf16 is True
    assert by_id[other["id"]].training.grad_reduce_in_bf16 is False
    assert by_id[stated["id"]].training.grad_reduce_in_bf16 is False
    [refused] = runs.refused
    assert refused.id == bad["id"]
    assert [r.field for r in refused.refusals] == ["config.grad_reduce_in_bf16"]


def test_the_published_gb200_405b_fp8_recipe_fits_without_recomputation() -> None:
    """Megatron-Bridge ran Llama 3.1 405B FP8 on 256 GB200 at tp4 pp16 vp4, micro-batch 1, with no
    recomputation (its base recipe's recompute_granularity = None): 214 GiB on a 186 GiB GPU before
    the low-precision rules, so the model had it run out of memory. FP8's quantized linear inputs
    are needed; with Megatron-Core's default dropout (0.1, not the Llama provider's 0) the bf16
    gradient buffer is needed too."""
    run = run_from_record(_record("mbridge-26.04-gb200-llama3.1-405b-fp8-256g-gbs1536-mbs1-tp4pp16cp1vp4"))
    assert run.training.grad_reduce_in_bf16 and run.training.precision == "fp8" and not run.model.dropout
    plain = [c for c in completions(run) if c.recompute == "none" and c.recompute_layers is None]
    assert plain

    def fits(training: TrainingSpec, dropout: bool = False) -> bool:
        model = replace(run.model, dropout=dropout)
        return any(predict(model, run.cluster, c, training).feasible for c in plain)

    assert fits(run.training) and fits(run.training, dropout=True)
    assert not fits(replace(run.training, precision="bf16"))  # 16-bit linear inputs, bf16 gradients
    assert not fits(replace(run.training, grad_reduce_in_bf16=False), dropout=True)

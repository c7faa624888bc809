"""Model presets: shapes against published parameter counts, and the preset lookup."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from search._errors import UnknownPresetError
from search._model_presets import MODEL_PRESET_ACTIVE_PARAMS, MODEL_PRESET_PARAMS, MODEL_PRESETS, model_preset

RUNS_2024_2026 = Path(__file__).parents[2] / "benchmarks" / "data" / "runs_2024_2026.json"

NARAYANAN_TABLE_1 = (
    "gpt-1.7b",
    "gpt-3.6b",
    "gpt-7.5b",
    "gpt-18b",
    "gpt-39b",
    "gpt-76b",
    "gpt-145b",
    "gpt-310b",
    "gpt-530b",
    "gpt-1t",
)
REQUIRED = (
    *NARAYANAN_TABLE_1,
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "bloom-176b",
    "mpt-7b",
    "mpt-30b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "kimi-k2",
    "gpt-oss-120b",
)
MOE = ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "kimi-k2",
       "gpt-oss-120b")
GPT_CLOSED_FORM = (*NARAYANAN_TABLE_1, "gpt3-175b")

REL_TOL = 0.01

# Table 1 prints billions with one decimal, so its two smallest entries sit further than 1 %
# from the exact counts of their own shapes (1.652B -> "1.7", 3.562B -> "3.6");
# test_narayanan_table_1_is_the_count_rounded_to_0_1_billion checks those two exactly.
ROUNDED_BEYOND_1_PERCENT = {
    "gpt-1.7b": "Table 1 prints 1.7 for 1,652,230,656 (-2.8 %): rounded to 0.1 B",
    "gpt-3.6b": "Table 1 prints 3.6 for 3,562,168,320 (-1.05 %): rounded to 0.1 B",
    # The five shape values Kimi K2's config.json shares with the paper (7168, 61 layers, 384 experts
    # of 2048, 1 dense layer, 64 heads, vocab 163840) give 1,026,408,209,408; Table 2's 1.04T is 13.6 B
    # (1.3 %) more, which neither the paper nor config.json (num_nextn_predict_layers 0) accounts for.
    # The same counting reproduces DeepSeek-V3's 671B within 0.004 %.
    "kimi-k2": "arXiv:2507.20534 Table 2 prints 1.04T for a shape that counts 1.0264T (-1.31 %)",
}
ACTIVE_BEYOND_1_PERCENT = {
    # Counting every dense part, the embedding and LM head, the shared expert and topk routed experts
    # gives 37,552,282,624 (+1.49 %), the runs file's active_params; "37B" is 37.55 B truncated.
    "deepseek-v3": "arXiv:2412.19437 prints 37B for 37.55 B (+1.49 %)",
    # 3,353,032,704 (3,353,020,416 in the runs file, without the Q/K norms): "3.3B" is 3.35 B truncated.
    "qwen3-30b-a3b": "the Qwen3-30B-A3B model card prints 3.3B for 3.353 B (+1.61 %)",
    # 5,711,982,912 with the input embedding (0.579 B) that the model card's 5.13B leaves out;
    # test_gpt_oss_counts_are_the_model_cards holds the count without it to 0.1 %.
    "gpt-oss-120b": "the gpt-oss model card's 5.13B active leaves out the input embedding (+11.3 %)",
}


def _within_tolerance(names: Iterable[str], beyond: dict[str, str]) -> list[object]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=beyond[name])) if name in beyond else name
        for name in names
    ]


def _assert_within(name: str, what: str, computed: int, published: float) -> None:
    rel_err = (computed - published) / published
    assert abs(rel_err) <= REL_TOL, (
        f"{name}: ModelSpec.{what} = {computed:,} vs published {published:,.0f}: "
        f"relative error {rel_err:+.3%} (limit {REL_TOL:.0%})"
    )


@pytest.mark.parametrize("name", _within_tolerance(MODEL_PRESETS, ROUNDED_BEYOND_1_PERCENT))
def test_params_within_1_percent_of_published(name: str) -> None:
    _assert_within(name, "params", model_preset(name).params, MODEL_PRESET_PARAMS[name])


@pytest.mark.parametrize("name", _within_tolerance(MOE, ACTIVE_BEYOND_1_PERCENT))
def test_active_params_within_1_percent_of_published(name: str) -> None:
    _assert_within(name, "active_params", model_preset(name).active_params, MODEL_PRESET_ACTIVE_PARAMS[name])


@pytest.mark.parametrize(("name", "limit"), [("kimi-k2", 0.014), ("deepseek-v3", 0.015), ("qwen3-30b-a3b", 0.017)])
def test_published_figures_beyond_1_percent_stay_where_they_were_measured(name: str, limit: float) -> None:
    # The strict xfails above say these miss 1 %; this says by how much at most, so that a change to the
    # shape or to the counting that moves them further shows.
    spec = model_preset(name)
    for computed, published in ((spec.params, MODEL_PRESET_PARAMS[name]),
                                (spec.active_params, MODEL_PRESET_ACTIVE_PARAMS[name])):
        assert abs(computed - published) / published <= limit


def _runs_file_models() -> dict[str, dict[str, Any]]:
    runs = json.loads(RUNS_2024_2026.read_text())
    return {run["model"]["name"]: run["model"] for run in runs if run["model"].get("moe")}


RUNS_FILE_NAMES = {"deepseek-v3": "DeepSeek-V3 671B", "qwen3-30b-a3b": "Qwen3-30B-A3B",
                   "qwen3-235b-a22b": "Qwen3-235B-A22B", "gpt-oss-120b": "GPT-OSS 120B"}


@pytest.mark.parametrize("name", sorted(RUNS_FILE_NAMES))
def test_moe_presets_equal_the_runs_file_shapes_and_counts(name: str) -> None:
    model = _runs_file_models()[RUNS_FILE_NAMES[name]]
    spec = model_preset(name)
    for field in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "head_dim", "tied_embeddings"):
        assert getattr(spec, field) == model[field], field
    # The runs file writes GPT-OSS's quick-GeLU GLU as "swiglu" with a detail saying so: 3 matrices either way.
    glu = "quick-geglu" if "quick_gelu" in model.get("activation_detail", "") else model["activation"]
    assert (spec.activation, spec.gated_mlp) == (glu, model["activation"] == "swiglu")
    moe = model["moe"]
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.topk, spec.moe.expert_ffn, spec.moe.shared_experts,
            spec.moe.shared_expert_ffn) == (moe["experts"], moe["topk"], moe["expert_ffn"], moe["shared_experts"],
                                            moe["shared_expert_ffn"])
    assert (spec.dense_layers, spec.moe_layers) == (moe["dense_layers"], moe["moe_layers"])
    assert (dataclasses.asdict(spec.mla) if spec.mla else None) == model.get("mla")
    # The runs file counts "biases ignored" and leaves out Qwen3's RMSNorm on each query and key head
    # (q_norm, k_norm: 2 x head_dim weights per layer) and GPT-OSS's softmax sinks, which the
    # checkpoints have and the presets count.
    qk_norms = 2 * spec.dim_per_head * spec.layers if spec.qk_norm else 0
    if not spec.bias:
        assert spec.params == model["params"] + qk_norms
        assert spec.active_params == model["active_params"] + qk_norms
    without = dataclasses.replace(spec, qk_norm=False, bias=False, softmax_sinks=False)
    assert (without.params, without.active_params) == (model["params"], model["active_params"])
    if "attention_window" in model:
        assert spec.attention_window == model["attention_window"]["size"]


def test_gpt_oss_counts_are_the_model_cards() -> None:
    # gpt-oss model card Table 1: 116.83B total, 5.13B active (the LM head but not the input embedding);
    # the runs file's 116,789,048,640 is the same shape without the 40,108,032 biases and sinks
    # (per layer: 8,000 attention biases, 64 sinks, 128 router biases, 128 x 8,640 expert biases).
    spec = model_preset("gpt-oss-120b")
    assert spec.params == 116_829_156_672
    assert spec.params - 116_789_048_640 == 36 * (8_000 + 64 + 128 + 128 * 8_640)
    assert abs(spec.active_params - spec.vocab * spec.hidden - 5.13e9) / 5.13e9 < 0.001
    assert (spec.windowed_layers, spec.windowed_layer_share) == (18, 0.5)


def test_deepseek_v3_preset_trains_with_its_mtp_module() -> None:
    runs = json.loads(RUNS_2024_2026.read_text())
    mtp = {run["model"].get("mtp_layers") for run in runs if run["model"]["name"] == "DeepSeek-V3 671B"}
    assert mtp == {0, 1}  # the runs file has both; arXiv:2412.19437 Sec. 4.2 trains with depth D = 1
    assert model_preset("deepseek-v3").mtp_layers == 1


@pytest.mark.parametrize("name", MOE)
def test_moe_presets_are_llama_style_blocks_at_their_pretraining_length(name: str) -> None:
    spec = model_preset(name)
    assert spec.moe is not None
    assert (spec.activation, spec.norm, spec.position_embedding, spec.bias, spec.tied_embeddings,
            spec.attention) == ("quick-geglu" if name == "gpt-oss-120b" else "swiglu", "rmsnorm", "rope",
                                name == "gpt-oss-120b", False, "flash")
    if spec.moe.first_dense_layers == 0:
        assert spec.ffn == spec.moe.expert_ffn
    expected_seq = {"mixtral-8x7b": 32768, "mixtral-8x22b": 65536}.get(name, 4096)
    assert spec.seq_len == expected_seq


def test_kimi_k2_is_deepseek_v3_with_more_experts_fewer_heads_one_dense_layer() -> None:
    kimi, deepseek = model_preset("kimi-k2"), model_preset("deepseek-v3")
    assert kimi.mla == deepseek.mla
    assert (kimi.heads, kimi.moe and kimi.moe.experts, kimi.dense_layers, kimi.vocab, kimi.mtp_layers) == (
        64, 384, 1, 163840, 0)
    same = ("layers", "hidden", "ffn", "seq_len")
    assert [getattr(kimi, f) for f in same] == [getattr(deepseek, f) for f in same]


@pytest.mark.parametrize("name", NARAYANAN_TABLE_1)
def test_narayanan_table_1_is_the_count_rounded_to_0_1_billion(name: str) -> None:
    computed_b = model_preset(name).params / 1e9
    published_b = MODEL_PRESET_PARAMS[name] / 1e9
    assert abs(computed_b - published_b) <= 0.05, f"{name}: {computed_b:.4f} B does not round to {published_b:.1f} B"


def test_required_presets_exist() -> None:
    missing = [name for name in REQUIRED if name not in MODEL_PRESETS]
    assert not missing, f"missing model presets: {missing}"


def test_every_preset_has_a_published_count_and_its_own_name() -> None:
    assert set(MODEL_PRESET_PARAMS) == set(MODEL_PRESETS)
    assert set(MODEL_PRESET_ACTIVE_PARAMS) == {name for name, spec in MODEL_PRESETS.items() if spec.moe} == set(MOE)
    for name, spec in MODEL_PRESETS.items():
        assert spec.name == name
        assert model_preset(name) is spec


def test_unknown_preset_raises_and_lists_known_names() -> None:
    with pytest.raises(UnknownPresetError) as info:
        model_preset("gpt-4")
    err = info.value
    assert isinstance(err, KeyError)
    assert err.kind == "model"
    assert err.name == "gpt-4"
    assert err.known == sorted(MODEL_PRESETS)
    message = str(err)
    assert "'gpt-4'" in message
    for name in MODEL_PRESETS:
        assert name in message


@pytest.mark.parametrize("name", GPT_CLOSED_FORM)
def test_gpt_params_equal_narayanan_closed_form_plus_final_layernorm(name: str) -> None:
    # Narayanan et al. 2021 Sec. 5.1: P = 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)), evaluated
    # exactly. Per layer it counts 12h^2 weights and 13h biases and LayerNorm parameters, plus
    # the (V+s)*h embedding tables (tied head, learned positions). It leaves out the final
    # LayerNorm after the last layer (scale + shift, 2h), which Megatron's GPT has and
    # ModelSpec.params counts; so the two differ by exactly 2h.
    spec = model_preset(name)
    assert spec.ffn == 4 * spec.hidden
    assert spec.tied_embeddings and spec.position_embedding == "learned" and spec.bias
    layers, h, v, s = spec.layers, spec.hidden, spec.vocab, spec.seq_len
    closed_form = 12 * layers * h**2 * (1 + Fraction(13, 12 * h) + Fraction(v + s, 12 * layers * h))
    assert closed_form.denominator == 1
    final_layernorm = 2 * h
    assert spec.params == closed_form + final_layernorm, (
        f"{name}: ModelSpec.params - closed form = {spec.params - closed_form}, expected {final_layernorm} (2h)"
    )

"""Model presets: shapes against published parameter counts, and the preset lookup."""

from __future__ import annotations

from fractions import Fraction

import pytest

from search._errors import UnknownPresetError
from search._model_presets import MODEL_PRESET_PARAMS, MODEL_PRESETS, model_preset

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
)
GPT_CLOSED_FORM = (*NARAYANAN_TABLE_1, "gpt3-175b")

REL_TOL = 0.01

# Table 1 prints billions with one decimal, so its two smallest entries sit further than 1 %
# from the exact counts of their own shapes (1.652B -> "1.7", 3.562B -> "3.6");
# test_narayanan_table_1_is_the_count_rounded_to_0_1_billion checks those two exactly.
ROUNDED_BEYOND_1_PERCENT = {
    "gpt-1.7b": "Table 1 prints 1.7 for 1,652,230,656 (-2.8 %): rounded to 0.1 B",
    "gpt-3.6b": "Table 1 prints 3.6 for 3,562,168,320 (-1.05 %): rounded to 0.1 B",
}


def _presets_within_tolerance() -> list[object]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=ROUNDED_BEYOND_1_PERCENT[name]))
        if name in ROUNDED_BEYOND_1_PERCENT
        else name
        for name in MODEL_PRESETS
    ]


@pytest.mark.parametrize("name", _presets_within_tolerance())
def test_params_within_1_percent_of_published(name: str) -> None:
    computed = model_preset(name).params
    published = MODEL_PRESET_PARAMS[name]
    rel_err = (computed - published) / published
    assert abs(rel_err) <= REL_TOL, (
        f"{name}: ModelSpec.params = {computed:,} vs published {published:,.0f}: "
        f"relative error {rel_err:+.3%} (limit {REL_TOL:.0%})"
    )


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

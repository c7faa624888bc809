"""Hugging Face config.json -> ModelSpec: the dense architectures the cost model covers, parameter counts
that match the published checkpoints, and refusals that name the field autopar cannot model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from search import MODEL_PRESETS, SpecError, model_from_hf_config

EXAMPLES = Path(__file__).parents[2] / "examples" / "hf"


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / name / "config.json").read_text())
    return data


LLAMA31_8B = example("llama-3.1-8b")

# Other architectures, each with the fields their transformers configuration class reads.
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
            "attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
            "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36,
            "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
MISTRAL_7B_V01 = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
                  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
                  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
                  "tie_word_embeddings": False, "vocab_size": 32000}
GPT2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256,
        "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
        "resid_pdrop": 0.1, "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
        "summary_type": "cls_index", "summary_use_proj": True, "task_specific_params": {"text-generation": {}},
        "vocab_size": 50257}
PYTHIA_1B = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu",
             "hidden_size": 2048, "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
             "num_attention_heads": 8, "num_hidden_layers": 16, "rotary_emb_base": 10000, "rotary_pct": 0.25,
             "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": 50304}
BLOOM_560M = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "apply_residual_connection_post_layernorm":
              False, "attention_dropout": 0.0, "hidden_dropout": 0.0, "hidden_size": 1024, "layer_norm_epsilon": 1e-05,
              "n_head": 16, "n_layer": 24, "vocab_size": 250880, "offset_alibi": 100, "pretraining_tp": 1,
              "slow_but_exact": False}


def test_llama31_8b_is_llama3_8b_with_its_rope_scaling() -> None:
    spec, notes = model_from_hf_config(LLAMA31_8B, name="llama-3.1-8b", seq_len=8192)
    assert notes == ()
    preset = MODEL_PRESETS["llama3-8b"]
    assert spec.params == preset.params == 8_030_261_248  # meta-llama/Llama-3.1-8B safetensors total
    assert (spec.rope_theta, spec.rope_scaling_factor, spec.norm_eps) == (500000.0, 8.0, 1e-5)
    for field in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "activation", "norm",
                  "position_embedding", "bias", "tied_embeddings", "rope_theta"):
        assert getattr(spec, field) == getattr(preset, field), field


def test_seq_len_defaults_to_the_file_and_says_so() -> None:
    spec, notes = model_from_hf_config(LLAMA31_8B, name="x")
    assert spec.seq_len == 131072
    assert notes and "max_position_embeddings (131072)" in notes[0] and "--seq-len" in notes[0]


@pytest.mark.parametrize(("config", "params"), [
    (example("qwen2.5-7b"), 7_615_616_512),  # Qwen/Qwen2.5-7B: Q/K/V biases counted
    (QWEN3_8B, 8_190_735_360),  # Qwen/Qwen3-8B: Q/K norms counted
    (GPT2, 124_439_808),  # openai-community/gpt2 (tied head, learned positions)
    (PYTHIA_1B, 1_011_781_632),  # EleutherAI/pythia-1b (untied head)
    # bigscience/bloom-560m's 559,214,592 minus its embedding LayerNorm (2h = 2,048), which ModelSpec
    # does not count (as for the bloom-176b preset)
    (BLOOM_560M, 559_214_592 - 2 * 1024),
])
def test_published_parameter_counts(config: dict[str, Any], params: int) -> None:
    spec, _ = model_from_hf_config(config, name="m", seq_len=1024)
    assert spec.params == params


def test_family_specific_choices() -> None:
    qwen2, _ = model_from_hf_config(example("qwen2.5-7b"), name="q", seq_len=4096)
    assert (qwen2.qkv_bias, qwen2.bias, qwen2.rope_theta, qwen2.norm_eps) == (True, False, 1e6, 1e-6)
    qwen3, _ = model_from_hf_config(QWEN3_8B, name="q", seq_len=4096)
    assert (qwen3.qk_norm, qwen3.qkv_bias) == (True, False)
    neox, _ = model_from_hf_config(PYTHIA_1B, name="p", seq_len=2048)
    assert (neox.rotary_percent, neox.parallel_residual, neox.bias, neox.activation) == (0.25, True, True, "gelu")
    gpt2, _ = model_from_hf_config(GPT2, name="g")
    assert (gpt2.position_embedding, gpt2.tied_embeddings, gpt2.dropout, gpt2.seq_len) == ("learned", True, True, 1024)
    bloom, _ = model_from_hf_config(BLOOM_560M, name="b", seq_len=2048)
    assert (bloom.position_embedding, bloom.ffn) == ("alibi", 4096)


def test_mistral_sliding_window_refused_unless_the_sequence_fits_in_it() -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config(MISTRAL_7B_V01, name="m", seq_len=8192)
    assert err.value.field == "config.json sliding_window" and "4096" in err.value.problem
    spec, _ = model_from_hf_config(MISTRAL_7B_V01, name="m", seq_len=4096)
    assert spec.kv_heads == 8


@pytest.mark.parametrize(("change", "field", "needle"), [
    ({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts", "mixture"),
    ({"model_type": "qwen2_moe", "num_experts": 60, "moe_intermediate_size": 1408}, "num_experts", "mixture"),
    ({"model_type": "deepseek_v3", "n_routed_experts": 256, "q_lora_rank": 1536}, "n_routed_experts", "mixture"),
    ({"model_type": "t5"}, "model_type", "not an architecture"),
    ({"head_dim": 64}, "head_dim", "attention width"),
    ({"attention_bias": True}, "attention_bias", "some projections"),
    ({"hidden_act": "gelu"}, "hidden_act", "not supported"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling", "yarn"),
    ({"rope_scaling": {**LLAMA31_8B["rope_scaling"], "high_freq_factor": 2.0}}, "rope_scaling.high_freq_factor",
     "Llama 3.1"),
    ({"layer_types": ["sliding_attention"] * 32}, "layer_types", "sliding-window"),
    ({"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window", "sliding window"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers", "not a positive integer"),
    ({"some_new_knob": 3}, "some_new_knob", "cannot tell whether it changes the cost"),
])
def test_refusals_name_the_field(change: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**LLAMA31_8B, **change}, name="m", seq_len=8192)
    assert err.value.field == f"config.json {field}"
    assert needle in str(err.value)


def test_examples_mixtral_is_refused_for_its_experts() -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config(example("mixtral-8x7b"), name="mixtral")
    assert err.value.field == "config.json num_local_experts" and "no mixture of experts" in err.value.fix


def test_bloom_needs_a_sequence_length() -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config(BLOOM_560M, name="b")
    assert err.value.field == "seq_len" and "--seq-len" in err.value.fix


def test_newer_transformers_rope_parameters() -> None:
    config = {k: v for k, v in LLAMA31_8B.items() if k not in ("rope_theta", "rope_scaling")}
    config["rope_parameters"] = {**LLAMA31_8B["rope_scaling"], "rope_theta": 500000.0}
    spec, _ = model_from_hf_config(config, name="m", seq_len=8192)
    assert (spec.rope_theta, spec.rope_scaling_factor) == (500000.0, 8.0)


@pytest.mark.parametrize(("field", "value"), [("norm_eps", 0.0), ("norm_eps", 1.5), ("rope_theta", -1.0),
                                              ("rope_scaling_factor", 0.5), ("rotary_percent", 1.5),
                                              ("qkv_bias", 1), ("qk_norm", "yes"), ("parallel_residual", None)])
def test_modelspec_validates_the_fields_config_json_fills(field: str, value: object) -> None:
    with pytest.raises(SpecError) as err:
        dataclasses.replace(MODEL_PRESETS["llama3-8b"], **{field: value})
    assert err.value.field == f"ModelSpec.{field}"

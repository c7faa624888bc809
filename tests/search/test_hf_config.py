"""Hugging Face config.json -> ModelSpec: the dense and mixture-of-experts architectures the cost model
covers, parameter counts that match the published checkpoints and presets, and refusals that name the
field autopar cannot model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from search import MODEL_PRESETS, SpecError, model_from_hf_config
from search._rope_spec import YarnSpec

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
# mistralai/Mistral-Nemo-Base-2407: 32 heads of 128 on a hidden size of 5120 (head_dim given).
MISTRAL_NEMO = {"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
                "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
                "intermediate_size": 14336, "max_position_embeddings": 1024000, "model_type": "mistral",
                "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
                "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0", "use_cache": True,
                "vocab_size": 131072}
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
    (MISTRAL_NEMO, 12_247_782_400),  # mistralai/Mistral-Nemo-Base-2407: head_dim 128 x 32 heads != 5120
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
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts", "mixture"),  # a llama with experts
    ({"model_type": "qwen2_moe", "num_experts": 60, "moe_intermediate_size": 1408}, "num_experts", "qwen3_moe"),
    ({"model_type": "deepseek_v2", "n_routed_experts": 160, "q_lora_rank": 1536}, "n_routed_experts", "deepseek_v3"),
    ({"q_lora_rank": 1536}, "q_lora_rank", "latent attention"),
    ({"model_type": "t5"}, "model_type", "not an architecture"),
    ({"head_dim": 0}, "head_dim", "not a positive integer"),
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


def test_explicit_head_dim_of_a_dense_model_is_read() -> None:
    narrow, _ = model_from_hf_config({**LLAMA31_8B, "head_dim": 64}, name="m", seq_len=8192)
    assert (narrow.head_dim, narrow.q_dim, narrow.kv_dim) == (64, 2048, 512)
    same, _ = model_from_hf_config({**LLAMA31_8B, "head_dim": 128}, name="llama-3.1-8b", seq_len=8192)
    assert same == model_from_hf_config(LLAMA31_8B, name="llama-3.1-8b", seq_len=8192)[0]


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
def test_modelspec_validates_the_fields_config_json_fills(field: str, value: Any) -> None:
    with pytest.raises(SpecError) as err:
        dataclasses.replace(MODEL_PRESETS["llama3-8b"], **{field: value})
    assert err.value.field == f"ModelSpec.{field}"


# ---------------------------------------------------------------- mixtures of experts

# Each the checkpoint's config.json as published on the Hugging Face hub.
MIXTRAL_8X22B = {"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                 "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 6144, "initializer_range": 0.02,
                 "intermediate_size": 16384, "max_position_embeddings": 65536, "model_type": "mixtral",
                 "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56,
                 "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
                 "rms_norm_eps": 1e-05, "rope_theta": 1000000, "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.38.0",
                 "use_cache": True, "vocab_size": 32000}  # mistral-community/Mixtral-8x22B-v0.1
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                 "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
                 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
                 "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
                 "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
                 "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
                 "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                 "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
                 "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}  # Qwen/Qwen3-30B-A3B
QWEN3_235B_A22B = {**QWEN3_30B_A3B, "hidden_size": 4096, "intermediate_size": 12288, "max_window_layers": 94,
                   "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_hidden_layers": 94}
DEEPSEEK_V3: dict[str, Any] = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                 "AutoModel": "modeling_deepseek.DeepseekV3Model",
                 "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"},
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}
KIMI_K2 = {  # moonshotai/Kimi-K2-Base (DeepseekV3ForCausalLM with its own model_type)
    **DEEPSEEK_V3, "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
    "max_position_embeddings": 131072, "model_type": "kimi_k2", "n_group": 1, "n_routed_experts": 384,
    "num_attention_heads": 64, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
    "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "topk_group": 1, "transformers_version": "4.48.3",
    "vocab_size": 163840,
}


@pytest.mark.parametrize(("config", "preset", "seq_len"), [
    (example("mixtral-8x7b"), "mixtral-8x7b", 32768),
    (MIXTRAL_8X22B, "mixtral-8x22b", 65536),
    (QWEN3_30B_A3B, "qwen3-30b-a3b", 4096),
    (QWEN3_235B_A22B, "qwen3-235b-a22b", 4096),
    (DEEPSEEK_V3, "deepseek-v3", 4096),
    (KIMI_K2, "kimi-k2", 4096),
])
def test_moe_config_is_its_preset(config: dict[str, Any], preset: str, seq_len: int) -> None:
    spec, _ = model_from_hf_config(config, name=preset, seq_len=seq_len)
    assert spec == MODEL_PRESETS[preset]  # every field, rope_theta and norm_eps included
    assert (spec.params, spec.active_params) == (MODEL_PRESETS[preset].params, MODEL_PRESETS[preset].active_params)


def test_examples_mixtral_reads_as_its_checkpoint() -> None:
    spec, notes = model_from_hf_config(example("mixtral-8x7b"), name="mixtral")
    assert spec.params == 46_702_792_704  # mistralai/Mixtral-8x7B-v0.1 safetensors total
    assert spec.moe is not None and (spec.moe.experts, spec.moe.topk, spec.moe.expert_ffn) == (8, 2, 14336)
    assert spec.seq_len == 32768 and "max_position_embeddings (32768)" in notes[0]


def test_deepseek_v3_trains_before_its_yarn_extension() -> None:
    spec, notes = model_from_hf_config(DEEPSEEK_V3, name="d")
    assert (spec.seq_len, spec.rope_scaling_factor, spec.rope_theta, spec.mtp_layers) == (4096, None, 10000.0, 1)
    text = " | ".join(notes)
    assert "YaRN, factor 40" in text and "original_max_position_embeddings (4096)" in text
    assert "n_group 8 / topk_group 4" in text and "quantization_config ignored" in text
    with pytest.raises(SpecError) as err:
        model_from_hf_config(DEEPSEEK_V3, name="d", seq_len=32768)
    assert err.value.field == "config.json rope_scaling" and "--seq-len <= 4096" in err.value.fix
    # transformers >= 4.56 folds theta and scaling into rope_parameters
    newer = {k: v for k, v in DEEPSEEK_V3.items() if k not in ("rope_scaling", "rope_theta")}
    newer["rope_parameters"] = {**DEEPSEEK_V3["rope_scaling"], "rope_type": "yarn", "rope_theta": 10000.0}
    assert model_from_hf_config(newer, name="deepseek-v3")[0] == MODEL_PRESETS["deepseek-v3"]
    # without rope_scaling, max_position_embeddings is the default length as for the dense models
    plain = {k: v for k, v in DEEPSEEK_V3.items() if k != "rope_scaling"}
    assert model_from_hf_config(plain, name="d")[0].seq_len == 163840


def test_qwen3_moe_dense_first_layers_and_router_options() -> None:
    dense2, _ = model_from_hf_config({**QWEN3_30B_A3B, "mlp_only_layers": [0, 1]}, name="q", seq_len=4096)
    assert dense2.moe is not None and (dense2.dense_layers, dense2.ffn, dense2.moe.expert_ffn) == (2, 6144, 768)
    same = model_from_hf_config({**QWEN3_30B_A3B, "norm_topk_prob": False, "output_router_logits": True,
                                 "router_aux_loss_coef": 0.0}, name="qwen3-30b-a3b", seq_len=4096)[0]
    assert same == MODEL_PRESETS["qwen3-30b-a3b"]


def test_deepseek_without_shared_experts_or_query_latent() -> None:
    spec, _ = model_from_hf_config({**DEEPSEEK_V3, "n_shared_experts": None, "q_lora_rank": None,
                                    "first_k_dense_replace": 0}, name="d", seq_len=4096)
    assert spec.moe is not None and spec.mla is not None
    assert (spec.moe.shared_experts, spec.moe.shared_expert_ffn, spec.mla.q_lora_rank) == (0, 0, None)
    assert (spec.dense_layers, spec.ffn) == (0, 2048)  # every layer MoE: ffn is the expert's


@pytest.mark.parametrize(("config", "change", "field", "needle"), [
    (QWEN3_30B_A3B, {"decoder_sparse_step": 2}, "decoder_sparse_step", "every 2th layer"),
    (QWEN3_30B_A3B, {"mlp_only_layers": [1, 3]}, "mlp_only_layers", "[1, 3]"),
    (QWEN3_30B_A3B, {"mlp_only_layers": list(range(48))}, "mlp_only_layers", "at least one MoE layer"),
    (QWEN3_30B_A3B, {"num_experts_per_tok": 200}, "num_experts_per_tok", "more than num_experts=128"),
    (QWEN3_30B_A3B, {"moe_intermediate_size": None}, "moe_intermediate_size", "missing"),
    (QWEN3_30B_A3B, {"use_sliding_window": True, "sliding_window": 2048}, "use_sliding_window", "sliding window"),
    (QWEN3_30B_A3B, {"shared_expert_intermediate_size": 5632}, "shared_expert_intermediate_size",
     "cannot tell whether it changes the cost"),
    (MIXTRAL_8X22B, {"sliding_window": 2048}, "sliding_window", "2048"),  # Mixtral uses a window when set
    (MIXTRAL_8X22B, {"num_local_experts": 0}, "num_local_experts", "not a positive integer"),
    (DEEPSEEK_V3, {"moe_layer_freq": 2}, "moe_layer_freq", "some later layers"),
    (DEEPSEEK_V3, {"first_k_dense_replace": 61}, "first_k_dense_replace", "no MoE layer of 61"),
    (DEEPSEEK_V3, {"first_k_dense_replace": -1}, "first_k_dense_replace", ">= 0"),
    (DEEPSEEK_V3, {"attention_bias": True}, "attention_bias", "MLA"),
    (DEEPSEEK_V3, {"head_dim": 96}, "head_dim", "qk_rope_head_dim"),
    (DEEPSEEK_V3, {"kv_lora_rank": None}, "kv_lora_rank", "missing"),
    (DEEPSEEK_V3, {"hidden_act": "gelu"}, "hidden_act", "SwiGLU"),
    (DEEPSEEK_V3, {"rope_scaling": {"type": "linear", "factor": 4.0}}, "rope_scaling", "linear"),
    (DEEPSEEK_V3, {"index_topk": 2048}, "index_topk", "cannot tell whether it changes the cost"),  # V3.2's DSA
])
def test_moe_refusals_name_the_field(config: dict[str, Any], change: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**config, **change}, name="m", seq_len=4096)
    assert err.value.field == f"config.json {field}"
    assert needle in str(err.value)


def test_deepseek_q_lora_rank_must_be_given() -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({k: v for k, v in DEEPSEEK_V3.items() if k != "q_lora_rank"}, name="m", seq_len=4096)
    assert err.value.field == "config.json q_lora_rank" and "null" in err.value.fix


# openai/gpt-oss-120b config.json (quantization_config left out).
GPT_OSS_120B: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
    "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                            "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                            "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088,
}


def test_gpt_oss_reads_as_its_preset_window_sinks_biases_glu_and_yarn_included() -> None:
    spec, notes = model_from_hf_config(GPT_OSS_120B, name="gpt-oss-120b")
    assert spec == MODEL_PRESETS["gpt-oss-120b"]
    assert (spec.attention_window, spec.window_skip_freq, spec.softmax_sinks, spec.bias) == (128, 2, True, True)
    # transformers' GptOssExperts: gate * sigmoid(1.702 gate) * (up + 1), both clamped by swiglu_limit.
    assert (spec.activation, spec.glu_linear_offset, spec.glu_clamp) == ("quick-geglu", 1.0, 7.0)
    assert spec.rope_theta == 150000 and spec.rope_yarn == YarnSpec(
        factor=32.0, original_max_positions=4096, beta_fast=32.0, beta_slow=1.0, correction_range_round_to_int=False)
    assert notes == ("seq_len = rope_scaling.original_max_position_embeddings (4096): give --seq-len for the "
                     "length you train at",)
    assert model_from_hf_config({**GPT_OSS_120B, "swiglu_limit": 5.5}, name="g")[0].glu_clamp == 5.5
    every_third = ["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(36)]
    assert model_from_hf_config({**GPT_OSS_120B, "layer_types": every_third}, name="g")[0].window_skip_freq == 3


@pytest.mark.parametrize(("change", "field"), [
    ({"layer_types": ["full_attention", "sliding_attention"] * 18}, "config.json layer_types"),
    ({"layer_types": ["full_attention"] * 36}, "config.json layer_types"),
    ({"attention_bias": False}, "config.json attention_bias"),
    ({"sliding_window": 0}, "config.json sliding_window"),
])
def test_gpt_oss_shapes_modelspec_cannot_express_are_refused_by_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**GPT_OSS_120B, **change}, name="g")
    assert err.value.field == field


def test_gpt_oss_yarn_defaults_and_transformers_5_rope_parameters() -> None:
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    spec = model_from_hf_config({**GPT_OSS_120B, "rope_scaling": yarn}, name="g", seq_len=8192)[0]
    assert spec.rope_yarn == YarnSpec(32.0, 4096, 32.0, 1.0, True)  # HF's and Megatron's defaults: 32, 1, truncate
    assert spec.seq_len == 8192  # longer than the original context: what YaRN is for, so not refused
    moved = {k: v for k, v in GPT_OSS_120B.items() if k not in ("rope_scaling", "rope_theta")}
    params = {**GPT_OSS_120B["rope_scaling"], "rope_theta": 150000.0}
    assert model_from_hf_config({**moved, "rope_parameters": params}, name="gpt-oss-120b")[0] == MODEL_PRESETS[
        "gpt-oss-120b"]
    plain = model_from_hf_config({**GPT_OSS_120B, "rope_scaling": {"rope_type": "default"}}, name="g")[0]
    assert plain.rope_yarn is None and plain.position_embedding == "rope"


_YARN = GPT_OSS_120B["rope_scaling"]


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"rope_scaling": None}, "config.json rope_scaling", "YaRN"),
    ({"rope_scaling": {**_YARN, "mscale": 1.0}}, "config.json rope_scaling.mscale", "attention factor"),
    ({"rope_scaling": {**_YARN, "attention_factor": 1.2}}, "config.json rope_scaling.attention_factor", "default"),
    ({"rope_scaling": {**_YARN, "rope_type": "longrope"}}, "config.json rope_scaling.rope_type", "longrope"),
    ({"rope_scaling": {k: v for k, v in _YARN.items() if k != "original_max_position_embeddings"}},
     "config.json rope_scaling.original_max_position_embeddings", "missing"),
    ({"rope_scaling": {**_YARN, "factor": 16.0}}, "config.json rope_scaling.factor", "131072 / 4096"),
    ({"rope_scaling": {**_YARN, "factor": 0.5}, "max_position_embeddings": 2048}, "config.json rope_scaling.factor",
     ">= 1"),
    ({"rope_scaling": {**_YARN, "beta_fast": 0.5}}, "config.json rope_scaling.beta_fast", "beta_slow"),
    ({"rope_scaling": {**_YARN, "truncate": "no"}}, "config.json rope_scaling.truncate", "boolean"),
    ({"swiglu_limit": -7.0}, "config.json swiglu_limit", "positive"),
])
def test_gpt_oss_rope_and_glu_settings_modelspec_cannot_record_are_refused_by_key(
        change: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**GPT_OSS_120B, **change}, name="g")
    assert err.value.field == field and says in str(err.value)

"""Mixture of experts and latent attention in ModelSpec: parameter counts against the checkpoints'
tensor shapes, validation that names the field, and dense models left as they were."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from search import MODEL_PRESETS, ModelSpec, SpecError
from search._moe_spec import MLASpec, MoESpec

H = 7168  # DeepSeek-V3 and Kimi K2 hidden size
MLA = MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def swiglu(**overrides: Any) -> ModelSpec:
    """A small Llama-style model (SwiGLU, RMSNorm, RoPE, no biases, untied head)."""
    fields: dict[str, Any] = dict(name="t", layers=4, hidden=1024, heads=16, kv_heads=4, ffn=2816, vocab=32000,
                                  seq_len=4096, activation="swiglu", bias=False, norm="rmsnorm",
                                  position_embedding="rope", tied_embeddings=False)
    fields.update(overrides)
    return ModelSpec(**fields)


def raises(field: str, call: Any, *also: str) -> SpecError:
    """``call()`` raises search.SpecError for ``field``, with a fix and the texts ``also``."""
    with pytest.raises(SpecError, match=rf"^{re.escape(field)}: ") as info:
        call()
    err = info.value
    assert err.field == field and err.fix.strip()
    for text in also:
        assert text in str(err), f"{text!r} not in {str(err)!r}"
    return err


# ---------------------------------------------------------------- counts against tensor shapes


def test_deepseek_v3_attention_is_the_sum_of_its_mla_tensors() -> None:
    # deepseek-ai/DeepSeek-V3 model.layers.N.self_attn.*: q_a_proj [1536, 7168], q_a_layernorm [1536],
    # q_b_proj [128*192, 1536], kv_a_proj_with_mqa [512+64, 7168], kv_a_layernorm [512],
    # kv_b_proj [128*(128+128), 512], o_proj [7168, 128*128].
    tensors = (1536 * H + 1536 + 128 * 192 * 1536 + (512 + 64) * H + 512 + 128 * 256 * 512 + H * 128 * 128)
    spec = MODEL_PRESETS["deepseek-v3"]
    assert tensors == 187_107_328
    assert spec.attention_params_per_layer == tensors
    assert (spec.head_dim, spec.q_dim, spec.v_dim, spec.attention_out_dim) == (192, 128 * 192, 128 * 128, 128 * 128)


def test_deepseek_v3_layers_are_the_sums_of_their_tensors() -> None:
    spec = MODEL_PRESETS["deepseek-v3"]
    expert = 3 * H * 2048  # gate_proj, up_proj [2048, 7168], down_proj [7168, 2048]
    attention, norms = 187_107_328, 2 * H  # input_layernorm, post_attention_layernorm
    # mlp.gate.weight [256, 7168]; its e_score_correction_bias [256] is a routing offset, not counted
    # (nor in the runs file's or DeepSeek's 671B).
    assert spec.router_params_per_layer == 256 * H
    assert spec.expert_params_per_layer == 256 * expert
    assert spec.shared_expert_params_per_layer == expert
    assert spec.moe_layer_params == attention + 256 * H + 257 * expert + norms
    assert spec.params_per_layer == attention + 3 * H * 18432 + norms  # the three dense layers
    assert (spec.dense_layers, spec.moe_layers) == (3, 58)
    assert [spec.layer_is_moe(i) for i in (0, 2, 3, 60)] == [False, False, True, True]
    embedding_and_head, final_norm = 2 * 129280 * H, H
    assert spec.params == 3 * spec.params_per_layer + 58 * spec.moe_layer_params + embedding_and_head + final_norm
    routed_active = 8 * expert
    assert spec.active_params == spec.params - 58 * (spec.expert_params_per_layer - routed_active)


def test_mixtral_8x7b_is_its_safetensors_total() -> None:
    # mistralai/Mixtral-8x7B-v0.1: per layer q/k/v/o [4096,4096] [1024,4096] x2 [4096,4096], gate [8, 4096],
    # 8 experts of w1, w3 [14336, 4096] and w2 [4096, 14336], two RMSNorms; embedding and lm_head
    # [32000, 4096], final norm. Hugging Face lists the checkpoint at 46,702,792,704 parameters.
    layer = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 8 * 4096 + 8 * 3 * 4096 * 14336 + 2 * 4096
    total = 32 * layer + 2 * 32000 * 4096 + 4096
    spec = MODEL_PRESETS["mixtral-8x7b"]
    assert spec.params == total == 46_702_792_704
    two_experts = 32 * 6 * 3 * 4096 * 14336  # the 6 experts a token skips, in every layer
    assert spec.active_params == total - two_experts == 12_879_925_248


def test_qwen3_moe_head_dim_wider_than_the_model() -> None:
    spec = MODEL_PRESETS["qwen3-30b-a3b"]  # 32 heads of 128 on hidden 2048
    assert (spec.q_dim, spec.kv_dim, spec.attention_out_dim) == (4096, 512, 4096)
    q_k_v_o, qk_norms = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048, 2 * 128
    assert spec.attention_params_per_layer == q_k_v_o + qk_norms
    assert (spec.dense_layers, spec.moe_layers, spec.shared_expert_params_per_layer) == (0, 48, 0)


# ---------------------------------------------------------------- dense models unchanged


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b", "llama3-405b", "bloom-176b", "mpt-30b"])
def test_a_dense_model_is_unchanged(name: str) -> None:
    spec = MODEL_PRESETS[name]
    assert spec.moe is None and spec.mla is None and spec.mtp_layers == 0
    assert (spec.moe_layers, spec.dense_layers) == (0, spec.layers)
    assert spec.active_params == spec.params
    assert spec.expert_params_per_layer == spec.router_params_per_layer == spec.shared_expert_params_per_layer == 0
    assert not any(spec.layer_is_moe(i) for i in range(spec.layers))
    assert spec.head_dim == spec.hidden // spec.heads
    assert spec.params == spec.layers * spec.params_per_layer + spec.embedding_params + spec.lm_head_params + (
        spec.norm_params)


def test_llama3_8b_count_is_still_its_safetensors_total() -> None:
    assert MODEL_PRESETS["llama3-8b"].params == MODEL_PRESETS["llama3-8b"].active_params == 8_030_261_248


def test_explicit_head_dim_equal_to_hidden_over_heads_is_the_same_model() -> None:
    assert swiglu(head_dim=64) == swiglu()
    wide = swiglu(head_dim=128)  # Qwen3-style: 16 heads of 128 on hidden 1024
    assert (wide.q_dim, wide.kv_dim) == (2048, 512)
    assert wide.params - swiglu().params == 4 * (2 * 1024 * (2048 - 1024) + 2 * 1024 * (512 - 256))


def test_moe_from_a_json_object() -> None:
    moe: dict[str, Any] = {"experts": 8, "topk": 2, "expert_ffn": 2816}
    spec = swiglu(moe=moe)
    assert spec.moe == MoESpec(experts=8, topk=2, expert_ffn=2816)
    assert spec == swiglu(moe=MoESpec(**moe))
    mla = swiglu(kv_heads=None, mla=dataclasses.asdict(MLA), moe=moe)
    assert mla.mla == MLA


# ---------------------------------------------------------------- validation names the field


@pytest.mark.parametrize(("build", "field", "text"), [
    (lambda: MoESpec(experts=8, topk=9, expert_ffn=64), "ModelSpec.moe.topk", "9 is more than experts=8"),
    (lambda: MoESpec(experts=8, topk=2, expert_ffn=64, shared_experts=1), "ModelSpec.moe.shared_expert_ffn",
     "shared_experts=1"),
    (lambda: MoESpec(experts=8, topk=2, expert_ffn=64, shared_expert_ffn=64), "ModelSpec.moe.shared_expert_ffn",
     "shared_experts=0"),
    (lambda: MoESpec(experts=0, topk=1, expert_ffn=64), "ModelSpec.moe.experts", "positive"),
    (lambda: MoESpec(experts=8, topk=2, expert_ffn=64, first_dense_layers=-1), "ModelSpec.moe.first_dense_layers",
     ">= 0"),
    (lambda: MoESpec(experts=8, topk=2, expert_ffn=64, capacity_factor=0.5), "ModelSpec.moe.capacity_factor",
     "drops tokens"),
    (lambda: MoESpec(experts=8, topk=2, expert_ffn=64, router_load="random"),  # type: ignore[arg-type]
     "ModelSpec.moe.router_load", "random"),
    (lambda: MLASpec(q_lora_rank=0, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
     "ModelSpec.mla.q_lora_rank", "positive"),
    (lambda: MLASpec(q_lora_rank=None, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=0, v_head_dim=128),
     "ModelSpec.mla.qk_rope_head_dim", "positive"),
    (lambda: swiglu(moe=MoESpec(experts=8, topk=2, expert_ffn=64, first_dense_layers=4)),
     "ModelSpec.moe.first_dense_layers", "leaves no MoE layer of 4"),
    (lambda: swiglu(mla=MLA), "ModelSpec.kv_heads", "one key/value head per query head"),
    (lambda: swiglu(kv_heads=None, mla=MLA, head_dim=128), "ModelSpec.head_dim", "192"),
    (lambda: swiglu(mtp_layers=1), "ModelSpec.mtp_layers", "DeepSeek-style"),
    (lambda: swiglu(mtp_layers=-1), "ModelSpec.mtp_layers", ">= 0"),
    (lambda: swiglu(moe={"experts": 8, "topk": 2, "expert_ffn": 64, "num_experts": 8}), "ModelSpec.moe.num_experts",
     "not a field"),
    (lambda: swiglu(kv_heads=None, mla={**dataclasses.asdict(MLA), "rope_theta": 1}), "ModelSpec.mla.rope_theta",
     "not a field"),
    (lambda: swiglu(moe=[8, 2]), "ModelSpec.moe", "not an object"),
    (lambda: swiglu(head_dim=0), "ModelSpec.head_dim", "positive"),
])
def test_validation_names_the_field(build: Any, field: str, text: str) -> None:
    raises(field, build, text)


def test_unknown_key_lists_the_fields() -> None:
    err = raises("ModelSpec.moe.top_k", lambda: swiglu(moe={"experts": 8, "top_k": 2, "expert_ffn": 64}))
    for known in ("experts", "topk", "expert_ffn", "shared_experts", "first_dense_layers"):
        assert known in err.fix


def test_heads_need_not_divide_hidden_when_head_dim_is_given() -> None:
    raises("ModelSpec.heads", lambda: swiglu(heads=24, kv_heads=8), "or give head_dim")
    assert swiglu(heads=24, kv_heads=8, head_dim=64).q_dim == 24 * 64


def test_mtp_layers_are_not_in_the_published_count() -> None:
    spec = MODEL_PRESETS["deepseek-v3"]
    assert spec.mtp_layers == 1
    assert dataclasses.replace(spec, mtp_layers=0).params == spec.params
    assert dataclasses.replace(spec, mtp_layers=0).active_params == spec.active_params

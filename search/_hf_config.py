"""A Hugging Face ``config.json`` read into a :class:`ModelSpec`, or refused with the field that cannot be.

Covered are the decoder architectures the cost model describes: ``llama``, ``mistral``,
``qwen2``, ``qwen3`` (gated SiLU MLP, RMSNorm, RoPE, GQA), ``gpt2`` (learned positions, GeLU,
LayerNorm, biases), ``gpt_neox`` (RoPE on a share of each head, parallel residual), ``bloom``
(ALiBi), and the mixtures of experts ``mixtral`` (every MLP an MoE of ``num_local_experts``,
``intermediate_size`` each), ``qwen3_moe`` (``num_experts`` of ``moe_intermediate_size``, dense
first layers by ``mlp_only_layers``) and ``deepseek_v3`` / ``kimi_k2`` (multi-head latent attention,
``first_k_dense_replace`` dense layers, shared experts, multi-token prediction) and ``gpt_oss``
(experts with biases in every layer, a sliding window on every N-th-but-full layer by ``layer_types``,
softmax sinks, the clamped quick-GeLU GLU, YaRN RoPE). Field names and
defaults are those of the ``transformers`` configuration classes (``LlamaConfig``, ``MistralConfig``,
``Qwen2Config``, ``Qwen3Config``, ``GPT2Config``, ``GPTNeoXConfig``, ``BloomConfig``,
``MixtralConfig``, ``Qwen3MoeConfig``, ``DeepseekV3Config``); where a class hard-codes a choice
instead of reading a field (Qwen2's Q/K/V biases, Qwen3's Q/K norms) the family sets it. The
experts' shapes have no default: a file without them is refused by the missing key.

Every key of the file is either read, known to change nothing autopar models (token ids, dtype,
initialisation, numerics of the reference implementation, the router's scoring and scaling), or
refused by name: a mixture of experts in another architecture or in a layer pattern other than
dense first layers followed by MoE layers (``decoder_sparse_step``, ``mlp_only_layers``,
``moe_layer_freq``), sliding-window attention shorter than the sequence, biases on only some
projections, RoPE scaling other than Llama 3.1's and GPT-OSS's YaRN (DeepSeek's YaRN is left out at lengths up to the
one it extends, said in a note), and any key this module does not know. The attention kernel is
not a property of the checkpoint: FlashAttention is assumed (a ModelSpec JSON file can say
``"attention": "standard"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search._errors import SpecError
from search._model_spec import ModelSpec
from search._moe_spec import MLASpec, MoESpec
from search._rope_spec import YarnSpec

FIELD = "config.json"
MOE_ARCHITECTURES = ("mixtral", "qwen3_moe", "deepseek_v3", "kimi_k2", "gpt_oss")
HF_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gpt2", "gpt_neox", "bloom", *MOE_ARCHITECTURES)
"""``model_type`` values this module reads."""

MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok",
            "n_shared_experts", "shared_expert_intermediate_size", "moe_layer_freq", "first_k_dense_replace",
            "decoder_sparse_step", "router_aux_loss_coef", "moe_num_experts")
"""Keys of mixture-of-experts configurations (Mixtral, Qwen-MoE, DeepSeek-V2/V3, DBRX, OLMoE, ...)."""

_FIX_MOE = (f"autopar reads the mixtures of experts of model_type {', '.join(MOE_ARCHITECTURES)}: choose one of "
            "those or a dense model")
_LLAMA_ACTS = ("silu", "swish")
_GELU_ACTS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python")
# Keys that change nothing autopar models: token ids, dtypes, initialisation, caching, HF bookkeeping.
_HOUSEKEEPING = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "unk_token_id", "decoder_start_token_id",
    "use_cache", "initializer_range", "initializer_factor", "tokenizer_class", "output_attentions",
    "output_hidden_states", "return_dict", "use_return_dict", "torchscript", "id2label", "label2id", "problem_type",
    "_attn_implementation_autoset", "attn_implementation", "task_specific_params", "auto_map",
    "pretraining_tp", "slow_but_exact", "quantization_config", "classifier_dropout", "is_decoder",
    "tie_encoder_decoder", "chunk_size_feed_forward", "prefix", "finetuning_task", "max_length", "min_length",
})
_LLAMA_KEYS = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "max_position_embeddings", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "partial_rotary_factor", "tie_word_embeddings", "attention_bias", "mlp_bias", "head_dim",
    "attention_dropout", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
})
_GPT2_KEYS = frozenset({
    "n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions", "n_ctx", "activation_function",
    "layer_norm_epsilon", "tie_word_embeddings", "resid_pdrop", "embd_pdrop", "attn_pdrop", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "n_special",
    "predict_special_tokens",
})
_NEOX_KEYS = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
    "max_position_embeddings", "hidden_act", "rotary_pct", "partial_rotary_factor", "rotary_emb_base", "rope_theta",
    "rope_scaling", "rope_parameters", "layer_norm_eps", "use_parallel_residual", "tie_word_embeddings",
    "attention_bias", "attention_dropout", "hidden_dropout",
})
_BLOOM_KEYS = frozenset({
    "n_layer", "num_hidden_layers", "hidden_size", "n_embed", "n_head", "num_attention_heads", "vocab_size",
    "layer_norm_epsilon", "tie_word_embeddings", "apply_residual_connection_post_layernorm", "hidden_dropout",
    "attention_dropout", "attention_softmax_in_fp32", "bias_dropout_fusion", "masked_softmax_fusion", "offset_alibi",
    "seq_length", "skip_bias_add", "skip_bias_add_qkv",
})
# The router's training-time options (its aux-loss weight, jitter, whether it returns its logits,
# how it scores and scales): a few FLOPs on an h x E product, nothing the cost model counts.
_ROUTER_KEYS = frozenset({"router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "norm_topk_prob"})
_MIXTRAL_KEYS = _LLAMA_KEYS | _ROUTER_KEYS | {"num_local_experts", "num_experts_per_tok"}
_QWEN3_MOE_KEYS = _LLAMA_KEYS | _ROUTER_KEYS | {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                                "decoder_sparse_step", "mlp_only_layers"}
_DEEPSEEK_KEYS = _ROUTER_KEYS | {
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "moe_intermediate_size", "vocab_size", "max_position_embeddings", "hidden_act", "rms_norm_eps", "rope_theta",
    "rope_scaling", "rope_parameters", "rope_interleave", "tie_word_embeddings", "attention_bias",
    "attention_dropout", "head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "first_k_dense_replace", "moe_layer_freq", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "num_nextn_predict_layers", "routed_scaling_factor", "scoring_func",
    "topk_method", "n_group", "topk_group", "aux_loss_alpha", "seq_aux", "ep_size",
}
_GPT_OSS_KEYS = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "max_position_embeddings", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "tie_word_embeddings", "attention_bias", "head_dim", "attention_dropout", "sliding_window",
    "layer_types", "num_local_experts", "num_experts_per_tok", "experts_per_token", "swiglu_limit",
    "router_aux_loss_coef", "output_router_logits", "initial_context_length",
})
_KNOWN = {"llama": _LLAMA_KEYS, "mistral": _LLAMA_KEYS, "qwen2": _LLAMA_KEYS, "qwen3": _LLAMA_KEYS,
          "gpt2": _GPT2_KEYS, "gpt_neox": _NEOX_KEYS, "bloom": _BLOOM_KEYS, "mixtral": _MIXTRAL_KEYS,
          "qwen3_moe": _QWEN3_MOE_KEYS, "deepseek_v3": _DEEPSEEK_KEYS, "kimi_k2": _DEEPSEEK_KEYS,
          "gpt_oss": _GPT_OSS_KEYS}
# transformers' defaults for what a file may leave out (the configuration classes' __init__ arguments).
_NORM_EPS_DEFAULT = {"llama": 1e-6, "mistral": 1e-6, "qwen2": 1e-6, "qwen3": 1e-6, "gpt2": 1e-5, "gpt_neox": 1e-5,
                     "bloom": 1e-5, "mixtral": 1e-5, "qwen3_moe": 1e-6, "deepseek_v3": 1e-6, "kimi_k2": 1e-6,
                     "gpt_oss": 1e-5}
_ROPE_THETA_DEFAULT = {"mixtral": 1e6}  # every other class: 10000


class _Reader:
    """Typed access to one config dict; every problem is a SpecError naming the key."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def integer(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            value = self.data.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise SpecError(f"{FIELD} {key}", f"{value!r} is not a positive integer", "fix the file")
                return value
        if default is None:
            raise SpecError(f"{FIELD} {keys[0]}", "is missing", f"add {keys[0]}"
                            + (" or give --seq-len" if keys[0] == "max_position_embeddings" else ""))
        return default

    def count(self, key: str, default: int | None = None) -> int:
        """An integer >= 0 (null reads as 0: DeepSeek's ``n_shared_experts`` without shared experts)."""
        if key not in self.data:
            if default is None:
                raise SpecError(f"{FIELD} {key}", "is missing", f"add {key}")
            return default
        value = self.data[key]
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(f"{FIELD} {key}", f"{value!r} is not an integer >= 0", "fix the file")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{FIELD} {key}", f"{value!r} is not a number", "fix the file")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"{FIELD} {key}", f"{value!r} is not true or false", "fix the file")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str, why: str) -> str:
        value = self.data.get(key, default)
        if value not in allowed:
            raise SpecError(f"{FIELD} {key}", f"{value!r} is not supported ({why})", f"autopar reads: "
                            f"{', '.join(allowed)}")
        return str(value)


def _refuse_moe(data: Mapping[str, Any]) -> None:
    for key in MOE_KEYS:
        value = data.get(key)
        if value not in (None, 0, False):
            raise SpecError(f"{FIELD} {key}", f"{key}={value!r} makes this a mixture-of-experts model "
                            f"({data.get('model_type', 'unknown model_type')})", _FIX_MOE)
    for key in ("q_lora_rank", "kv_lora_rank", "num_nextn_predict_layers"):
        if data.get(key):
            raise SpecError(f"{FIELD} {key}", f"{key} is multi-head latent attention or multi-token prediction "
                            f"(DeepSeek) in a {data.get('model_type')!r} model", "autopar reads them in model_type "
                            "deepseek_v3 and kimi_k2 only")


def _refuse_unknown(data: Mapping[str, Any], model_type: str) -> None:
    unknown = sorted(set(data) - _KNOWN[model_type] - _HOUSEKEEPING)
    if unknown:
        raise SpecError(f"{FIELD} {unknown[0]}", f"autopar does not know the {model_type} field {unknown[0]!r} and "
                        "cannot tell whether it changes the cost", "remove it from a copy of the file if it only "
                        "describes inference or bookkeeping; otherwise this model is not supported")


def _rope(r: _Reader, theta_keys: tuple[str, ...], default_theta: float) -> tuple[float, float | None]:
    """(rope_theta, Llama 3.1 scaling factor or None) from rope_theta / rope_parameters / rope_scaling."""
    params = r.data.get("rope_parameters")
    scaling = r.data.get("rope_scaling")
    theta = next((r.number(k, default_theta) for k in theta_keys if r.data.get(k) is not None), default_theta)
    if isinstance(params, Mapping):  # transformers >= 4.56 folds theta and scaling into rope_parameters
        if params.get("rope_theta") is not None:
            theta = _Reader(params).number("rope_theta", theta)
        scaling = scaling if scaling is not None else params
    elif params is not None:
        raise SpecError(f"{FIELD} rope_parameters", f"{params!r} is not an object", "fix the file")
    if scaling is None:
        return theta, None
    if not isinstance(scaling, Mapping):
        raise SpecError(f"{FIELD} rope_scaling", f"{scaling!r} is not an object", "fix the file")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise SpecError(f"{FIELD} rope_scaling", f"RoPE scaling {kind!r} is not supported: no launch target "
                        "autopar writes can express it", "use a configuration without rope_scaling, or Llama 3.1's "
                        "'llama3' scaling")
    s = _Reader(scaling)
    expected = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0}
    for key, want in expected.items():
        if s.number(key, want) != want:
            raise SpecError(f"{FIELD} rope_scaling.{key}", f"{scaling.get(key)!r} differs from Llama 3.1's {want:g}, "
                            "the only llama3 scaling Megatron's --use-rope-scaling implements",
                            "use Meta's low/high frequency factors 1 and 4 over 8192 tokens")
    factor = s.number("factor", 0.0)
    if factor < 1:
        raise SpecError(f"{FIELD} rope_scaling.factor", f"{scaling.get('factor')!r} is not a factor >= 1",
                        "give the factor, e.g. 8")
    return theta, factor


def _window(r: _Reader, seq_len: int, model_type: str) -> None:
    """Refuse sliding-window attention that is active at ``seq_len`` (the cost model attends to all tokens)."""
    window = r.data.get("sliding_window")
    used = r.flag("use_sliding_window", model_type in ("mistral", "mixtral"))  # Qwen gates it; Mistral uses it if set
    layer_types = r.data.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        raise SpecError(f"{FIELD} layer_types", "some layers use sliding-window attention, which the cost model "
                        "does not describe", "choose a model whose layers all use full attention")
    if used and window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise SpecError(f"{FIELD} sliding_window", f"{window!r} is not a positive integer", "fix the file")
        if window < seq_len:
            key = "use_sliding_window" if "use_sliding_window" in r.data else "sliding_window"
            raise SpecError(f"{FIELD} {key}", f"attention over a sliding window of {window} tokens, shorter than "
                            f"the sequence of {seq_len}, which the cost model does not describe (it would "
                            "overestimate the attention time)", f"train with --seq-len <= {window}, or choose a "
                            "model with full attention")


def _layer_window(r: _Reader) -> tuple[int, int | None]:
    """GPT-OSS's ``sliding_window`` (tokens, the query included) and the Megatron skip frequency its
    ``layer_types`` follow: every N-th layer (1-based) ``full_attention``, the others
    ``sliding_attention`` (GptOssConfig: alternating, the first windowed: N = 2); None when all are
    windowed. Another pattern is refused by ``layer_types``."""
    window = r.integer("sliding_window")
    types = r.data.get("layer_types")
    layers = r.integer("num_hidden_layers")
    if types is None:
        return window, 2  # GptOssConfig's default: "sliding_attention" if bool((i + 1) % 2) else "full_attention"
    full = [i + 1 for i, t in enumerate(types) if t == "full_attention"] if isinstance(types, list) else []
    freq = full[0] if full else None
    expected = ["full_attention" if freq and (i + 1) % freq == 0 else "sliding_attention" for i in range(layers)]
    if types != expected or freq == 1:
        raise SpecError(f"{FIELD} layer_types", "the windowed layers do not follow one skip frequency (every N-th "
                        "layer full attention, Megatron --window-attn-skip-freq), which ModelSpec describes",
                        "choose a model whose full-attention layers are every N-th one")
    return window, freq


_YARN_KEYS = {"factor": "factor", "original_max_position_embeddings": "original_max_positions",
              "beta_fast": "beta_fast", "beta_slow": "beta_slow", "truncate": "correction_range_round_to_int"}
"""``rope_scaling`` keys of a YaRN scaling -> :class:`YarnSpec` fields (transformers ``_compute_yarn_parameters``);
besides them only ``rope_type`` / ``type`` and ``rope_theta`` are read."""


def _gpt_oss_rope(r: _Reader) -> tuple[float, YarnSpec | None]:
    """GPT-OSS's RoPE base and YaRN scaling from ``rope_scaling`` (or transformers 5's ``rope_parameters``):
    every key of a YaRN scaling is recorded or refused by name (``attention_factor``, ``mscale``: the spec
    keeps YaRN's default attention factor); a file without ``original_max_position_embeddings`` or whose
    ``max_position_embeddings`` / ``original_max_position_embeddings`` differs from ``factor`` is refused
    (transformers releases disagree on which of the two such a file means)."""
    key = "rope_parameters" if r.data.get("rope_parameters") is not None else "rope_scaling"
    scaling, where = r.data.get(key), f"{FIELD} {key}"
    theta = r.number("rope_theta", 150000.0)  # GptOssConfig's rope_theta default
    if scaling is None:
        raise SpecError(where, "is missing: GPT-OSS's RoPE is YaRN-scaled, and the file does not say how",
                        "add rope_scaling (openai/gpt-oss-120b: rope_type yarn, factor 32, "
                        "original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, truncate false)")
    if not isinstance(scaling, Mapping):
        raise SpecError(where, f"{scaling!r} is not an object", "fix the file")
    s = _Reader(scaling)
    theta = s.number("rope_theta", theta)
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default" and set(scaling) <= {"rope_type", "type", "rope_theta"}:
        return theta, None
    if kind != "yarn":
        raise SpecError(f"{where}.rope_type", f"{kind!r} is not a RoPE scaling ModelSpec records for GPT-OSS",
                        "use rope_type yarn with its settings, or default (plain RoPE) alone")
    unknown = sorted(set(scaling) - set(_YARN_KEYS) - {"rope_type", "type", "rope_theta"})
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", "is not a YaRN setting ModelSpec records (a launch would leave it "
                        "out; the attention factor is YaRN's default, 0.1 ln(factor) + 1)",
                        "remove it from a copy of the file if it states that default; otherwise this model is not "
                        "supported")
    for required in ("factor", "original_max_position_embeddings"):
        if scaling.get(required) is None:
            raise SpecError(f"{where}.{required}", "is missing", f"add {required} (openai/gpt-oss-120b: "
                            f"{32 if required == 'factor' else 4096})")
    longest, original = r.integer("max_position_embeddings", default=0), s.integer("original_max_position_embeddings")
    if longest not in (0, original) and longest / original != s.number("factor", 0.0):
        raise SpecError(f"{where}.factor", f"{scaling['factor']!r} is not max_position_embeddings / "
                        f"original_max_position_embeddings = {longest} / {original}, and transformers releases "
                        "differ on which of the two YaRN uses (older ones the ratio, newer ones the factor)",
                        "make the file consistent")
    try:
        yarn = YarnSpec(**{field: scaling[hf] for hf, field in _YARN_KEYS.items() if hf in scaling})
    except SpecError as err:  # name the file's key, not the spec's field
        spec_field = err.field.rsplit(".", 1)[-1]
        hf_key = next(hf for hf, field in _YARN_KEYS.items() if field == spec_field)
        raise SpecError(f"{where}.{hf_key}", err.problem, err.fix) from None
    return theta, yarn


def _gpt_oss(r: _Reader, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    """GPT-OSS (transformers ``GptOssConfig``): 3-matrix GLU experts in every layer, biases on the attention
    and expert projections and the router (``attention_bias``), a learned sink per head, a sliding window
    on the layers :func:`_layer_window` says, YaRN RoPE (:func:`_gpt_oss_rope`). The GLU is the clamped
    quick-GeLU one transformers' ``GptOssExperts`` hard-codes: ``gate * sigmoid(1.702 gate) * (up + 1)``
    with the gate clamped at ``swiglu_limit`` and ``up`` within +-``swiglu_limit`` (``hidden_act`` is not
    read), so ``activation`` quick-geglu, ``glu_linear_offset`` 1 and ``glu_clamp`` ``swiglu_limit``."""
    if not r.flag("attention_bias", True):
        raise SpecError(f"{FIELD} attention_bias", "false leaves the attention without the biases its experts and "
                        "router keep, which ModelSpec's one bias flag cannot describe", "use attention_bias true")
    window, freq = _layer_window(r)
    theta, yarn = _gpt_oss_rope(r)
    notes: list[str] = []
    if seq_len is None and yarn is not None:
        seq_len = yarn.original_max_positions
        notes.append(f"seq_len = rope_scaling.original_max_position_embeddings ({seq_len}): give --seq-len for the "
                     "length you train at")
    if seq_len is None:
        seq_len = r.integer("max_position_embeddings")
        notes.append(f"seq_len = max_position_embeddings ({seq_len}): give --seq-len for the length you train at")
    hidden, heads, layers = r.integer("hidden_size"), r.integer("num_attention_heads"), r.integer("num_hidden_layers")
    expert_ffn = r.integer("intermediate_size")  # GptOssConfig.intermediate_size is each expert's
    clamp = r.number("swiglu_limit", 7.0)  # GptOssConfig's default
    if clamp <= 0:
        raise SpecError(f"{FIELD} swiglu_limit", f"{clamp:g} is not a positive clamp", "fix the file")
    spec = ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, head_dim=r.integer("head_dim", default=64),
        kv_heads=r.integer("num_key_value_heads", default=heads), ffn=expert_ffn,
        moe=_moe(r, "num_local_experts", expert_ffn), vocab=r.integer("vocab_size"), seq_len=seq_len,
        activation="quick-geglu", glu_linear_offset=1.0, glu_clamp=clamp,
        tied_embeddings=r.flag("tie_word_embeddings", False), position_embedding="rope",
        bias=True, norm="rmsnorm", attention="flash", dropout=r.number("attention_dropout", 0.0) > 0,
        norm_eps=r.number("rms_norm_eps", _NORM_EPS_DEFAULT["gpt_oss"]), rope_theta=theta, rope_yarn=yarn,
        attention_window=window, window_skip_freq=freq, softmax_sinks=True,
    )
    return spec, notes


def _moe(r: _Reader, experts_key: str, expert_ffn: int, *, shared: int = 0, first_dense_layers: int = 0) -> MoESpec:
    """The experts of ``experts_key`` with ``num_experts_per_tok`` routed per token, refused by config key;
    ``shared`` shared experts of ``expert_ffn`` each."""
    experts, topk = r.integer(experts_key), r.integer("num_experts_per_tok")
    if topk > experts:
        raise SpecError(f"{FIELD} num_experts_per_tok", f"{topk} is more than {experts_key}={experts}",
                        "fix the file")
    return MoESpec(experts=experts, topk=topk, expert_ffn=expert_ffn, shared_experts=shared,
                   shared_expert_ffn=shared * expert_ffn, first_dense_layers=first_dense_layers)


def _llama_moe(r: _Reader, model_type: str, layers: int) -> tuple[int, MoESpec | None]:
    """(dense ffn, experts) of a Llama-style block: Mixtral's MoE in every layer, Qwen3-MoE's after the
    ``mlp_only_layers`` (a Qwen3MoeDecoderLayer is MoE when not listed there and (i + 1) % step == 0)."""
    if model_type == "mixtral":  # MixtralConfig.intermediate_size is each expert's
        ffn = r.integer("intermediate_size")
        return ffn, _moe(r, "num_local_experts", ffn)
    if model_type != "qwen3_moe":
        return r.integer("intermediate_size"), None
    step = r.integer("decoder_sparse_step", default=1)
    if step != 1:
        raise SpecError(f"{FIELD} decoder_sparse_step", f"{step} puts experts in every {step}th layer only, which "
                        "ModelSpec cannot describe (dense first layers, then MoE layers)",
                        "choose a model with decoder_sparse_step 1")
    dense = r.data.get("mlp_only_layers") or []
    if not isinstance(dense, list) or dense != list(range(len(dense))) or len(dense) >= layers:
        raise SpecError(f"{FIELD} mlp_only_layers", f"dense MLPs in layers {dense!r}: ModelSpec describes dense "
                        "first layers 0 ... k-1 followed by at least one MoE layer", "choose a model whose "
                        "mlp_only_layers is empty or the first k layers")
    expert_ffn = r.integer("moe_intermediate_size")
    ffn = r.integer("intermediate_size") if dense else expert_ffn
    return ffn, _moe(r, "num_experts", expert_ffn, first_dense_layers=len(dense))


def _llama_family(r: _Reader, model_type: str, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    notes: list[str] = []
    hidden, heads, layers = r.integer("hidden_size"), r.integer("num_attention_heads"), r.integer("num_hidden_layers")
    r.choice("hidden_act", _LLAMA_ACTS, "silu", "the gated MLP of these models is SwiGLU")
    head_dim = r.integer("head_dim") if r.data.get("head_dim") is not None else None  # None: hidden / heads
    for key in ("attention_bias", "mlp_bias"):
        if r.flag(key, False):
            raise SpecError(f"{FIELD} {key}", f"{key}=true puts biases on some projections only, which ModelSpec "
                            "cannot describe (bias covers every linear, qkv_bias only Q/K/V)",
                            "choose a model without them")
    theta, scaling = _rope(r, ("rope_theta",), _ROPE_THETA_DEFAULT.get(model_type, 10000.0))
    rotary = r.number("partial_rotary_factor", 1.0)
    dropout = r.number("attention_dropout", 0.0) > 0
    max_pos = r.integer("max_position_embeddings") if seq_len is None else seq_len
    if seq_len is None:
        notes.append(f"seq_len = max_position_embeddings ({max_pos}) of config.json: give --seq-len for the length "
                     "you train at")
    _window(r, max_pos, model_type)
    ffn, moe = _llama_moe(r, model_type, layers)
    spec = ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, head_dim=head_dim,
        kv_heads=r.integer("num_key_value_heads", default=heads), ffn=ffn, moe=moe,
        vocab=r.integer("vocab_size"), seq_len=max_pos, activation="swiglu",
        tied_embeddings=r.flag("tie_word_embeddings", False), position_embedding="rope", bias=False,
        norm="rmsnorm", attention="flash", dropout=dropout, qkv_bias=model_type == "qwen2",
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        norm_eps=r.number("rms_norm_eps", _NORM_EPS_DEFAULT[model_type]),
        rope_theta=theta, rope_scaling_factor=scaling, rotary_percent=rotary,
    )
    return spec, notes


def _yarn(r: _Reader, seq_len: int | None) -> tuple[float, int, list[str]] | None:
    """DeepSeek's YaRN ``rope_scaling`` (rope_theta, seq_len, notes), or None without it. YaRN extends
    the context past ``original_max_position_embeddings``, the pre-training length; up to that
    length the model trains without it (DeepSeek-V3 and Kimi K2 pre-trained at 4096 and added YaRN
    after), which is what the launch files can say; a longer sequence is refused."""
    scaling = r.data.get("rope_scaling")
    scaling = r.data.get("rope_parameters") if scaling is None else scaling
    if not isinstance(scaling, Mapping) or scaling.get("rope_type", scaling.get("type")) != "yarn":
        return None
    s = _Reader(scaling)
    original, factor = s.integer("original_max_position_embeddings"), s.number("factor", 1.0)
    theta = s.number("rope_theta", r.number("rope_theta", 10000.0))
    if seq_len is not None and seq_len > original:
        raise SpecError(f"{FIELD} rope_scaling", f"a sequence of {seq_len} needs its YaRN scaling (factor "
                        f"{factor:g} beyond {original} tokens), which no launch target autopar writes can express",
                        f"train at --seq-len <= {original}, the pre-training length")
    notes = [f"rope_scaling (YaRN, factor {factor:g}) left out: it extends the context beyond the {original} tokens "
             "of pre-training"]
    if seq_len is None:
        notes.append(f"seq_len = rope_scaling.original_max_position_embeddings ({original}), the length before the "
                     "YaRN extension: give --seq-len for the length you train at")
    return theta, seq_len or original, notes


def _deepseek(r: _Reader, model_type: str, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    """DeepSeek-V3 and Kimi K2 (``DeepseekV3ForCausalLM``): MLA, a dense first ``first_k_dense_replace``
    layers of ``intermediate_size``, then routed experts and ``n_shared_experts`` shared ones of
    ``moe_intermediate_size`` each. ``num_key_value_heads`` is not read: MLA's kv_b_proj gives every
    query head its own key and value."""
    r.choice("hidden_act", _LLAMA_ACTS, "silu", "the gated MLP of these models is SwiGLU")
    if r.flag("attention_bias", False):
        raise SpecError(f"{FIELD} attention_bias", "biases on the MLA projections only are not something "
                        "ModelSpec describes", "choose a model without them")
    if r.data.get("moe_layer_freq", 1) != 1:
        raise SpecError(f"{FIELD} moe_layer_freq", f"{r.data['moe_layer_freq']!r} puts experts in some later layers "
                        "only, which ModelSpec cannot describe (dense first layers, then MoE layers)",
                        "choose a model with moe_layer_freq 1")
    layers, dense = r.integer("num_hidden_layers"), r.count("first_k_dense_replace")
    if dense >= layers:
        raise SpecError(f"{FIELD} first_k_dense_replace", f"{dense} leaves no MoE layer of {layers}",
                        "fix the file, or describe the model as a dense one")
    expert_ffn, shared = r.integer("moe_intermediate_size"), r.count("n_shared_experts")
    moe = _moe(r, "n_routed_experts", expert_ffn, shared=shared, first_dense_layers=dense)
    if "q_lora_rank" not in r.data:
        raise SpecError(f"{FIELD} q_lora_rank", "is missing", "add q_lora_rank (null: queries without a latent)")
    mla = MLASpec(q_lora_rank=r.integer("q_lora_rank") if r.data["q_lora_rank"] is not None else None,
                  kv_lora_rank=r.integer("kv_lora_rank"), qk_head_dim=r.integer("qk_nope_head_dim"),
                  qk_rope_head_dim=r.integer("qk_rope_head_dim"), v_head_dim=r.integer("v_head_dim"))
    if r.data.get("head_dim") not in (None, mla.qk_rope_head_dim, mla.qk_dim):  # transformers: = qk_rope_head_dim
        raise SpecError(f"{FIELD} head_dim", f"{r.data['head_dim']!r} is neither qk_rope_head_dim nor "
                        "qk_nope_head_dim + qk_rope_head_dim", "remove head_dim (MLA's widths are the *_head_dim keys)")
    notes: list[str] = []
    groups, group_topk = r.integer("n_group", default=1), r.integer("topk_group", default=1)
    if group_topk < groups:
        notes.append(f"n_group {groups} / topk_group {group_topk} (group-limited routing) not modelled: the "
                     "all-to-all is costed as if a token's experts could sit in every group")
    yarn = _yarn(r, seq_len)
    if yarn is None:
        theta, _ = _rope(r, ("rope_theta",), 10000.0)  # refuses any other scaling
        length = seq_len or r.integer("max_position_embeddings")
        if seq_len is None:
            notes.append(f"seq_len = max_position_embeddings ({length}) of config.json: give --seq-len for the "
                         "length you train at")
    else:
        theta, length, yarn_notes = yarn
        notes += yarn_notes
    spec = ModelSpec(
        name=name, layers=layers, hidden=r.integer("hidden_size"), heads=r.integer("num_attention_heads"),
        ffn=r.integer("intermediate_size") if dense else expert_ffn, vocab=r.integer("vocab_size"), seq_len=length,
        activation="swiglu", tied_embeddings=r.flag("tie_word_embeddings", False), position_embedding="rope",
        bias=False, norm="rmsnorm", attention="flash", dropout=r.number("attention_dropout", 0.0) > 0,
        norm_eps=r.number("rms_norm_eps", _NORM_EPS_DEFAULT[model_type]), rope_theta=theta, mla=mla, moe=moe,
        mtp_layers=r.count("num_nextn_predict_layers", default=0),
    )
    return spec, notes


def _gpt2(r: _Reader, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    if r.flag("add_cross_attention", False):
        raise SpecError(f"{FIELD} add_cross_attention", "cross-attention layers (an encoder-decoder) are not a "
                        "decoder-only transformer", "choose a decoder-only model")
    r.choice("activation_function", _GELU_ACTS, "gelu_new", "GPT-2's MLP is GeLU")
    hidden = r.integer("n_embd")
    positions = r.integer("n_positions", "n_ctx", default=1024)
    dropout = any(r.number(k, 0.1) > 0 for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"))
    spec = ModelSpec(
        name=name, layers=r.integer("n_layer"), hidden=hidden, heads=r.integer("n_head"),
        ffn=r.integer("n_inner", default=4 * hidden), vocab=r.integer("vocab_size"), seq_len=seq_len or positions,
        activation="gelu", tied_embeddings=r.flag("tie_word_embeddings", True), position_embedding="learned",
        bias=True, norm="layernorm", attention="flash", dropout=dropout,
        norm_eps=r.number("layer_norm_epsilon", _NORM_EPS_DEFAULT["gpt2"]),
    )
    if spec.seq_len > positions:
        raise SpecError("seq_len", f"{spec.seq_len} exceeds the {positions} learned positions (n_positions)",
                        f"give --seq-len <= {positions}")
    notes = [] if seq_len else [f"seq_len = n_positions ({positions}) of config.json"]
    return spec, notes


def _gpt_neox(r: _Reader, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    r.choice("hidden_act", _GELU_ACTS, "gelu", "GPT-NeoX's MLP is GeLU")
    if not r.flag("attention_bias", True):
        raise SpecError(f"{FIELD} attention_bias", "attention without biases while the MLP keeps them is not "
                        "something ModelSpec describes", "choose a model with attention_bias true")
    theta, scaling = _rope(r, ("rope_theta", "rotary_emb_base"), 10000.0)
    rotary = r.number("rotary_pct", r.number("partial_rotary_factor", 0.25))
    max_pos = seq_len or r.integer("max_position_embeddings", default=2048)
    dropout = any(r.number(k, 0.0) > 0 for k in ("attention_dropout", "hidden_dropout"))
    spec = ModelSpec(
        name=name, layers=r.integer("num_hidden_layers"), hidden=r.integer("hidden_size"),
        heads=r.integer("num_attention_heads"),
        ffn=r.integer("intermediate_size"), vocab=r.integer("vocab_size"), seq_len=max_pos, activation="gelu",
        tied_embeddings=r.flag("tie_word_embeddings", False), position_embedding="rope", bias=True,
        norm="layernorm", attention="flash", dropout=dropout, norm_eps=r.number("layer_norm_eps", 1e-5),
        rope_theta=theta, rope_scaling_factor=scaling, rotary_percent=rotary,
        parallel_residual=r.flag("use_parallel_residual", True),
    )
    notes = [] if seq_len else [f"seq_len = max_position_embeddings ({max_pos}) of config.json"]
    return spec, notes


def _bloom(r: _Reader, name: str, seq_len: int | None) -> tuple[ModelSpec, list[str]]:
    if r.flag("apply_residual_connection_post_layernorm", False):
        raise SpecError(f"{FIELD} apply_residual_connection_post_layernorm", "the residual taken after the "
                        "LayerNorm (BERT order) is not a block ModelSpec describes", "choose a pre-LN model")
    length = seq_len or r.data.get("seq_length")
    if length is None:
        raise SpecError("seq_len", "BLOOM's config.json has no sequence length (ALiBi has no position table)",
                        "give --seq-len (BLOOM trained at 2048)")
    dropout = any(r.number(k, 0.0) > 0 for k in ("attention_dropout", "hidden_dropout"))
    hidden = r.integer("hidden_size", "n_embed")
    spec = ModelSpec(
        name=name, layers=r.integer("n_layer", "num_hidden_layers"), hidden=hidden,
        heads=r.integer("n_head", "num_attention_heads"), ffn=4 * hidden, vocab=r.integer("vocab_size"),
        seq_len=int(length), activation="gelu", tied_embeddings=r.flag("tie_word_embeddings", True),
        position_embedding="alibi", bias=True, norm="layernorm", attention="flash", dropout=dropout,
        norm_eps=r.number("layer_norm_epsilon", 1e-5),
    )
    return spec, []


def model_from_hf_config(config: Mapping[str, Any], *, name: str,
                         seq_len: int | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` (as a dict) and notes on defaults taken.

    ``seq_len`` is the training sequence length (default: the file's ``max_position_embeddings``
    or ``n_positions``, said in a note). Raises :class:`SpecError` naming the key that autopar cannot
    model: an architecture it does not read, experts in a layer pattern ModelSpec cannot describe,
    sliding-window attention, ... (see the module docstring).
    """
    if not isinstance(config, Mapping):
        raise SpecError(FIELD, f"a JSON {type(config).__name__}, not an object", "give a config.json")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0):
        raise SpecError("seq_len", f"{seq_len!r} is not a positive integer", "give the training sequence length")
    model_type = config.get("model_type")
    if model_type not in MOE_ARCHITECTURES:
        _refuse_moe(config)
    if model_type not in _KNOWN:
        raise SpecError(f"{FIELD} model_type", f"{model_type!r} is not an architecture autopar reads",
                        f"autopar reads model_type {', '.join(HF_ARCHITECTURES)}")
    _refuse_unknown(config, str(model_type))
    r = _Reader(config)
    if model_type == "gpt2":
        spec, notes = _gpt2(r, name, seq_len)
    elif model_type == "gpt_neox":
        spec, notes = _gpt_neox(r, name, seq_len)
    elif model_type == "bloom":
        spec, notes = _bloom(r, name, seq_len)
    elif model_type in ("deepseek_v3", "kimi_k2"):
        spec, notes = _deepseek(r, str(model_type), name, seq_len)
    elif model_type == "gpt_oss":
        spec, notes = _gpt_oss(r, name, seq_len)
    else:
        spec, notes = _llama_family(r, str(model_type), name, seq_len)
    if config.get("quantization_config") is not None:
        notes.append("quantization_config ignored: autopar models training in bf16/fp16/fp8 mixed precision")
    return spec, tuple(notes)

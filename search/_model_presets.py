"""Model presets: published transformer shapes and their published parameter counts.

Each shape cites its source: the paper table, the training script or the Hugging Face
``config.json`` of the checkpoint. ``vocab`` is the embedding-row count as trained (padded),
not the tokenizer size. ``MODEL_PRESET_PARAMS`` holds the count each source publishes, so a
test can hold :attr:`ModelSpec.params` to it, and ``MODEL_PRESET_ACTIVE_PARAMS`` the parameters per
token of the mixtures of experts (:attr:`ModelSpec.active_params`).
"""

from __future__ import annotations

from search._errors import UnknownPresetError
from search._model_spec import Attention, ModelSpec, PositionEmbedding
from search._moe_spec import MLASpec, MoESpec
from search._rope_spec import YarnSpec


def _gelu_4h(name: str, layers: int, hidden: int, heads: int, *, vocab: int, seq_len: int,
             position: PositionEmbedding, bias: bool, attention: Attention, dropout: bool) -> ModelSpec:
    """A GPT-style block stack: GeLU MLP of 4h, LayerNorm, LM head tied to the embedding."""
    return ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=vocab, seq_len=seq_len,
        activation="gelu", tied_embeddings=True, position_embedding=position,
        bias=bias, norm="layernorm", attention=attention, dropout=dropout,
    )


def _megatron_gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    """A GPT shape of Narayanan et al. 2021 (arXiv:2104.04473) Table 1.

    Sec. 5.1: vocabulary 51,200, sequence length 2,048, MLP 4h. Megatron's GPT ties the LM
    head to the input embedding, learns position embeddings, has biases and LayerNorm, and in
    2021 materialised the attention scores (no FlashAttention); Megatron-LM's default
    --hidden-dropout and --attention-dropout are 0.1.
    """
    return _gelu_4h(name, layers, hidden, heads, vocab=51200, seq_len=2048, position="learned", bias=True,
                    attention="standard", dropout=True)


def _llama(
    name: str, *, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, seq_len: int,
    rope_theta: float,
) -> ModelSpec:
    """A Llama 2 / Llama 3 shape: SwiGLU, RMSNorm (eps 1e-5), RoPE, no biases, untied LM head, FlashAttention."""
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn,
        vocab=vocab,
        seq_len=seq_len,
        activation="swiglu",
        tied_embeddings=False,
        position_embedding="rope",
        bias=False,
        norm="rmsnorm",
        attention="flash",
        rope_theta=rope_theta,
    )


def _swiglu_moe(
    name: str, *, layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq_len: int, moe: MoESpec,
    rope_theta: float, norm_eps: float, kv_heads: int | None = None, head_dim: int | None = None,
    qk_norm: bool = False, mla: MLASpec | None = None, mtp_layers: int = 0,
) -> ModelSpec:
    """A Llama-style block (SwiGLU, RMSNorm, RoPE, no biases, untied LM head, FlashAttention)
    whose MLP is a mixture of experts after ``moe.first_dense_layers`` dense layers of ``ffn``
    (``ffn`` = ``moe.expert_ffn`` when every layer is an MoE layer)."""
    return ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, vocab=vocab,
        seq_len=seq_len, activation="swiglu", tied_embeddings=False, position_embedding="rope", bias=False,
        norm="rmsnorm", attention="flash", rope_theta=rope_theta, norm_eps=norm_eps, head_dim=head_dim,
        qk_norm=qk_norm, mla=mla, moe=moe, mtp_layers=mtp_layers,
    )


# DeepSeek-V3's multi-head latent attention (arXiv:2412.19437 Sec. 4.2: d_c = 512, d_c' = 1536,
# d_h = 128 per head, d_h^R = 64; config.json q_lora_rank, kv_lora_rank, qk_nope_head_dim,
# qk_rope_head_dim, v_head_dim), which Kimi K2 keeps (its config.json has the same five values).
_DEEPSEEK_MLA = MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


def _mpt(name: str, *, layers: int, hidden: int, heads: int, seq_len: int) -> ModelSpec:
    """An MPT shape (model cards): ALiBi, no biases (LayerNorm scale only), tied, MLP 4h, FlashAttention."""
    return _gelu_4h(name, layers, hidden, heads, vocab=50432, seq_len=seq_len, position="alibi", bias=False,
                    attention="flash", dropout=False)


_PRESETS: tuple[ModelSpec, ...] = (
    # (layers, hidden, heads): Narayanan et al. 2021 Table 1; the same values as NLS/HS/NAH in
    # Megatron-LM examples/sc21/run_table_1.sh.
    _megatron_gpt("gpt-1.7b", 24, 2304, 24),
    _megatron_gpt("gpt-3.6b", 30, 3072, 32),
    _megatron_gpt("gpt-7.5b", 36, 4096, 32),
    _megatron_gpt("gpt-18b", 40, 6144, 48),
    _megatron_gpt("gpt-39b", 48, 8192, 64),
    _megatron_gpt("gpt-76b", 60, 10240, 80),
    _megatron_gpt("gpt-145b", 80, 12288, 96),
    _megatron_gpt("gpt-310b", 96, 16384, 128),
    _megatron_gpt("gpt-530b", 105, 20480, 128),
    _megatron_gpt("gpt-1t", 128, 25600, 160),
    # Brown et al. 2020 (arXiv:2005.14165) Table 2.1: 96 layers, d_model 12288, 96 heads of 128,
    # d_ff = 4 d_model, context 2048. Vocabulary: 50257 BPE tokens padded to 51200 rows as
    # Megatron trains it (Narayanan et al. 2021 Sec. 5.1 and Table 2, which lists this shape at
    # 174.6B); with 50257 rows the count is 174.60B instead of 174.62B, both within 0.3 % of 175B.
    # The paper's alternating locally banded sparse attention layers add no parameters.
    _megatron_gpt("gpt3-175b", 96, 12288, 96),
    # Llama 2 (Touvron et al. 2023, arXiv:2307.09288, Table 1: 4k context, GQA for 70B); shapes
    # from the Hugging Face config.json of meta-llama/Llama-2-{7b,13b,70b}-hf (rope_theta 10000,
    # rms_norm_eps 1e-5).
    _llama("llama2-7b", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000, seq_len=4096,
           rope_theta=10000.0),
    _llama("llama2-13b", layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824, vocab=32000, seq_len=4096,
           rope_theta=10000.0),
    _llama("llama2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000, seq_len=4096,
           rope_theta=10000.0),
    # Llama 3 (Llama Team 2024, arXiv:2407.21783, Table 3: layers, model/FFN dimension, 8 KV
    # heads for all three sizes); vocab 128256 rows from the Hugging Face config.json (the paper
    # rounds to 128K). seq_len 8192: the pre-training length (Sec. 3.4.1; 405B starts at 4096
    # for its first 252M tokens), before the long-context stage. RoPE base 500,000 (Sec. 3.2;
    # rope_theta of meta-llama/Meta-Llama-3-8B's config.json, rms_norm_eps 1e-5). No RoPE scaling:
    # that came with the Llama 3.1 checkpoints (rope_scaling "llama3", factor 8), which
    # `--model hf:PATH/config.json` reads.
    _llama("llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, seq_len=8192,
           rope_theta=500000.0),
    _llama("llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256, seq_len=8192,
           rope_theta=500000.0),
    _llama("llama3-405b", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256, seq_len=8192,
           rope_theta=500000.0),
    # BLOOM (bigscience/bloom model card; Le Scao et al. 2022, arXiv:2211.05100): 70 layers,
    # 112 heads, hidden 14336, sequence length 2048, 250880 embedding rows (3,596,615,680
    # embedding parameters = 250880 * 14336), ALiBi, GeLU, biases, tied LM head. Megatron-DeepSpeed
    # fused softmax, no FlashAttention. Its embedding LayerNorm (2h = 28,672 parameters) has no
    # ModelSpec field and is not counted.
    _gelu_4h("bloom-176b", 70, 14336, 112, vocab=250880, seq_len=2048, position="alibi", bias=True,
             attention="standard", dropout=False),
    # MPT model cards (mosaicml/mpt-7b, mosaicml/mpt-30b) "Hyperparameter" tables: n_layers,
    # n_heads, d_model, vocab size 50432, sequence length; FlashAttention, ALiBi, no biases.
    # MLP expansion_ratio 4 (config.json). MPT-30B was pre-trained at 2048 and then at 8192.
    _mpt("mpt-7b", layers=32, hidden=4096, heads=32, seq_len=2048),
    _mpt("mpt-30b", layers=48, hidden=7168, heads=64, seq_len=8192),
    # Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088, Table 1: dim 4096, 32 layers, head_dim 128,
    # hidden_dim 14336, 32 heads, 8 KV heads, vocab 32000, 8 experts, top 2; Sec. 2: "pretrained ...
    # using a context size of 32k tokens"); mistralai/Mixtral-8x7B-v0.1 config.json (= examples/hf/
    # mixtral-8x7b): num_local_experts 8, num_experts_per_tok 2, intermediate_size 14336 per expert,
    # rope_theta 1e6, rms_norm_eps 1e-5, sliding_window null (full attention). Every layer is MoE.
    _swiglu_moe("mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                seq_len=32768, moe=MoESpec(experts=8, topk=2, expert_ffn=14336), rope_theta=1e6, norm_eps=1e-5),
    # Mixtral 8x22B: mistral-community/Mixtral-8x22B-v0.1 config.json (the base checkpoint of the
    # announcement): hidden_size 6144, 56 layers, 48 heads, 8 KV heads, intermediate_size 16384 per
    # expert, 8 experts top 2, vocab 32000 (the Instruct checkpoint's tokenizer has 32768 rows: +9.4M
    # parameters), rope_theta 1e6, rms_norm_eps 1e-5, max_position_embeddings 65536. Mistral publishes
    # no pre-training length; seq_len 65536 is the "64K tokens context window" of the announcement
    # (mistral.ai/news/mixtral-8x22b, 2024-04-17).
    _swiglu_moe("mixtral-8x22b", layers=56, hidden=6144, heads=48, kv_heads=8, ffn=16384, vocab=32000,
                seq_len=65536, moe=MoESpec(experts=8, topk=2, expert_ffn=16384), rope_theta=1e6, norm_eps=1e-5),
    # DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437 Sec. 4.2 "Hyper-Parameters": 61 layers, hidden
    # 7168, 128 heads, MLA as above, every layer MoE but the first three, 1 shared and 256 routed
    # experts of 2048, 8 activated, MTP depth 1; "maximum sequence length to 4K during pre-training");
    # deepseek-ai/DeepSeek-V3 config.json: intermediate_size 18432 (the three dense layers),
    # moe_intermediate_size 2048, n_shared_experts 1, first_k_dense_replace 3, vocab_size 129280,
    # num_nextn_predict_layers 1, rope_theta 10000, rms_norm_eps 1e-6 (its YaRN rope_scaling, factor
    # 40 over 4096, came with the long-context extension after pre-training). The same shape as
    # benchmarks/data/runs_2024_2026.json's "DeepSeek-V3 671B" (Megatron-MoE-ModelZoo DeepSeek-V3.yaml).
    _swiglu_moe("deepseek-v3", layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280, seq_len=4096,
                moe=MoESpec(experts=256, topk=8, expert_ffn=2048, shared_experts=1, shared_expert_ffn=2048,
                            first_dense_layers=3),
                mla=_DEEPSEEK_MLA, mtp_layers=1, rope_theta=10000.0, norm_eps=1e-6),
    # Qwen3 MoE (Qwen Team 2025, arXiv:2505.09388, Table 2: layers, Q/KV heads, 128 experts of which 8
    # activated, no shared experts; Sec. 3.2: the general and reasoning pre-training stages use
    # sequences of 4,096 tokens, the last stage extends to 32,768); Qwen/Qwen3-30B-A3B and
    # Qwen/Qwen3-235B-A22B config.json: head_dim 128 (wider than hidden / heads), moe_intermediate_size
    # 768 / 1536, decoder_sparse_step 1 and mlp_only_layers [] (every layer MoE), vocab 151936, untied,
    # rope_theta 1e6, rms_norm_eps 1e-6; Qwen3MoeAttention's RMSNorm on each query and key head (qk_norm).
    _swiglu_moe("qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, qk_norm=True,
                ffn=768, vocab=151936, seq_len=4096, moe=MoESpec(experts=128, topk=8, expert_ffn=768),
                rope_theta=1e6, norm_eps=1e-6),
    _swiglu_moe("qwen3-235b-a22b", layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, qk_norm=True,
                ffn=1536, vocab=151936, seq_len=4096, moe=MoESpec(experts=128, topk=8, expert_ffn=1536),
                rope_theta=1e6, norm_eps=1e-6),
    # Kimi K2 (Kimi Team 2025, arXiv:2507.20534, Table 2 against DeepSeek-V3: 64 heads instead of 128,
    # 384 experts instead of 256, 1 dense layer instead of 3; pre-trained with a 4,096-token context,
    # then extended with YaRN); moonshotai/Kimi-K2-Base config.json (architectures
    # DeepseekV3ForCausalLM): hidden_size 7168, 61 layers, intermediate_size 18432 (the dense layer),
    # moe_intermediate_size 2048, n_routed_experts 384, num_experts_per_tok 8, n_shared_experts 1,
    # first_k_dense_replace 1, the MLA of DeepSeek-V3, vocab_size 163840, num_nextn_predict_layers 0,
    # rope_theta 50000, rms_norm_eps 1e-6.
    _swiglu_moe("kimi-k2", layers=61, hidden=7168, heads=64, ffn=18432, vocab=163840, seq_len=4096,
                moe=MoESpec(experts=384, topk=8, expert_ffn=2048, shared_experts=1, shared_expert_ffn=2048,
                            first_dense_layers=1),
                mla=_DEEPSEEK_MLA, rope_theta=50000.0, norm_eps=1e-6),
    # GPT-OSS 120B (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Sec. 2.1 and Table 1: 36 layers,
    # 128 experts of which 4 active, GQA with 64 query heads of 64 and 8 KV heads, alternating banded
    # windows of 128 tokens and full attention, a learned bias in each head's softmax denominator,
    # biases on the attention and expert projections); openai/gpt-oss-120b config.json: hidden_size 2880,
    # intermediate_size 2880 (each expert's), head_dim 64, num_local_experts 128, num_experts_per_tok 4,
    # sliding_window 128 with layer_types alternating sliding/full (the first windowed), vocab_size
    # 201088, tie_word_embeddings false, attention_bias true, rms_norm_eps 1e-5, rope_theta 150000 with
    # rope_scaling yarn (factor 32, original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, truncate
    # false), swiglu_limit 7.0. Megatron-Bridge gpt_oss_provider.py @ v0.3.0 (GPTOSSProvider120B, lines 39-99):
    # the same shape, position_embedding_type yarn, yarn_rotary_scaling_factor 32, yarn_original_max_position_
    # embeddings 4096, yarn_beta_fast 32, yarn_beta_slow 1, yarn_correction_range_round_to_int False, yarn_mscale
    # None, softmax_type learnable, add_bias_linear, window_attn_skip_freq 2, gated quick_gelu with
    # glu_linear_offset 1.0 and activation_func_clamp_value 7.0 (a GLU of 3 matrices, costed like SwiGLU);
    # window_size (127, 0) since 5fcab34f8 ("Fix off-by-one in sliding window size", v0.4.0; v0.3.0 had
    # (128, 0)). Pre-trained length not published; the Megatron-Bridge performance tables run it at 4,096 tokens.
    ModelSpec(name="gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn=2880,
              vocab=201088, seq_len=4096, activation="quick-geglu", tied_embeddings=False, position_embedding="rope",
              bias=True, norm="rmsnorm", attention="flash", rope_theta=150000.0, norm_eps=1e-5,
              moe=MoESpec(experts=128, topk=4, expert_ffn=2880), attention_window=128, window_skip_freq=2,
              softmax_sinks=True, glu_linear_offset=1.0, glu_clamp=7.0,
              rope_yarn=YarnSpec(factor=32.0, original_max_positions=4096, beta_fast=32.0, beta_slow=1.0,
                                 correction_range_round_to_int=False)),
)

MODEL_PRESETS: dict[str, ModelSpec] = {spec.name: spec for spec in _PRESETS}
"""Preset id (lower case, dashes) -> shape."""

MODEL_PRESET_PARAMS: dict[str, float] = {
    "gpt-1.7b": 1.7e9,  # Narayanan et al. 2021 Table 1 (billions, one decimal)
    "gpt-3.6b": 3.6e9,  # Narayanan et al. 2021 Table 1
    "gpt-7.5b": 7.5e9,  # Narayanan et al. 2021 Table 1
    "gpt-18b": 18.4e9,  # Narayanan et al. 2021 Table 1
    "gpt-39b": 39.1e9,  # Narayanan et al. 2021 Table 1
    "gpt-76b": 76.1e9,  # Narayanan et al. 2021 Table 1
    "gpt-145b": 145.6e9,  # Narayanan et al. 2021 Table 1
    "gpt-310b": 310.1e9,  # Narayanan et al. 2021 Table 1
    "gpt-530b": 529.6e9,  # Narayanan et al. 2021 Table 1
    "gpt-1t": 1008.0e9,  # Narayanan et al. 2021 Table 1
    "gpt3-175b": 175.0e9,  # Brown et al. 2020 Table 2.1 (n_params); Narayanan et al. 2021 Table 2: 174.6B
    "llama2-7b": 6.74e9,  # meta-llama/Llama-2-7b-hf model page (safetensors total 6,738,415,616)
    "llama2-13b": 13.0e9,  # meta-llama/Llama-2-13b-hf model page (safetensors total 13,015,864,320)
    "llama2-70b": 69.0e9,  # meta-llama/Llama-2-70b-hf model page (safetensors total 68,976,648,192)
    "llama3-8b": 8.03e9,  # meta-llama/Meta-Llama-3-8B model page (safetensors total 8,030,261,248)
    "llama3-70b": 70.6e9,  # meta-llama/Meta-Llama-3-70B model page (safetensors total 70,553,706,496)
    "llama3-405b": 405e9,  # Llama Team 2024 (arXiv:2407.21783) Table 3 and Llama 3.1 model card
    "bloom-176b": 176_247_271_424.0,  # bigscience/bloom model card, "Model type" (exact count)
    "mpt-7b": 6.7e9,  # mosaicml/mpt-7b model card, Hyperparameter table (n_parameters)
    "mpt-30b": 29.95e9,  # mosaicml/mpt-30b model card, Hyperparameter table (n_parameters)
    "mixtral-8x7b": 46.7e9,  # mistral.ai/news/mixtral-of-experts (2023-12-11): "46.7B total parameters"
    "mixtral-8x22b": 141e9,  # mistral.ai/news/mixtral-8x22b (2024-04-17): "39B active parameters out of 141B"
    "deepseek-v3": 671e9,  # arXiv:2412.19437 abstract: "671B total parameters" (the 14B MTP module not counted)
    "qwen3-30b-a3b": 30.5e9,  # Qwen/Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated"
    "qwen3-235b-a22b": 235e9,  # Qwen/Qwen3-235B-A22B model card: "235B in total and 22B activated"
    "kimi-k2": 1.04e12,  # arXiv:2507.20534 Table 2: total parameters 1.04T
    "gpt-oss-120b": 116.83e9,  # gpt-oss model card Table 1: "Total Parameters 116.83B"
}
"""Parameter count each preset's source publishes (rounded as published)."""

MODEL_PRESET_ACTIVE_PARAMS: dict[str, float] = {
    "mixtral-8x7b": 12.9e9,  # mistral.ai/news/mixtral-of-experts: "only uses 12.9B parameters per token"
    "mixtral-8x22b": 39e9,  # mistral.ai/news/mixtral-8x22b: "39B active parameters out of 141B"
    "deepseek-v3": 37e9,  # arXiv:2412.19437 abstract: "37B activated for each token"
    "qwen3-30b-a3b": 3.3e9,  # Qwen/Qwen3-30B-A3B model card
    "qwen3-235b-a22b": 22e9,  # Qwen/Qwen3-235B-A22B model card
    "kimi-k2": 32.6e9,  # arXiv:2507.20534 Table 2: activated parameters 32.6B
    # gpt-oss model card Table 1: "Active Parameters 5.13B", which leaves out the input embedding
    # (0.58B; its LM head is counted): ModelSpec.active_params counts both.
    "gpt-oss-120b": 5.13e9,
}
"""Parameters per token each mixture-of-experts preset's source publishes (rounded as published);
a dense preset's active parameters are all of them."""


def model_preset(name: str) -> ModelSpec:
    """The model preset ``name`` (``gpt-1.7b`` ... ``gpt-1t``, ``gpt3-175b``, ``llama3-70b``, ...)."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise UnknownPresetError("model", name, sorted(MODEL_PRESETS)) from None

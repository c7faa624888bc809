"""Model presets: published transformer shapes and their published parameter counts.

Each shape cites its source: the paper table, the training script or the Hugging Face
``config.json`` of the checkpoint. ``vocab`` is the embedding-row count as trained (padded),
not the tokenizer size. ``MODEL_PRESET_PARAMS`` holds the count each source publishes, so a
test can hold :attr:`ModelSpec.params` to it.
"""

from __future__ import annotations

from search._errors import UnknownPresetError
from search._model_spec import Attention, ModelSpec, PositionEmbedding


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
}
"""Parameter count each preset's source publishes (rounded as published)."""


def model_preset(name: str) -> ModelSpec:
    """The model preset ``name`` (``gpt-1.7b`` ... ``gpt-1t``, ``gpt3-175b``, ``llama3-70b``, ...)."""
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise UnknownPresetError("model", name, sorted(MODEL_PRESETS)) from None

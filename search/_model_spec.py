"""The transformer being trained: shape, and the parameter count derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from search._checks import one_of, positive_int, positive_number
from search._errors import SpecError

Activation = Literal["gelu", "swiglu"]
LAUNCH_ONLY_FIELDS: tuple[str, ...] = ("norm_eps", "rope_theta", "rope_scaling_factor", "rotary_percent")
"""ModelSpec fields the cost model never reads: the launch files need them, a prediction does not."""
PositionEmbedding = Literal["learned", "rope", "alibi"]
Attention = Literal["flash", "standard"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer (GPT / Llama / BLOOM / MPT family).

    Every field is validated on construction; an invalid value raises
    :class:`search.SpecError` naming the field and the fix.
    """

    name: str
    """Human-readable name, e.g. ``"llama3-70b"``."""
    layers: int
    """Number of transformer blocks."""
    hidden: int
    """Model width h."""
    heads: int
    """Attention (query) heads a."""
    ffn: int
    """MLP inner size f (4h for GPT; 8h/3 rounded for SwiGLU models)."""
    vocab: int
    """Embedding rows V (padded vocabulary as trained)."""
    seq_len: int
    """Training sequence length s in tokens."""
    kv_heads: int | None = None
    """Key/value heads for grouped-query attention; None means = heads (multi-head attention)."""
    activation: Activation = "gelu"
    """MLP activation: ``gelu`` (2 matrices) or ``swiglu`` (3 matrices)."""
    tied_embeddings: bool = False
    """True when the LM head reuses the input embedding matrix."""
    position_embedding: PositionEmbedding = "learned"
    """``learned`` adds s*h parameters; ``rope`` and ``alibi`` add none."""
    bias: bool = True
    """Linear layers and LayerNorms carry biases (GPT-2/3, BLOOM: yes; Llama, MPT: no)."""
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    """Normalisation layer; RMSNorm has no bias."""
    attention: Attention = "flash"
    """``flash`` (FlashAttention: no s*s matrices stored) or ``standard`` (materialised scores)."""
    dropout: bool = False
    """Attention/hidden dropout on: 1-byte masks are stored for backward (Korthikanti et al.
    2022 assume it; Llama, MPT and BLOOM train without dropout)."""
    qkv_bias: bool = False
    """Only the Q, K and V projections carry biases (Qwen2: ``q_proj``/``k_proj``/``v_proj`` with
    ``bias=True``, everything else without); implied when ``bias`` is True. Adds h + 2*kv_dim
    parameters per layer."""
    qk_norm: bool = False
    """RMSNorm on each query and key head before RoPE (Qwen3; Megatron ``--qk-layernorm``): two
    norms of head_dim weights per layer."""
    norm_eps: float = 1e-5
    """Epsilon of every LayerNorm/RMSNorm (HF ``rms_norm_eps`` / ``layer_norm_eps``; 1e-5 is
    Megatron's and torchtitan's default and the value of every preset). No effect on the cost."""
    rope_theta: float = 10000.0
    """RoPE base theta (Su et al. 2021 use 10000; Llama 3: 500000). Used only with
    ``position_embedding="rope"``; no effect on the cost."""
    rope_scaling_factor: float | None = None
    """Llama 3.1-style RoPE frequency scaling (HF ``rope_scaling`` of ``rope_type`` "llama3") by this
    factor, with Meta's low/high frequency factors 1 and 4 over an original context of 8192
    tokens (the only form Megatron's ``--use-rope-scaling`` implements); None means no scaling.
    No effect on the cost."""
    rotary_percent: float = 1.0
    """Share of each head's dimensions RoPE rotates (GPT-NeoX/Pythia ``rotary_pct`` 0.25; Megatron
    ``--rotary-percent``). No effect on the cost."""
    parallel_residual: bool = False
    """Attention and MLP read the same input and add to one residual (GPT-J/GPT-NeoX
    ``use_parallel_residual``): the same FLOPs and parameters as the sequential block, and one
    tensor-parallel all-reduce per pass instead of two (the outputs are summed first, as
    GPT-NeoX does); the launch targets refuse it (Megatron has no such block)."""
    # Derived once in __post_init__ (the cost model reads them on every prediction).
    _kv_dim: int = field(init=False, repr=False, compare=False, default=0)
    _params_per_layer: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        owner = "ModelSpec"
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"{owner}.name", f"{self.name!r} is empty", "give the model a name")
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "seq_len"):
            positive_int(owner, name, getattr(self, name))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        kv = positive_int(owner, "kv_heads", self.kv_heads)
        one_of(owner, "activation", self.activation, ("gelu", "swiglu"))
        one_of(owner, "position_embedding", self.position_embedding, ("learned", "rope", "alibi"))
        one_of(owner, "norm", self.norm, ("layernorm", "rmsnorm"))
        one_of(owner, "attention", self.attention, ("flash", "standard"))
        for name in ("qkv_bias", "qk_norm", "parallel_residual"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{owner}.{name}", f"{getattr(self, name)!r} is not a boolean", "give true or false")
        if not 0 < positive_number(owner, "norm_eps", self.norm_eps) < 1:
            raise SpecError(f"{owner}.norm_eps", f"{self.norm_eps!r} is not below 1", "give e.g. 1e-5 or 1e-6")
        positive_number(owner, "rope_theta", self.rope_theta)
        if self.rope_scaling_factor is not None and positive_number(owner, "rope_scaling_factor",
                                                                    self.rope_scaling_factor) < 1:
            raise SpecError(f"{owner}.rope_scaling_factor", f"{self.rope_scaling_factor!r} is below 1",
                            "give the factor the context was extended by (e.g. 8 for Llama 3.1), or null")
        if not 0 < positive_number(owner, "rotary_percent", self.rotary_percent) <= 1:
            raise SpecError(f"{owner}.rotary_percent", f"{self.rotary_percent!r} is above 1",
                            "give the share of each head RoPE rotates, in (0, 1]")
        if self.hidden % self.heads:
            raise SpecError(
                f"{owner}.heads",
                f"{self.heads} does not divide hidden={self.hidden}",
                "choose heads so that hidden / heads (the head dimension) is an integer",
            )
        if self.heads % kv:
            raise SpecError(
                f"{owner}.kv_heads",
                f"{kv} does not divide heads={self.heads}",
                "grouped-query attention needs heads to be a multiple of kv_heads",
            )
        object.__setattr__(self, "_kv_dim", kv * (self.hidden // self.heads))
        object.__setattr__(
            self, "_params_per_layer",
            self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.norm_params,
        )

    @property
    def head_dim(self) -> int:
        """Per-head width h / a."""
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (and of the V) projection: kv_heads * head_dim."""
        return self._kv_dim or int(self.kv_heads or self.heads) * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in the MLP: 2 for GeLU (up, down), 3 for SwiGLU (gate, up, down)."""
        return 3 if self.activation == "swiglu" else 2

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (+ biases, + the Q/K norms of ``qk_norm``)."""
        h, kv = self.hidden, self.kv_dim
        weights = h * h + 2 * h * kv + h * h
        biases = (h + 2 * kv + h) if self.bias else (h + 2 * kv) if self.qkv_bias else 0
        qk_norms = 2 * self.head_dim if self.qk_norm else 0
        return weights + biases + qk_norms

    @property
    def mlp_params_per_layer(self) -> int:
        """MLP weights (+ biases): SwiGLU has two input projections of width f."""
        h, f = self.hidden, self.ffn
        weights = self.mlp_matrices * h * f
        biases = ((self.mlp_matrices - 1) * f + h) if self.bias else 0
        return weights + biases

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation layer (scale, + shift for LayerNorm with bias)."""
        return self.hidden * (2 if (self.norm == "layernorm" and self.bias) else 1)

    @property
    def params_per_layer(self) -> int:
        """One transformer block: attention + MLP + two norms."""
        return self._params_per_layer

    @property
    def embedding_params(self) -> int:
        """Input embedding (V*h) plus learned position embedding (s*h) if any."""
        pos = self.seq_len * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + pos

    @property
    def lm_head_params(self) -> int:
        """Output projection V*h, 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total trainable parameters N.

        Source: Narayanan et al. 2021 (arXiv:2104.04473) Sec. 5.1,
        P = 12*l*h^2*(1 + 13/(12h) + (V+s)/(12*l*h)) for GPT with 4h MLP and biases;
        generalised here to GQA (K/V width kv_heads*head_dim), SwiGLU (3 matrices),
        bias-free linears, RMSNorm, untied LM heads and RoPE/ALiBi (no position table).
        """
        final_norm = self.norm_params
        return self.layers * self.params_per_layer + self.embedding_params + self.lm_head_params + final_norm

    @property
    def largest_layer_params(self) -> int:
        """Largest single module (DeepSpeed's 'largest layer'): the embedding or an MLP matrix."""
        return max(self.vocab * self.hidden, self.hidden * self.ffn, self.hidden * self.hidden)

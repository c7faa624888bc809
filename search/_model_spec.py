"""The transformer being trained: shape, and the parameter count derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from search._checks import one_of, positive_int
from search._errors import SpecError

Activation = Literal["gelu", "swiglu"]
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
        """Q, K, V and output projections (+ biases)."""
        h, kv = self.hidden, self.kv_dim
        weights = h * h + 2 * h * kv + h * h
        biases = (h + 2 * kv + h) if self.bias else 0
        return weights + biases

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

"""The transformer being trained: shape, and the parameter count derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from search._checks import one_of, positive_int, positive_number
from search._errors import SpecError
from search._model_checks import GATED_ACTIVATIONS, check_glu, check_window, check_yarn
from search._moe_spec import MLASpec, MoESpec, from_mapping
from search._rope_spec import YarnSpec, yarn_from_mapping

Activation = Literal["gelu", "swiglu", "quick-geglu"]
LAUNCH_ONLY_FIELDS: tuple[str, ...] = ("norm_eps", "rope_theta", "rope_scaling_factor", "rotary_percent",
                                       "glu_linear_offset")
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
    """MLP activation: ``gelu`` (2 matrices), or a gated linear unit of 3 matrices: ``swiglu`` (SiLU gate;
    Megatron ``--swiglu``) or ``quick-geglu`` (quick-GeLU gate ``x * sigmoid(1.702 x)``, GPT-OSS; Megatron
    ``--quick-geglu``), costed alike (the same GEMMs, tensors and elementwise traffic)."""
    tied_embeddings: bool = False
    """True when the LM head reuses the input embedding matrix."""
    position_embedding: PositionEmbedding = "learned"
    """``learned`` adds s*h parameters; ``rope`` and ``alibi`` add none."""
    bias: bool = True
    """Linear layers and LayerNorms carry biases (GPT-2/3, BLOOM: yes; Llama, MPT: no). The experts' second
    bias is added per expert outside the GEMM (:func:`search._unfused_paths.expert_bias_total_bytes_per_copy`)."""
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
    Megatron's and torchtitan's default; DeepSeek-V3, Qwen3 and Kimi K2 use 1e-6). No effect on the cost."""
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
    head_dim: int | None = None
    """Per-head width of queries, keys and values; None means hidden / heads. Given when the
    attention is wider or narrower than the residual stream (Qwen3-30B-A3B: 32 heads of 128 on
    a hidden size of 2048; HF ``head_dim``, Megatron ``--kv-channels``)."""
    mla: MLASpec | None = None
    """Multi-head latent attention instead of the Q/K/V projections (DeepSeek-V2/V3, Kimi K2)."""
    moe: MoESpec | None = None
    """Mixture of experts in place of the MLP of every layer after ``moe.first_dense_layers``."""
    mtp_layers: int = 0
    """Multi-token-prediction modules trained with the model (DeepSeek-V3: 1; Megatron
    ``--mtp-num-layers``): each one more block, a 2h x h projection and one more LM-head pass, on
    the last pipeline rank. Not counted in :attr:`params` (the published counts leave it out)."""
    attention_window: int | None = None
    """Sliding-window attention: a query attends to the last ``attention_window`` tokens, itself
    included (HF ``sliding_window``; Megatron ``--window-size (attention_window - 1, 0)``, as
    Megatron-Bridge's GPT-OSS bridge maps it; GPT-OSS: 128). None: every layer attends to the whole
    causal prefix. Which layers use it: :attr:`window_skip_freq`."""
    window_skip_freq: int | None = None
    """With :attr:`attention_window`: every ``window_skip_freq``-th layer (1-based) attends to all
    tokens, the others to the window (Megatron ``--window-attn-skip-freq``, ``layer_number % N == 0``
    is full; GPT-OSS: 2, alternate layers). None: every layer is windowed."""
    softmax_sinks: bool = False
    """A learnable softmax offset per head and layer ("attention sinks"; GPT-OSS, Megatron
    ``--softmax-type learnable``): ``heads`` parameters per layer; its time (one more logit per
    softmax row) is not costed."""
    glu_linear_offset: float = 0.0
    """Added to the GLU's linear half, ``gate_act(x_glu) * (x_linear + offset)`` (GPT-OSS 1.0: transformers
    ``GptOssExperts`` ``(up + 1) * glu``; Megatron ``--glu-linear-offset``). Quick-GeGLU only; no effect
    on the cost."""
    glu_clamp: float | None = None
    """Clamp of the GLU's inputs: the gate at most ``glu_clamp``, the linear half within +-``glu_clamp``
    (GPT-OSS ``swiglu_limit`` 7.0; Megatron ``--activation-func-clamp-value``, ``fused_bias_geglu.py``).
    Quick-GeGLU only; None: no clamp. Megatron-Core clamps eagerly, before its fused kernel: costed per
    routed copy (:func:`search._unfused_paths.clamp_total_bytes_per_copy`)."""
    rope_yarn: YarnSpec | None = None
    """YaRN scaling of the RoPE frequencies (GPT-OSS: factor 32 over 4,096 tokens; Megatron
    ``--position-embedding-type yarn``); None: plain RoPE. Its attention factor keeps Megatron-Core off
    Transformer Engine's fused RoPE: costed as the eager one (:func:`search._unfused_paths.unfused_rope`)."""
    # Derived once in __post_init__ (the cost model reads them on every prediction).
    _kv_dim: int = field(init=False, repr=False, compare=False, default=0)
    _params_per_layer: int = field(init=False, repr=False, compare=False, default=0)
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __hash__(self) -> int:
        """The hash of the compared fields, computed once: specs key the cost model's caches, which
        a search consults some 10^6 times (a frozen dataclass re-hashes every field on each call)."""
        return self._hash or hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))

    def __post_init__(self) -> None:
        owner = "ModelSpec"
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError(f"{owner}.name", f"{self.name!r} is empty", "give the model a name")
        for name in ("layers", "hidden", "heads", "ffn", "vocab", "seq_len"):
            positive_int(owner, name, getattr(self, name))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        kv = positive_int(owner, "kv_heads", self.kv_heads)
        one_of(owner, "activation", self.activation, ("gelu", *GATED_ACTIVATIONS))
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
        object.__setattr__(self, "mla", from_mapping(MLASpec, f"{owner}.mla", self.mla))
        object.__setattr__(self, "moe", from_mapping(MoESpec, f"{owner}.moe", self.moe))
        if isinstance(self.mtp_layers, bool) or not isinstance(self.mtp_layers, int) or self.mtp_layers < 0:
            raise SpecError(f"{owner}.mtp_layers", f"{self.mtp_layers!r} is not an integer >= 0",
                            "give the number of multi-token-prediction modules (0: none)")
        if self.mtp_layers and self.moe is None and self.mla is None:
            raise SpecError(f"{owner}.mtp_layers", "multi-token prediction is modelled for DeepSeek-style models only",
                            "set mtp_layers=0, or describe the model's moe/mla parts")
        check_window(owner, self.attention_window, self.window_skip_freq, self.softmax_sinks)
        check_glu(owner, self.activation, self.glu_linear_offset, self.glu_clamp)
        object.__setattr__(self, "rope_yarn", yarn_from_mapping(f"{owner}.rope_yarn", self.rope_yarn))
        if self.rope_yarn is not None:
            check_yarn(owner, self.position_embedding, self.rope_scaling_factor, self.mla is not None)
        if self.moe is not None and self.moe.first_dense_layers >= self.layers:
            raise SpecError(f"{owner}.moe.first_dense_layers",
                            f"{self.moe.first_dense_layers} leaves no MoE layer of {self.layers}",
                            f"give fewer than {self.layers} dense first layers, or no moe part")
        if self.mla is not None:
            if self.kv_heads != self.heads:
                raise SpecError(f"{owner}.kv_heads", "multi-head latent attention has one key/value head per "
                                "query head", f"set kv_heads={self.heads} (or null) with mla")
            if self.head_dim is not None and self.head_dim != self.mla.qk_dim:
                raise SpecError(f"{owner}.head_dim", f"{self.head_dim} is not mla.qk_head_dim + mla.qk_rope_head_dim "
                                f"= {self.mla.qk_dim}", "leave head_dim null with mla, or give that sum")
            for flag in ("bias", "qkv_bias", "qk_norm", "softmax_sinks"):
                if getattr(self, flag):
                    raise SpecError(f"{owner}.{flag}", "is not modelled with multi-head latent attention (its "
                                    "projections have no biases and normalise the latents, not Q/K heads)",
                                    f"set {flag}=false with mla")
            object.__setattr__(self, "head_dim", self.mla.qk_dim)
        if self.head_dim is not None:
            positive_int(owner, "head_dim", self.head_dim)
        elif self.hidden % self.heads:
            raise SpecError(
                f"{owner}.heads",
                f"{self.heads} does not divide hidden={self.hidden}",
                "choose heads so that hidden / heads (the head dimension) is an integer, or give head_dim",
            )
        else:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.heads % kv:
            raise SpecError(
                f"{owner}.kv_heads",
                f"{kv} does not divide heads={self.heads}",
                "grouped-query attention needs heads to be a multiple of kv_heads",
            )
        object.__setattr__(self, "_kv_dim", kv * self.dim_per_head)
        object.__setattr__(
            self, "_params_per_layer",
            self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.norm_params,
        )
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare)))

    @property
    def dim_per_head(self) -> int:
        """Per-head width of queries and keys: ``head_dim`` (hidden / heads unless given)."""
        return int(self.head_dim or self.hidden // self.heads)

    @property
    def kv_dim(self) -> int:
        """Width of the K projection, kv_heads * head_dim (with MLA: heads x (no-RoPE + RoPE) per head)."""
        return self._kv_dim or int(self.kv_heads or self.heads) * self.dim_per_head

    @property
    def q_dim(self) -> int:
        """Width of the query projection: heads * head_dim."""
        return self.heads * self.dim_per_head

    @property
    def v_dim(self) -> int:
        """Width of the V projection (= the attention output before the output projection, per
        kv group); with MLA heads * v_head_dim."""
        return self.heads * self.mla.v_head_dim if self.mla is not None else self.kv_dim

    @property
    def attention_out_dim(self) -> int:
        """Input width of the attention output projection: heads x value width per head."""
        return self.heads * (self.mla.v_head_dim if self.mla is not None else self.dim_per_head)

    def attention_linears(self) -> tuple[tuple[int, int, str], ...]:
        """The attention block's weight matrices as (input width, output width, TP split), the
        split being ``column``, ``row`` or ``replicated`` (Megatron-Core: fused QKV column-parallel,
        output row-parallel; MLA's down-projections are not split, ``parallel_mode="duplicated"``
        in ``multi_latent_attention.py``, its up-projections are column-parallel)."""
        h = self.hidden
        if self.mla is None:
            return ((h, self.q_dim + 2 * self.kv_dim, "column"), (self.attention_out_dim, h, "row"))
        m = self.mla
        q: tuple[tuple[int, int, str], ...] = (
            ((h, m.q_lora_rank, "replicated"), (m.q_lora_rank, self.heads * m.qk_dim, "column"))
            if m.q_lora_rank is not None else ((h, self.heads * m.qk_dim, "column"),))
        return (*q, (h, m.kv_lora_rank + m.qk_rope_head_dim, "replicated"),
                (m.kv_lora_rank, self.heads * (m.qk_head_dim + m.v_head_dim), "column"),
                (self.attention_out_dim, h, "row"))

    def mlp_linears(self, ffn: int | None = None) -> tuple[tuple[int, int, str], ...]:
        """One MLP of inner size ``ffn`` (default the dense ``ffn``): input projection(s) of
        width f (two fused for SwiGLU), column-parallel; output projection, row-parallel."""
        f = self.ffn if ffn is None else ffn
        return ((self.hidden, f * (self.mlp_matrices - 1), "column"), (f, self.hidden, "row"))

    @property
    def gated_mlp(self) -> bool:
        """The MLP is a gated linear unit (SwiGLU, quick-GeGLU): its first GEMM writes the gate and the
        linear half, which the activation reads."""
        return self.activation in GATED_ACTIVATIONS

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices in the MLP: 2 for GeLU (up, down), 3 for a GLU (gate, up, down)."""
        return 3 if self.gated_mlp else 2

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (+ biases, + the Q/K norms of ``qk_norm``; with MLA the
        down/up projections and the two latent RMSNorms)."""
        weights = sum(i * o for i, o, _ in self.attention_linears())
        if self.mla is not None:
            return weights + (self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        biases = (q + 2 * kv + h) if self.bias else (q + 2 * kv) if self.qkv_bias else 0
        qk_norms = 2 * self.dim_per_head if self.qk_norm else 0
        sinks = self.heads if self.softmax_sinks else 0
        return weights + biases + qk_norms + sinks

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
        """One dense transformer block: attention + MLP + two norms (with ``moe``: a dense first layer)."""
        return self._params_per_layer

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.layers - self.moe.first_dense_layers if self.moe is not None else 0

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.layers - self.moe_layers

    def layer_is_moe(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a mixture of experts."""
        return self.moe is not None and index >= self.moe.first_dense_layers

    def expert_mlp_params(self, ffn: int) -> int:
        """One expert MLP of inner size ``ffn``: ``mlp_matrices * h * ffn`` weights, + with ``bias``
        the input projections' ``(mlp_matrices - 1) * ffn`` and the output's ``h`` biases (GPT-OSS:
        Megatron ``add_bias_linear`` gives each expert's linear_fc1/linear_fc2 a bias, Megatron-Bridge
        gpt_oss_bridge.py maps ``gate_up_proj_bias``/``down_proj_bias`` onto them)."""
        weights = self.mlp_matrices * self.hidden * ffn
        return weights + ((self.mlp_matrices - 1) * ffn + self.hidden if self.bias and ffn else 0)

    @property
    def expert_params_per_layer(self) -> int:
        """The routed experts of one MoE layer, ``E`` x :meth:`expert_mlp_params` (what expert
        parallelism shards; 0 for a dense model)."""
        if self.moe is None:
            return 0
        return self.moe.experts * self.expert_mlp_params(self.moe.expert_ffn)

    @property
    def router_params_per_layer(self) -> int:
        """The router's h x E weights, + E biases with ``bias`` (GPT-OSS ``mlp.router.bias``;
        0 for a dense model)."""
        if self.moe is None:
            return 0
        return (self.hidden + (1 if self.bias else 0)) * self.moe.experts

    @property
    def shared_expert_params_per_layer(self) -> int:
        """The shared experts of one MoE layer, one MLP of their total inner size."""
        return self.expert_mlp_params(self.moe.shared_expert_ffn) if self.moe is not None else 0

    @property
    def moe_layer_dense_params(self) -> int:
        """The parts of one MoE layer every expert-parallel rank holds (attention, router, shared
        experts, norms): split by tensor parallelism only."""
        return (self.attention_params_per_layer + self.router_params_per_layer + self.shared_expert_params_per_layer
                + 2 * self.norm_params)

    @property
    def moe_layer_params(self) -> int:
        """One MoE block: :attr:`moe_layer_dense_params` + the routed experts."""
        return self.moe_layer_dense_params + self.expert_params_per_layer

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: every dense part and ``topk`` of the routed
        experts (= :attr:`params` for a dense model)."""
        if self.moe is None:
            return self.params
        routed = self.moe.topk * self.expert_mlp_params(self.moe.expert_ffn)
        layers = self.dense_layers * self.params_per_layer + self.moe_layers * (self.moe_layer_dense_params + routed)
        return layers + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def windowed_layers(self) -> int:
        """Layers attending over :attr:`attention_window` only: all but every ``window_skip_freq``-th
        (Megatron ``is_layer_window_attention``: layer_number % N != 0, 1-based); 0 without a window."""
        if self.attention_window is None:
            return 0
        return self.layers - (self.layers // self.window_skip_freq if self.window_skip_freq else 0)

    @property
    def windowed_layer_share(self) -> float:
        """:attr:`windowed_layers` / :attr:`layers`: the cost model charges each block the average of
        windowed and full attention by this share (a pipeline stage's own mix is not tracked)."""
        return self.windowed_layers / self.layers

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
        layers = self.dense_layers * self.params_per_layer + self.moe_layers * self.moe_layer_params
        return layers + self.embedding_params + self.lm_head_params + final_norm

    @property
    def largest_layer_params(self) -> int:
        """Largest single module (DeepSpeed's 'largest layer'): the embedding or a weight matrix."""
        widest = max(i * o for i, o, _ in self.attention_linears() + self.mlp_linears())
        return max(self.vocab * self.hidden, widest)

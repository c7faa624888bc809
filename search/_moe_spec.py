"""The optional parts of a transformer beyond the dense GPT/Llama block: a mixture of experts
(:class:`MoESpec`) and multi-head latent attention (:class:`MLASpec`).

Shapes follow Megatron-Core's arguments (``--num-experts``, ``--moe-router-topk``,
``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``,
``--q-lora-rank``, ``--kv-lora-rank``, ``--qk-head-dim``, ``--qk-pos-emb-head-dim``,
``--v-head-dim``) and the models' own configs (DeepSeek-V3 ``config.json``: ``n_routed_experts``,
``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts``, ``first_k_dense_replace``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from search._checks import one_of, positive_int, positive_number
from search._errors import SpecError

RouterLoad = Literal["learned", "force-balanced"]
ROUTER_LOADS: tuple[RouterLoad, ...] = get_args(RouterLoad)


def _non_negative_int(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{owner}.{name}", f"{value!r} is not an integer >= 0", "give a whole number >= 0")
    return value


def from_mapping(cls: type[Any], owner: str, value: object) -> Any:
    """Build ``cls`` from a JSON object (a stored or posted spec), refusing unknown keys by name."""
    if isinstance(value, cls) or value is None:
        return value
    if not isinstance(value, Mapping):
        raise SpecError(owner, f"{value!r} is not an object", f"give an object with the fields of {cls.__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise SpecError(f"{owner}.{unknown[0]}", "is not a field the cost model reads",
                        f"remove it; the fields are: {', '.join(sorted(known))}")
    return cls(**value)


@dataclass(frozen=True, slots=True)
class MoESpec:
    """A mixture-of-experts MLP in some or all layers (Shazeer et al. 2017; Fedus et al. 2021;
    DeepSeek-AI 2024, arXiv:2412.19437 Sec. 2.1.2 for shared experts and dense first layers)."""

    experts: int
    """Routed experts per MoE layer E."""
    topk: int
    """Routed experts each token goes to k."""
    expert_ffn: int
    """Inner size of one expert's MLP (same activation, hence matrix count, as the model's)."""
    shared_experts: int = 0
    """Experts every token goes to, besides the routed ones (DeepSeek-V3: 1)."""
    shared_expert_ffn: int = 0
    """Inner size of all shared experts together (Megatron ``--moe-shared-expert-intermediate-size``)."""
    first_dense_layers: int = 0
    """The first layers keep a dense MLP of ``ModelSpec.ffn`` (DeepSeek-V3: 3, Kimi K2: 1;
    ``first_k_dense_replace``); every later layer is an MoE layer."""
    capacity_factor: float | None = None
    """Tokens an expert takes, relative to an even share; the rest are dropped. None: dropless
    (every token reaches its experts, the busiest expert paces the layer)."""
    pad_to_capacity: bool = False
    """Every expert's input is padded to its full capacity (Megatron ``--moe-pad-expert-input-to-capacity``,
    needs ``capacity_factor``): each expert computes ``capacity_factor`` times an even share whatever the
    routing, and the alltoall dispatcher's split sizes are static, so it never waits on the GPU
    (megatron-core 0.19.0 ``token_dispatcher.py:511-535``, the drop-and-pad branch of ``preprocess``)."""
    router_load: RouterLoad = "learned"
    """``learned``: a trained router with its real load imbalance; ``force-balanced``: the even
    assignment benchmarks force (Megatron ``--moe-router-force-load-balancing``)."""

    def __post_init__(self) -> None:
        owner = "ModelSpec.moe"
        positive_int(owner, "experts", self.experts)
        positive_int(owner, "topk", self.topk)
        positive_int(owner, "expert_ffn", self.expert_ffn)
        _non_negative_int(owner, "shared_experts", self.shared_experts)
        _non_negative_int(owner, "shared_expert_ffn", self.shared_expert_ffn)
        _non_negative_int(owner, "first_dense_layers", self.first_dense_layers)
        if self.topk > self.experts:
            raise SpecError(f"{owner}.topk", f"{self.topk} is more than experts={self.experts}",
                            "give topk <= experts")
        if (self.shared_experts == 0) != (self.shared_expert_ffn == 0):
            raise SpecError(f"{owner}.shared_expert_ffn",
                            f"shared_experts={self.shared_experts} with shared_expert_ffn={self.shared_expert_ffn}",
                            "give both (the shared experts' total inner size) or neither")
        if self.capacity_factor is not None and positive_number(owner, "capacity_factor", self.capacity_factor) < 1:
            raise SpecError(f"{owner}.capacity_factor", f"{self.capacity_factor!r} drops tokens of a balanced load",
                            "give a factor >= 1 (1.0-1.25 is usual), or null for dropless")
        if not isinstance(self.pad_to_capacity, bool):
            raise SpecError(f"{owner}.pad_to_capacity", f"{self.pad_to_capacity!r} is not true or false",
                            "give true to pad every expert's input to its capacity, false otherwise")
        if self.pad_to_capacity and self.capacity_factor is None:
            raise SpecError(f"{owner}.pad_to_capacity", "pads to a capacity, but capacity_factor is null (dropless)",
                            "give capacity_factor (megatron-core transformer_config.py:1686-1690: "
                            "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity)")
        one_of(owner, "router_load", self.router_load, ROUTER_LOADS)


@dataclass(frozen=True, slots=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-AI 2024, arXiv:2405.04434 Sec. 2.1): queries and
    keys/values pass through low-rank latents; each head has a no-RoPE part and a RoPE part."""

    q_lora_rank: int | None
    """Query latent width d_c' (None: queries projected directly from the hidden state)."""
    kv_lora_rank: int
    """Key/value latent width d_c."""
    qk_head_dim: int
    """Per-head query/key width without RoPE d_h."""
    qk_rope_head_dim: int
    """Per-head RoPE width d_h^R (the RoPE key is shared by all heads)."""
    v_head_dim: int
    """Per-head value width."""

    def __post_init__(self) -> None:
        owner = "ModelSpec.mla"
        if self.q_lora_rank is not None:
            positive_int(owner, "q_lora_rank", self.q_lora_rank)
        for name in ("kv_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim"):
            positive_int(owner, name, getattr(self, name))

    @property
    def qk_dim(self) -> int:
        """Per-head width of queries and keys (the no-RoPE and the RoPE parts)."""
        return self.qk_head_dim + self.qk_rope_head_dim


__all__ = ["ROUTER_LOADS", "MLASpec", "MoESpec", "RouterLoad", "from_mapping"]

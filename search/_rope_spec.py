"""YaRN RoPE scaling (Peng et al. 2023, arXiv:2309.00071), part of :class:`ModelSpec`.

YaRN changes the RoPE frequencies (and scales the rotated queries and keys by its attention factor),
not the shape of any tensor. The cost model reads only whether it is set: the attention factor keeps
Megatron-Core off Transformer Engine's fused RoPE (:mod:`search._unfused_paths`). It is recorded so a
launch trains the model that was costed (GPT-OSS: factor 32 over 4,096 tokens). The fields are those of Hugging Face's
``rope_scaling`` of ``rope_type`` "yarn" (transformers ``modeling_rope_utils._compute_yarn_parameters``)
and of Megatron-Core's ``YarnRotaryEmbedding`` (megatron-core 0.19.2
``core/models/common/embeddings/yarn_rotary_pos_embedding.py:49-74``), which take the same defaults.

Not recorded, hence refused where a source states them: ``attention_factor``, ``mscale`` and
``mscale_all_dim``. Without them both implementations scale by YaRN's default ``0.1 ln(factor) + 1``
(Megatron ``_yarn_get_concentration_factor``, ``yarn_rotary_pos_embedding.py:252-271``: mscale 1 over
mscale_all_dim 0, the parser's defaults, ``training/arguments.py`` ``--mscale`` 1.0 / ``--mscale-all-dim``
0.0, gives the same factor as Megatron-Bridge's GPT-OSS provider's None / None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from search._checks import positive_int
from search._errors import SpecError


def _finite(owner: str, name: str, value: object, *, at_least: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < at_least:
        raise SpecError(f"{owner}.{name}", f"{value!r} is not a finite number >= {at_least:g}",
                        f"give a number >= {at_least:g}")
    return float(value)


@dataclass(frozen=True, slots=True)
class YarnSpec:
    """YaRN scaling of a model's RoPE frequencies (its base is ``ModelSpec.rope_theta``)."""

    factor: float
    """Context extension factor s >= 1 (HF ``rope_scaling.factor``; Megatron ``--rotary-scaling-factor``;
    GPT-OSS: 32)."""
    original_max_positions: int
    """The context the RoPE frequencies were made for, L (HF ``original_max_position_embeddings``; Megatron
    ``--yarn-original-max-position-embeddings``; GPT-OSS: 4096)."""
    beta_fast: float = 32.0
    """Dimensions rotating more than ``beta_fast`` times over L are extrapolated, kept as RoPE (HF
    ``beta_fast``, default 32; Megatron ``--yarn-beta-fast``)."""
    beta_slow: float = 1.0
    """Dimensions rotating fewer than ``beta_slow`` times over L are interpolated by ``factor``; those in
    between are ramped (HF ``beta_slow``, default 1; Megatron ``--yarn-beta-slow``)."""
    correction_range_round_to_int: bool = True
    """The ramp's end dimensions are rounded to integers (HF ``truncate``, default true; Megatron
    ``--yarn-correction-range-round-to-int``, default true; GPT-OSS: false)."""

    def __post_init__(self) -> None:
        owner = "ModelSpec.rope_yarn"
        object.__setattr__(self, "factor", _finite(owner, "factor", self.factor, at_least=1.0))
        positive_int(owner, "original_max_positions", self.original_max_positions)
        fast = _finite(owner, "beta_fast", self.beta_fast, at_least=0.0)
        slow = _finite(owner, "beta_slow", self.beta_slow, at_least=0.0)
        if not fast > slow > 0:
            raise SpecError(f"{owner}.beta_fast", f"beta_fast {fast:g} is not above beta_slow {slow:g} > 0: YaRN "
                            "ramps from the dimensions rotating beta_fast times to those rotating beta_slow times",
                            "give beta_fast > beta_slow > 0 (YaRN's and GPT-OSS's 32 and 1)")
        object.__setattr__(self, "beta_fast", fast)
        object.__setattr__(self, "beta_slow", slow)
        if not isinstance(self.correction_range_round_to_int, bool):
            raise SpecError(f"{owner}.correction_range_round_to_int",
                            f"{self.correction_range_round_to_int!r} is not a boolean", "give true or false")


def yarn_from_mapping(owner: str, value: object) -> YarnSpec | None:
    """``value`` as a :class:`YarnSpec` (a stored or posted JSON object), refusing unknown keys by name: a
    YaRN setting this spec does not record (``mscale``, ``attention_factor``) would be launched without it."""
    if value is None or isinstance(value, YarnSpec):
        return value
    if not isinstance(value, Mapping):
        raise SpecError(owner, f"{value!r} is not an object", "give an object with the fields of YarnSpec, or null")
    known = [f.name for f in fields(YarnSpec)]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise SpecError(f"{owner}.{unknown[0]}", "is not a YaRN setting autopar records (a launch would leave it out)",
                        f"remove it; the fields are: {', '.join(known)}")
    return YarnSpec(**value)

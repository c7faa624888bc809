"""Checks of :class:`ModelSpec`'s architecture variants (GPT-OSS's): the sliding window and softmax sinks,
the clamped quick-GeLU GLU, YaRN RoPE. Each raises :class:`SpecError` naming the field."""

from __future__ import annotations

import math

from search._checks import positive_int
from search._errors import SpecError

GATED_ACTIVATIONS: tuple[str, ...] = ("swiglu", "quick-geglu")
"""MLP activations of a gated linear unit: three matrices (gate, up, down), the gate's activation times the
up projection (Shazeer 2020, arXiv:2002.05202)."""


def check_window(owner: str, window: int | None, skip_freq: int | None, sinks: bool) -> None:
    """Validate the sliding-window fields of :class:`ModelSpec`."""
    if window is not None:
        positive_int(owner, "attention_window", window)
    if skip_freq is not None:
        if window is None:
            raise SpecError(f"{owner}.window_skip_freq", "is set without an attention_window",
                            "give attention_window (the window in tokens), or leave window_skip_freq null")
        if positive_int(owner, "window_skip_freq", skip_freq) < 2:
            raise SpecError(f"{owner}.window_skip_freq", f"{skip_freq} makes every layer full attention",
                            "give N >= 2 (every N-th layer full, GPT-OSS 2), or null for every layer windowed, "
                            "or drop attention_window")
    if not isinstance(sinks, bool):
        raise SpecError(f"{owner}.softmax_sinks", f"{sinks!r} is not a boolean", "give true or false")


def check_glu(owner: str, activation: str, offset: object, clamp: object) -> None:
    """Validate ``glu_linear_offset`` and ``glu_clamp``: numbers of the quick-GeLU GLU only (Megatron-Core
    applies the offset and the clamp in its quick-GeGLU kernels, ``fusions/fused_bias_geglu.py``
    ``weighted_bias_quick_geglu_impl``, and refuses a non-zero offset with another activation,
    ``transformer_config.py:2134-2137``, megatron-core 0.19.2)."""
    if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
        raise SpecError(f"{owner}.glu_linear_offset", f"{offset!r} is not a finite number",
                        "give the number added to the GLU's linear half (GPT-OSS 1.0), or 0")
    if offset != 0 and activation != "quick-geglu":
        raise SpecError(f"{owner}.glu_linear_offset", f"{offset:g} with activation {activation!r}: only the "
                        "quick-GeLU GLU takes a linear offset (Megatron refuses it with another activation)",
                        "set activation='quick-geglu', or glu_linear_offset=0")
    if clamp is None:
        return
    if isinstance(clamp, bool) or not isinstance(clamp, int | float) or not math.isfinite(clamp) or clamp <= 0:
        raise SpecError(f"{owner}.glu_clamp", f"{clamp!r} is not a positive finite number",
                        "give the clamp of the GLU's inputs (GPT-OSS swiglu_limit 7.0), or null for none")
    if activation != "quick-geglu":
        raise SpecError(f"{owner}.glu_clamp", f"a clamp with activation {activation!r}: Megatron clamps the "
                        "quick-GeLU GLU's inputs only (activation_func_clamp_value)",
                        "set activation='quick-geglu', or glu_clamp=null")


def check_yarn(owner: str, position_embedding: str, rope_scaling_factor: float | None, latent: bool) -> None:
    """A YaRN ``rope_yarn`` scales RoPE: it needs ``position_embedding='rope'``, excludes Llama 3.1's
    scaling, and is not recorded for latent attention (Megatron's MLA configures its own YaRN, with the
    mscale fields this spec leaves out: ``MLATransformerConfig``, ``transformer_config.py:2927-2952``)."""
    if position_embedding != "rope":
        raise SpecError(f"{owner}.rope_yarn", f"YaRN scales RoPE, but position_embedding is {position_embedding!r}",
                        "set position_embedding='rope', or rope_yarn=null")
    if rope_scaling_factor is not None:
        raise SpecError(f"{owner}.rope_yarn", "both YaRN and Llama 3.1's rope_scaling_factor: a model's RoPE has "
                        "one scaling", "give rope_yarn or rope_scaling_factor, not both")
    if latent:
        raise SpecError(f"{owner}.rope_yarn", "YaRN is not recorded for multi-head latent attention (its mscale "
                        "fields are not in the spec; DeepSeek-V3 is costed and launched without its YaRN)",
                        "set rope_yarn=null with mla")

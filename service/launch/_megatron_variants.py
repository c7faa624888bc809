"""GPT-OSS's architecture in Megatron-Core's flags: the sliding window and softmax sinks, the clamped
quick-GeLU GLU and YaRN RoPE, as Megatron-Bridge's ``GPTOSSProvider`` sets them for its published GPT-OSS runs
(``src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py`` @ v0.3.0, lines 39-92; the window (127, 0) since
5fcab34f8, v0.4.0) and megatron-core 0.19.2's parser reads them into the same ``TransformerConfig`` fields
(``training/arguments.py:2301-2326`` window and YaRN flags, ``:2369`` ``--quick-geglu``;
``training/argument_utils.py:323-326`` quick_gelu + gated_linear_unit, ``:384-413`` the ``yarn_*`` fields).

:func:`shape_args <service.launch._megatron.shape_args>` writes ``--quick-geglu`` and
``--position-embedding-type yarn`` in place of ``--swiglu`` and ``rope``; :func:`variant_args` the values that
go with them. Biases need nothing: Megatron's ``add_bias_linear`` defaults to on (QKV, projection, experts'
fc1/fc2 and the router's bias, ``moe/router.py:64-69``), and ``--rotary-base`` and ``--kv-channels`` come
from the recipe and expert arguments.
"""

from __future__ import annotations

from search import ModelSpec

from ._megatron_recipe import number

SINKS_NOTE = ("the softmax sinks (--softmax-type learnable) run in Transformer Engine's fused attention, which needs "
              "TE >= 2.8 (megatron-core asserts it, extensions/transformer_engine.py:1913-1918); Megatron-Bridge falls "
              "back to --attention-backend local on an older TE, unfused attention autopar does not cost")
"""Said with every launch of a model with softmax sinks."""


def variant_args(m: ModelSpec) -> tuple[list[str], list[str]]:
    """(arguments, notes) of the GLU's offset and clamp, the sliding window, the sinks and YaRN's settings;
    nothing for a model without them. ``--window-size`` is (window - 1, 0): ``attention_window`` counts the
    query itself, Megatron's (left, right) the keys beside it (Megatron-Bridge 5fcab34f8, "Fix off-by-one in
    sliding window size": GPT-OSS's 128 tokens are (127, 0))."""
    args: list[str] = []
    notes: list[str] = []
    if m.activation == "quick-geglu":  # --quick-geglu itself is shape_args'
        if m.glu_linear_offset:  # Megatron's default: 0.0
            args += ["--glu-linear-offset", number(m.glu_linear_offset)]
        if m.glu_clamp is not None:  # Megatron's default: None, no clamp
            args += ["--activation-func-clamp-value", number(m.glu_clamp)]
    if m.attention_window is not None:
        args += ["--window-size", f"{m.attention_window - 1},0"]  # arguments.py tuple_type: "127,0" -> (127, 0)
        if m.window_skip_freq is not None:  # utils.py is_layer_window_attention: layer_number % N == 0 is full
            args += ["--window-attn-skip-freq", str(m.window_skip_freq)]
    if m.softmax_sinks:
        args += ["--softmax-type", "learnable"]
        notes.append(SINKS_NOTE)
    y = m.rope_yarn
    if y is not None:
        # argument_utils._apply_yarn_config_from_args: --rotary-scaling-factor is yarn_rotary_scaling_factor; the
        # parser's --mscale 1.0 / --mscale-all-dim 0.0 give YaRN's default attention factor (search._rope_spec).
        args += ["--rotary-scaling-factor", number(y.factor),
                 "--yarn-original-max-position-embeddings", str(y.original_max_positions),
                 "--yarn-beta-fast", number(y.beta_fast), "--yarn-beta-slow", number(y.beta_slow),
                 "--yarn-correction-range-round-to-int" if y.correction_range_round_to_int
                 else "--no-yarn-correction-range-round-to-int"]
    return args, notes

"""Megatron-LM's rules for the architecture variants GPT-OSS brings (a quick-GeLU GLU with its offset and
clamp, a sliding window, softmax sinks and YaRN RoPE), re-implemented as :func:`check_megatron_args`
(:mod:`service.launch._megatron_checks`) runs them: each rule cites megatron-core ``core_v0.19.0`` or
Transformer Engine, or says it is autopar's."""

from __future__ import annotations

from search import SpecError

from ._megatron_args import FIELD as _FIELD
from ._megatron_args import float_value, int_value, is_placeholder, layer_pattern


def _window_size(v: dict[str, str | None]) -> tuple[int, int] | None:
    """``--window-size`` as ``arguments.py:376-386`` ``tuple_type`` reads it ("127,0" or "(127,0)"), held to
    the (left, right) pair with -1 (unbounded) or more on each side that Transformer Engine takes."""
    text = v.get("--window-size")
    if text is None or is_placeholder(text):
        if "--window-size" in v and text is None:
            raise SpecError(_FIELD, "--window-size has no value", "give --window-size LEFT,RIGHT (GPT-OSS: 127,0)")
        return None
    try:
        window = tuple(int(part) for part in text.strip("()").split(","))
    except ValueError:
        raise SpecError(_FIELD, f"--window-size {text!r} is not integers joined by commas (tuple_type)",
                        "give --window-size LEFT,RIGHT (GPT-OSS: 127,0)") from None
    if len(window) != 2 or min(window) < -1:
        raise SpecError(_FIELD, f"--window-size {text!r} is not a (left, right) pair of integers >= -1",
                        "give --window-size LEFT,RIGHT (GPT-OSS: 127,0)")
    return window[0], window[1]


def check_architecture_variants(v: dict[str, str | None], layers: int | None, cp: int) -> None:
    """GPT-OSS's flags: one activation (``argument_utils.py:314-326`` asserts ``not args.swiglu`` with
    --squared-relu or --quick-geglu), the fused bias-activation's GLU offset rule
    (``transformer_config.py:2114-2137``; ``arguments.py:1549-1551`` turns the fusion off without biases), the
    sliding window's and sinks' attention backend (Transformer Engine ``get_attention_backend``,
    ``attention/dot_product_attention/utils.py`` @ 002a3e573f49: FusedAttention runs a window as (left, 0)
    without dropout, FlashAttention no non-vanilla softmax, and
    under context parallelism a non-vanilla softmax with ``cp_comm_type`` a2a only, a window not with p2p), and
    YaRN's settings (read only with ``--position-embedding-type yarn``, ``argument_utils.py:384-413``). Rules
    marked autopar's refuse what Megatron would silently ignore or run unfused and uncosted."""
    activations = [f for f in ("--swiglu", "--squared-relu", "--quick-geglu") if f in v]
    if len(activations) > 1:
        raise SpecError(_FIELD, f"{' and '.join(activations)}: one MLP activation (argument_utils.py:320-325)",
                        "keep one of them")
    quick = "--quick-geglu" in v
    fused = ("--no-bias-swiglu-fusion" not in v if "--swiglu" in v
             else "--no-bias-gelu-fusion" not in v and "--disable-bias-linear" not in v)
    if (float_value(v, "--glu-linear-offset", _FIELD) or 0.0) != 0.0 and fused and not quick:
        raise SpecError(_FIELD, "When bias_activation_fusion is True and glu_linear_offset is non-zero, activation "
                        "function must be quick_gelu (transformer_config.py:2134-2137)",
                        "add --quick-geglu, or drop --glu-linear-offset")
    clamp = float_value(v, "--activation-func-clamp-value", _FIELD)
    if clamp is not None and (not quick or not clamp > 0):  # autopar's: Megatron documents it for quick_gelu only
        raise SpecError(_FIELD, f"--activation-func-clamp-value {clamp:g}: the clamp of the quick-GeLU GLU's inputs "
                        "(transformer_config.py:228-230) needs --quick-geglu and a value > 0",
                        "add --quick-geglu with a positive clamp (GPT-OSS: 7.0), or drop the flag")
    window = _window_size(v)
    if "--window-attn-skip-freq" in v and window is None:  # autopar's: utils.py:499-500 ignores it then
        raise SpecError(_FIELD, "--window-attn-skip-freq without --window-size: no layer is windowed",
                        "give --window-size, or drop --window-attn-skip-freq")
    if window is not None and "--window-attn-skip-freq" in v:  # an N, or 1 (windowed) / 0 (full) per layer
        layer_pattern(v, "--window-attn-skip-freq", layers)
    # Megatron's default attention dropout is 0.1 (transformer_config.py); a placeholder is not known here.
    dropout = 0.1 if "--attention-dropout" not in v else float_value(v, "--attention-dropout", _FIELD) or 0.0
    if window is not None and window[0] != -1 and (window[1] != 0 or dropout):  # autopar's, from TE utils.py
        raise SpecError(_FIELD, f"--window-size {window[0]},{window[1]} with attention dropout "
                        f"{v.get('--attention-dropout', '0.1 (the default)')}: Transformer Engine's fused attention "
                        "runs a sliding window only as (left, 0) without dropout, so the layers would run unfused "
                        "attention, which autopar does not cost", "give --window-size LEFT,0 and --attention-dropout 0")
    softmax = v.get("--softmax-type") or "vanilla"
    if softmax not in ("vanilla", "off-by-one", "learnable"):
        raise SpecError(_FIELD, f"--softmax-type {softmax!r} is not vanilla, off-by-one or learnable "
                        "(transformer_config.py:163)", "give one of them")
    exchange = v.get("--cp-comm-type") or "p2p"
    if cp > 1 and softmax != "vanilla" and exchange != "a2a":
        raise SpecError(_FIELD, f"--softmax-type {softmax} with --context-parallel-size {cp}: Transformer Engine "
                        f"runs it only with --cp-comm-type a2a, not {exchange} (no attention backend is left)",
                        "use --context-parallel-size 1 (autopar costs CP as the p2p ring)")
    if cp > 1 and window is not None and window[0] != -1 and exchange in ("p2p", "a2a+p2p"):
        raise SpecError(_FIELD, f"--window-size with --context-parallel-size {cp} and --cp-comm-type {exchange}: "
                        "Transformer Engine runs sliding windows with a2a or all_gather CP only",
                        "use --context-parallel-size 1 (autopar costs CP as the p2p ring)")
    _check_yarn_args(v)


_YARN_FLAGS = ("--yarn-original-max-position-embeddings", "--yarn-beta-fast", "--yarn-beta-slow",
               "--yarn-correction-range-round-to-int", "--no-yarn-correction-range-round-to-int")


def _check_yarn_args(v: dict[str, str | None]) -> None:
    """YaRN's settings count only with ``--position-embedding-type yarn`` outside latent attention (autopar's:
    ``_apply_yarn_config_from_args`` ignores them otherwise); a factor >= 1 and beta_fast > beta_slow (autopar's,
    YaRN's ramp: Peng et al. 2023, arXiv:2309.00071 Sec. 3.2)."""
    yarn = v.get("--position-embedding-type") == "yarn" and "--multi-latent-attention" not in v
    given = [f for f in _YARN_FLAGS if f in v]
    if given and not yarn:
        raise SpecError(_FIELD, f"{given[0]} without --position-embedding-type yarn (or with latent attention) is "
                        "ignored by megatron-core (argument_utils.py:384-413)",
                        "add --position-embedding-type yarn, or drop the YaRN flags")
    if not yarn:
        return
    factor = float_value(v, "--rotary-scaling-factor", _FIELD)
    if factor is not None and factor < 1:
        raise SpecError(_FIELD, f"--rotary-scaling-factor {factor:g} is below 1: YaRN extends a context, it does not "
                        "shrink one", "give the extension factor (GPT-OSS: 32)")
    fast = float_value(v, "--yarn-beta-fast", _FIELD)
    slow = float_value(v, "--yarn-beta-slow", _FIELD)
    fast, slow = 32.0 if fast is None else fast, 1.0 if slow is None else slow  # YarnRotaryEmbedding's defaults
    if not fast > slow > 0:
        raise SpecError(_FIELD, f"--yarn-beta-fast {fast:g} is not above --yarn-beta-slow {slow:g} > 0",
                        "give beta_fast > beta_slow > 0 (GPT-OSS: 32 and 1)")
    if (int_value(v, "--yarn-original-max-position-embeddings", 1) or 0) <= 0:
        raise SpecError(_FIELD, "--yarn-original-max-position-embeddings must be a positive integer",
                        "give the context the RoPE frequencies were made for (GPT-OSS: 4096)")
    if "--yarn-correction-range-round-to-int" in v and "--no-yarn-correction-range-round-to-int" in v:
        raise SpecError(_FIELD, "both --yarn-correction-range-round-to-int and its --no- form",
                        "keep one of them")

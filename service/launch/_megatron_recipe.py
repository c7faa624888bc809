"""The training recipe and the model's own settings in Megatron's arguments, for both forks.

Flag names are those of ``megatron_flags.txt`` (megatron-core 0.19.2) and
``megatron_deepspeed_flags.txt`` (Megatron-DeepSpeed 4efb479), which :func:`check_megatron_args`
and :func:`check_megatron_deepspeed_args` hold every emitted flag to. What differs between the
forks is data (:class:`RecipeSpelling`):

* tokenizer: ``--tokenizer-type HuggingFaceTokenizer`` (megatron-core's ``build_tokenizer``) or
  ``HFTokenizer`` (the fork's ``megatron/tokenizer/tokenizer.py``), ``--tokenizer-model``;
* vocabulary rows: megatron-core takes ``--padded-vocab-size`` as the embedding size
  (``build_tokenizer._set_padded_vocab_size`` keeps a given one); the fork always pads the
  tokenizer's size up to a multiple of ``--make-vocab-size-divisible-by`` x tp, so it gets
  ``ceil(vocab / tp)``, which yields exactly ``vocab`` rows for any tokenizer no larger;
* RoPE base: ``--rotary-base`` / ``--rotary-position-embeddings-theta`` (both ``type=int``);
  Llama 3.1 scaling only in megatron-core (``--use-rope-scaling --rope-scaling-factor``, with the
  low/high frequency factors 1 and 4 over 8192 tokens fixed in ``RotaryEmbedding._apply_scaling``);
* norm epsilon: ``--norm-epsilon`` / ``--layernorm-epsilon``; Q/K norms (``--qk-layernorm``) and
  Q/K/V-only biases (``--add-qkv-bias``) only in megatron-core.

Training length, schedule and optimizer follow ``validate_args`` (megatron-core 0.19.0
``arguments.py:1236-1262``): iteration-based (``--train-iters`` with ``--lr-warmup-iters``, or
``--lr-warmup-fraction`` when the length is a placeholder), ``--min-lr <= --lr``, ``--save`` with
``--save-interval``. Missing data, tokenizer, learning rate or length are placeholders.
"""

from __future__ import annotations

from dataclasses import dataclass

from search import ModelSpec, SpecError

from ._base import LaunchRequest
from ._recipe import REQUIRED
from ._shell import placeholder


@dataclass(frozen=True, slots=True)
class RecipeSpelling:
    """How a Megatron fork spells the recipe and the model settings that differ between forks."""

    fork: str
    tokenizer_type: str
    padded_vocab_flag: bool
    """True: ``--padded-vocab-size``; False: ``--make-vocab-size-divisible-by``."""
    rope_base: str
    norm_eps: str
    rope_scaling: bool
    qk_norm: str | None
    qkv_bias: str | None


MEGATRON_RECIPE = RecipeSpelling(fork="Megatron-LM", tokenizer_type="HuggingFaceTokenizer", padded_vocab_flag=True,
                                 rope_base="--rotary-base", norm_eps="--norm-epsilon", rope_scaling=True,
                                 qk_norm="--qk-layernorm", qkv_bias="--add-qkv-bias")
MEGATRON_DEEPSPEED_RECIPE = RecipeSpelling(fork="Megatron-DeepSpeed", tokenizer_type="HFTokenizer",
                                           padded_vocab_flag=False, rope_base="--rotary-position-embeddings-theta",
                                           norm_eps="--layernorm-epsilon", rope_scaling=False, qk_norm=None,
                                           qkv_bias=None)


def number(x: float) -> str:
    """A float as argparse's ``float()`` reads it back exactly."""
    return repr(float(x))


def _required(field: str) -> str:
    name, what = REQUIRED[field]
    return placeholder(name, what)


def model_settings(m: ModelSpec, tp: int, spelling: RecipeSpelling) -> tuple[list[str], list[str]]:
    """(arguments, notes): vocabulary rows, norm epsilon, RoPE base/scaling/share, Q/K norms, Q/K/V biases."""
    if m.parallel_residual:
        raise SpecError("ModelSpec.parallel_residual", f"{spelling.fork} has no parallel attention/MLP block "
                        "(GPT-J/NeoX), so the launch would train another model", "launch this model by hand")
    notes: list[str] = []
    rows = -(-m.vocab // tp) * tp
    if rows != m.vocab:
        notes.append(f"the embedding has {rows} rows, not {m.vocab}: vocabulary-parallel layers need a multiple of "
                     f"tp={tp}")
    args = ["--padded-vocab-size", str(rows)] if spelling.padded_vocab_flag else [
        "--make-vocab-size-divisible-by", str(rows // tp)]
    args += [spelling.norm_eps, number(m.norm_eps)]
    if m.position_embedding == "rope":
        if m.rope_theta != int(m.rope_theta):
            raise SpecError("ModelSpec.rope_theta", f"{m.rope_theta} is not an integer, and {spelling.rope_base} "
                            "takes one (type=int)", "use an integer RoPE base")
        args += [spelling.rope_base, str(int(m.rope_theta))]
        if m.rotary_percent != 1.0:
            args += ["--rotary-percent", number(m.rotary_percent)]
        if m.rope_scaling_factor is not None:
            if not spelling.rope_scaling:
                raise SpecError("ModelSpec.rope_scaling_factor", f"{spelling.fork} has no RoPE scaling (Llama 3.1's "
                                "'llama3' frequencies)", "use framework megatron, or a model without rope scaling")
            args += ["--use-rope-scaling", "--rope-scaling-factor", number(m.rope_scaling_factor)]
    for name, flag in (("qk_norm", spelling.qk_norm), ("qkv_bias", spelling.qkv_bias)):
        if getattr(m, name):
            if flag is None:
                raise SpecError(f"ModelSpec.{name}", f"{spelling.fork} has no option for {name} (Qwen's "
                                "architecture)", "use framework megatron for this model")
            if not (name == "qkv_bias" and m.bias):
                args.append(flag)
    return args, notes


def recipe_args(request: LaunchRequest, spelling: RecipeSpelling) -> tuple[list[str], list[str]]:
    """(arguments, notes): data, tokenizer, length, schedule, optimizer, checkpoints, logging."""
    r, t, m = request.recipe, request.training, request.model
    args: list[str] = ["--data-path", *(r.data_path or [_required("data_path")]), "--split", r.split,
                       "--tokenizer-type", spelling.tokenizer_type, "--tokenizer-model",
                       r.tokenizer or _required("tokenizer")]
    iters = r.iterations(t.global_batch, m.seq_len)
    args += ["--train-iters", str(iters) if iters is not None else _required("train_iters"),
             "--lr", number(r.lr) if r.lr is not None else _required("lr"), "--min-lr", number(r.min_lr),
             "--lr-decay-style", r.lr_schedule]
    if iters is not None or r.warmup_iters is not None:
        args += ["--lr-warmup-iters", str(r.warmup(iters) if iters is not None else r.warmup_iters)]
    else:
        args += ["--lr-warmup-fraction", number(r.warmup_fraction)]
    args += ["--weight-decay", number(r.weight_decay), "--adam-beta1", number(r.adam_beta1),
             "--adam-beta2", number(r.adam_beta2), "--adam-eps", number(r.adam_eps), "--clip-grad", number(r.clip_grad)]
    if r.save is not None:
        args += ["--save", r.save, "--save-interval", str(r.save_interval)]
    if r.resume_from is not None:
        args += ["--load", r.resume_from]
    args += ["--log-interval", str(r.log_interval)]
    if r.tensorboard_dir is not None:
        args += ["--tensorboard-dir", r.tensorboard_dir]
    notes = []
    missing = r.missing("data_path", "tokenizer", "lr", "train_iters")
    if missing:
        names = ", ".join(REQUIRED[f][0] for f in missing)
        notes.append(f"set {names} in the environment at launch, or emit again with "
                     + ", ".join("--" + f.replace("_", "-") for f in missing))
    if iters is not None and r.train_tokens is not None:
        notes.append(f"{r.train_tokens:.4g} tokens = {iters} steps of {t.global_batch} x {m.seq_len} tokens "
                     f"({iters * t.global_batch * m.seq_len / r.train_tokens - 1:+.2%} rounding)")
    return args, notes

"""The training recipe: what a run needs besides its parallel layout (data, tokenizer, learning rate
and schedule, length, checkpoints, logging, optimizer hyperparameters).

Values come from ``autopar search --emit`` flags, a recipe file (``--recipe FILE.json``, this
class's fields as a JSON object), or the launch endpoint's query parameters; the emitters write
them with each framework's own names. What has no safe default (data, tokenizer, learning rate,
length; torchtitan's dataset) and was not given becomes a *placeholder* read from the environment
at launch, which stops the launch with a message naming the variable and what it is (see
:data:`REQUIRED`), instead of a default that would train the wrong thing. Everything else has a
default that is written out in the files, where it can be read.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from search import SpecError

LrSchedule = Literal["cosine", "linear", "constant"]
LR_SCHEDULES: tuple[LrSchedule, ...] = get_args(LrSchedule)

REQUIRED: dict[str, tuple[str, str]] = {
    "data_path": ("DATA_PATH", "the data path: Megatron --data-path, prefix of the tokenized .bin/.idx files"),
    "dataset": ("DATASET", "torchtitan's registered dataset, e.g. c4"),
    "tokenizer": ("TOKENIZER", "the Hugging Face tokenizer: a hub id or a directory with tokenizer.json"),
    "lr": ("LR", "the peak learning rate, e.g. 3e-4"),
    "train_iters": ("TRAIN_ITERS", "the number of optimizer steps"),
}
"""Recipe field -> (environment variable of its placeholder, what it is)."""


@dataclass(frozen=True, slots=True)
class TrainingRecipe:
    """One run's recipe; every field is optional (see the module docstring for what a missing one does)."""

    data_path: tuple[str, ...] = ()
    """Megatron ``--data-path`` words: one prefix of tokenized ``.bin``/``.idx`` files, several, or
    ``weight prefix`` pairs; torchtitan's ``dataset_path`` (one path: a hub id or a local copy)."""
    dataset: str | None = None
    """torchtitan's registered dataset (``c4``, ``c4_test``, ...): its loader and text field."""
    split: str = "969,30,1"
    """Megatron ``--split`` (train, validation, test shares); Megatron's own former default."""
    tokenizer: str | None = None
    """Hugging Face tokenizer: a hub id or a directory (torchtitan: ``hf_assets_path``, a directory)."""
    lr: float | None = None
    """Peak learning rate."""
    min_lr: float = 0.0
    """Learning rate at the end of the decay (Megatron's and torchtitan's default: 0)."""
    lr_schedule: LrSchedule = "cosine"
    """Decay after the warmup: cosine, linear, or constant."""
    warmup_iters: int | None = None
    """Warmup steps; None means ``warmup_fraction`` of the run."""
    warmup_fraction: float = 0.01
    """Share of the run spent warming up when ``warmup_iters`` is not given."""
    train_iters: int | None = None
    """Optimizer steps; None takes ``train_tokens`` / (global batch x sequence length)."""
    train_tokens: float | None = None
    """Training tokens (e.g. 300e9), converted to steps at the run's global batch and sequence length."""
    save: str | None = None
    """Checkpoint directory to save into (none: no checkpoints)."""
    load: str | None = None
    """Checkpoint directory to resume from; defaults to ``save`` (resume where the run saves)."""
    save_interval: int = 1000
    """Steps between checkpoints."""
    log_interval: int = 10
    """Steps between log lines."""
    tensorboard_dir: str | None = None
    """TensorBoard directory (none: no TensorBoard)."""
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    """Gradient-norm clipping (AdamW with these values is GPT-3's and Llama's recipe)."""

    def __post_init__(self) -> None:
        owner = "recipe"
        if isinstance(self.data_path, str) or not isinstance(self.data_path, tuple | list):
            raise SpecError(f"{owner}.data_path", f"{self.data_path!r} is not a list of paths",
                            'give ["prefix"], or ["0.7", "prefix1", "0.3", "prefix2"]')
        object.__setattr__(self, "data_path", tuple(self.data_path))
        texts = {name: getattr(self, name) for name in ("dataset", "tokenizer", "save", "load", "tensorboard_dir",
                                                         "split")}
        texts.update({f"data_path[{i}]": path for i, path in enumerate(self.data_path)})
        for name, value in texts.items():
            if value is not None and (not isinstance(value, str) or not value.strip() or "\0" in value
                                      or "\n" in value or value.startswith("-")):
                raise SpecError(f"{owner}.{name}", f"{value!r} is not a usable value (empty, a NUL or a newline, "
                                "or a leading '-' the framework would read as an option)",
                                "give a path or name on one line")
        for name in ("lr", "train_tokens"):
            value = getattr(self, name)
            if value is not None and not _positive(value):
                raise SpecError(f"{owner}.{name}", f"{value!r} is not a positive number", "give a number > 0")
        for name in ("warmup_iters", "train_iters", "save_interval", "log_interval"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0
                                      or (value == 0 and name != "warmup_iters")):
                raise SpecError(f"{owner}.{name}", f"{value!r} is not a positive integer", "give an integer")
        for name in ("min_lr", "weight_decay", "adam_eps", "clip_grad"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise SpecError(f"{owner}.{name}", f"{value!r} is not a number >= 0", "give a number >= 0")
        for name in ("adam_beta1", "adam_beta2", "warmup_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
                raise SpecError(f"{owner}.{name}", f"{value!r} is not in [0, 1)", "give e.g. 0.9")
        if self.lr_schedule not in LR_SCHEDULES:
            raise SpecError(f"{owner}.lr_schedule", f"{self.lr_schedule!r} is not a schedule",
                            f"use one of: {', '.join(LR_SCHEDULES)}")
        if self.lr is not None and self.min_lr > self.lr:
            raise SpecError(f"{owner}.min_lr", f"{self.min_lr} is above lr {self.lr}", "give min_lr <= lr")
        if self.train_iters is not None and self.train_tokens is not None:
            raise SpecError(f"{owner}.train_tokens", "both train_iters and train_tokens are given",
                            "give one: steps, or tokens (converted to steps)")

    @property
    def resume_from(self) -> str | None:
        """Where the run resumes from: ``load``, else ``save``."""
        return self.load or self.save

    def iterations(self, global_batch: int, seq_len: int) -> int | None:
        """Optimizer steps: ``train_iters``, or ``train_tokens`` in steps of global batch x sequence (rounded up)."""
        if self.train_iters is not None:
            return self.train_iters
        if self.train_tokens is not None:
            return max(1, math.ceil(self.train_tokens / (global_batch * seq_len)))
        return None

    def warmup(self, iterations: int) -> int:
        """Warmup steps for a run of ``iterations`` steps."""
        if self.warmup_iters is not None:
            return self.warmup_iters
        return max(1, round(self.warmup_fraction * iterations))

    def missing(self, *fields: str) -> tuple[str, ...]:
        """Which of the :data:`REQUIRED` ``fields`` this recipe leaves to placeholders."""
        given = {"data_path": bool(self.data_path), "dataset": self.dataset is not None,
                 "tokenizer": self.tokenizer is not None, "lr": self.lr is not None,
                 "train_iters": self.train_iters is not None or self.train_tokens is not None}
        return tuple(f for f in fields if not given[f])


def _positive(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < math.inf


def recipe_from_dict(data: dict[str, Any], where: str = "recipe") -> TrainingRecipe:
    """A :class:`TrainingRecipe` from a JSON object, naming an unknown key."""
    if not isinstance(data, dict):
        raise SpecError(where, f"a JSON {type(data).__name__}, not an object", "give the recipe's fields as an object")
    names = [f.name for f in dataclasses.fields(TrainingRecipe)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise SpecError(f"{where} {unknown[0]}", "is not a recipe field", f"the fields are: {', '.join(names)}")
    values = dict(data)
    if "data_path" in values and isinstance(values["data_path"], list):
        values["data_path"] = tuple(values["data_path"])
    return TrainingRecipe(**values)

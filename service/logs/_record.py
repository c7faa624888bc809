"""What a training log says about its run (:class:`ParsedLog`), the error a log that says too
little raises (:class:`LogParseError`), and the rules every format shares: text that is a log,
the steady-state iteration time, and the OOM verdict.

Steady state: every format logs a time per *logged* line (Megatron and torchtitan average it
over their log interval, DeepSpeed's ThroughputTimer times one step). The first
``max(2, ceil(10 %))`` logged lines are warm-up (CUDA graphs, NCCL communicators, allocator
growth, the first logged iteration's compilation) and are dropped, and so is every line whose
interval had a skipped or NaN iteration (an fp16 loss-scale overflow skips the optimizer step, so
the interval is faster than training); the iteration time is the median of what is left, so one
slow interval (a checkpoint save, an evaluation) does not move it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeGuard, get_args

from search import SpecError
from search._model_spec import Activation, Attention, PositionEmbedding
from search._parallel_spec import Offload, Recompute

Format = Literal["megatron", "megatron-deepspeed", "deepspeed", "torchtitan"]
FORMATS: tuple[Format, ...] = get_args(Format)


def is_format(name: str) -> TypeGuard[Format]:
    """``name`` is one of :data:`FORMATS`."""
    return name in FORMATS

MIB = 1024**2
GIB = 1024**3
DUMP_ENTRY = re.compile(r"^ {2}([A-Za-z_]\w*) \.*(?: (.*))?$")
"""One ``  name ...... value`` line of the configuration dumps Megatron (``_print_args``) and DeepSpeed
(``DeepSpeedConfig.print``) write at start."""

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""Terminal colour codes (torchtitan colours its metrics line: ``tools/utils.py::Color``)."""
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
"""Control characters no text log holds (tab, newline, carriage return and ESC are text), and the
replacement character an undecodable byte becomes."""

OOM = re.compile(r"torch\.(?:cuda\.)?OutOfMemoryError: CUDA out of memory|RuntimeError: CUDA out of memory")
"""PyTorch's allocator failure: ``torch.OutOfMemoryError`` (torch >= 2.5, also reachable as
``torch.cuda.OutOfMemoryError``), ``RuntimeError`` before torch 1.13 (c10/cuda/CUDACachingAllocator.cpp)."""


class LogParseError(SpecError):
    """A log the importer cannot read: ``file`` and ``line`` (1-based; None for the file as a whole)
    say where, ``problem`` what, ``fix`` how. Its ``field`` is ``file:line``, as compilers write it."""

    def __init__(self, file: str, line: int | None, problem: str, fix: str) -> None:
        self.file = file
        self.line = line
        super().__init__(file if line is None else f"{file}:{line}", problem, fix)


@dataclass(frozen=True, slots=True)
class Iteration:
    """One logged iteration line."""

    line: int
    """1-based line number in the log."""
    step: int
    """The iteration (step) number the line reports."""
    time_s: float
    """Seconds per iteration over the line's interval."""
    flagged: bool = False
    """The interval had a skipped or NaN iteration (never steady state)."""


@dataclass(frozen=True, slots=True)
class ParsedLog:
    """What one training log says about its run; None where the log does not print it.

    Degrees and batch sizes are Megatron's words (search.ParallelConfig's): ``dp`` counts data-parallel
    replicas (torchtitan's dp_replicate * dp_shard), ``global_batch`` sequences per optimizer step."""

    name: str
    """The file name (errors and notes name it)."""
    format: Format
    world_size: int | None = None
    tp: int | None = None
    pp: int | None = None
    vp: int | None = None
    cp: int | None = None
    dp: int | None = None
    ep: int | None = None
    etp: int | None = None
    sp: bool | None = None
    tp_comm_overlap: bool | None = None
    moe_dispatcher: str | None = None
    """Megatron's MoE token dispatcher as ``ParallelConfig.moe_dispatcher`` names it (``flex-deepep``, ...)."""
    moe_a2a_overlap: bool | None = None
    """Megatron's ``--overlap-moe-expert-parallel-comm``."""
    cuda_graphs: str | None = None
    """Megatron's CUDA graph: ``full-iteration`` (``ParallelConfig.cuda_graphs``), ``none``, or the per-layer
    implementation as printed (``local``, ``transformer_engine``), which the run's config then refuses."""
    placement: str | None = None
    """Rank order of the groups: Megatron's tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping."""
    global_batch: int | None = None
    micro_batch: int | None = None
    zero_stage: int | None = None
    offload_optimizer: Offload | None = None
    offload_param: Offload | None = None
    recompute: Recompute | None = None
    precision: str | None = None
    """bf16, fp16, fp8, mxfp8, nvfp4 or fp32 (which no preset models: the import refuses it)."""
    grad_reduce_in_bf16: bool | None = None
    """Megatron's ``--grad-reduce-in-bf16``: gradients accumulated and reduced in bf16, not fp32."""
    seq_len: int | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    activation: Activation | None = None
    norm: Literal["layernorm", "rmsnorm"] | None = None
    position_embedding: PositionEmbedding | None = None
    bias: bool | None = None
    tied_embeddings: bool | None = None
    dropout: bool | None = None
    attention: Attention | None = None
    """The attention kernel: a fused one (FlashAttention, Transformer Engine's) or the unfused softmax."""
    head_dim: int | None = None
    """Per-head width when the log sets it apart from hidden / heads (Megatron's --kv-channels)."""
    experts: int | None = None
    """Routed experts of a mixture-of-experts model (its shape then comes from --model)."""
    beyond_shape: tuple[str, ...] = ()
    """Parts of the printed model the shape fields above do not carry (``window``, ``sinks``,
    ``quick-geglu``, ``yarn``): its model then comes from --model, which must have them."""
    model_name: str | None = None
    """The model as the log names it (torchtitan's "llama3 8B"), when it does."""
    iterations: tuple[Iteration, ...] = ()
    """Every logged iteration line, in order."""
    steady_iterations: int = 0
    """Lines the median is taken over (after warm-up and flagged lines are dropped)."""
    iteration_time_s: float | None = None
    """Median seconds per iteration over the steady-state lines; None for a run that ran out of memory."""
    peak_memory_bytes: float | None = None
    """The largest peak the log prints (the rank that prints it), in bytes."""
    memory_kind: str | None = None
    """What that peak counts: "max allocated" (Megatron, DeepSpeed) or "max reserved" (torchtitan)."""
    oom: bool = False
    oom_line: int | None = None
    notes: tuple[str, ...] = field(default=())
    """What the parser assumed."""


def log_lines(text: str, name: str) -> list[str]:
    """``text`` split into lines with terminal colours removed; binary data raises
    :class:`LogParseError` naming its line."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        bad = _BINARY.search(line)
        if bad is not None:
            raise LogParseError(name, number, f"binary data (character {ord(bad.group()):#04x} at column "
                                f"{bad.start() + 1}): this is not a text training log",
                                "give the log file as the training job wrote it (its stdout and stderr), "
                                "uncompressed")
    if not any(line.strip() for line in lines):
        raise LogParseError(name, None, "the file is empty", "give the log of a training run")
    return [ANSI.sub("", line) for line in lines]


def decode_log(data: bytes, name: str) -> str:
    """The text of a log file's bytes (UTF-8); an undecodable byte raises :class:`LogParseError`
    naming its line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise LogParseError(name, line, f"byte {data[exc.start]:#04x} is not UTF-8 text: this is not a text "
                            "training log", "give the log file as the training job wrote it, uncompressed") from None


def warmup_lines(logged: int) -> int:
    """Logged iteration lines counted as warm-up: ``max(2, ceil(10 %))``."""
    return max(2, math.ceil(0.1 * logged))


def steady_time_s(iterations: Sequence[Iteration], name: str, last_line: int) -> tuple[float, int]:
    """The median seconds per iteration over the steady-state lines (see the module docstring) and
    how many lines it is over; :class:`LogParseError` when no line is left."""
    if not iterations:
        raise LogParseError(name, last_line, "no iteration lines: the log ends before training logged a step",
                            "give the log of a run that trained: the job's whole output (Megatron prints "
                            "its iteration lines on the last pipeline rank, not rank 0), or of one that ran out of "
                            "memory (its traceback makes an OOM run)")
    warm = warmup_lines(len(iterations))
    steady = [it.time_s for it in iterations[warm:] if not it.flagged]
    if not steady:
        flagged = sum(it.flagged for it in iterations[warm:])
        why = f", {flagged} after them had skipped or NaN iterations" if flagged else ""
        raise LogParseError(name, iterations[-1].line,
                            f"only warm-up iterations: {len(iterations)} logged iteration line(s), the first {warm} "
                            f"are warm-up{why}", "log more iterations (at least 3 logged lines; the first "
                            "max(2, 10%) are warm-up) or a smaller log interval")
    return statistics.median(steady), len(steady)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a logged run ended: out of memory on ``oom_line``, or trained at ``time_s`` per iteration,
    the median of ``steady`` steady-state lines."""

    oom_line: int | None
    time_s: float | None
    steady: int


def outcome(lines: Sequence[str], iterations: Sequence[Iteration], name: str) -> Outcome:
    """The OOM verdict, else the steady-state time (:func:`steady_time_s`, which refuses a log without one)."""
    oom_line = first_oom(lines)
    if oom_line is not None:
        return Outcome(oom_line, None, 0)
    time_s, steady = steady_time_s(iterations, name, len(lines))
    return Outcome(None, time_s, steady)


def first_oom(lines: Sequence[str]) -> int | None:
    """The 1-based line of the first CUDA out-of-memory error, None when there is none."""
    for number, line in enumerate(lines, 1):
        if OOM.search(line):
            return number
    return None


Value = bool | int | float | str | None

_LAUNCHER_PREFIX = re.compile(r"^(?:\d+: |\[default\d+\]:|\[rank\d+\]:)")
"""What launchers put before each line: ``srun --label`` (``0: ``), ``torchrun --tee`` (``[default0]:``,
``[rank0]:``)."""


def without_launcher_prefix(line: str) -> str:
    return _LAUNCHER_PREFIX.sub("", line, count=1)


def literal(text: str) -> Value:
    """A printed Python value: True/False/None, an integer, a float, else the text itself."""
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def positive_int(value: Value) -> int | None:
    """``value`` when it is a positive integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

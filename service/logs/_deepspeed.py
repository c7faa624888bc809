"""DeepSpeed logs: the engine's configuration dump and its step-time lines.

Line formats, from deepspeedai/DeepSpeed:

* the configuration dump, ``deepspeed/runtime/config.py::DeepSpeedConfig.print`` (called by
  ``runtime/engine.py::DeepSpeedEngine.__init__`` on rank 0 as ``print("DeepSpeedEngine
  configuration")``), through DeepSpeed's logger (``utils/logging.py``: ``[time] [INFO]
  [config.py:N:print] message``): a ``DeepSpeedEngine configuration:`` line, then one
  ``'  {} {} {}'.format(name, '.' * (29 - len(name)), value)`` line per attribute, sorted, then
  ``  json = {`` and the user's JSON (``print_user_config``). ``world_size`` there is the
  data-parallel size; precision is ``bfloat16_config``/``float16_config`` (``enabled=True ...``) or,
  before 0.15, ``bfloat16_enabled``/``fp16_enabled``;
* the throughput line, ``utils/timer.py::ThroughputTimer.stop`` every ``steps_per_print`` steps:
  ``epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...,
  MemAllocated=...GB, MaxMemAllocated=...GB`` (samples of the global batch per second over that
  step; GB are GiB; steps before ``start_step`` = 2 are untimed and show batch / 1e-6); before
  October 2022 ``0/20, RunningAvgSamplesPerSec=...`` (epoch/step, the same figures);
* the pipeline engine's line, ``runtime/pipe/engine.py::PipelineEngine.train_batch``: ``steps: 10
  loss: 2.3456 iter time (s): 0.532 samples/sec: 120.301`` (mean over ``steps_per_print`` steps),
  and ``runtime/pipe/module.py::PipelineModule._partition_layers``' ``stage=0 layers=13`` per stage;
* with ``wall_clock_breakdown``, ``utils/timer.py::SynchronizedWallClockTimer.log``: ``[Rank 0]
  time (ms) | fwd: ... | bwd: ... | bwd_inner: ... | bwd_allreduce: ... | step: ...`` (the global
  timers of ``runtime/engine.py::EngineTimers``; ``forward``/``backward`` before 2021), whose
  fwd + bwd + step is a step's time, or a ``train_batch`` timer (the pipeline engine's), a step's time;
* fp16 overflows, ``runtime/fp16/loss_scaler.py``: ``[deepspeed] OVERFLOW! Rank 0 Skipping step.``,
  and ``runtime/engine.py::_report_progress``: ``step=10, skipped=1, lr=[...], mom=[...]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from service.logs._record import (
    DUMP_ENTRY,
    GIB,
    Iteration,
    LogParseError,
    ParsedLog,
    Value,
    literal,
    outcome,
    positive_int,
    without_launcher_prefix,
)

DS_HEADER = re.compile(r"DeepSpeedEngine configuration:")
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\] ?)+")
_JSON_START = re.compile(r"^ {2}json = ")
_LOGGED_ENTRY = re.compile(r"\] {3}([A-Za-z_]\w*) \.*(?: (.*))?$")
_LOGGED_JSON_START = re.compile(r"\] {3}json = ")
"""The same behind a prefix before the logger's (a log collector's timestamp): found after the logger's ``]``."""
THROUGHPUT = re.compile(r"(?:epoch=\d+/micro_step=\d+/global_step=|(?:^|\] )\d+/)(\d+), "
                        r"RunningAvgSamplesPerSec=([^,]*), CurrSamplesPerSec=([^,]*), MemAllocated=([^,]*)GB, "
                        r"MaxMemAllocated=([\d.]+)GB")
PIPE_STEP = re.compile(r"\bsteps: (\d+) loss: \S+ .*?iter time \(s\): ([^ ]+) samples/sec: ")
_TIMERS = re.compile(r"time \(ms\) \| (?:fwd|forward): ([\d.]+) \| (?:bwd|backward): ([\d.]+) \|.*\| step: ([\d.]+)")
_TRAIN_BATCH = re.compile(r"time \(ms\) \|(?:.*\|)? train_batch: ([\d.]+)")
_STAGE = re.compile(r"^stage=(\d+) layers=\d+$")
_OVERFLOW = re.compile(r"OVERFLOW! Rank \d+ Skipping step|\bstep=\d+, skipped=(\d+),")
_OFFLOAD = re.compile(r"offload_(optimizer|param)=\w*\(device=[^,)]*?'?(cpu|nvme)'?[>,)]")
_UNTIMED_S = 1e-5
"""ThroughputTimer reports batch / 1e-6 samples/s for steps it did not time (TIME_EPSILON)."""


def _message(line: str) -> str:
    """The message of a DeepSpeed logger line (``[time] [INFO] [file:line:func] message``)."""
    return _LOG_PREFIX.sub("", without_launcher_prefix(line), count=1)


def _enabled(value: Value) -> bool:
    """``True``, or a config model printed as ``enabled=True ...``."""
    return value is True or (isinstance(value, str) and value.startswith("enabled=True"))


def deepspeed_config(lines: Sequence[str], name: str) -> dict[str, Any]:
    """What the DeepSpeedEngine configuration dump says (ParsedLog field names; empty without a
    dump). A dump cut off before its ``json =`` line raises :class:`LogParseError`."""
    start = next((i for i, line in enumerate(lines) if DS_HEADER.search(line)), None)
    if start is None:
        return {}
    found: dict[str, Value] = {}
    for i in range(start + 1, len(lines)):
        message = _message(lines[i])
        if _JSON_START.match(message) or _LOGGED_JSON_START.search(lines[i]):
            break
        entry = DUMP_ENTRY.match(message) or _LOGGED_ENTRY.search(lines[i])
        if entry is not None:
            found[entry.group(1)] = literal(entry.group(2) or "")
    else:
        raise LogParseError(name, len(lines), f"the log ends inside the DeepSpeedEngine configuration dump that starts "
                            f"at line {start + 1} ({len(found)} setting(s) read, no 'json =' line)",
                            "give the whole log from the start of the run")
    stage = found.get("zero_optimization_stage")
    out: dict[str, Any] = {
        "header_line": start + 1,
        "zero_stage": stage if isinstance(stage, int) and found.get("zero_enabled") is not False else 0,
        "global_batch": positive_int(found.get("train_batch_size")),
        "micro_batch": positive_int(found.get("train_micro_batch_size_per_gpu")),
        "dp": positive_int(found.get("world_size")),
    }
    if _enabled(found.get("bfloat16_config")) or found.get("bfloat16_enabled") is True:
        out["precision"] = "bf16"
    elif _enabled(found.get("float16_config")) or found.get("fp16_enabled") is True:
        out["precision"] = "fp16"
    else:
        out["precision"] = "fp32"
    for which, device in _OFFLOAD.findall(str(found.get("zero_config", ""))):
        out[f"offload_{which}"] = device
    pipeline = str(found.get("pipeline", ""))
    interval = re.search(r"'activation_checkpoint_interval': (\d+)", pipeline)
    if interval is not None and int(interval.group(1)) > 0:
        out["recompute"] = "full"
    return out


def _timed(value: str, line: int, name: str, what: str) -> float:
    number = literal(value)
    if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
        raise LogParseError(name, line, f"{what} {value.strip()!r} is not a positive number (the line is cut off "
                            "or garbled)", "give the log as DeepSpeed wrote it; if only its last line is cut off, "
                            "remove that line")
    return float(number)


def parse_deepspeed(lines: Sequence[str], name: str) -> ParsedLog:
    """Parse a DeepSpeed (engine or pipeline engine) training log."""
    config = deepspeed_config(lines, name)
    notes: list[str] = []
    pipe: list[Iteration] = []
    throughput: list[Iteration] = []
    timers: list[Iteration] = []
    stages: set[int] = set()
    peak_gib: float | None = None
    overflow = False
    for number, line in enumerate(lines, 1):
        message = _message(line)
        if (m := PIPE_STEP.search(message)) is not None:
            pipe.append(Iteration(number, int(m.group(1)), _timed(m.group(2), number, name, "iter time (s)"),
                                  overflow))
            overflow = False
        elif (m := THROUGHPUT.search(message)) is not None:
            samples_per_s = _timed(m.group(3), number, name, "CurrSamplesPerSec")
            peak_gib = max(peak_gib or 0.0, float(m.group(5)))
            batch = config.get("global_batch")
            if batch is None:
                raise LogParseError(name, number, "a ThroughputTimer line, but no DeepSpeedEngine configuration dump "
                                    "gives the train_batch_size its samples/s are of",
                                    "give the whole log from the start of the run (DeepSpeed prints its "
                                    "configuration on rank 0 when the engine starts)")
            time_s = batch / samples_per_s
            throughput.append(Iteration(number, int(m.group(1)), time_s, overflow or time_s < _UNTIMED_S))
            overflow = False
        elif (m := _TIMERS.search(message) or _TRAIN_BATCH.search(message)) is not None:
            ms = sum(float(g) for g in m.groups())
            timers.append(Iteration(number, len(timers) + 1, ms / 1000.0, overflow))
            overflow = False
        elif (m := _STAGE.match(message.strip())) is not None:
            stages.add(int(m.group(1)))
        elif (m := _OVERFLOW.search(message)) is not None:
            overflow = overflow or m.group(1) is None or int(m.group(1)) > 0
    iterations = pipe or throughput or timers
    source = ("the pipeline engine's 'iter time (s)'" if pipe else "ThroughputTimer's CurrSamplesPerSec" if throughput
              else "the wall-clock timers (fwd + bwd + step, or train_batch)")
    end = outcome(lines, iterations, name)
    if end.oom_line is None:
        notes.append(f"iteration time: median of {end.steady} of {len(iterations)} logged steps, from {source} "
                     "(warm-up and overflow-skipped steps left out)")
    pp = max(stages) + 1 if stages else 1
    dp = config.get("dp")
    fields = {key: config[key] for key in ("zero_stage", "global_batch", "micro_batch", "precision",
                                           "offload_optimizer", "offload_param", "recompute") if key in config}
    notes.append("DeepSpeed prints no tensor parallelism and no model shape: tp 1, the model from --model")
    return ParsedLog(name=name, format="deepspeed", world_size=None if dp is None else dp * pp, tp=1, pp=pp, vp=1,
                     cp=1, dp=dp, ep=1, etp=1, sp=False, **fields, iterations=tuple(iterations),
                     steady_iterations=end.steady, iteration_time_s=end.time_s,
                     peak_memory_bytes=None if peak_gib is None else peak_gib * GIB,
                     memory_kind=None if peak_gib is None else "max allocated", oom=end.oom_line is not None,
                     oom_line=end.oom_line, notes=tuple(notes))

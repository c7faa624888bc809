"""Which framework wrote a log (``--format auto``), and :func:`parse_log`, which reads any of them.

Signatures, first match wins:

* megatron-deepspeed: a Megatron signature (its argument dump, or an iteration line with
  ``elapsed time per iteration (ms):``) together with DeepSpeed's (``DeepSpeedEngine configuration:``)
  or Megatron-DeepSpeed's own iteration field ``consumed tokens:``;
* megatron: a Megatron signature alone;
* torchtitan: its logger's ``[titan]`` prefix, its mesh line, or its metrics line (``step: N  loss: ...
  tps: ...``);
* deepspeed: the engine's configuration dump, its ThroughputTimer line or the pipeline engine's
  ``steps: N loss: ... iter time (s):`` line.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.logs._deepspeed import DS_HEADER, PIPE_STEP, THROUGHPUT, parse_deepspeed
from service.logs._megatron import ARGS_HEADER, ITERATION, parse_megatron
from service.logs._record import FORMATS, Format, LogParseError, ParsedLog, is_format, log_lines
from service.logs._torchtitan import MESH, METRICS, TITAN_PREFIX, parse_torchtitan

AUTO = "auto"


def detect_format(lines: Sequence[str], name: str) -> Format:
    """The framework whose signature lines the log holds (see the module docstring)."""
    megatron = deepspeed = torchtitan = mds = False
    for line in lines:
        if ARGS_HEADER.search(line) or (ITERATION.search(line) and "elapsed time per iteration (ms)" in line):
            megatron = True
            mds = mds or "consumed tokens:" in line
        elif DS_HEADER.search(line) or THROUGHPUT.search(line) or PIPE_STEP.search(line):
            deepspeed = True
        elif TITAN_PREFIX.match(line) or MESH.search(line) or METRICS.search(line):
            torchtitan = True
    if megatron:
        return "megatron-deepspeed" if deepspeed or mds else "megatron"
    if torchtitan:
        return "torchtitan"
    if deepspeed:
        return "deepspeed"
    raise LogParseError(name, None, "no line of a known training log: no Megatron argument dump or iteration line, "
                        "no DeepSpeed configuration or throughput line, no torchtitan metrics line",
                        f"give the log of a run of one of: {', '.join(FORMATS)} (the job's output "
                        "from the start of the run)")


def parse_log(text: str, *, name: str, format: str = AUTO) -> ParsedLog:
    """Parse one training log; ``format`` is one of :data:`FORMATS` or ``"auto"`` (detected by
    signature lines). Raises :class:`LogParseError` (file, line, problem, fix) on anything that is
    not a complete log of a run: binary data, a log cut inside its configuration dump, no
    iteration lines, only warm-up iterations, a garbled iteration line."""
    if format != AUTO and not is_format(format):
        raise LogParseError(name, None, f"unknown log format {format!r}", f"use one of: {AUTO}, {', '.join(FORMATS)}")
    lines = log_lines(text, name)
    fmt: Format = format if is_format(format) else detect_format(lines, name)
    if fmt == "torchtitan":
        return parse_torchtitan(lines, name)
    if fmt == "deepspeed":
        return parse_deepspeed(lines, name)
    return parse_megatron(lines, name, fmt)

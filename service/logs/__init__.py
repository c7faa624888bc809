"""Training logs as measured runs: :func:`parse_log` reads a Megatron-LM, Megatron-DeepSpeed,
DeepSpeed or torchtitan log into a :class:`ParsedLog` (degrees, batch, ZeRO, recompute, precision,
model shape where printed, steady-state iteration time, peak memory, OOM verdict), and
:func:`run_request` turns it, with what the log does not print (cluster, model), into the body
``POST /v1/runs`` stores."""

from service.logs._detect import AUTO, detect_format, parse_log
from service.logs._record import FORMATS, Format, Iteration, LogParseError, ParsedLog, decode_log, warmup_lines
from service.logs._to_run import run_request

__all__ = [
    "AUTO",
    "FORMATS",
    "Format",
    "Iteration",
    "LogParseError",
    "ParsedLog",
    "decode_log",
    "detect_format",
    "parse_log",
    "run_request",
    "warmup_lines",
]

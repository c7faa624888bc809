"""torchtitan logs: its metrics line, its parallel dimensions and the configuration it prints.

Line formats, from pytorch/torchtitan (every line through ``tools/logging.py::init_logger``:
``[titan] 2025-06-01 12:00:00,000 - root - INFO - message``, colours from ``tools/utils.py::Color``):

* the metrics line, ``components/metrics.py::MetricsProcessor.log`` on step 1 and every
  ``log_freq`` steps: ``step: 10  loss:  7.8912  grad_norm:  1.2345  memory: 45.12GiB(47.49%)  tps:
  6,512  tflops: 377.12  mfu: 38.13%`` (``grad_norm`` and ``tflops`` since 2025, ``wps`` before
  ``tps`` in 2024; ``memory`` is the peak
  *reserved* memory; ``tps`` is tokens per second per device over the interval: the local tokens
  divided by the interval and by ``parallel_dims.non_data_parallel_size``);
* the mesh, ``distributed/parallel_dims.py::ParallelDims.build_mesh``: ``Building device mesh with
  parallelism: pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1, ep=1[, etp=1]`` (2025 on), before that
  ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]``;
* the batch, ``trainer.py::Trainer.__init__``: ``Trainer is initialized with local batch size 8,
  global batch size 64, gradient accumulation steps 1, sequence length 8192, ...`` (2025) or
  ``... with 65536 tokens per DP rank, 524288 tokens per train step, gradient accumulation steps 1,
  maximum context length 8192, ...`` (2026, after the config refactor #2386);
* the model, ``trainer.py``: ``Model llama3 8B size: 8,030,261,248 total parameters``, and in 2025
  ``Building llama3 8Bwith {json of the model args}``;
* ``distributed/activation_checkpoint.py``: ``Applied selective activation checkpointing to the
  model`` (``SelectiveAC``/``FullAC`` since #2386); ``distributed/fsdp.py``: ``Applied FSDP to the
  model`` / ``Applied HSDP ...`` / ``Applied CPU Offloading ...``; ``components/quantization``:
  ``Float8 training active ...`` / ``Converted Linear layers to MXFP8Linear``;
* with ``--debug.print_config``: ``Running with configs: {json}``.

The iteration time is global batch x sequence length / (tps x world size): tps averages the
devices, each a share of the tokens.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from search._model_presets import MODEL_PRESETS
from service.logs._record import (
    GIB,
    Iteration,
    LogParseError,
    ParsedLog,
    outcome,
)

TITAN_PREFIX = re.compile(r"\[titan\] ")
METRICS = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*(\S+)\s+(?:grad_norm:\s*\S+\s+)?memory:\s*([\d.]+)"
                     r"GiB\([\d.]+%\)\s+(?:tps|wps):\s*([\d,]+)\s+(?:tflops:\s*[\d,.]+\s+)?mfu:\s*\S+")
_METRICS_START = re.compile(r"(?<!validate )\bstep:\s*\d+\s+loss:")
MESH = re.compile(r"Building device mesh with parallelism: pp=(\d+), dp_replicate=(\d+), dp_shard=(\d+), "
                  r"cp=(\d+), tp=(\d+), ep=(\d+)(?:, etp=(\d+))?")
OLD_MESH = re.compile(r"Building \d-D device mesh with \[([^\]]*)\], \[([\d, ]*)\]")
_BATCH_2025 = re.compile(r"local batch size (\d+), global batch size (\d+), .*?sequence length (\d+)")
_BATCH_2026 = re.compile(r"with (\d+) tokens per DP rank, (\d+) tokens per train step, .*?maximum context length (\d+)")
_MODEL = re.compile(r"Model (\S+) (\S+) size: [\d,]+ total parameters")
_BUILDING = re.compile(r"Building (\S+) (\S+?) ?with \{")
_AC = re.compile(r"Applied (\w+) activation checkpointing to the model")
_CONFIGS = re.compile(r"Running with configs: \{")


def _json_block(lines: Sequence[str], start: int, name: str, what: str) -> dict[str, Any]:
    """The JSON object that starts on line ``start`` (0-based) at its first ``{`` and runs until the
    braces balance; :class:`LogParseError` when the log ends first or it is not JSON."""
    text = lines[start][lines[start].index("{"):]
    # What stands before torchtitan's "[titan]" (srun --label, torchrun --tee, a collector's timestamp)
    # stands before every line of the block too.
    prefix = lines[start][:max(0, lines[start].find("[titan]"))]
    depth, end = text.count("{") - text.count("}"), start
    parts = [text]
    while depth > 0:
        end += 1
        if end >= len(lines):
            raise LogParseError(name, len(lines), f"the log ends inside the {what} that starts at line {start + 1}",
                                "give the whole log from the start of the run")
        part = lines[end][len(prefix):]
        parts.append(part)
        depth += part.count("{") - part.count("}")
    try:
        data = json.loads("\n".join(parts))
    except json.JSONDecodeError as exc:
        raise LogParseError(name, start + exc.lineno, f"the {what} is not valid JSON ({exc.msg})",
                            "give the log as torchtitan wrote it") from None
    if not isinstance(data, dict):
        raise LogParseError(name, start + 1, f"the {what} is not a JSON object", "give the log as torchtitan wrote it")
    return data


def _find(data: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in nested dicts (configs move keys between sections)."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for value in data.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None


def _llama_ffn(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """torchtitan llama's SwiGLU width (``models/llama3/model/model.py::FeedForward``)."""
    hidden = int(2 * 4 * dim / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _shape(args: dict[str, Any]) -> dict[str, Any]:
    """ParsedLog shape fields from a llama-style model-args JSON (dim, n_layers, ...)."""
    ints = {key: args[key] for key in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of")
            if isinstance(args.get(key), int) and not isinstance(args[key], bool) and args[key] > 0}
    if not all(k in ints for k in ("dim", "n_layers", "n_heads", "vocab_size")):
        return {}
    out: dict[str, Any] = {"hidden": ints["dim"], "layers": ints["n_layers"], "heads": ints["n_heads"],
                           "kv_heads": ints.get("n_kv_heads", ints["n_heads"]), "vocab": ints["vocab_size"],
                           "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False,
                           "tied_embeddings": False}
    if "multiple_of" in ints:
        multiplier = args.get("ffn_dim_multiplier")
        out["ffn"] = _llama_ffn(ints["dim"], ints["multiple_of"],
                                float(multiplier) if isinstance(multiplier, int | float) else None)
    return out


def _metrics(line: str, number: int, name: str) -> tuple[Iteration, float] | None:
    """A metrics line's step with its tps (in ``time_s`` until the batch is known) and its memory in GiB."""
    if _METRICS_START.search(line) is None:
        return None
    m = METRICS.search(line)
    if m is None:
        raise LogParseError(name, number, "a metrics line without its 'memory: ...GiB(...%)  tps: N  ...  mfu: "
                            "P%' fields (the line is cut off or garbled)", "give the log as torchtitan wrote it; if "
                            "only its last line is cut off, remove that line")
    tps = int(m.group(4).replace(",", ""))
    if tps <= 0:
        raise LogParseError(name, number, "tps 0: the step did not advance", "give the log as torchtitan wrote it")
    loss = m.group(2)
    flagged = not math.isfinite(float(loss)) if re.fullmatch(r"[-+\w.]+", loss) else True
    return Iteration(number, int(m.group(1)), float(tps), flagged), float(m.group(3))


def parse_torchtitan(lines: Sequence[str], name: str) -> ParsedLog:
    """Parse a torchtitan training log."""
    fields: dict[str, Any] = {"zero_stage": 3, "recompute": "none", "precision": "bf16", "sp": False, "vp": 1}
    notes: list[str] = []
    rates: list[Iteration] = []
    peak_gib: float | None = None
    micro_tokens: int | None = None
    config: dict[str, Any] = {}
    for i, line in enumerate(lines):
        number = i + 1
        if (metrics := _metrics(line, number, name)) is not None:
            rates.append(metrics[0])
            peak_gib = max(peak_gib or 0.0, metrics[1])
        elif (m := MESH.search(line)) is not None:
            pp, dp_replicate, dp_shard, cp, tp, ep, etp = (int(g) if g else 1 for g in m.groups())
            fields.update(pp=pp, dp=dp_replicate * dp_shard, cp=cp, tp=tp, ep=ep, etp=etp,
                          world_size=pp * dp_replicate * dp_shard * cp * tp)
            if dp_shard == 1 and dp_replicate > 1:
                fields["zero_stage"] = 0  # DDP: replicas without sharding (one replica: ZeRO-3 over 1 rank, the same)
        elif (m := OLD_MESH.search(line)) is not None:
            sizes = dict(zip((n.strip(" '") for n in m.group(1).split(",")), (int(v) for v in m.group(2).split(",")),
                             strict=False))
            dp = sizes.get("dp_replicate", 1) * sizes.get("dp_shard", 1) * sizes.get("dp", 1)
            tp, pp, cp = sizes.get("tp", 1), sizes.get("pp", 1), sizes.get("cp", 1)
            fields.update(pp=pp, dp=dp, cp=cp, tp=tp, ep=1, etp=1, world_size=pp * dp * cp * tp)
            if sizes.get("dp_shard", 1) == 1 and sizes.get("dp", 1) == 1 and dp > 1:
                fields["zero_stage"] = 0
        elif (m := _BATCH_2025.search(line)) is not None:
            local, global_batch, seq = (int(g) for g in m.groups())
            fields.update(global_batch=global_batch, seq_len=seq, micro_batch=local)
        elif (m := _BATCH_2026.search(line)) is not None:
            per_rank, per_step, seq = (int(g) for g in m.groups())
            fields.update(global_batch=per_step // seq, seq_len=seq, micro_batch=per_rank // seq)
            micro_tokens = per_rank
        elif (m := _MODEL.search(line)) is not None:
            fields["model_name"] = f"{m.group(1)} {m.group(2)}"
        elif (m := _BUILDING.search(line)) is not None:
            fields.update(_shape(_json_block(lines, i, name, "model arguments")))
        elif _CONFIGS.search(line) is not None:
            config = _json_block(lines, i, name, "configuration")
        elif (m := _AC.search(line)) is not None:
            mode = m.group(1).lower()
            fields["recompute"] = ("full" if mode.startswith("full") else "selective" if mode.startswith("sel")
                                   else "none")
        elif "Applied DDP to the model" in line:
            fields["zero_stage"] = 0
        elif "Applied CPU Offloading to the model" in line:
            fields.update(offload_optimizer="cpu", offload_param="cpu")
        elif "Float8 training active" in line or "Swapped to Float8Linear layers" in line:
            fields["precision"] = "fp8"
        elif "Converted Linear layers to MXFP8Linear" in line:
            fields["precision"] = "mxfp8"
    # torchtitan's TP shards the norms and dropout over the sequence (SequenceParallel) unless
    # parallelism.enable_sequence_parallel is off (config/configs.py, default True).
    fields["sp"] = fields.get("tp", 1) > 1 and _find(config, "enable_sequence_parallel") is not False
    if config:
        if _find(config, "mixed_precision_param") == "float32" and fields["precision"] == "bf16":
            fields["precision"] = "fp32"
        micro = _find(config, "pipeline_parallel_microbatch_size")
        if isinstance(micro, int) and micro > 0 and fields.get("pp", 1) > 1:
            fields["micro_batch"] = micro
    elif fields.get("pp", 1) > 1 and micro_tokens is not None:
        fields["micro_batch"] = 1
        notes.append("pipeline micro-batch size not printed: torchtitan's default 1 assumed")
    if fields.get("model_name") and "layers" not in fields:
        family, flavor = str(fields["model_name"]).split(" ", 1)
        if f"{family}-{flavor}".lower() in MODEL_PRESETS:
            notes.append(f"model {fields['model_name']}: autopar preset {family}-{flavor.lower()}")
    iterations: list[Iteration] = []
    batch, tokens, world = fields.get("global_batch"), fields.get("seq_len"), fields.get("world_size")
    if batch is not None and tokens is not None and world is not None:
        iterations = [Iteration(r.line, r.step, batch * tokens / (r.time_s * world), r.flagged) for r in rates]
    elif rates:
        missing = [k for k, v in (("batch ('Trainer is initialized with ...')", batch), ("sequence length", tokens),
                                  ("device mesh ('Building device mesh with parallelism: ...')", world)) if v is None]
        raise LogParseError(name, rates[0].line, f"metrics lines, but the log does not print the {', '.join(missing)} "
                            "that turn tokens per second into seconds per step",
                            "give the whole log from the start of the run")
    end = outcome(lines, iterations, name)
    if end.oom_line is None:
        notes.append(f"iteration time: global batch x sequence length / (tps x world size), median of {end.steady} of "
                     f"{len(iterations)} logged steps (warm-up and NaN-loss steps left out)")
    if peak_gib is not None:
        notes.append("peak memory: torchtitan prints the peak reserved memory (allocator cache included)")
    return ParsedLog(name=name, format="torchtitan", **fields, iterations=tuple(iterations),
                     steady_iterations=end.steady, iteration_time_s=end.time_s,
                     peak_memory_bytes=None if peak_gib is None else peak_gib * GIB,
                     memory_kind=None if peak_gib is None else "max reserved", oom=end.oom_line is not None,
                     oom_line=end.oom_line, notes=tuple(notes))

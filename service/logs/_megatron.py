"""Megatron-LM logs (and Megatron-DeepSpeed's, which print the same lines).

Line formats, from the frameworks' source:

* the argument dump, ``megatron/training/arguments.py::_print_args`` (NVIDIA/Megatron-LM)::

      ------------------------ arguments ------------------------
        accumulate_allreduce_grads_in_fp32 .............. False
        ...
      -------------------- end of arguments ---------------------

  one ``'  {} {} {}'.format(name, '.' * (48 - len(name)), value)`` line per argparse dest, sorted;
* the degrees line of ``validate_args`` (same file): ``using world size: 8, data-parallel size: 2,
  context-parallel size: 1, hierarchical context-parallel sizes: None, tensor-model-parallel size: 4,
  pipeline-model-parallel size: 1``;
* the iteration line, ``megatron/training/training.py::training_log``: `` [2025-04-13 23:41:12]
  iteration       10/    1000 | consumed samples:          160 | elapsed time per iteration (ms):
  1147.6 | ... | global batch size:    16 | ... | number of skipped iterations:   0 | number of nan
  iterations:   0 |`` (lines whose global batch is not the run's, under ``--rampup-batch-size``,
  are not steady state; no timestamp before 2024; Megatron-DeepSpeed's ``megatron/training.py::
  training_log`` adds ``consumed tokens:``, ``samples per second:`` and ``TFLOPs:``). The time is the
  mean over the log interval;
* the memory line, ``megatron/training/utils.py::report_memory`` (printed after the first logged
  iterations): ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... |
  reserved: ... | max reserved: ...``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from service.logs._deepspeed import deepspeed_config
from service.logs._record import (
    DUMP_ENTRY,
    MIB,
    Format,
    Iteration,
    LogParseError,
    ParsedLog,
    Value,
    literal,
    outcome,
    positive_int,
    without_launcher_prefix,
)

ARGS_HEADER = re.compile(r"-{8,} arguments -{8,}")
ARGS_END = re.compile(r"-{8,} end of arguments -{8,}")
_PREFIXED_ENTRY = re.compile(r"\s([A-Za-z_]\w*) \.{2,}(?: (.*))?$")
"""An entry behind a prefix the launcher or a log collector added (a timestamp): found by its dots."""
ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(?:\d+|infinity)\s*\|")
_ELAPSED = re.compile(r"\| elapsed time per iteration \(ms\): ([^|]*)\|")
_SKIPPED = re.compile(r"\| number of skipped iterations:\s*(\d+)")
_NAN = re.compile(r"\| number of nan iterations:\s*(\d+)")
_BATCH = re.compile(r"\| global batch size:\s*(\d+)")
_MEMORY = re.compile(r"\(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| max allocated: ([\d.]+)")
_WORLD = re.compile(r"using world size: (\d+), data-parallel[ -]size: (\d+),(?: context-parallel size: (\d+),)?"
                    r".*?tensor-model-parallel size: (\d+), pipeline-model-parallel size: (\d+)")
_FIX_DUMP = ("give the whole log from the start of the run (Megatron prints its arguments before training), "
             "or cut it after the 'end of arguments' line")


def argument_dump(lines: Sequence[str], name: str) -> dict[str, tuple[Value, int]]:
    """The arguments Megatron printed (name -> (value, line)); empty when the log has no dump.
    A dump without its end line (a log cut inside it) raises :class:`LogParseError`. Lines of other
    ranks interleaved in the dump are passed over."""
    start = next((i for i, line in enumerate(lines) if ARGS_HEADER.search(line)), None)
    if start is None:
        return {}
    found: dict[str, tuple[Value, int]] = {}
    for i in range(start + 1, len(lines)):
        line = without_launcher_prefix(lines[i])
        if ARGS_END.search(line):
            if not found:
                raise LogParseError(name, i + 1, f"the argument dump that starts at line {start + 1} is empty",
                                    _FIX_DUMP)
            return found
        entry = DUMP_ENTRY.match(line) or _PREFIXED_ENTRY.search(line)
        if entry is not None:
            found[entry.group(1)] = (literal(entry.group(2) or ""), i + 1)
    raise LogParseError(name, len(lines), f"the log ends inside the argument dump that starts at line {start + 1} "
                        f"({len(found)} argument(s) read, no 'end of arguments' line)", _FIX_DUMP)


def _precision(a: dict[str, Value]) -> str:
    if a.get("fp4") not in (None, False):
        return "nvfp4"
    if a.get("fp8") not in (None, False):
        return "mxfp8" if a.get("fp8_recipe") == "mxfp8" else "fp8"
    if a.get("bf16") is True:
        return "bf16"
    return "fp16" if a.get("fp16") is True else "fp32"


def _recompute(a: dict[str, Value]) -> str:
    granularity = a.get("recompute_granularity")
    if granularity in ("full", "selective"):
        return str(granularity)
    if a.get("checkpoint_activations") is True:  # Megatron before 2022, Megatron-DeepSpeed
        return "full"
    return "selective" if a.get("recompute_activations") is True else "none"


def _position(a: dict[str, Value]) -> str | None:
    kind = str(a.get("position_embedding_type", "learned_absolute"))  # Megatron's default
    if "rope" in kind or "rotary" in kind:  # Megatron-DeepSpeed prints PositionEmbeddingType.rotary
        return "rope"
    if "alibi" in kind:
        return "alibi"
    return "learned" if "learned" in kind or "absolute" in kind else None


def _attention(a: dict[str, Value]) -> str:
    """Megatron's attention kernel: ``--attention-backend`` (megatron-core ``AttnBackend``: flash, fused,
    unfused, local, auto; auto lets Transformer Engine pick a fused kernel), else the FlashAttention
    switches (``--use-flash-attn``, Megatron-DeepSpeed's ``--use-flash-attn-v2``/``-triton``); none of
    them (Megatron before 2023): the unfused softmax."""
    backend = str(a.get("attention_backend", "")).rpartition(".")[2]
    if backend in ("flash", "fused"):
        return "flash"
    if backend in ("unfused", "local"):
        return "standard"
    if backend == "auto" and a.get("transformer_impl") == "transformer_engine":
        return "flash"
    flash = ("use_flash_attn", "use_flash_attn_v1", "use_flash_attn_v2", "use_flash_attn_triton")
    return "flash" if any(a.get(key) is True for key in flash) or (
        not backend and a.get("transformer_impl") == "transformer_engine") else "standard"


BEYOND_SHAPE = ("window", "sinks", "quick-geglu", "yarn")
"""What a Megatron argument dump can print of a model that ``ParsedLog``'s shape fields cannot carry."""


def _beyond_shape(a: dict[str, Value]) -> tuple[str, ...]:
    """The parts of :data:`BEYOND_SHAPE` the run's arguments set: ``--window-size`` (any value but
    None), ``--softmax-type`` other than vanilla, ``--quick-geglu``, ``--position-embedding-type yarn``
    (megatron-core 0.19 ``arguments.py``; GPT-OSS sets all four)."""
    window = a.get("window_size")
    return tuple(part for part, present in (
        ("window", window is not None and str(window) != "None"),
        ("sinks", str(a.get("softmax_type") or "vanilla") != "vanilla"),
        ("quick-geglu", a.get("quick_geglu") is True),
        ("yarn", "yarn" in str(a.get("position_embedding_type") or "")),
    ) if present)


def _dispatcher(a: dict[str, Value], ep: int) -> str:
    """The MoE token dispatcher as ``ParallelConfig.moe_dispatcher`` names it: ``flex-<backend>`` for
    ``--moe-token-dispatcher-type flex`` (backend deepep unless given; the deprecated
    ``--moe-enable-deepep`` is flex + deepep), ``alltoall``, or with expert parallelism any other name
    as printed (``allgather``, ``flex-ncclep``), which the run's config then refuses naming the field."""
    kind = str(a.get("moe_token_dispatcher_type") or "allgather")
    if a.get("moe_enable_deepep") is True:
        return "flex-deepep"
    if kind == "flex":
        return f"flex-{a.get('moe_flex_dispatcher_backend') or 'deepep'}"
    return kind if ep > 1 else "alltoall"  # without expert parallelism no token crosses a GPU


def _cuda_graphs(a: dict[str, Value]) -> str:
    """The CUDA graph as ``ParallelConfig.cuda_graphs`` names it: ``full-iteration`` for Megatron-Core's whole
    forward-backward graph, in every spelling the releases printed: ``cuda_graph_impl full_iteration``
    (megatron-core 0.18+, ``transformer_config.py:927-940`` at 458c8d0), ``cuda_graph_impl local`` with
    ``full_iteration`` in ``cuda_graph_scope`` (0.15-0.17, a string or ``[<CudaGraphScope.full_iteration: 1>]``)
    or ``enable_cuda_graph`` with that scope (0.14); ``none``; else the per-layer implementation's name
    (``local``, ``transformer_engine``; ``external_cuda_graph`` is the latter), which the run's config refuses
    (per-layer graphs are not costed)."""
    impl = str(a.get("cuda_graph_impl") or "none")
    if impl == "none" and a.get("enable_cuda_graph") is True:  # deprecated spelling of local
        impl = "local"
    if impl == "none" and a.get("external_cuda_graph") is True:  # deprecated spelling of transformer_engine
        impl = "transformer_engine"
    scope = set(re.findall(r"\w+", f"{a.get('cuda_graph_scope') or ''} {a.get('cuda_graph_modules') or ''}"))
    if impl == "full_iteration" or (impl == "local" and "full_iteration" in scope):
        return "full-iteration"
    return impl


def fields_from_arguments(args: dict[str, tuple[Value, int]]) -> dict[str, Any]:
    """ParsedLog fields from Megatron's argument names (None where the dump lacks them)."""
    a = {key: value for key, (value, _) in args.items()}
    if not a:
        return {}
    groups = positive_int(a.get("num_query_groups")) if a.get("group_query_attention") is True else None
    groups = groups or positive_int(a.get("num_key_value_heads"))  # Megatron-DeepSpeed's GQA argument
    normalization = str(a.get("normalization", "")).lower()
    zero = 1 if a.get("use_distributed_optimizer") is True else 0
    stage = a.get("zero_stage")
    if isinstance(stage, int) and a.get("deepspeed") is True:  # Megatron-DeepSpeed's --zero-stage
        zero = stage
    heads = positive_int(a.get("num_attention_heads"))
    experts = positive_int(a.get("num_experts"))
    tp = positive_int(a.get("tensor_model_parallel_size"))
    kv_channels = positive_int(a.get("kv_channels"))
    return {
        "world_size": positive_int(a.get("world_size")),
        "tp": tp,
        "pp": positive_int(a.get("pipeline_model_parallel_size")),
        "vp": positive_int(a.get("virtual_pipeline_model_parallel_size")) or 1,
        "cp": positive_int(a.get("context_parallel_size")) or 1,
        "dp": positive_int(a.get("data_parallel_size")),
        "ep": positive_int(a.get("expert_model_parallel_size")) or 1,
        # megatron-core: --expert-tensor-parallel-size defaults to the tensor-parallel size
        "etp": positive_int(a.get("expert_tensor_parallel_size")) or (tp if experts else 1),
        "sp": a.get("sequence_parallel") is True,
        "tp_comm_overlap": a.get("tp_comm_overlap") is True,
        "moe_dispatcher": _dispatcher(a, positive_int(a.get("expert_model_parallel_size")) or 1),
        "moe_a2a_overlap": a.get("overlap_moe_expert_parallel_comm") is True,
        "cuda_graphs": _cuda_graphs(a),
        "placement": "tp-cp-ep-pp-dp" if a.get("use_tp_pp_dp_mapping") is True else "tp-cp-ep-dp-pp",
        "global_batch": positive_int(a.get("global_batch_size")),
        "micro_batch": positive_int(a.get("micro_batch_size")),
        "zero_stage": zero,
        "recompute": _recompute(a),
        "precision": _precision(a),
        # Megatron-Core --grad-reduce-in-bf16 (a bf16 gradient buffer; search.TrainingSpec.grad_reduce_in_bf16).
        "grad_reduce_in_bf16": a.get("grad_reduce_in_bf16") is True,
        "seq_len": positive_int(a.get("seq_length")),
        "layers": positive_int(a.get("num_layers")),
        "hidden": positive_int(a.get("hidden_size")),
        "heads": heads,
        "kv_heads": groups or heads,
        "ffn": positive_int(a.get("ffn_hidden_size")),
        "vocab": positive_int(a.get("padded_vocab_size")) or positive_int(a.get("vocab_size")),
        "activation": "swiglu" if a.get("swiglu") is True else "gelu",
        "norm": "rmsnorm" if "rms" in normalization else "layernorm",
        "position_embedding": _position(a),
        "bias": a.get("add_bias_linear", True) is not False,
        "tied_embeddings": a.get("untie_embeddings_and_output_weights") is not True,
        "attention": _attention(a),
        "dropout": any(isinstance(v, float) and v > 0 for v in (a.get("hidden_dropout"), a.get("attention_dropout"))),
        "head_dim": kv_channels if kv_channels and heads and kv_channels * heads != a.get("hidden_size") else None,
        "experts": experts,
        "beyond_shape": _beyond_shape(a),
    }


def _iteration(line: str, number: int, name: str) -> Iteration | None:
    head = ITERATION.search(line)
    if head is None:
        return None
    elapsed = _ELAPSED.search(line)
    problem = "an iteration line without its 'elapsed time per iteration (ms): T |' field"
    if elapsed is not None:
        value = literal(elapsed.group(1))
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            skipped, nan = _SKIPPED.search(line), _NAN.search(line)
            flagged = bool((skipped and int(skipped.group(1))) or (nan and int(nan.group(1))))
            return Iteration(number, int(head.group(1)), value / 1000.0, flagged)
        problem = f"elapsed time per iteration {elapsed.group(1).strip()!r} is not a positive number of ms"
    raise LogParseError(name, number, f"{problem} (the line is cut off or garbled)",
                        "give the log as Megatron wrote it; if only its last line is cut off, remove that line")


def parse_megatron(lines: Sequence[str], name: str, fmt: Format = "megatron") -> ParsedLog:
    """Parse a Megatron-LM (or, with ``fmt="megatron-deepspeed"``, a Megatron-DeepSpeed) log."""
    fields = fields_from_arguments(argument_dump(lines, name))
    notes: list[str] = []
    if not fields:
        notes.append("no argument dump: degrees from the 'using world size' line, the model from --model")
    iterations: list[Iteration] = []
    peak_mib: float | None = None
    for number, line in enumerate(lines, 1):
        it = _iteration(line, number, name)
        if it is not None:
            batch = _BATCH.search(line)
            if batch is not None and fields.get("global_batch") is None:
                fields["global_batch"] = int(batch.group(1))
            elif batch is not None and int(batch.group(1)) != fields["global_batch"]:
                it = dataclasses.replace(it, flagged=True)  # --rampup-batch-size: not yet the run's batch
            iterations.append(it)
            continue
        memory = _MEMORY.search(line)
        if memory is not None:
            peak_mib = max(peak_mib or 0.0, float(memory.group(3)))
            continue
        world = _WORLD.search(line)
        if world is not None:
            for key, value in zip(("world_size", "dp", "cp", "tp", "pp"), world.groups(), strict=True):
                if value is not None and fields.get(key) is None:
                    fields[key] = int(value)
    if fmt == "megatron-deepspeed":
        ds = deepspeed_config(lines, name)
        if ds.get("zero_stage") is not None:
            fields["zero_stage"] = ds["zero_stage"]
        for key in ("offload_optimizer", "offload_param"):
            if ds.get(key) is not None:
                fields[key] = ds[key]
    end = outcome(lines, iterations, name)
    if end.oom_line is None:
        notes.append(f"iteration time: median of {end.steady} of {len(iterations)} logged iteration lines "
                     "(warm-up and lines with skipped or NaN iterations left out)")
    return ParsedLog(name=name, format=fmt, **fields, iterations=tuple(iterations), steady_iterations=end.steady,
                     iteration_time_s=end.time_s, peak_memory_bytes=None if peak_mib is None else peak_mib * MIB,
                     memory_kind=None if peak_mib is None else "max allocated", oom=end.oom_line is not None,
                     oom_line=end.oom_line, notes=tuple(notes))

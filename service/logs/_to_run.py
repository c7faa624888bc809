"""A parsed log as the body ``POST /v1/runs`` stores: the log's own figures, and what it does not
print (the cluster; the model when its shape is not in the log) from the caller.

The log wins where both speak and they agree; where they disagree (a ``--model`` preset with
other layers than the log's, a cluster of other size than the log's world) the import is refused,
naming the file, so a run is never stored under a configuration that did not run.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from search import CLUSTER_PRESETS, SpecError, UnknownPresetError, cluster_preset, model_preset
from service.logs._record import LogParseError, ParsedLog

FRAMEWORK = {"megatron": "megatron", "megatron-deepspeed": "megatron-deepspeed", "deepspeed": "deepspeed",
             "torchtitan": "fsdp"}
"""autopar's runtime for each log format (torchtitan trains with FSDP2)."""
_SHAPE_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
_MAX_NOTES = 2000
MIN_PEAK_BYTES = 1024
"""POST /v1/runs' floor for a peak: a log printing less (MaxMemAllocated=0.0GB off the GPU) has no peak."""


def _gpus_per_node(cluster: dict[str, Any]) -> int | None:
    if isinstance(cluster.get("preset"), str):
        try:
            return cluster_preset(cluster["preset"], 1).node.gpus_per_node
        except UnknownPresetError:
            raise SpecError("cluster.preset", f"unknown cluster preset {cluster['preset']!r}",
                            f"choose one of: {', '.join(CLUSTER_PRESETS)} (GET /v1/presets/clusters)") from None
    node = cluster.get("node")
    return node.get("gpus_per_node") if isinstance(node, dict) else None


def _cluster(log: ParsedLog, cluster: dict[str, Any]) -> dict[str, Any]:
    """``cluster`` with ``nodes`` from the log's world size when not given; a disagreement raises."""
    per_node = _gpus_per_node(cluster)
    world = log.world_size
    if world is None or not isinstance(per_node, int) or per_node < 1:
        return {"nodes": 1, **cluster}
    if "nodes" not in cluster:
        if world % per_node:
            raise LogParseError(log.name, None, f"the run used {world} GPUs, not a whole number of the cluster's "
                                f"{per_node}-GPU nodes", "give a cluster whose node holds the GPUs each node of the "
                                "run used (a custom node with that gpus_per_node)")
        return {**cluster, "nodes": max(1, world // per_node)}
    nodes = cluster["nodes"]
    if isinstance(nodes, int) and nodes * per_node != world:
        raise LogParseError(log.name, None, f"the run used {world} GPUs, the cluster has {nodes} node(s) of "
                            f"{per_node} GPUs", f"give nodes={world // per_node} (or leave nodes out: the log's "
                            "world size gives it)" if world % per_node == 0 else "give the cluster the run used")
    return cluster


def _derived_model(log: ParsedLog) -> dict[str, Any]:
    """The model the log describes: its printed shape, else a preset its name matches."""
    if log.experts is None and not log.beyond_shape and all(
            getattr(log, f) is not None for f in (*_SHAPE_FIELDS, "seq_len")):
        shape: dict[str, Any] = {"name": f"custom-{log.layers}x{log.hidden}", "seq_len": log.seq_len}
        for key in (*_SHAPE_FIELDS, "activation", "norm", "position_embedding", "bias", "tied_embeddings",
                    "dropout", "attention", "head_dim"):
            if getattr(log, key) is not None:
                shape[key] = getattr(log, key)
        return {"shape": shape}
    preset = _named_preset(log)
    if preset is not None:
        return {"preset": preset, **({"seq_len": log.seq_len} if log.seq_len else {})}
    what = ("a mixture of experts (its expert shape is not in the log)" if log.experts
            else f"a model with {_beyond(log.beyond_shape)}, which its printed shape does not carry"
            if log.beyond_shape else "no complete model shape")
    raise LogParseError(log.name, None, f"the log prints {what}", "give the model: --model PRESET|FILE.json "
                        "(API: the model field), as POST /v1/runs takes it")


def _given_model(log: ParsedLog, model: dict[str, Any]) -> dict[str, Any]:
    """``model`` with the log's sequence length; refused when its shape disagrees with the log's."""
    from pydantic import ValidationError

    from service.request import ModelIn, model_spec

    if log.seq_len is not None:
        if isinstance(model.get("shape"), dict):
            model = {**model, "shape": {**model["shape"], "seq_len": log.seq_len}}
        else:
            model = {**model, "seq_len": log.seq_len}
    try:
        spec = model_spec(ModelIn.model_validate(model))
    except ValidationError as exc:
        raise SpecError("model", f"not a model of POST /v1/runs ({exc.errors()[0]['msg']})",
                        "give a preset name, a ModelSpec JSON file or a model object") from None
    printed: dict[str, Any] = {key: getattr(log, key) for key in _SHAPE_FIELDS if getattr(log, key) is not None}
    named = _named_preset(log)
    if not printed and named is not None:  # torchtitan names its model ("llama3 8B") without the shape
        printed = {key: getattr(model_preset(named), key) for key in _SHAPE_FIELDS}
    differ = [f"{key} {value} (the model has {getattr(spec, key)})" for key, value in printed.items()
              if value != getattr(spec, key) and key != "vocab"]  # Megatron pads the vocabulary to 128 x tp
    has = {"window": spec.attention_window is not None, "sinks": spec.softmax_sinks,
           "quick-geglu": spec.activation == "quick-geglu", "yarn": spec.rope_yarn is not None}
    if log.format in ("megatron", "megatron-deepspeed") and log.layers is not None:  # an argument dump was read
        differ += [f"{_beyond((part,))} (the model has none)" if part in log.beyond_shape
                   else f"without {_beyond((part,))} (the model has one)"
                   for part, present in has.items() if present != (part in log.beyond_shape)]
    if differ:
        ran = f"{log.model_name}, " if log.model_name else ""
        raise LogParseError(log.name, None, f"the log's model is not {spec.name}: it has {ran}" + ", ".join(differ),
                            "give the model that ran (or leave the model out when the log prints its shape)")
    return model


_BEYOND_WORDS = {"window": "a sliding window (--window-size)", "sinks": "softmax sinks (--softmax-type)",
                 "quick-geglu": "a quick-GeLU GLU (--quick-geglu)",
                 "yarn": "YaRN RoPE (--position-embedding-type yarn)"}


def _beyond(parts: tuple[str, ...]) -> str:
    """The log's words for parts of a model beyond the printed shape."""
    return ", ".join(_BEYOND_WORDS[p] for p in parts)


def _named_preset(log: ParsedLog) -> str | None:
    """The autopar preset of the model the log names (torchtitan's ``llama3 8B`` is ``llama3-8b``)."""
    from search._model_presets import MODEL_PRESETS

    if log.model_name is None:
        return None
    family, _, flavor = log.model_name.partition(" ")
    preset = f"{family}-{flavor}".lower()
    return preset if preset in MODEL_PRESETS else None


def run_request(log: ParsedLog, *, cluster: dict[str, Any], model: dict[str, Any] | None = None,
                notes: str | None = None) -> dict[str, Any]:
    """The ``POST /v1/runs`` body of a parsed log.

    ``cluster`` is a request cluster (``{"preset": "dgx-h100"}`` or ``{"gpu": {...}, "node": {...}}``,
    optionally ``nodes`` and ``profile_id``); ``nodes`` defaults to the log's world size over the node's
    GPUs. ``model`` is a request model; without it the log's printed shape (Megatron) or its model's
    preset (torchtitan's ``llama3 8B``) is used. Raises :class:`LogParseError` naming the file when the
    log lacks what a run needs or disagrees with what was given."""
    if log.global_batch is None:
        raise LogParseError(log.name, None, "the log does not print the global batch size",
                            "give the whole log from the start of the run")
    if log.precision == "fp32":
        raise LogParseError(log.name, None, "the run trained in fp32, which autopar's cost model does not cover",
                            "import runs in bf16, fp16, fp8, mxfp8 or nvfp4")
    if log.cuda_graphs not in (None, "none", "full-iteration"):
        raise LogParseError(log.name, None, f"the run captured per-layer CUDA graphs (cuda_graph_impl "
                            f"{log.cuda_graphs}), which autopar's cost model does not cover: it costs none or one "
                            "full-iteration graph (docs/cost-model.md, Known limits)",
                            "import runs with cuda_graph_impl none or full_iteration")
    config: dict[str, Any] = {}
    for key in ("dp", "tp", "pp", "vp", "cp", "sp", "tp_comm_overlap", "placement", "ep", "etp", "micro_batch",
                "zero_stage", "recompute", "offload_optimizer", "offload_param"):
        if getattr(log, key) is not None:
            config[key] = getattr(log, key)
    # Megatron's dispatcher and EP overlap, written only where they differ from the defaults (an older
    # log without them, or a dense run, keeps the body it had).
    if log.moe_dispatcher not in (None, "alltoall"):
        config["moe_dispatcher"] = log.moe_dispatcher
    if log.moe_a2a_overlap:
        config["moe_a2a_overlap"] = True
    if log.cuda_graphs == "full-iteration":
        config["cuda_graphs"] = log.cuda_graphs
    said = [f"imported from {PurePath(log.name).name} ({log.format} log)", *log.notes]
    if log.recompute is None:
        config["recompute"] = "none"
        said.append("activation recomputation not printed: none assumed")
    if log.oom:
        said.append(f"CUDA out of memory at line {log.oom_line}")
    framework = FRAMEWORK[log.format]
    if log.format == "deepspeed" and (log.pp or 1) > 1:
        framework = "megatron-deepspeed"  # DeepSpeed's PipelineEngine is the pipeline Megatron-DeepSpeed runs
        said.append("DeepSpeed pipeline engine: costed as megatron-deepspeed")
    training: dict[str, Any] = {"global_batch": log.global_batch, **({"precision": log.precision} if log.precision
                                                                      else {})}
    if log.grad_reduce_in_bf16 and framework == "megatron" and log.precision != "fp16":
        training["grad_reduce_in_bf16"] = True  # fp16 reduces in fp16 whatever the flag says
    text = "; ".join([*([notes] if notes else []), *said])
    body: dict[str, Any] = {
        "model": _given_model(log, model) if model is not None else _derived_model(log),
        "cluster": _cluster(log, cluster),
        "training": training,
        "framework": framework,
        "config": config,
        "oom": log.oom,
        "notes": text if len(text) <= _MAX_NOTES else text[:_MAX_NOTES - 3] + "...",
    }
    if not log.oom:
        body["iteration_time_s"] = log.iteration_time_s
    if log.peak_memory_bytes is not None and log.peak_memory_bytes >= MIN_PEAK_BYTES:
        body["peak_memory_bytes"] = log.peak_memory_bytes
    return body

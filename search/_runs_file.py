"""Read published runs and feasibility claims in the calibration schema into specs.

Schema: ``benchmarks/data/README.md`` (runs.json, feasibility.json) and its 2024-2026 extensions
(``benchmarks/data/README_2024_2026.md``). Every field of both is listed in :data:`RUN_FIELDS` with
what the loader does with it: *modelled* (read into the specs), *checked* (must agree with what is
modelled), *informational* (provenance and published figures no prediction reads), or *refused when
set* to something the model cannot express (a mixture of experts, an FP8
recipe other than per-tensor scaling, ...). A record is never read as something it is not: such a
record, and one with a field the loader does not know, is refused with a reason naming the field
(:class:`RecordRefused`); :func:`read_runs` collects the refusals per row instead of stopping.

Fields a source left null take the documented default of the framework that ran it
(Megatron-LM argument defaults: micro-batch 1, vp 1, cp 1, no sequence parallelism, no
recomputation; bf16); :attr:`CalibrationRun.unknown` names the configuration fields so filled
whose value is open, for a caller that completes them otherwise (``benchmarks/_tuned.py``).
A null ``sp`` is open only under Megatron-LM: Megatron-DeepSpeed runs it off by default, and the
published runs on it (BigScience, February 2022) predate sequence parallelism (Korthikanti et
al., May 2022). A null ``cp`` is what ``num_gpus / (dp*tp*pp)`` leaves; a null ``micro_batch``
is ``global_batch / (dp*grad_accum)`` where ``grad_accum`` is given.

Megatron-Bridge rows (``software`` names Megatron-Bridge: its performance summary, whose tables
give the degrees but not the flags) take the performance recipes' rules for two flags, as general
rules of that runtime (:func:`megatron_bridge_defaults`), not per run: sequence parallelism is on
whenever tp > 1 (``scripts/performance/utils/utils.py`` ``WorkloadBaseConfig.sequence_parallel`` is
``tensor_model_parallel_size > 1``; every flat recipe in ``src/megatron/bridge/perf_recipes`` sets
``sequence_parallel = True`` with tp > 1 and False with tp = 1), and TP communication overlap
(``--tp-comm-overlap``, userbuffers) is on with tp > 1 except under NVFP4 (the base recipes'
``CommOverlapConfig(tp_comm_overlap=True)``; the perf recipes turn it off only for NVFP4:
``cfg.comm_overlap.tp_comm_overlap = False if precision == "nvfp4"``). Both read at
Megatron-Bridge 067f987df03b (2026-08-22). A third: the performance recipes reduce gradients in
bf16 (``grad_reduce_in_fp32 = False``, :attr:`TrainingSpec.grad_reduce_in_bf16`): set for every
performance run by ``src/megatron/bridge/perf_recipes/_common.py`` ``_benchmark_common`` and
``_perf_precision`` at 067f987df03b (recipes that set it back, Kimi K2, GLM-5 and Wan, are not in
the published tables), and by each model's ``scripts/performance/configs/*/*_llm_pretrain.yaml``
(``grad_reduce_in_fp32: false`` for Llama 3 8B/70B, Llama 3.1 405B, DeepSeek-V3, Qwen3-30B-A3B and
Qwen3-235B-A22B) in the 25.09 container's tree (f9aad1f31). A fourth: their Llama and Qwen3 rows
take the model provider's dropout, 0 (:data:`DROPOUT_FREE_PROVIDERS`: Llama, Qwen, GPT-OSS), not
Megatron-Core's 0.1.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from search._cluster_presets import (
    GPUS,
    NETWORK_EFFICIENCY,
    NODES,
    NVLINK_RING_EFFICIENCY,
    OMNI_PATH_NCCL_EFFICIENCY,
    gpu_preset,
)
from search._cluster_spec import ClusterSpec, NodeSpec
from search._errors import SpecError
from search._fp8_attention import check_fp8_attention
from search._model_spec import Activation, ModelSpec
from search._moe_spec import MoESpec
from search._parallel_spec import (
    MOE_DISPATCHERS,
    Framework,
    ParallelConfig,
    Precision,
    TrainingSpec,
    check_compatible,
)
from search._pipeline_layout import balanced, megatron_first_last
from search._runs_fields import (  # the loader's vocabulary; the public names re-exported in __all__
    _POSITION_EMBEDDINGS,
    CATEGORIES,
    CHECKED,
    GLU_DETAILS,
    INCONSISTENT,
    INFORMATIONAL,
    INVALID,
    MALFORMED,
    MEGATRON_FSDP,
    MODELLED,
    NODE_FOR_GPU,
    REFUSED_WHEN_SET,
    RUN_FIELDS,
    TUNABLE,
    UNKNOWN_DISPATCHER,
    RecordRefused,
    Refusal,
    _refusals,
    attention_window_of,
    recipe_precision,
)

_LINKS = re.compile(r"(\d+)\s*x\s*(?:[A-Za-z][\w-]*\s+){0,3}(\d+)\s*G(?:b/s|bps|bit/s)", re.IGNORECASE)
_AGGREGATE = re.compile(r"(\d+)\s*G(?:b/s|bps)\s+node-node", re.IGNORECASE)
_NVLINKS = re.compile(r"(\d+)\s+inter-GPU links", re.IGNORECASE)
NVLINK_BYTES_PER_S_PER_LINK = 25e9
"""NVLink 2, 3 and 4 all carry 25 GB/s per link per direction (V100: 6 links, A100: 12, H100: 18)."""
_RAM = re.compile(r"(\d+)\s*(GB|TB)\s+RAM", re.IGNORECASE)
@dataclass(frozen=True, slots=True)
class CalibrationRun:
    """One published run as specs plus what was measured."""

    id: str
    source: str
    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    iteration_time_s: float | None
    peak_memory_bytes: float | None
    ran: bool | None
    """True: the run ran (measured time or oom false); False: it OOMed; None: unknown."""
    unknown: tuple[str, ...] = ()
    """Fields of :data:`TUNABLE` the record left null with more than one possible value; ``config``
    holds the framework default for each (micro-batch 1, vp 1, no SP, no recomputation)."""


@dataclass(frozen=True, slots=True)
class RefusedRow:
    """A record of a runs file that could not be read, with every reason."""

    id: str
    path: str
    refusals: tuple[Refusal, ...]


@dataclass(frozen=True, slots=True)
class RunsFile:
    """What :func:`read_runs` read: the runs, and the records it refused."""

    runs: tuple[CalibrationRun, ...]
    refused: tuple[RefusedRow, ...]


def network_bytes_per_s(text: str | None) -> float | None:
    """Per-node network line rate from a free-text description, or None.

    ``"8x 200 Gb/s HDR"`` -> 200e9 B/s; ``"4x Omni-Path 100 Gb/s"`` -> 50e9;
    ``"1600 Gbps node-node"`` -> 200e9.
    """
    if not text:
        return None
    if m := _LINKS.search(text):
        return int(m.group(1)) * int(m.group(2)) * 1e9 / 8
    if m := _AGGREGATE.search(text):
        return int(m.group(1)) * 1e9 / 8
    return None


_OMNI_PATH = re.compile(r"omni-?path|\bOPA\b", re.IGNORECASE)


def network_efficiency(text: str | None) -> float:
    """NCCL bus bandwidth over line rate on the fabric a free-text description names: Omni-Path's
    measured :data:`OMNI_PATH_NCCL_EFFICIENCY` where it names Omni-Path, else InfiniBand's
    :data:`NETWORK_EFFICIENCY`."""
    return OMNI_PATH_NCCL_EFFICIENCY if text and _OMNI_PATH.search(text) else NETWORK_EFFICIENCY


def _node(cluster: dict[str, Any]) -> NodeSpec:
    gpu_id = cluster["gpu"]
    if gpu_id not in GPUS:
        raise SpecError("cluster.gpu", f"{gpu_id!r} is not a known GPU", f"use one of {', '.join(sorted(GPUS))}")
    base = NODES[NODE_FOR_GPU[gpu_id]]
    gpn = int(cluster.get("gpus_per_node") or base.gpus_per_node)
    gpn = min(gpn, int(cluster.get("num_gpus") or gpn))
    domain = base.nvlink_domain_gpus if base.nvlink_domain_gpus % gpn == 0 else 0
    node = replace(base, gpus_per_node=gpn, nvlink_domain_gpus=domain,
                   inter_node_bytes_per_s=base.inter_node_bytes_per_s * gpn / base.gpus_per_node)
    network = cluster.get("network") or ""
    if (net := network_bytes_per_s(network)) is not None:
        node = replace(node, inter_node_bytes_per_s=net * network_efficiency(network))
    if m := _NVLINKS.search(network):
        # Nodes without NVSwitch (e.g. 4 NVLinks per GPU): the per-GPU NVLink bandwidth.
        node = replace(node, intra_node_bytes_per_s=int(m.group(1)) * NVLINK_BYTES_PER_S_PER_LINK
                       * NVLINK_RING_EFFICIENCY)
    if m := _RAM.search(network):
        node = replace(node, cpu_memory_bytes=int(m.group(1)) * (2**30 if m.group(2).upper() == "GB" else 2**40))
    return node


MEGATRON_BRIDGE = "megatron-bridge"
"""How a record's ``software`` names Megatron-Bridge (case-insensitive)."""


DROPOUT_FREE_PROVIDERS = ("llama", "qwen", "gpt-oss")
"""Model families (by the record's model name) whose Megatron-Bridge provider sets hidden and
attention dropout to 0, where Megatron-Core's ``TransformerConfig`` default is 0.1: at dc805f5cf9e0,
``src/megatron/bridge/models/llama/llama_provider.py`` lines 41-42 and 108-109,
``qwen/qwen_provider.py`` lines 59-60 (Qwen2 and 2.5), 271-272 (Qwen3) and 378-379 (Qwen3 MoE),
``gpt_oss/gpt_oss_provider.py`` lines 54-55. DeepSeek's providers (``deepseek/deepseek_provider.py``,
``mla_provider.py``) set none there, so its rows keep the default."""


def megatron_bridge_defaults(rec: dict[str, Any], tp: int, precision: str) -> dict[str, bool]:
    """The flags a Megatron-Bridge performance row leaves null, as its recipes set them (module
    docstring): ``sp`` = tp > 1, ``tp_comm_overlap`` = tp > 1 and not NVFP4, ``grad_reduce_in_bf16``;
    ``dropout`` False for the model families whose provider sets it to 0 (:data:`DROPOUT_FREE_PROVIDERS`);
    and ``activation_offload_open`` for a Megatron-FSDP row (pp 1), whose recipe's activation offload
    is not printed. Empty for other rows and for flags the row states."""
    cfg = rec.get("config") or {}
    if MEGATRON_BRIDGE not in str(rec.get("software") or "").lower().replace(" ", "-") \
            or (cfg.get("framework") or "megatron") != "megatron":
        return {}
    out: dict[str, bool] = {}
    if cfg.get("sp") is None:
        out["sp"] = tp > 1
    if cfg.get("tp_comm_overlap") is None:
        # Megatron-Bridge turns the overlap off where SP is off (comm_overlap.py _get_model_comm_overlap_cfgs).
        out["tp_comm_overlap"] = tp > 1 and precision != "nvfp4" and cfg.get("sp") is not False
    if cfg.get("grad_reduce_in_bf16") is None and precision != "fp16":
        out["grad_reduce_in_bf16"] = True
    model = rec.get("model") or {}
    if model.get("dropout") is None and str(model.get("name") or "").lower().startswith(DROPOUT_FREE_PROVIDERS):
        out["dropout"] = False
    if cfg.get("fsdp") == MEGATRON_FSDP and int(cfg.get("pp") or 1) == 1:
        # Its Megatron-FSDP recipes may offload some layers' activations (cpu_offloading_num_layers: none
        # to 40 by GPU and precision), which the tables do not print: open unless an erratum gives the
        # recipe's value (benchmarks/data/errata.json).
        out["activation_offload_open"] = True
    return out


def _model(rec: dict[str, Any], pp: int, vp: int, dropout: bool) -> ModelSpec:
    m = rec
    h = int(m["hidden"])
    vocab = int(m["vocab"])
    ffn = int(m.get("ffn") or 4 * h)
    layers = m.get("layers")
    if layers is None:
        # Solve P = 12*l*h^2 + 13*l*h + V*h for l, then round to a multiple of pp*vp.
        estimate = (float(m["params"]) - vocab * h) / (12 * h * h + 13 * h)
        step = pp * vp
        layers = max(step, round(estimate / step) * step)
    # A detailed GLU (GPT-OSS's quick-GeLU one) is read as the function it names (search._runs_fields.GLU_DETAILS).
    activation = str(m.get("activation") or "gelu")
    activation = GLU_DETAILS.get((str(m.get("activation_detail")), activation), activation)
    llama_like = activation in ("swiglu", "quick-geglu")

    def given(key: str, default: Any) -> Any:
        """The record's value where it states one (files written by ``autopar runs export`` do),
        else what the published runs imply: SwiGLU models are Llama-like (RoPE, RMSNorm, no
        biases, untied head), GeLU models GPT-like."""
        value = m.get(key)
        return default if value is None else value

    position = given("position_embedding", "rope" if llama_like else "learned")
    return ModelSpec(
        name=str(m.get("name") or "model"),
        layers=int(layers),
        hidden=h,
        heads=int(m["heads"]),
        kv_heads=int(m.get("kv_heads") or m["heads"]),
        ffn=ffn,
        vocab=vocab,
        seq_len=int(m["seq_len"]),
        activation=cast(Activation, activation),
        tied_embeddings=bool(given("tied_embeddings", not llama_like)),
        position_embedding=_POSITION_EMBEDDINGS.get(position, position),
        bias=bool(given("bias", not llama_like)),
        norm=given("norm", "rmsnorm" if llama_like else "layernorm"),
        attention=m.get("attention") or "flash",
        dropout=bool(given("dropout", dropout)),
        qkv_bias=bool(given("qkv_bias", False)),
        qk_norm=bool(given("qk_norm", False)),
        parallel_residual=bool(given("parallel_residual", False)),
        norm_eps=float(given("norm_eps", 1e-5)),
        rope_theta=float(given("rope_theta", 10000.0)),
        rope_scaling_factor=m.get("rope_scaling_factor"),
        rotary_percent=float(given("rotary_percent", 1.0)),
        head_dim=None if m.get("mla") is not None else m.get("head_dim"),
        mla=m.get("mla"),
        moe=_moe(m.get("moe")),
        mtp_layers=int(m.get("mtp_layers") or 0),
        **_window(m.get("attention_window")),
        softmax_sinks=given("softmax_sinks", False),
        glu_linear_offset=given("glu_linear_offset", 0.0),
        glu_clamp=m.get("glu_clamp"),
        rope_yarn=m.get("rope_yarn"),
    )


def _window(value: Any) -> dict[str, Any]:
    """The record's ``attention_window`` as :class:`ModelSpec` fields (none without one)."""
    if value is None:
        return {}
    size, freq = attention_window_of(value)
    return {"attention_window": size, "window_skip_freq": freq}


def _moe(moe: dict[str, Any] | None) -> MoESpec | None:
    """The schema's MoE block as a :class:`MoESpec` (dense layers first; "force" in ``router`` means
    the benchmark forced an even token distribution)."""
    if moe is None:
        return None
    return MoESpec(
        experts=int(moe["experts"]), topk=int(moe["topk"]), expert_ffn=int(moe["expert_ffn"]),
        shared_experts=int(moe.get("shared_experts") or 0), shared_expert_ffn=int(moe.get("shared_expert_ffn") or 0),
        first_dense_layers=int(moe.get("dense_layers") or 0),
        capacity_factor=float(moe["capacity_factor"]) if moe.get("capacity_factor") is not None else None,
        pad_to_capacity=moe.get("pad_to_capacity", False),
        router_load="force-balanced" if "force" in str(moe.get("router") or "").lower() else "learned",
    )


def _inconsistent(record_id: str, field: str, problem: str) -> RecordRefused:
    return RecordRefused(record_id, [Refusal(field, problem, INCONSISTENT)])


def _run(rec: dict[str, Any]) -> CalibrationRun:
    """Specs of a record :func:`_refusals` passed (nulls take framework defaults)."""
    rid = str(rec["id"])
    cfg = rec["config"]
    cl = rec["cluster"]
    framework = cfg.get("framework") or "megatron"
    tp = int(cfg.get("tp") or 1)
    pp = int(cfg.get("pp") or 1)
    num_gpus = int(cl["num_gpus"])
    given_dp, given_cp = cfg.get("dp"), cfg.get("cp")
    cp = int(given_cp or (num_gpus // (int(given_dp) * tp * pp) if given_dp else 1))
    dp = int(given_dp or num_gpus // (tp * pp * cp))
    if dp * tp * pp * cp != num_gpus:
        raise _inconsistent(rid, "config.dp", f"dp*tp*pp*cp = {dp}*{tp}*{pp}*{cp} is not num_gpus = {num_gpus}")
    global_batch = int(cfg["global_batch"])
    micro_batch, grad_accum = cfg.get("micro_batch"), cfg.get("grad_accum")
    if micro_batch is None and grad_accum is not None:
        micro_batch, rest = divmod(global_batch, dp * int(grad_accum))
        if rest or not micro_batch:
            raise _inconsistent(rid, "config.grad_accum", f"{grad_accum} does not divide global_batch/dp = "
                                f"{global_batch}/{dp} into whole micro-batches")
    elif micro_batch is not None and grad_accum is not None and int(micro_batch) * dp * int(grad_accum) != global_batch:
        raise _inconsistent(rid, "config.grad_accum", f"micro_batch*dp*grad_accum = {micro_batch}*{dp}*{grad_accum} "
                            f"is not global_batch = {global_batch}")
    vp = int(cfg.get("vp") or 1)
    precision = recipe_precision(cfg.get("precision"), cfg.get("fp8_recipe")) or "bf16"
    recipe_flags = megatron_bridge_defaults(rec, tp, precision)
    first, last = cfg.get("first_stage_layers"), cfg.get("last_stage_layers")
    given_layers = cfg.get("stage_layers")
    uneven = bool(cfg.get("uneven_pipeline")) or first is not None or given_layers is not None
    unknown = tuple(name for name, is_open in (
        ("micro_batch", micro_batch is None), ("vp", cfg.get("vp") is None and pp > 1),
        ("sp", cfg.get("sp") is None and tp > 1 and framework == "megatron" and "sp" not in recipe_flags),
        ("recompute", cfg.get("recompute") is None),
        ("stage_layers", uneven and first is None and given_layers is None),
        ("etp", cfg.get("etp") is None and int(cfg.get("ep") or 1) > 1 and tp > 1),
        ("activation_offload_layers", recipe_flags.get("activation_offload_open", False)
         and cfg.get("activation_offload_layers") is None and cfg.get("recompute") in (None, "none")),
        ("moe_dispatcher", cfg.get("moe_dispatcher") == UNKNOWN_DISPATCHER and int(cfg.get("ep") or 1) > 1)) if is_open)
    # Dropout is not in the published schema: take the framework's default (Megatron-LM and
    # Megatron-DeepSpeed --hidden-dropout/--attention-dropout 0.1; MPT/llm-foundry 0), or for a
    # Megatron-Bridge row its model provider's (megatron_bridge_defaults).
    model = _model(rec["model"], 1 if uneven else pp, 1 if uneven else vp,
                   dropout=recipe_flags.get("dropout", framework in ("megatron", "megatron-deepspeed")))
    stage_layers = None
    if uneven:
        try:
            if given_layers is not None:
                stage_layers = tuple(int(n) for n in given_layers)
            elif first is not None:
                stage_layers = megatron_first_last(model.layers, pp, 1, int(first), int(last))
            else:
                stage_layers = balanced(model.layers, pp, 0.0)
        except (SpecError, ValueError) as exc:
            raise _inconsistent(rid, "config.first_stage_layers", f"no pipeline split of {model.layers} layers on "
                                f"pp={pp}: {exc}") from None
    node = _node(cl)
    num_nodes = max(1, math.ceil(num_gpus / node.gpus_per_node))
    cluster = ClusterSpec(gpu=gpu_preset(cl["gpu"]), node=node, num_nodes=num_nodes, name=str(cl.get("gpu")))
    config = ParallelConfig(
        dp=dp, tp=tp, pp=pp, vp=vp, cp=cp, sp=bool(cfg.get("sp") or recipe_flags.get("sp", False)),
        micro_batch=int(micro_batch or 1),
        zero_stage=int(cfg.get("zero_stage") or 0),
        offload_optimizer=cfg.get("offload_optimizer") or "none",
        offload_param=cfg.get("offload_param") or "none",
        recompute=cfg.get("recompute") or "none", stage_layers=stage_layers,
        tp_comm_overlap=bool(cfg.get("tp_comm_overlap") or recipe_flags.get("tp_comm_overlap", False)),
        ep=int(cfg.get("ep") or 1), etp=int(cfg.get("etp") or 1),
        activation_offload_layers=int(cfg.get("activation_offload_layers") or 0),
        # an unknown dispatcher (open: :data:`UNKNOWN_DISPATCHER`) starts at the default, as other open fields
        moe_dispatcher=cfg["moe_dispatcher"] if cfg.get("moe_dispatcher") in MOE_DISPATCHERS else "alltoall",
        moe_a2a_overlap=bool(cfg.get("moe_a2a_overlap")),
        cuda_graphs=cfg.get("cuda_graphs") or "none",
    )
    grad_reduce_in_bf16 = cfg.get("grad_reduce_in_bf16")
    if grad_reduce_in_bf16 is not None and not isinstance(grad_reduce_in_bf16, bool):
        raise _inconsistent(rid, "config.grad_reduce_in_bf16", f"{grad_reduce_in_bf16!r} is not true, false or null")
    training = TrainingSpec(global_batch=global_batch, precision=cast(Precision, precision),
                            framework=cast(Framework, framework),
                            grad_reduce_in_bf16=bool(grad_reduce_in_bf16 or recipe_flags.get("grad_reduce_in_bf16")),
                            fp8_attention=bool(cfg.get("fp8_attention")))
    check_compatible(model, cluster.world_size, config, training)
    check_fp8_attention(model, cluster.gpu, training)
    if cfg.get("expert_dp") is not None and int(cfg["expert_dp"]) != config.edp:
        raise _inconsistent(rid, "config.expert_dp", f"{cfg['expert_dp']} is not world / (etp*ep*pp) = {config.edp}")
    active = rec["model"].get("active_params")
    if model.moe is not None and active is not None and abs(model.active_params / float(active) - 1) > 0.01:
        raise _inconsistent(rid, "model.active_params", f"{active:.4g} is not the shape's {model.active_params:.4g} "
                            "active parameters (within 1 %)")
    meas = rec.get("measured") or {}
    oom = meas.get("oom")
    time_s = meas.get("iteration_time_s")
    ran = (not oom) if oom is not None else (True if time_s is not None else None)
    return CalibrationRun(
        id=rid, source=str(rec.get("source", "unknown")), model=model, cluster=cluster, config=config,
        training=training, iteration_time_s=time_s, peak_memory_bytes=meas.get("peak_memory_bytes_per_gpu"), ran=ran,
        unknown=unknown,
    )


def run_from_record(rec: dict[str, Any]) -> CalibrationRun:
    """Turn one ``runs.json`` record into specs (nulls take framework defaults).

    Raises :class:`RecordRefused` (a :class:`SpecError`) with every reason when the record holds
    what the cost model cannot express, is inconsistent, malformed or gives invalid specs.
    """
    if not isinstance(rec, dict):
        raise RecordRefused("?", [Refusal("record", f"is a {type(rec).__name__}, not an object", MALFORMED)])
    rid = str(rec.get("id", "?"))
    if refusals := _refusals(rec):
        raise RecordRefused(rid, refusals)
    try:
        return _run(rec)
    except RecordRefused:
        raise
    except SpecError as exc:
        raise RecordRefused(rid, [Refusal(exc.field, f"{exc.problem}; {exc.fix}", INVALID)]) from None
    except KeyError as exc:
        raise RecordRefused(rid, [Refusal(str(exc.args[0]), "is missing", MALFORMED)]) from None
    except (TypeError, ValueError) as exc:
        raise RecordRefused(rid, [Refusal("record", f"a value has the wrong type: {exc}", MALFORMED)]) from None


def json_records(path: str | Path) -> list[Any]:
    """The records of a ``runs.json``-schema file, as JSON (a file that is not a JSON list raises
    ``ValueError``, one that cannot be read ``OSError``)."""
    records = json.loads(Path(path).read_text())
    if not isinstance(records, list):
        raise ValueError(f"{path}: not a JSON list of run records (benchmarks/data/README.md)")
    return records


def load_runs(path: str | Path) -> list[CalibrationRun]:
    """All records of a ``runs.json``-schema file; the first record that cannot be read raises."""
    return [run_from_record(rec) for rec in json_records(path)]


def read_records(records: list[Any], path: str | Path) -> RunsFile:
    """Every record of a list read from ``path`` (named in each refusal): the runs read, and each
    record refused with its reasons."""
    runs, refused = [], []
    for rec in records:
        try:
            runs.append(run_from_record(rec))
        except RecordRefused as exc:
            refused.append(RefusedRow(exc.record_id, str(path), exc.refusals))
    return RunsFile(tuple(runs), tuple(refused))


def read_runs(path: str | Path) -> RunsFile:
    """Every record of a ``runs.json``-schema file: the runs read, and each record refused with its
    reasons (a file that is not a JSON list raises ``ValueError``, one that cannot be read ``OSError``)."""
    return read_records(json_records(path), path)


@dataclass(frozen=True, slots=True)
class FeasibilityClaim:
    """One published 'fits / does not fit' claim turned into specs."""

    id: str
    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec
    feasible: bool


_CLAIM_CONFIG = ("zero_stage", "offload_optimizer", "offload_param", "micro_batch", "recompute")
"""What a claim's configuration may give: the rest is data parallelism on every GPU, fp16, DeepSpeed."""


def load_feasibility(path: str | Path) -> list[FeasibilityClaim]:
    """Every (record, expect) pair of a ``feasibility.json``-schema file.

    The node keeps its whole host (CPU memory, NVMe, CPU) when the claim uses fewer GPUs
    than it has, as in the ZeRO-Offload single-GPU experiment on a DGX-2.
    """
    claims = []
    for rec in json.loads(Path(path).read_text()):
        cl = rec["cluster"]
        gpu = gpu_preset(cl["gpu"])
        base = NODES[NODE_FOR_GPU[cl["gpu"]]]
        gpn = int(cl.get("gpus_per_node") or base.gpus_per_node)
        node = replace(base, gpus_per_node=gpn,
                       inter_node_bytes_per_s=base.inter_node_bytes_per_s * gpn / base.gpus_per_node)
        num_gpus = int(cl["num_gpus"])
        cluster = ClusterSpec(gpu=gpu, node=node, num_nodes=max(1, num_gpus // gpn), name=str(cl.get("node")))
        m = rec["model"]
        model = _model({**m, "kv_heads": m.get("kv_heads"), "attention": m.get("attention") or "standard"}, 1, 1,
                       dropout=False)
        for i, exp in enumerate(rec["expect"]):
            cfg = exp["config"]
            if extra := sorted(k for k, v in cfg.items() if k not in _CLAIM_CONFIG and v is not None):
                raise SpecError(f"{rec['id']}.expect[{i}].config", f"{', '.join(extra)} not read by the claims loader",
                                f"give only {', '.join(_CLAIM_CONFIG)} (DeepSpeed data parallelism on every GPU)")
            mb = int(cfg.get("micro_batch") or 1)
            config = ParallelConfig(
                dp=num_gpus, micro_batch=mb, zero_stage=int(cfg.get("zero_stage") or 0),
                offload_optimizer=cfg.get("offload_optimizer") or "none",
                offload_param=cfg.get("offload_param") or "none", recompute=cfg.get("recompute") or "none",
            )
            training = TrainingSpec(global_batch=num_gpus * mb, precision="fp16", framework="deepspeed")
            claims.append(FeasibilityClaim(f"{rec['id']}#{i}", model, cluster, config, training, bool(exp["feasible"])))
    return claims


__all__ = ["CATEGORIES", "CHECKED", "INFORMATIONAL", "MODELLED", "NODE_FOR_GPU", "REFUSED_WHEN_SET", "RUN_FIELDS",
           "TUNABLE", "CalibrationRun", "FeasibilityClaim", "RecordRefused", "Refusal", "RefusedRow", "RunsFile",
           "load_feasibility", "load_runs", "network_bytes_per_s", "network_efficiency", "read_runs", "run_from_record"]

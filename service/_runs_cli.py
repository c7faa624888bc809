"""``autopar runs export``: the service's measured runs as a calibration file.

    autopar runs export [--out FILE] [--search-id ID] [--model NAME] [--json]

Writes the runs stored by ``POST /v1/runs`` as a JSON list in the calibration schema
(``benchmarks/data/README.md``, the ``runs.json`` schema, with ``README_2024_2026.md``'s extensions
for mixture-of-experts and latent-attention models and expert parallelism), so that
``python benchmarks/fidelity.py --data FILE`` measures the cost model against this cluster's own
runs and ``python benchmarks/fit_constants.py --data FILE`` can refit its constants on them.

The schema names a GPU by its ``hardware.json`` id and leaves some model fields to the loader
(``search._runs_file``: tied embeddings, position embedding, biases and norm follow the activation,
dropout the framework; a cluster is its GPU's preset node). A run is exported only when that loader
reads its record back into the specs the service predicted it with; every other run (a custom GPU,
a custom node, a model the schema cannot describe, a request this autopar cannot read) is skipped
and the reason printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search import (
    LAUNCH_ONLY_FIELDS,
    AutoparError,
    ClusterSpec,
    GPUSpec,
    ModelSpec,
    ParallelConfig,
    SpecError,
    TrainingSpec,
)
from search._cluster_presets import GPUS
from search._fabric import Fabric
from search._runs_file import NODE_FOR_GPU, run_from_record
from service._runs_import_cli import add_import_parser

if TYPE_CHECKING:
    from service.store import Database, Run

SOURCE = "autopar service"
DEFAULT_OUT = Path("autopar-runs.json")
CALIBRATION_GPU_IDS: tuple[str, ...] = tuple(gpu for gpu in GPUS if gpu in NODE_FOR_GPU)
"""GPUs the calibration loader can build a cluster for: ids of ``benchmarks/data/hardware.json``."""


def add_runs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``runs`` to ``autopar``'s subparsers."""
    r = sub.add_parser("runs", help="import training logs as measured runs, export them for calibration",
                       description="The measured runs stored by POST /v1/runs (AUTOPAR_DATABASE_URL, else the SQLite "
                       "file in AUTOPAR_DATA_DIR).")
    rsub = r.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    e = rsub.add_parser("export", help="write the runs in the calibration schema (benchmarks/fidelity.py --data)",
                        description="Write the stored runs as a JSON list in the calibration schema of "
                        "benchmarks/data/README.md, for benchmarks/fidelity.py --data FILE and "
                        "benchmarks/fit_constants.py --data FILE. Runs the schema cannot describe are skipped "
                        "with the reason; the summary goes to stderr.")
    e.add_argument("--out", type=Path, metavar="FILE", help=f"file to write (default: {DEFAULT_OUT})")
    e.add_argument("--search-id", metavar="ID", help="only the runs of this search")
    e.add_argument("--model", metavar="NAME", help="only the runs of this model preset or custom shape name")
    e.add_argument("--json", action="store_true", help="print the list to stdout instead of writing a file")
    r.set_defaults(handler=_runs)
    add_import_parser(rsub)


class Skip(Exception):
    """A run the calibration schema cannot carry; the message says why."""


@dataclass(frozen=True, slots=True)
class Specs:
    """What a stored run was predicted with (its hardware profile aside)."""

    model: ModelSpec
    cluster: ClusterSpec
    config: ParallelConfig
    training: TrainingSpec


@dataclass(frozen=True, slots=True)
class Export:
    """The records of the exported runs, and the runs skipped with their reasons."""

    records: list[dict[str, Any]]
    skipped: list[tuple[str, str]]
    """(run id, reason)"""
    other_versions: Counter[str]
    """Exported runs predicted at upload by another autopar version: version -> runs."""
    with_profile: int
    """Exported runs whose stored prediction used a hardware profile (the record has preset figures)."""


def stored_specs(request: dict[str, Any], db: Database) -> Specs:
    """The specs POST /v1/runs predicted a stored request with, without its hardware profile."""
    from service.request import ClusterIn, ModelIn, TrainingIn, cluster_spec, model_spec

    cluster_in = ClusterIn.model_validate(request["cluster"]).model_copy(update={"profile_id": None})
    training = TrainingIn.model_validate(request["training"])
    return Specs(model_spec(ModelIn.model_validate(request["model"])), cluster_spec(cluster_in, db)[0],
                 ParallelConfig(**request["config"]),
                 TrainingSpec(global_batch=training.global_batch, precision=training.precision,
                              framework=request["framework"], grad_reduce_in_bf16=training.grad_reduce_in_bf16))


def calibration_gpu_id(gpu_spec: GPUSpec) -> str | None:
    """The ``hardware.json`` id of a GPU: a preset's own id, else the preset with the same figures
    (a custom GPU copied from GET /v1/presets/clusters under another name); None when none has them."""
    if gpu_spec.name in CALIBRATION_GPU_IDS and GPUS[gpu_spec.name] == gpu_spec:
        return gpu_spec.name
    for gpu_id in CALIBRATION_GPU_IDS:
        if dataclasses.replace(gpu_spec, name=gpu_id) == GPUS[gpu_id]:
            return gpu_id
    return None


def _differences(prefix: str, ran: Any, loaded: Any, ignore: tuple[str, ...] = ()) -> list[str]:
    return [f"{prefix}.{f.name} (ran {getattr(ran, f.name)!r}, the loader reads {getattr(loaded, f.name)!r})"
            for f in dataclasses.fields(ran)
            if f.compare and f.name not in ignore and getattr(ran, f.name) != getattr(loaded, f.name)]


def costs_as_non_blocking(fabric: Fabric) -> bool:
    """Whether ``fabric`` costs every group as the calibration schema's one network figure does (no
    tier oversubscribed, no measured tier bandwidth, no in-network reduction): the schema has no
    fabric, so such a run exports exactly; another fabric's does not (it is skipped, saying so)."""
    return not fabric.sharp and all(t.oversubscription == 1.0 and t.bus_bytes_per_s is None for t in fabric.tiers)


def round_trip_differences(record: dict[str, Any], specs: Specs) -> list[str]:
    """What the calibration loader reads differently from what ran (names aside); empty when equal."""
    loaded = run_from_record(record)
    return [
        *_differences("model", specs.model, loaded.model, LAUNCH_ONLY_FIELDS),  # the schema needs no RoPE base
        *_differences("gpu", specs.cluster.gpu, loaded.cluster.gpu, ("name",)),
        *_differences("node", specs.cluster.node, loaded.cluster.node, ("name",)),
        *_differences("cluster", specs.cluster, loaded.cluster,
                      ("name", "gpu", "node", "profile") + (("fabric",) if costs_as_non_blocking(specs.cluster.fabric)
                                                            else ())),
        *_differences("config", specs.config, loaded.config),
        *_differences("training", specs.training, loaded.training),
    ]


def _when(moment: datetime) -> str:
    """ISO 8601 in UTC (SQLite hands back naive datetimes; they are UTC)."""
    return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)).isoformat(
        timespec="seconds")


def _locator(row: Run) -> str:
    where = f"autopar run {row.id}"
    if row.search_id is not None:
        return f"{where}, search {row.search_id} rank {row.rank}"
    return f"{where}, rank {row.rank} of a deleted search" if row.rank is not None else where


def model_extensions(m: ModelSpec) -> dict[str, Any]:
    """The model fields of README_2024_2026.md's schema extensions a run's shape needs: ``head_dim``
    when it is not hidden/heads, ``moe`` (with ``active_params``), ``mla``, ``mtp_layers``, the sliding
    window (``attention_window``), ``softmax_sinks`` and GPT-OSS's GLU and YaRN settings when the model has
    them; nothing for a plain dense model (its record stays in the original schema)."""
    out: dict[str, Any] = {}
    if m.dim_per_head * m.heads != m.hidden or m.mla is not None:
        out["head_dim"] = m.dim_per_head
    if m.moe is not None:
        e = m.moe
        out["active_params"] = m.active_params
        out["moe"] = {
            "experts": e.experts, "topk": e.topk, "expert_ffn": e.expert_ffn, "shared_experts": e.shared_experts,
            "shared_expert_ffn": e.shared_expert_ffn, "moe_layers": m.moe_layers, "dense_layers": m.dense_layers,
            # MoESpec's words: "learned" or "force-balanced" (the published records say it in a sentence)
            "router": e.router_load, "token_drop": e.capacity_factor is not None,
            # Beyond the schema (it says only whether tokens drop): the factor that ran.
            "capacity_factor": e.capacity_factor, "pad_to_capacity": e.pad_to_capacity,
        }
    if m.mla is not None:
        out["mla"] = {"q_lora_rank": m.mla.q_lora_rank, "kv_lora_rank": m.mla.kv_lora_rank,
                      "qk_head_dim": m.mla.qk_head_dim, "qk_rope_head_dim": m.mla.qk_rope_head_dim,
                      "v_head_dim": m.mla.v_head_dim}
    if m.mtp_layers:
        out["mtp_layers"] = m.mtp_layers
    if m.attention_window is not None:  # the loader's attention_window_of reads the pattern back
        pattern = "all layers" if m.window_skip_freq is None else f"window_attn_skip_freq={m.window_skip_freq}"
        out["attention_window"] = {"size": m.attention_window, "pattern": pattern}
    if m.softmax_sinks:
        out["softmax_sinks"] = True
    if m.activation == "quick-geglu":  # launch-only: what a relaunch of the record needs
        out["glu_linear_offset"], out["glu_clamp"] = m.glu_linear_offset, m.glu_clamp
    if m.rope_yarn is not None:
        out["rope_yarn"] = dataclasses.asdict(m.rope_yarn)
    return out


def run_record(row: Run, specs: Specs) -> dict[str, Any]:
    """One stored run in the calibration schema; raises :class:`Skip` when the schema cannot carry it."""
    m, c, t = specs.model, specs.config, specs.training
    gpu = specs.cluster.gpu
    gpu_id = calibration_gpu_id(gpu)
    if gpu_id is None:
        raise Skip(f"custom GPU {gpu.name!r} has the figures of no GPU of the calibration set (hardware.json ids: "
                   f"{', '.join(CALIBRATION_GPU_IDS)}), and the schema names a GPU only by its id")
    time_s = row.iteration_time_s
    profile = row.profile_id or row.request["cluster"].get("profile_id")
    notes = [row.request.get("notes") or "",
             f"measured run posted to autopar {row.autopar_version} on {_when(row.created_at)}"]
    if row.request["cluster"].get("preset") is None:
        notes.append(f"custom cluster {specs.cluster.name} with the figures of the {NODE_FOR_GPU[gpu_id]} preset")
    if profile:
        notes.append(f"hardware profile {profile}: the stored prediction used its measurements; this record has "
                     f"the {gpu_id} preset figures (the calibration schema has no profile)")
    return {
        "id": row.id,
        "source": SOURCE,
        "source_locator": _locator(row),
        "confidence": "measured",
        "model": {
            "name": m.name, "params": m.params, "layers": m.layers, "hidden": m.hidden, "heads": m.heads,
            "kv_heads": m.kv_heads, "ffn": m.ffn, "vocab": m.vocab, "seq_len": m.seq_len,
            "activation": m.activation, "attention": m.attention,
            # Beyond the schema (search/_runs_file.py derives them today): the shape as it ran.
            "tied_embeddings": m.tied_embeddings, "position_embedding": m.position_embedding, "bias": m.bias,
            "norm": m.norm, "dropout": m.dropout, "qkv_bias": m.qkv_bias, "qk_norm": m.qk_norm,
            "parallel_residual": m.parallel_residual, "norm_eps": m.norm_eps, "rope_theta": m.rope_theta,
            "rope_scaling_factor": m.rope_scaling_factor, "rotary_percent": m.rotary_percent,
            **model_extensions(m),
        },
        "cluster": {
            "gpu": gpu_id, "num_gpus": specs.cluster.world_size, "gpus_per_node": specs.cluster.node.gpus_per_node,
            # null, not free text: the loader parses link rates out of `network` and would replace the node's.
            "network": None,
            "peak_flop_per_s_per_gpu": gpu.fp16_flop_per_s if t.precision == "fp16"
            else (gpu.bf16_flop_per_s or gpu.fp16_flop_per_s),
        },
        "config": {
            "tp": c.tp, "pp": c.pp, "dp": c.dp, "cp": c.cp, "vp": c.vp, "sp": c.sp, "micro_batch": c.micro_batch,
            "global_batch": t.global_batch, "grad_accum": t.global_batch // (c.micro_batch * c.dp),
            "zero_stage": c.zero_stage, "offload_optimizer": c.offload_optimizer, "offload_param": c.offload_param,
            "recompute": c.recompute, "precision": t.precision, "framework": t.framework,
            **({"tp_comm_overlap": True} if c.tp_comm_overlap else {}),
            # Megatron-Core --grad-reduce-in-bf16 (search/_runs_file.py reads it; absent means fp32 main grads).
            **({"grad_reduce_in_bf16": True} if t.grad_reduce_in_bf16 else {}),
            # Transformer Engine's FP8 attention (search/_runs_fields.py reads it; absent means BF16 attention).
            **({"fp8_attention": True} if t.fp8_attention else {}),
            **({"uneven_pipeline": True, "stage_layers": list(c.stage_layers)} if c.stage_layers is not None else {}),
            # Megatron-Core --cpu-offloading-num-layers (search/_runs_file.py reads it; absent means none).
            **({"activation_offload_layers": c.activation_offload_layers} if c.activation_offload_layers else {}),
            **({"ep": c.ep, "etp": c.etp} if m.moe is not None or c.ep > 1 or c.etp > 1 else {}),
            # Megatron-Core's flex dispatcher and --overlap-moe-expert-parallel-comm (absent: alltoall, none).
            **({"moe_dispatcher": c.moe_dispatcher} if c.moe_dispatcher != "alltoall" else {}),
            **({"moe_a2a_overlap": True} if c.moe_a2a_overlap else {}),
            # Megatron-Core's full-iteration CUDA graph (search/_runs_fields.py reads it; absent means none).
            **({"cuda_graphs": c.cuda_graphs} if c.cuda_graphs != "none" else {}),
        },
        "measured": {
            "iteration_time_s": time_s,
            "iteration_time_kind": "measured",
            "iteration_time_how": "seconds per iteration as posted to POST /v1/runs" if time_s is not None else None,
            "tokens_per_s": t.global_batch * m.seq_len / time_s if time_s else None,
            "tflops_per_gpu": None, "flops_convention": None, "mfu": None, "hfu": None,
            "peak_memory_bytes_per_gpu": row.peak_memory_bytes,
            "oom": row.oom,
        },
        "notes": "; ".join(n for n in notes if n),
    }


def export_runs(db: Database, *, search_id: str | None = None, model: str | None = None) -> Export:
    """Every stored run matching the filters (as GET /v1/runs filters them), oldest first."""
    from pydantic import ValidationError

    from service._version import autopar_version
    from service.store import all_runs

    with db.session() as s:
        rows = all_runs(s, search_id=search_id, model=model)
    records: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    versions: Counter[str] = Counter()
    with_profile = 0
    for row in rows:
        try:
            try:
                specs = stored_specs(row.request, db)
            except (AutoparError, ValidationError, KeyError, TypeError, ValueError) as exc:
                raise Skip(f"its stored request does not resolve in this autopar ({exc})") from None
            record = run_record(row, specs)
            try:
                differences = round_trip_differences(record, specs)
            except (AutoparError, KeyError, TypeError, ValueError) as exc:
                raise Skip(f"the calibration loader cannot read its record ({exc})") from None
            if differences:
                raise Skip("the calibration schema cannot describe what ran: " + "; ".join(differences)
                           + " (search/_runs_file.py derives tied_embeddings, position_embedding, bias and norm "
                           "from the activation and dropout from the framework, and takes the node of the GPU's "
                           "preset)")
        except Skip as why:
            skipped.append((row.id, str(why)))
            continue
        records.append(record)
        if row.autopar_version != autopar_version():
            versions[row.autopar_version] += 1
        with_profile += bool(row.profile_id or row.request["cluster"].get("profile_id"))
    return Export(records, skipped, versions, with_profile)


def _write(path: Path, text: str) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise SpecError("--out", f"the folder {directory} does not exist", "create it, or choose another --out")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise SpecError("--out", f"cannot write {path}: {exc.strerror or exc}", "choose a writable --out") from None


def _summary(export: Export, target: str, args: argparse.Namespace) -> list[str]:
    n = len(export.records)
    lines = [f"exported {n} run{'s' * (n != 1)} {target} ({len(export.skipped)} skipped)"]
    if not export.records and not export.skipped:
        given = [f"{flag} {value}" for flag, value in (("--search-id", args.search_id), ("--model", args.model))
                 if value is not None]
        lines.append(f"no stored run matches {' and '.join(given)}" if given
                     else "no stored runs: post measured runs to POST /v1/runs first")
    lines += [f"skipped {run_id}: {why}" for run_id, why in export.skipped]
    if export.other_versions:
        from service._version import autopar_version

        count = sum(export.other_versions.values())
        lines.append(f"note: {count} exported run(s) were predicted at upload by autopar "
                     f"{', '.join(sorted(export.other_versions))}; fidelity.py predicts with this one "
                     f"({autopar_version()}), so its errors may differ from GET /v1/runs'")
    if export.with_profile:
        lines.append(f"note: {export.with_profile} exported run(s) were predicted with a hardware profile; the "
                     "calibration schema has preset figures only, so fidelity.py predicts them without it")
    return lines


def _runs(args: argparse.Namespace) -> int:
    from service._db_access import current_database

    if args.json and args.out is not None:
        raise SpecError("--out", "--json prints the runs to stdout and writes no file", "drop --out or --json")
    out: Path = args.out or DEFAULT_OUT
    _, db = current_database()
    try:
        export = export_runs(db, search_id=args.search_id, model=args.model)
    finally:
        db.dispose()
    text = json.dumps(export.records, indent=1) + "\n"
    if args.json:
        sys.stdout.write(text)
        target = "to stdout"
    else:
        _write(out, text)
        target = f"to {out}"
    for line in _summary(export, target, args):
        print(line, file=sys.stderr)
    return 0

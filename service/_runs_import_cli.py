"""``autopar runs import``: training logs stored as measured runs, as ``POST /v1/runs:import`` stores them.

    autopar runs import LOGFILE... --cluster NAME|FILE.json [--nodes N] [--model NAME|FILE.json|hf:PATH]
                        [--format auto|megatron|megatron-deepspeed|deepspeed|torchtitan] [--profile-id ID]
                        [--notes TEXT] [--dry-run] [--json]

Each file is read by :func:`service.logs.parse_log` and stored through the service's own storing
path (``service.runs.store_run``: predicted now, the prediction stored beside the
measurement), one transaction per file: a file that cannot be read stores nothing and its error
names the file and line; the others are still imported, and the exit status is 2 when any failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from search import AutoparError, SpecError
from service._cli_output import EXIT_BAD_INPUT, EXIT_OK, Column, print_table
from service._spec_files import HF_PREFIX, is_spec_file, load_cluster, read_json_object
from service.logs import AUTO, FORMATS, warmup_lines

if TYPE_CHECKING:
    from pydantic import BaseModel

    from search import GPUSpec, NodeSpec
    from service.runs import LogRun
    from service.store import Database

HELP = ("Megatron-LM: the argument dump (------ arguments ------), the 'using world size' line, the iteration lines "
        "(iteration N/ M | ... | elapsed time per iteration (ms): T | ...) and the [Rank R] (after N iterations) "
        "memory (MB) lines. Megatron-DeepSpeed: the same, with DeepSpeed's configuration dump (its ZeRO stage). "
        "DeepSpeed: the DeepSpeedEngine configuration dump, the ThroughputTimer line (CurrSamplesPerSec, "
        "MaxMemAllocated), the pipeline engine's 'steps: N loss: L iter time (s): T' line, or the fwd/bwd/step "
        "timers. torchtitan: the device-mesh and batch lines and the metrics line (step: N loss: L memory: "
        "G GiB(P%) tps: T ...). The iteration time is the median over the logged lines after the first "
        "max(2, 10%) (warm-up), without lines whose interval skipped an iteration or had a NaN loss. A 'CUDA out of "
        "memory' traceback makes an OOM run. What the log does not print comes from the options: the cluster "
        "always, the model when the log has no shape (DeepSpeed, torchtitan), the nodes when the log has no world "
        "size.")


def add_import_parser(rsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``import`` to ``autopar runs``' actions."""
    i = rsub.add_parser("import", help="store training logs as measured runs (Megatron, DeepSpeed, torchtitan)",
                        description="Parse training logs into measured runs and store them with their predictions, "
                        "as POST /v1/runs:import does. " + HELP,
                        epilog="exit status: 0 every log imported; 2 a log could not be read or stored (the others "
                        "are imported; a failing file stores nothing), or bad options")
    i.add_argument("logs", nargs="+", metavar="LOGFILE", help="training log of one run: the job's output "
                   "(Megatron prints the arguments on rank 0 and the iteration lines on the last pipeline rank)")
    i.add_argument("--format", default=AUTO, choices=(AUTO, *FORMATS),
                   help="the framework that wrote the logs (default: auto, detected by signature lines)")
    i.add_argument("--cluster", required=True, metavar="NAME|FILE.json",
                   help='cluster preset or JSON file {"gpu": {...}, "node": {...}} the runs ran on')
    i.add_argument("--nodes", type=int, metavar="N", help="number of nodes (default: the log's world size / the "
                   "node's GPUs)")
    i.add_argument("--model", metavar="NAME|FILE.json|hf:PATH", help="model preset, ModelSpec JSON file or hf:PATH "
                   "to a Hugging Face config.json (default: the shape the log prints; required for DeepSpeed logs)")
    i.add_argument("--profile-id", metavar="ID", help="the stored hardware profile of the machine the runs ran on")
    i.add_argument("--notes", metavar="TEXT", help="said before each run's notes")
    i.add_argument("--dry-run", action="store_true", help="parse and predict, store nothing (no database needed "
                   "without --profile-id)")
    i.add_argument("--json", action="store_true", help="print the imported runs as JSON")
    i.set_defaults(handler=import_logs)


def model_object(arg: str) -> dict[str, Any]:
    """``--model`` as the model object of POST /v1/runs."""
    if arg.startswith(HF_PREFIX):
        path = Path(arg.removeprefix(HF_PREFIX))
        path = path / "config.json" if path.is_dir() else path
        return {"hf_config": read_json_object("--model", str(path)), "name": path.parent.name or path.stem}
    if not is_spec_file(arg):
        return {"preset": arg}
    data = read_json_object("--model", arg)
    data.pop("params", None)  # derived from the shape (autopar presets --json prints it)
    return {"shape": {"name": Path(arg).stem, **data}}


def cluster_object(arg: str, nodes: int | None) -> dict[str, Any]:
    """``--cluster`` / ``--nodes`` as the cluster object of POST /v1/runs (no nodes: the log's)."""
    if nodes is not None and nodes < 1:
        raise SpecError("--nodes", f"{nodes} is not a node count", "give a positive number of nodes")
    if not is_spec_file(arg):
        out: dict[str, Any] = {"preset": arg}
    else:
        from service.request import GPUIn, NodeIn

        spec = load_cluster(arg, nodes)  # the file as predict and search read it, checked
        out = {"gpu": _request_fields(spec.gpu, GPUIn, f"--cluster {arg} gpu"),
               "node": _request_fields(spec.node, NodeIn, f"--cluster {arg} node")}
        nodes = nodes if nodes is not None else read_json_object("--cluster", arg).get("num_nodes")
    return out if nodes is None else {**out, "nodes": nodes}


def _request_fields(spec: GPUSpec | NodeSpec, schema: type[BaseModel], where: str) -> dict[str, Any]:
    """A GPU or node spec as the request object POST /v1/runs stores; a figure the request cannot carry
    (set apart from its default) is refused rather than dropped, so the stored prediction is the file's."""
    fields = {f.name: f for f in dataclasses.fields(spec) if f.init}
    lost = [name for name, f in fields.items() if name not in schema.model_fields
            and getattr(spec, name) != (f.default if f.default is not dataclasses.MISSING else None)]
    if lost:
        raise SpecError(where, f"sets {', '.join(lost)}, which a stored run cannot carry",
                        "leave it out of the file to import runs on this cluster")
    return {name: getattr(spec, name) for name in fields if name in schema.model_fields}


def _row(file: str, run: LogRun, out: dict[str, Any]) -> list[str]:
    log, c = run.log, out["config"]
    measured, predicted = out.get("iteration_time_s"), out.get("predicted_iteration_time_s")
    error = f"{predicted / measured - 1:+.1%}" if measured and predicted else "-"
    layout = " ".join(f"{k}{c[k]}" for k in ("tp", "pp", "vp", "cp", "ep", "dp") if c.get(k, 1) != 1 or k == "dp")
    peak = out.get("peak_memory_bytes")
    return [file, log.format, (out.get("id") or "dry run")[:8], out["model"].get("preset")
            or (out["model"].get("shape") or {}).get("name") or out["model"].get("name") or "hf", layout,
            f"{out['training']['global_batch']}/{c['micro_batch']}", "OOM" if out["oom"] else f"{measured:.3f}",
            "-" if predicted is None else f"{predicted:.3f}", error, "-" if peak is None else f"{peak / 2**30:.1f}",
            f"{log.steady_iterations}/{len(log.iterations)}"]


COLUMNS = (Column("log", left=True, keep=True), Column("format", left=True, priority=2),
           Column("run", left=True, keep=True), Column("model", left=True, priority=3),
           Column("degrees", left=True, priority=4), Column("batch/micro", priority=1),
           Column("measured s/it", keep=True), Column("predicted s/it", keep=True), Column("error", keep=True),
           Column("peak GiB", priority=5), Column("steady lines", priority=0))


def _dry(run: LogRun, db: Database | None) -> dict[str, Any]:
    """The run as POST /v1/runs would store it, with what the service would predict (nothing stored)."""
    from service._evaluate import evaluate
    from service.request import ClusterIn, ConfigIn, ModelIn, TrainingIn

    body = run.body
    ev = evaluate(cast(ModelIn, body.model), cast(ClusterIn, body.cluster), cast(TrainingIn, body.training),
                  body.framework or "megatron", cast(ConfigIn, body.config), cast("Database", db))
    return {**body.model_dump(mode="json", exclude_none=True), "id": None, "config": dataclasses.asdict(ev.config),
            "predicted_iteration_time_s": ev.prediction.iteration_time_s,
            "predicted_peak_memory_bytes": ev.prediction.peak_memory_bytes_per_gpu,
            "predicted_fits": ev.prediction.feasible}


def import_logs(args: argparse.Namespace) -> int:
    from service._db_access import current_database
    from service.runs import log_run, run_out, store_run
    from service.store import DEFAULT_TENANT

    cluster = cluster_object(args.cluster, args.nodes)
    model = model_object(args.model) if args.model is not None else None
    db: Database | None = None
    if not args.dry_run or args.profile_id is not None:
        _, db = current_database()
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    failed = 0
    try:
        for file in args.logs:
            try:
                try:
                    data = Path(file).read_bytes()
                except OSError as exc:
                    raise SpecError(file, f"cannot read the log ({exc.strerror or exc})",
                                    "check the path and its permissions") from None
                run = log_run(data, file, format=args.format, cluster=cluster, model=model, notes=args.notes,
                              profile_id=args.profile_id)
                if args.dry_run:
                    out = _dry(run, db)
                else:
                    db = cast("Database", db)  # opened above unless a dry run
                    with db.session() as s:
                        row = store_run(s, run.body, db, DEFAULT_TENANT)
                        out = run_out(row)
                    out["created_at"] = out["created_at"].isoformat()
            except AutoparError as err:
                where = "" if isinstance(err, AutoparError) and str(err).startswith(file) else f"{file}: "
                print(f"autopar: error: {where}{err}", file=sys.stderr)
                failed += 1
                continue
            rows.append(_row(file, run, out))
            records.append({"file": file, "format": run.log.format, "iterations": len(run.log.iterations),
                            "steady_iterations": run.log.steady_iterations, "memory_kind": run.log.memory_kind,
                            "run": out})
    finally:
        if db is not None:
            db.dispose()
    if args.json:
        json.dump(records, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif rows:
        title = "runs parsed (dry run: nothing stored)" if args.dry_run else "runs imported"
        print_table(title, COLUMNS, rows)
        print(f"iteration time: median of the steady lines (the first max(2, 10%) logged lines are warm-up: "
              f"{warmup_lines(10)} of 10, {warmup_lines(50)} of 50)")
    if failed:
        print(f"autopar: {failed} of {len(args.logs)} log(s) not imported (nothing stored from them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK

"""``autopar search``: the ranked configurations of a model on a cluster, or the best per cluster size.

    autopar search --model gpt3-175b --cluster dgx-a100-80gb --nodes 128 --global-batch 1536 --top 10
    autopar search --model llama3-70b --cluster dgx-h100 --nodes 8:256 --global-batch 512 --tokens 300e9
    autopar search --model llama3-70b --cluster dgx-b200 --nodes 18 --global-batch 512 --versus gb200-nvl72

One node count prints the top-k table, the counts, the best configuration's explanation, the
Pareto front's size and the hints; ``--json`` prints :meth:`SearchResult.to_dict`. A range
``A:B`` searches A, 2A, 4A, ... nodes (and B) and prints the best configuration of each, with
the time to train and the GPU-hours of a ``--tokens`` budget. ``--versus`` answers the same question
on other clusters of as many GPUs (another node type, NVL72 racks, or the fabric oversubscribed ``@R:1``)
and prints the answers side by side, with where each group of the best configuration runs (NVLink or
the fabric tier it spans). No feasible configuration is said
plainly and exits 3 (at every size of a range); user errors raise :class:`search.SpecError` (exit 2).
Tables leave out their least important columns to fit the terminal (``--wide`` keeps them all).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

from search import ClusterSpec, HardwareProfile, SpecError, apply_profile, staleness
from search._parallel_spec import FRAMEWORKS, PRECISIONS
from service._calibrate_cli import CALIBRATION_HELP, cli_calibration
from service._cli_output import EXIT_CODES_HELP, EXIT_INFEASIBLE, EXIT_OK, Column, print_table
from service._emit_cli import add_emit_arguments, emit
from service._spec_files import add_model_arguments, load_cluster, model_argument

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from search._search_result import RankedConfig, SearchResult

OBJECTIVES = ("throughput", "cost", "pareto")
"""``search._search.OBJECTIVES``, spelled out so that ``autopar predict`` does not import optuna."""
LARGE_SWEEP = 10_000
"""Sweeps of at least this many steps show a progress bar even when stderr is not a terminal."""
SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0


def add_search_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``search`` subcommand to ``autopar``'s subparsers."""
    p = sub.add_parser("search", help="rank the parallel configurations of a model on a cluster",
                       description="Rank the parallel configurations of a model on a cluster (top-k by the "
                                   "objective), or the best one per cluster size with --nodes A:B.",
                       epilog=EXIT_CODES_HELP)
    add_model_arguments(p)
    p.add_argument("--cluster", required=True, metavar="NAME|FILE.json", help="cluster preset or JSON file")
    p.add_argument("--nodes", metavar="N|A:B",
                   help="node count, or a range A:B searched at A, 2A, 4A, ... and B (default: 1, or the file's)")
    p.add_argument("--global-batch", type=int, required=True, metavar="N", help="sequences per optimizer step")
    p.add_argument("--precision", default="bf16", choices=PRECISIONS, help="mixed precision (default: bf16)")
    p.add_argument("--framework", default="any", choices=(*FRAMEWORKS, "any"),
                   help="runtime the configurations must run on; any = all four (default: any)")
    p.add_argument("--grad-reduce-in-bf16", action="store_true",
                   help="Megatron-Core --grad-reduce-in-bf16 (Megatron-Bridge's performance recipes set it): "
                        "accumulate and reduce the gradients in bf16, a 2-byte gradient buffer and half the "
                        "data-parallel traffic; ranks Megatron-Core configurations only; not with fp16")
    p.add_argument("--objective", default="throughput", choices=OBJECTIVES,
                   help="max tokens/s, min $ per token (needs --price-per-gpu-hour), or the Pareto front of "
                        "tokens/s vs memory headroom (default: throughput)")
    p.add_argument("--price-per-gpu-hour", type=float, metavar="USD", help="price of a GPU-hour (--objective cost)")
    p.add_argument("--top", type=int, default=10, metavar="K", help="configurations to list (default: 10)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="sampler seed (default: 0)")
    p.add_argument("--trials", type=int, metavar="N",
                   help="sample N trials with TPE/NSGA-II instead of sweeping the space exhaustively")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop sampling after this long")
    p.add_argument("--storage", metavar="URL", help="shared Optuna storage (with --study-name) for several workers")
    p.add_argument("--study-name", metavar="NAME", help="study in --storage; a range appends -<nodes>n")
    p.add_argument("--profile", metavar="FILE.json", help="measured hardware profile: replaces preset speeds")
    p.add_argument("--profile-max-age-days", type=float, default=90.0, metavar="DAYS",
                   help="warn when the profile is older than this (default: 90)")
    p.add_argument("--tokens", type=float, metavar="T", help="training token budget (e.g. 300e9): time to train")
    p.add_argument("--min-headroom", metavar="GiB|PCT%", type=_headroom,
                   help="GPU memory every ranked configuration must leave free: GiB (e.g. 4) or a share of the "
                        "GPU (e.g. 10%%)")
    p.add_argument("--allow-tiling", action="store_true",
                   help="also rank DeepSpeed ZeRO-3 with memory-centric tiling (the model code must use "
                        "deepspeed.zero.TiledLinear)")
    p.add_argument("--host-safety-factor", type=float, default=1.0, metavar="F",
                   help="keep this multiple of the offloaded states' host memory free (default: 1; 1.5 is "
                        "DeepSpeed's estimator margin)")
    p.add_argument("--allow-untested", action="store_true",
                   help="also rank combinations the runtime accepts but has never been shown to run")
    p.add_argument("--versus", action="append", metavar="NAME|FILE.json[@R:1]",
                   help="answer the same question on another cluster with as many GPUs, side by side (repeatable): "
                        "a preset or file; @R:1 oversubscribes its fabric's leaf uplinks R:1 (e.g. --versus "
                        "gb200-nvl72, --versus dgx-b200@2:1)")
    p.add_argument("--calibration", metavar="ID", help=CALIBRATION_HELP)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--wide", action="store_true", help="every table column, however wide the terminal")
    add_emit_arguments(p)
    p.set_defaults(handler=run_search)


def parse_nodes(text: str | None) -> list[int] | None:
    """``None`` (the cluster's default), ``[N]`` for ``"N"``, or A, 2A, 4A, ... (< B) and B for ``"A:B"``."""
    if text is None:
        return None
    fix = "give a node count such as 8, or a range A:B such as 8:256 (positive integers, A <= B)"
    parts = text.split(":")
    if len(parts) > 2 or not all(part.strip().isdigit() for part in parts):
        raise SpecError("--nodes", f"{text!r} is not N or A:B", fix)
    low, high = int(parts[0]), int(parts[-1])
    if low < 1 or high < low:
        raise SpecError("--nodes", f"{text!r} is not a range of positive node counts", fix)
    counts = [low]
    while counts[-1] * 2 < high:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == high else [*counts, high]


def _check(args: argparse.Namespace) -> None:
    positive = {"--global-batch": args.global_batch, "--top": args.top, "--trials": args.trials,
                "--timeout": args.timeout, "--tokens": args.tokens, "--price-per-gpu-hour": args.price_per_gpu_hour}
    for option, value in positive.items():
        if value is not None and not value > 0:
            raise SpecError(option, f"{value!r} is not positive", "give a number > 0")
    if args.objective == "cost" and args.price_per_gpu_hour is None:
        raise SpecError("--price-per-gpu-hour", "--objective cost needs the price of a GPU-hour",
                        "add --price-per-gpu-hour USD, e.g. --price-per-gpu-hour 2.5")
    if (args.storage is None) != (args.study_name is None):
        raise SpecError("--study-name", "--storage and --study-name go together",
                        "give both to share a study between workers, or neither")


class _ProfileNotes:
    """Applies one measured profile to each cluster, warning on stderr once per distinct note."""

    def __init__(self, path: str | None, max_age_days: float) -> None:
        self.profile, self.max_age_days = None if path is None else HardwareProfile.load(path), max_age_days
        self.said: set[str] = set()

    def apply(self, cluster: ClusterSpec) -> ClusterSpec:
        if self.profile is None:
            return cluster
        stale = staleness(self.profile, cluster, self.max_age_days)
        cluster, fallbacks = apply_profile(cluster, self.profile)
        for note in (*(f"stale profile: {why}" for why in stale), *fallbacks):
            if note not in self.said:
                self.said.add(note)
                print(f"autopar: warning: {note}", file=sys.stderr)
        return cluster


class _ProgressBar:
    """A rich progress bar on stderr, started at the first report of a sweep worth watching."""

    def __init__(self, label: str, quiet: bool) -> None:
        self.label, self.quiet, self.tty = label, quiet, sys.stderr.isatty()
        self.bar: tuple[Progress, TaskID] | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if not self.tty and (self.quiet or total < LARGE_SWEEP):
                return
            from rich.console import Console
            from rich.progress import Progress

            progress = Progress(console=Console(file=sys.stderr), transient=self.tty)
            progress.start()
            self.bar = progress, progress.add_task(self.label, total=total)
        progress, task = self.bar
        progress.update(task, completed=done, total=total)

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.bar is not None:
            self.bar[0].stop()


def _headroom(text: str) -> tuple[float, bool]:
    """``"4"`` / ``"4GiB"`` -> (4.0, False); ``"10%"`` -> (10.0, True)."""
    raw = text.strip()
    percent = raw.endswith("%")
    number = raw.rstrip("%").removesuffix("GiB").removesuffix("gib").strip()
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB or a percentage (e.g. 4 or 10%)") from None
    if not 0 <= value < (100 if percent else 4096):
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: give 0-4096 GiB or 0-99 %")
    return value, percent


def _headroom_bytes(headroom: tuple[float, bool] | None, gpu_memory_bytes: float) -> float:
    if headroom is None:
        return 0.0
    value, percent = headroom
    return value / 100.0 * gpu_memory_bytes if percent else value * 2**30


def run_search(args: argparse.Namespace) -> int:
    """The ``search`` subcommand."""
    _check(args)
    node_counts = parse_nodes(args.nodes)
    if args.emit and node_counts is not None and len(node_counts) > 1:
        raise SpecError("--emit", "a node range has no single configuration to launch", "give one --nodes N")
    model = model_argument(args)
    profile = _ProfileNotes(args.profile, args.profile_max_age_days)
    import optuna

    from search._search import search

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line per search

    clusters: list[Any] = []
    chosen = cli_calibration(args.calibration, load_cluster(args.cluster, None).name)  # issue 16

    def one(num_nodes: int | None, study_name: str | None) -> SearchResult:
        cluster = profile.apply(load_cluster(args.cluster, num_nodes))
        clusters.append(cluster)
        label = f"{model.name} on {cluster.num_nodes} x {cluster.name}"
        with _ProgressBar(label, quiet=args.json) as bar:
            return search(model, chosen.apply(cluster), args.global_batch, precision=args.precision,
                          framework=args.framework, grad_reduce_in_bf16=args.grad_reduce_in_bf16,
                          objective=args.objective, top_k=args.top, seed=args.seed, n_trials=args.trials,
                          timeout_s=args.timeout, price_per_gpu_hour=args.price_per_gpu_hour,
                          storage=args.storage, study_name=study_name, progress=bar,
                          min_headroom_bytes=_headroom_bytes(args.min_headroom, cluster.gpu.memory_bytes),
                          allow_untested=args.allow_untested, calibration=chosen.calibration,
                          allow_tiling=args.allow_tiling, host_safety_factor=args.host_safety_factor)

    if args.versus:
        if node_counts is not None and len(node_counts) > 1:
            raise SpecError("--versus", "compares clusters at one size, not a node range", "give one --nodes N")
        if args.emit:
            raise SpecError("--emit", "--versus answers on several clusters", "emit from one cluster without --versus")
        base = profile.apply(load_cluster(args.cluster, None if node_counts is None else node_counts[0]))
        contenders = [(args.cluster, base), *((spec, versus_cluster(spec, base.world_size)) for spec in args.versus)]
        answers = []
        for spec, cluster in contenders:
            with _ProgressBar(f"{model.name} on {spec}", quiet=args.json) as bar:
                answers.append((spec, cluster, search(
                    model, cluster, args.global_batch, precision=args.precision, framework=args.framework,
                    grad_reduce_in_bf16=args.grad_reduce_in_bf16, objective=args.objective, top_k=args.top,
                    seed=args.seed, n_trials=args.trials,
                    timeout_s=args.timeout, price_per_gpu_hour=args.price_per_gpu_hour, progress=bar,
                    min_headroom_bytes=_headroom_bytes(args.min_headroom, cluster.gpu.memory_bytes),
                    allow_untested=args.allow_untested, allow_tiling=args.allow_tiling,
                    host_safety_factor=args.host_safety_factor)))
        if args.json:
            print(json.dumps([_versus_row(spec, cluster, r) for spec, cluster, r in answers], indent=2))
        else:
            _print_versus(answers, args)
        return EXIT_OK if any(r.best is not None for _, _, r in answers) else EXIT_INFEASIBLE
    if node_counts is None or len(node_counts) == 1:
        result = one(None if node_counts is None else node_counts[0], args.study_name)
        if args.json:
            print(json.dumps({**result.to_dict(), "calibration": chosen.out()}, indent=2))
        else:
            _print_result(result, args)
            print(chosen.note())
        if result.best is None:
            return EXIT_INFEASIBLE
        if args.emit:
            return emit(result, args, clusters[-1], model)
        return EXIT_OK
    results = [one(n, None if args.study_name is None else f"{args.study_name}-{n}n") for n in node_counts]
    if args.json:
        print(json.dumps([_what_if_row(r, args.tokens) for r in results], indent=2))
    else:
        _print_what_if(results, args)
    return EXIT_OK if any(r.best is not None for r in results) else EXIT_INFEASIBLE


def _time_to_train(best: RankedConfig, world_size: int, tokens: float | None) -> tuple[float | None, float | None]:
    """(days, GPU-hours) to train on ``tokens`` at the best configuration's speed."""
    if tokens is None:
        return None, None
    seconds = tokens / best.prediction.tokens_per_s
    return seconds / SECONDS_PER_DAY, world_size * seconds / SECONDS_PER_HOUR


def _what_if_row(result: SearchResult, tokens: float | None) -> dict[str, Any]:
    best = result.best
    days, gpu_hours = (None, None) if best is None else _time_to_train(best, result.world_size, tokens)
    return {"num_nodes": result.num_nodes, "world_size": result.world_size,
            "best": None if best is None else best.to_dict(), "time_to_train_days": days, "gpu_hours": gpu_hours,
            "n_valid": result.n_valid, "n_feasible": result.n_feasible, "elapsed_s": result.elapsed_s}


# Ranked-table columns when the terminal is narrow: the layout and the answer always show; the rest
# leave lowest priority first (a layout column that reads the same on every row before any other).
_KEEP = frozenset({"rank", "framework", "dp", "tp", "pp", "mb", "zero", "tokens/s", "peak GiB", "$/M tokens"})
_PRIORITY = {"bottleneck": 0, "iteration s": 1, "MFU": 2, "recompute": 3, "sp": 4, "vp": 5, "cp": 6,
             "offload (opt/param)": 7, "ep": 8, "etp": 8, "order": 8}
_LEFT = frozenset({"framework", "offload (opt/param)", "recompute", "bottleneck"})


def _ranked_columns(columns: list[str], rows: list[list[str]]) -> list[Column]:
    uniform = {c for i, c in enumerate(columns) if c in ("vp", "cp", "sp", "offload (opt/param)", "ep", "etp")
               and len({row[i] for row in rows}) <= 1}
    return [Column(c, left=c in _LEFT, keep=c in _KEEP, priority=-1 if c in uniform else _PRIORITY.get(c, 9))
            for c in columns]


def _precision(args: argparse.Namespace) -> str:
    """The precision as the tables' header lines say it, with the gradient reduction when it is bf16."""
    return f"{args.precision}{' (gradients reduced in bf16)' if args.grad_reduce_in_bf16 else ''}"


def _print_result(result: SearchResult, args: argparse.Namespace) -> None:
    from search._search import describe

    print(f"{result.model} on {result.num_nodes} x {result.cluster} = {result.world_size} GPUs, global batch "
          f"{args.global_batch}, {_precision(args)}, framework {result.framework}, objective {result.objective}")
    cost = result.objective == "cost"
    moe = any(r.config.ep > 1 or r.config.etp > 1 for r in result.top)
    placed = any(r.config.placement != "tp-cp-ep-dp-pp" for r in result.top)  # Megatron's --use-tp-pp-dp-mapping
    columns = ["rank", "framework", "dp", "tp", "pp", "vp", "cp", *(["ep", "etp"] * moe), *(["order"] * placed),
               "sp", "mb", "zero",
               "offload (opt/param)", "recompute", "tokens/s", "MFU", "iteration s", "peak GiB", "bottleneck",
               *(["$/M tokens"] * cost)]
    rows = []
    for r in result.top:
        c, p = r.config, r.prediction
        rows.append([str(r.rank), r.framework, str(c.dp), str(c.tp), str(c.pp), str(c.vp), str(c.cp),
                     *([str(c.ep), str(c.etp)] * moe), *([c.placement] * placed),
                     ("yes+ovl" if c.tp_comm_overlap else "yes") if c.sp else "-", str(c.micro_batch),
                     str(c.zero_stage),
                     "-" if c.offload_optimizer == c.offload_param == "none" else
                     f"{c.offload_optimizer}/{c.offload_param}", c.recompute,
                     ("~" if r.equivalent_to_best else "") + f"{p.tokens_per_s:,.0f}", f"{p.mfu:.1%}",
                     f"{p.iteration_time_s:.3f}",
                     f"{p.peak_memory_bytes_per_gpu / 2**30:.1f}", p.bottleneck, *([f"{r.score:.3f}"] * cost)])
    how = "sampled" if not result.exhaustive else (
        "exhaustive" if result.n_evaluated >= result.n_feasible else "exhaustive, the rest pruned by bound")
    counts = (f"space {result.space_size:,}, valid {result.n_valid:,}, feasible {result.n_feasible:,}, "
              f"timed {result.n_evaluated:,} ({how}), {result.elapsed_s:.2f} s, study {result.study_name}")
    best = result.best
    if best is None:
        checked = f"{result.n_valid:,} valid" if result.exhaustive else (
            f"{result.n_evaluated:,} sampled (of {result.n_valid:,} valid)")
        if result.n_valid == 0:
            print(f"NO VALID CONFIGURATION: no parallel configuration of {result.model} on {result.num_nodes} x "
                  f"{result.cluster} ({result.world_size} GPUs) with global batch {args.global_batch} passes the "
                  f"rules of {result.framework} (the hints say which rule and what would make some valid).")
        else:
            print(f"NO FEASIBLE CONFIGURATION: none of the {checked} configurations of "
                  f"{result.model} fits in the memory of {result.num_nodes} x {result.cluster} "
                  f"({result.world_size} GPUs) with global batch {args.global_batch} ({result.framework}).")
        print(counts)
        for hint in result.hints or ("no hint: try more nodes, a smaller global batch or another framework",):
            print(f"hint: {hint}")
        return
    print_table(f"top {len(result.top)} by {result.objective}", _ranked_columns(columns, rows), rows,
                wide=args.wide)
    print(counts)
    print(f"best: {describe(best.framework, best.config)}: {best.explanation}")
    if best.note:
        print(f"note: {best.note} (~ marks the configurations within the model's error of the best)")
    print(f"Pareto front (tokens/s vs memory headroom): {len(result.pareto)} configuration"
          f"{'' if len(result.pareto) == 1 else 's'}")
    days, gpu_hours = _time_to_train(best, result.world_size, args.tokens)
    if days is not None and gpu_hours is not None:
        print(f"time to train {_tokens(args.tokens)} tokens: {days:,.1f} days, {gpu_hours:,.0f} GPU-hours")
    for hint in result.hints:
        print(f"hint: {hint}")


def _tokens(n: float) -> str:
    return next((f"{n / scale:,.4g}{unit}" for scale, unit in ((1e12, "T"), (1e9, "B")) if n >= scale), f"{n:,.0f}")


def _number(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _print_what_if(results: list[SearchResult], args: argparse.Namespace) -> None:
    from search._search import describe

    print(f"{results[0].model} on {results[0].cluster}, {results[0].num_nodes} to {results[-1].num_nodes} nodes, "
          f"global batch {args.global_batch}, {_precision(args)}, framework {args.framework}, "
          f"objective {args.objective}")
    budget = args.tokens is not None
    price = budget and args.price_per_gpu_hour is not None
    columns = ["nodes", "GPUs", "best configuration", "tokens/s", "MFU",
               *(["days", "GPU-hours"] * budget), *(["cost $"] * price), "feasible/evaluated", "seconds"]
    rows = []
    for result in results:
        best = result.best
        cells = [str(result.num_nodes), str(result.world_size)]
        if best is None:
            cells += ["NO FEASIBLE CONFIGURATION", "-", "-"]
            days = gpu_hours = None
        else:
            p = best.prediction
            cells += [describe(best.framework, best.config), f"{p.tokens_per_s:,.0f}", f"{p.mfu:.1%}"]
            days, gpu_hours = _time_to_train(best, result.world_size, args.tokens)
        if budget:
            cells += [_number(days, ",.1f"), _number(gpu_hours, ",.0f")]
        if price:
            cells.append(_number(None if gpu_hours is None else gpu_hours * args.price_per_gpu_hour, ",.0f"))
        cells += [f"{result.n_feasible:,}/{result.n_evaluated:,}", f"{result.elapsed_s:.2f}"]
        rows.append(cells)
    title = "best configuration per cluster size" + (f" ({_tokens(args.tokens)} training tokens)" if budget else "")
    keep = {"nodes", "GPUs", "best configuration", "tokens/s", "days", "cost $"}
    order = {"seconds": 0, "feasible/evaluated": 1, "MFU": 2, "GPU-hours": 3}
    print_table(title, [Column(c, left=c == "best configuration", keep=c in keep, priority=order.get(c, 9))
                        for c in columns], rows, wide=args.wide)
    if any(result.best is None for result in results):
        print("NO FEASIBLE CONFIGURATION at some sizes: run `autopar search --nodes N` at one of them for the hints")


def versus_cluster(spec: str, world_size: int) -> ClusterSpec:
    """The cluster of a ``--versus`` value, ``NAME|FILE.json[@R:1]``, with ``world_size`` GPUs; ``@R:1``
    sets the oversubscription of the uplinks above its fabric's leaves."""
    name, _, ratio = spec.partition("@")
    one = load_cluster(name, 1)
    gpn = one.node.gpus_per_node
    if world_size % gpn:
        raise SpecError("--versus", f"{name}'s {gpn}-GPU nodes do not make {world_size} GPUs",
                        f"give --nodes so that the GPU count is a multiple of {gpn}")
    cluster = dataclasses.replace(one, num_nodes=world_size // gpn)
    if not ratio:
        return cluster
    number = ratio.removesuffix(":1")
    try:
        value = float(number)
    except ValueError:
        raise SpecError("--versus", f"{ratio!r} is not an oversubscription R:1", "write e.g. dgx-b200@2:1") from None
    tiers = cluster.fabric.tiers
    if len(tiers) < 2:
        raise SpecError("--versus", f"{name}'s fabric is one tier: no uplinks to oversubscribe",
                        "use a preset with leaves and a spine (dgx-h100, dgx-b200, gb200-nvl72, ...)")
    spine = dataclasses.replace(tiers[1], oversubscription=value)
    fabric = dataclasses.replace(cluster.fabric, tiers=(tiers[0], spine, *tiers[2:]))
    return dataclasses.replace(cluster, fabric=fabric, name=f"{cluster.name}@{value:g}:1")


def _where(cluster: ClusterSpec, result: SearchResult) -> dict[str, str]:
    from search._placement import landing

    best = result.best
    if best is None:
        return {}
    node = cluster.node
    return landing(best.config, node.gpus_per_node, node.nvlink_domain, cluster.fabric)


def _versus_row(spec: str, cluster: ClusterSpec, result: SearchResult) -> dict[str, Any]:
    best = result.best
    return {"cluster": spec, "name": cluster.name, "num_nodes": result.num_nodes, "world_size": result.world_size,
            "nvlink_domain_gpus": cluster.node.nvlink_domain, "fabric": cluster.fabric.describe(),
            "best": None if best is None else best.to_dict(), "groups": _where(cluster, result),
            "n_valid": result.n_valid, "n_feasible": result.n_feasible, "elapsed_s": result.elapsed_s}


def _print_versus(answers: list[tuple[str, ClusterSpec, SearchResult]], args: argparse.Namespace) -> None:
    from search._search import describe

    first = answers[0][2]
    print(f"{first.model} on {first.world_size} GPUs, global batch {args.global_batch}, {_precision(args)}, "
          f"framework {args.framework}, objective {args.objective}: the same question on {len(answers)} clusters")
    columns = ["cluster", "nodes", "NVLink domain", "fabric", "best configuration", "groups on", "tokens/s", "MFU",
               "iteration s", "peak GiB", "feasible/evaluated"]
    rows = []
    for spec, cluster, result in answers:
        best = result.best
        cells = [spec, str(result.num_nodes), str(cluster.node.nvlink_domain), cluster.fabric.describe()]
        if best is None:
            cells += ["NO FEASIBLE CONFIGURATION", "-", "-", "-", "-", "-"]
        else:
            p = best.prediction
            where = ", ".join(f"{g} {tier}" for g, tier in _where(cluster, result).items()) or "-"
            cells += [describe(best.framework, best.config), where, f"{p.tokens_per_s:,.0f}", f"{p.mfu:.1%}",
                      f"{p.iteration_time_s:.3f}", f"{p.peak_memory_bytes_per_gpu / 2**30:.1f}"]
        cells.append(f"{result.n_feasible:,}/{result.n_evaluated:,}")
        rows.append(cells)
    keep = {"cluster", "best configuration", "groups on", "tokens/s"}
    order = {"feasible/evaluated": 0, "peak GiB": 1, "iteration s": 2, "fabric": 3, "NVLink domain": 4, "MFU": 5}
    print_table("best configuration per cluster", [Column(c, left=c in ("cluster", "fabric", "best configuration",
                                                                      "groups on"), keep=c in keep,
                                                         priority=order.get(c, 9)) for c in columns],
                rows, wide=args.wide)
    if any(result.best is None for _, _, result in answers):
        print("NO FEASIBLE CONFIGURATION on some clusters: search each alone for the hints")

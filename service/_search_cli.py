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
from search._parallel_spec import CUDA_GRAPHS, FRAMEWORKS, MOE_DISPATCHERS, PRECISIONS
from service._calibrate_cli import CALIBRATION_HELP, cli_calibration
from service._cli_output import EXIT_CODES_HELP, EXIT_INFEASIBLE, EXIT_OK
from service._emit_cli import add_emit_arguments, emit
from service._search_tables import print_result, print_versus, print_what_if, versus_row, what_if_row
from service._spec_files import add_model_arguments, load_cluster, model_argument

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from search._search_result import SearchResult

OBJECTIVES = ("throughput", "cost", "pareto")
"""``search._search.OBJECTIVES``, spelled out so that ``autopar predict`` does not import optuna."""
LARGE_SWEEP = 10_000
"""Sweeps of at least this many steps show a progress bar even when stderr is not a terminal."""


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
    p.add_argument("--moe-dispatcher", default="alltoall", choices=MOE_DISPATCHERS,
                   help="MoE models, Megatron-Core: the token dispatcher every expert-parallel configuration runs "
                        "(flex-deepep / flex-hybridep need the DeepEP package; default: alltoall)")
    p.add_argument("--moe-a2a-overlap", action="store_true",
                   help="MoE models, Megatron-Core: --overlap-moe-expert-parallel-comm wherever a configuration "
                        "allows it (no full recompute; vp > 1 when pp > 1)")
    p.add_argument("--cuda-graphs", default="none", choices=CUDA_GRAPHS,
                   help="Megatron-Core's full-iteration CUDA graph (--cuda-graph-impl full_iteration) wherever a "
                        "configuration runs it (not Megatron-FSDP; MoE only with ep > 1 on flex-hybridep); narrows "
                        "--framework any to megatron (default: none)")
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
                          allow_tiling=args.allow_tiling, host_safety_factor=args.host_safety_factor,
                          moe_dispatcher=args.moe_dispatcher, moe_a2a_overlap=args.moe_a2a_overlap,
                          cuda_graphs=args.cuda_graphs)

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
                    host_safety_factor=args.host_safety_factor, moe_dispatcher=args.moe_dispatcher,
                    moe_a2a_overlap=args.moe_a2a_overlap, cuda_graphs=args.cuda_graphs)))
        if args.json:
            print(json.dumps([versus_row(spec, cluster, r) for spec, cluster, r in answers], indent=2))
        else:
            print_versus(answers, args)
        return EXIT_OK if any(r.best is not None for _, _, r in answers) else EXIT_INFEASIBLE
    if node_counts is None or len(node_counts) == 1:
        result = one(None if node_counts is None else node_counts[0], args.study_name)
        if args.json:
            print(json.dumps({**result.to_dict(), "calibration": chosen.out()}, indent=2))
        else:
            print_result(result, args)
            print(chosen.note())
        if result.best is None:
            return EXIT_INFEASIBLE
        if args.emit:
            return emit(result, args, clusters[-1], model)
        return EXIT_OK
    results = [one(n, None if args.study_name is None else f"{args.study_name}-{n}n") for n in node_counts]
    if args.json:
        print(json.dumps([what_if_row(r, args.tokens) for r in results], indent=2))
    else:
        print_what_if(results, args)
    return EXIT_OK if any(r.best is not None for r in results) else EXIT_INFEASIBLE


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

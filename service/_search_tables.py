"""What ``autopar search`` prints for people and for ``--json``: the ranked table with the best
configuration's explanation, the counts and hints (:func:`print_result`); the best configuration per
cluster size with the time and GPU-hours of a token budget (:func:`print_what_if`, :func:`what_if_row`);
the same question on several clusters with where each group of the best configuration runs
(:func:`print_versus`, :func:`versus_row`). Tables leave out their least important columns to fit the
terminal (``--wide`` keeps them all)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from search import ClusterSpec, ParallelConfig
from service._cli_output import Column, print_table

if TYPE_CHECKING:
    from search._search_result import RankedConfig, SearchResult

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0


def _time_to_train(best: RankedConfig, world_size: int, tokens: float | None) -> tuple[float | None, float | None]:
    """(days, GPU-hours) to train on ``tokens`` at the best configuration's speed."""
    if tokens is None:
        return None, None
    seconds = tokens / best.prediction.tokens_per_s
    return seconds / SECONDS_PER_DAY, world_size * seconds / SECONDS_PER_HOUR


def what_if_row(result: SearchResult, tokens: float | None) -> dict[str, Any]:
    best = result.best
    days, gpu_hours = (None, None) if best is None else _time_to_train(best, result.world_size, tokens)
    return {"num_nodes": result.num_nodes, "world_size": result.world_size,
            "best": None if best is None else best.to_dict(), "time_to_train_days": days, "gpu_hours": gpu_hours,
            "n_valid": result.n_valid, "n_feasible": result.n_feasible, "elapsed_s": result.elapsed_s}


# Ranked-table columns when the terminal is narrow: the layout and the answer always show; the rest
# leave lowest priority first (a layout column that reads the same on every row before any other).
_KEEP = frozenset({"rank", "framework", "dp", "tp", "pp", "mb", "zero", "tokens/s", "peak GiB", "$/M tokens"})
_PRIORITY = {"bottleneck": 0, "iteration s": 1, "MFU": 2, "recompute": 3, "sp": 4, "vp": 5, "cp": 6,
             "offload (opt/param)": 7, "ep": 8, "etp": 8, "order": 8, "cuda graph": 8}
_LEFT = frozenset({"framework", "offload (opt/param)", "recompute", "bottleneck"})


def _ranked_columns(columns: list[str], rows: list[list[str]]) -> list[Column]:
    uniform = {c for i, c in enumerate(columns) if c in ("vp", "cp", "sp", "offload (opt/param)", "ep", "etp")
               and len({row[i] for row in rows}) <= 1}
    return [Column(c, left=c in _LEFT, keep=c in _KEEP, priority=-1 if c in uniform else _PRIORITY.get(c, 9))
            for c in columns]


def _precision(args: argparse.Namespace) -> str:
    """The precision as the tables' header lines say it, with the gradient reduction when it is bf16."""
    return f"{args.precision}{' (gradients reduced in bf16)' if args.grad_reduce_in_bf16 else ''}"


def print_result(result: SearchResult, args: argparse.Namespace) -> None:
    from search._search import describe

    print(f"{result.model} on {result.num_nodes} x {result.cluster} = {result.world_size} GPUs, global batch "
          f"{args.global_batch}, {_precision(args)}, framework {result.framework}, objective {result.objective}")
    cost = result.objective == "cost"
    moe = any(r.config.ep > 1 or r.config.etp > 1 for r in result.top)
    placed = any(r.config.placement != "tp-cp-ep-dp-pp" for r in result.top)  # Megatron's --use-tp-pp-dp-mapping
    exchange = any(r.config.moe_dispatcher != "alltoall" or r.config.moe_a2a_overlap for r in result.top)
    graphed = any(r.config.cuda_graphs != "none" for r in result.top)  # Megatron's --cuda-graph-impl
    columns = ["rank", "framework", "dp", "tp", "pp", "vp", "cp", *(["ep", "etp"] * moe),
               *(["token exchange"] * exchange), *(["cuda graph"] * graphed), *(["order"] * placed),
               "sp", "mb", "zero",
               "offload (opt/param)", "recompute", "tokens/s", "MFU", "iteration s", "peak GiB", "bottleneck",
               *(["$/M tokens"] * cost)]
    rows = []
    for r in result.top:
        c, p = r.config, r.prediction
        rows.append([str(r.rank), r.framework, str(c.dp), str(c.tp), str(c.pp), str(c.vp), str(c.cp),
                     *([str(c.ep), str(c.etp)] * moe), *([_exchange(c)] * exchange),
                     *([c.cuda_graphs if c.cuda_graphs != "none" else "-"] * graphed), *([c.placement] * placed),
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


def print_what_if(results: list[SearchResult], args: argparse.Namespace) -> None:
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


def _where(cluster: ClusterSpec, result: SearchResult) -> dict[str, str]:
    from search._placement import landing

    best = result.best
    if best is None:
        return {}
    node = cluster.node
    return landing(best.config, node.gpus_per_node, node.nvlink_domain, cluster.fabric)


def versus_row(spec: str, cluster: ClusterSpec, result: SearchResult) -> dict[str, Any]:
    best = result.best
    return {"cluster": spec, "name": cluster.name, "num_nodes": result.num_nodes, "world_size": result.world_size,
            "nvlink_domain_gpus": cluster.node.nvlink_domain, "fabric": cluster.fabric.describe(),
            "best": None if best is None else best.to_dict(), "groups": _where(cluster, result),
            "n_valid": result.n_valid, "n_feasible": result.n_feasible, "elapsed_s": result.elapsed_s}


def print_versus(answers: list[tuple[str, ClusterSpec, SearchResult]], args: argparse.Namespace) -> None:
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


def _exchange(c: ParallelConfig) -> str:
    """The MoE token dispatcher and EP overlap of one row: "flex-hybridep+ovl", "alltoall", "-" without ep."""
    if c.ep == 1:
        return "-"
    return f"{c.moe_dispatcher}{'+ovl' if c.moe_a2a_overlap else ''}"

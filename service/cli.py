"""The ``autopar`` command line.

    autopar predict --model gpt3-175b --cluster dgx-a100-80gb --nodes 128 --tp 8 --pp 16 \\
        --micro-batch 1 --global-batch 1536 --recompute full --precision fp16
    autopar presets [--json]

Errors that are the user's (an invalid spec, an unknown preset, an unreadable spec file) print
``autopar: error: <message>`` on stderr and return 2, without a traceback; a question with no
feasible answer returns 3 (see :mod:`service._cli_output` for every exit code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from search import (
    CLUSTER_PRESETS,
    AutoparError,
    ClusterSpec,
    HardwareProfile,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    apply_profile,
    cluster_preset,
    predict,
    staleness,
)
from search._fabric import fabric_dict
from search._model_presets import MODEL_PRESETS
from search._parallel_spec import (
    CUDA_GRAPHS,
    FRAMEWORKS,
    MOE_DISPATCHERS,
    OFFLOADS,
    PLACEMENTS,
    PRECISIONS,
    RECOMPUTES,
)
from service._admin_cli import add_admin_parsers
from service._calibrate_cli import CALIBRATION_HELP, add_calibrate_parser, cli_calibration
from service._cli_output import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_CODES_HELP,
    EXIT_INFEASIBLE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Column,
    print_table,
    silence_stdout,
)
from service._profile_cli import add_profile_parser
from service._runs_cli import add_runs_parser
from service._search_cli import add_search_parser
from service._serve_cli import add_serve_parsers
from service._spec_files import add_model_arguments, load_cluster, model_argument, spec_dict
from service._version import autopar_version

PROG = "autopar"





def build_parser() -> argparse.ArgumentParser:
    """The ``autopar`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(prog=PROG, description="Predict and search parallel training configurations.",
                                     epilog=EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=f"{PROG} {autopar_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("predict", help="predict one configuration's step time and memory",
                       description="Predict one configuration's iteration time, throughput and peak memory.",
                       epilog=EXIT_CODES_HELP)
    add_model_arguments(p)
    p.add_argument("--cluster", required=True, metavar="NAME|FILE.json",
                   help='cluster preset or JSON file {"gpu": {...}, "node": {...}, "num_nodes": N}')
    p.add_argument("--nodes", type=int, metavar="N", help="number of nodes (default: 1, or the file's num_nodes)")
    p.add_argument("--dp", type=int, metavar="N", help="data-parallel degree (default: world / (tp*pp*cp))")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor-parallel degree (default: 1)")
    p.add_argument("--pp", type=int, default=1, metavar="N", help="pipeline stages (default: 1)")
    p.add_argument("--vp", type=int, default=1, metavar="N", help="virtual stages per pipeline rank (default: 1)")
    p.add_argument("--cp", type=int, default=1, metavar="N", help="context-parallel degree (default: 1)")
    p.add_argument("--ep", type=int, default=1, metavar="N",
                   help="expert-parallel degree, MoE models (default: 1; folded into tp*cp*dp as Megatron-Core does)")
    p.add_argument("--etp", type=int, default=1, metavar="N", help="expert tensor-parallel degree (default: 1)")
    p.add_argument("--moe-dispatcher", default="alltoall", choices=MOE_DISPATCHERS,
                   help="MoE token dispatcher with ep > 1: Megatron's alltoall, or flex with the DeepEP or HybridEP "
                        "backend (default: alltoall)")
    p.add_argument("--moe-a2a-overlap", action="store_true",
                   help="Megatron-Core --overlap-moe-expert-parallel-comm (ep > 1; vp > 1 when pp > 1)")
    p.add_argument("--cuda-graphs", default="none", choices=CUDA_GRAPHS,
                   help="Megatron-Core's full-iteration CUDA graph (--cuda-graph-impl full_iteration): no host "
                        "overhead per micro-batch; an MoE model needs ep > 1 on flex-hybridep (default: none)")
    p.add_argument("--sp", action="store_true", help="Megatron sequence parallelism (needs tp > 1)")
    p.add_argument("--tp-comm-overlap", action="store_true",
                   help="Megatron-Core --tp-comm-overlap: TP collectives pipelined with GEMMs (needs --sp)")
    p.add_argument("--stage-layers", type=_layer_counts, metavar="N,N,...",
                   help="transformer layers on each pipeline rank, first to last (default: the even split)")
    p.add_argument("--micro-batch", type=int, default=1, metavar="N", help="sequences per micro-batch (default: 1)")
    p.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3), help="ZeRO stage (default: 0)")
    p.add_argument("--offload-optimizer", default="none", choices=OFFLOADS, help="optimizer offload (default: none)")
    p.add_argument("--offload-param", default="none", choices=OFFLOADS,
                   help="parameter offload, ZeRO-3 only (default: none)")
    p.add_argument("--recompute", default="none", choices=RECOMPUTES, help="activation recomputation (default: none)")
    p.add_argument("--offload-fraction", type=float, default=1.0, metavar="F",
                   help="share of the optimizer states on the CPU with --offload-optimizer cpu (Megatron "
                        "--optimizer-offload-fraction, DeepSpeed ZeRO-3 ratio; default: 1, all)")
    p.add_argument("--recompute-layers", type=int, metavar="N",
                   help="with --recompute full: layers recomputed per (virtual) pipeline stage (Megatron "
                        "--recompute-method block; default: every layer)")
    p.add_argument("--activation-offload-layers", type=int, default=0, metavar="N",
                   help="layers whose activations go to the CPU (Megatron --cpu-offloading-num-layers; pp 1, "
                        "no recomputation; default: 0)")
    p.add_argument("--tiles", type=int, default=1, metavar="N",
                   help="memory-centric tiling, DeepSpeed ZeRO-3 with TiledLinear in the model code (default: 1, off)")
    p.add_argument("--placement", default="tp-cp-ep-dp-pp", choices=PLACEMENTS,
                   help="order of the groups on the ranks, innermost first (default: Megatron's tp-cp-ep-dp-pp)")
    p.add_argument("--host-safety-factor", type=float, default=1.0, metavar="F",
                   help="keep this multiple of the offloaded states' host memory free (default: 1, what the runtime "
                        "allocates; 1.5 is DeepSpeed's estimator margin)")
    p.add_argument("--global-batch", type=int, required=True, metavar="N", help="sequences per optimizer step")
    p.add_argument("--precision", default="bf16", choices=PRECISIONS, help="mixed precision (default: bf16)")
    p.add_argument("--framework", default="megatron", choices=FRAMEWORKS, help="training runtime (default: megatron)")
    p.add_argument("--grad-reduce-in-bf16", action="store_true",
                   help="Megatron-Core --grad-reduce-in-bf16 (Megatron-Bridge's performance recipes set it): "
                        "accumulate and reduce the gradients in bf16, a 2-byte gradient buffer and half the "
                        "data-parallel traffic (--framework megatron only); not with fp16")
    p.add_argument("--profile", metavar="FILE.json",
                   help="measured hardware profile (autopar profile): replaces preset speeds where measured")
    p.add_argument("--profile-max-age-days", type=float, default=90.0, metavar="DAYS",
                   help="warn when the profile is older than this (default: 90)")
    p.add_argument("--calibration", metavar="ID", help=CALIBRATION_HELP)
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.set_defaults(handler=_predict)

    s = sub.add_parser("presets", help="list the model and cluster presets",
                       description="List the model and cluster presets.", epilog=EXIT_CODES_HELP)
    s.add_argument("--json", action="store_true", help="print the presets' full specs as JSON (each model entry "
                   "is a valid --model file, each cluster entry a valid --cluster file)")
    s.add_argument("--wide", action="store_true", help="every column, however wide the terminal")
    s.set_defaults(handler=_presets)
    add_search_parser(sub)
    add_profile_parser(sub)
    add_serve_parsers(sub)
    add_admin_parsers(sub)
    add_runs_parser(sub)
    add_calibrate_parser(sub)
    return parser


def _layer_counts(text: str) -> tuple[int, ...]:
    """``"7,8,8,7"`` -> (7, 8, 8, 7)."""
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of layer counts") from None


def parallel_config(args: argparse.Namespace, world_size: int) -> ParallelConfig:
    """The :class:`ParallelConfig` of ``args``; dp = world / (tp*pp*cp) when ``--dp`` is omitted."""
    from service.request import derived_dp  # the API's rule; pydantic loads only when a command needs it

    config = ParallelConfig(
        dp=1 if args.dp is None else args.dp, tp=args.tp, pp=args.pp, vp=args.vp, cp=args.cp, sp=args.sp,
        micro_batch=args.micro_batch, zero_stage=args.zero_stage, offload_optimizer=args.offload_optimizer,
        offload_param=args.offload_param, recompute=args.recompute, tp_comm_overlap=args.tp_comm_overlap,
        stage_layers=args.stage_layers, optimizer_offload_fraction=args.offload_fraction,
        recompute_layers=args.recompute_layers, activation_offload_layers=args.activation_offload_layers,
        tiles=args.tiles, placement=args.placement, cuda_graphs=args.cuda_graphs,
    )
    # The expert degrees fold into tp*cp*dp: set them once dp is known.
    experts = {"ep": args.ep, "etp": args.etp, "moe_dispatcher": args.moe_dispatcher,
               "moe_a2a_overlap": args.moe_a2a_overlap}
    if args.dp is not None:
        return dataclasses.replace(config, **experts)
    dp = derived_dp(world_size, tp=config.tp, pp=config.pp, cp=config.cp, field="ParallelConfig.dp",
                    fix=f"choose tp, pp and cp whose product divides {world_size}, or change --nodes")
    return dataclasses.replace(config, dp=dp, **experts)


def describe(model: ModelSpec, cluster: ClusterSpec, c: ParallelConfig, t: TrainingSpec) -> str:
    """One header line naming the model, the cluster and the configuration."""
    offload = "" if c.offload_optimizer == c.offload_param == "none" else (
        f" offload(optimizer={c.offload_optimizer}, param={c.offload_param})")
    return (f"{model.name} on {cluster.name}, {cluster.num_nodes} x {cluster.node.gpus_per_node} = "
            f"{cluster.world_size} GPUs: dp={c.dp} tp={c.tp} pp={c.pp} vp={c.vp} cp={c.cp}"
            f"{f' ep={c.ep} etp={c.etp}' if model.moe is not None else ''}"
            f"{' sp' if c.sp else ''} micro-batch={c.micro_batch} global-batch={t.global_batch} "
            f"zero={c.zero_stage}{offload} recompute={c.recompute}{_policies(c)} {t.precision}"
            f"{' grad-reduce-in-bf16' if t.grad_reduce_in_bf16 else ''} {t.framework}")


def _policies(c: ParallelConfig) -> str:
    """The fine-grained memory policies and the placement, when they are not the defaults."""
    parts = [f" offload-fraction={c.optimizer_offload_fraction:g}" if c.optimizer_offload_fraction < 1 else "",
             f" recompute-layers={c.recompute_layers}" if c.recompute_layers is not None else "",
             f" activation-offload-layers={c.activation_offload_layers}" if c.activation_offload_layers else "",
             f" tiles={c.tiles}" if c.tiles > 1 else "",
             f" dispatcher={c.moe_dispatcher}" if c.moe_dispatcher != "alltoall" else "",
             " ep-overlap" if c.moe_a2a_overlap else "",
             f" cuda-graph={c.cuda_graphs}" if c.cuda_graphs != "none" else "",
             f" placement={c.placement}" if c.placement != "tp-cp-ep-dp-pp" else ""]
    return "".join(parts)


def _predict(args: argparse.Namespace) -> int:
    model = model_argument(args)
    cluster = load_cluster(args.cluster, args.nodes)
    notes: tuple[str, ...] = ()
    if args.profile:
        profile = HardwareProfile.load(args.profile)
        stale = staleness(profile, cluster, args.profile_max_age_days)
        cluster, fallbacks = apply_profile(cluster, profile)
        notes = tuple(f"stale profile: {why}" for why in stale) + fallbacks
    config = parallel_config(args, cluster.world_size)
    training = TrainingSpec(global_batch=args.global_batch, precision=args.precision, framework=args.framework,
                            grad_reduce_in_bf16=args.grad_reduce_in_bf16)
    chosen = cli_calibration(args.calibration, cluster.name)
    prediction = predict(model, chosen.apply(cluster), config, training, chosen.calibration,
                         host_safety_factor=args.host_safety_factor)
    if notes:
        prediction = dataclasses.replace(prediction, warnings=prediction.warnings + notes)
    if args.json:
        print(json.dumps({**prediction.to_dict(), "calibration": chosen.out()}, indent=2))
    else:
        print(describe(model, cluster, config, training))
        print(chosen.note())
        print(prediction.explain())
    return EXIT_OK if prediction.feasible else EXIT_INFEASIBLE


def presets_dict() -> dict[str, Any]:
    """Every preset's full spec; each model entry is a valid ``--model`` file and each cluster entry a
    valid ``--cluster`` file (one node)."""
    clusters = {}
    for name in CLUSTER_PRESETS:
        spec = cluster_preset(name)
        clusters[name] = {"gpu": spec_dict(spec.gpu), "node": spec_dict(spec.node), "num_nodes": 1,
                          "fabric": fabric_dict(spec.fabric)}
    models = {name: {**model_dict(spec), "params": spec.params} for name, spec in MODEL_PRESETS.items()}
    return {"models": models, "clusters": clusters}


def model_dict(spec: ModelSpec) -> dict[str, Any]:
    """A model's constructor arguments as JSON-ready data (``moe``, ``mla`` and ``rope_yarn`` as objects): a
    valid ``--model`` file."""
    data = spec_dict(spec)
    for part in ("moe", "mla", "rope_yarn"):
        if data[part] is not None:
            data[part] = dataclasses.asdict(data[part])
    return data


def params_text(spec: ModelSpec) -> str:
    """``70.6B``; with a mixture of experts also the parameters a token passes through, ``671.0B (37.6B active)``."""
    total = f"{spec.params / 1e9:.1f}B"
    return total if spec.moe is None else f"{total} ({spec.active_params / 1e9:.1f}B active)"


def _presets(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(presets_dict(), indent=2))
        return EXIT_OK
    model_columns = [Column("name", left=True, keep=True), Column("params", keep=True), Column("layers", keep=True),
                     Column("hidden", keep=True), Column("heads", priority=3), Column("kv heads", priority=2),
                     Column("ffn", priority=1), Column("vocab", priority=0), Column("seq len", priority=4)]
    model_rows = [[name, params_text(m), str(m.layers), str(m.hidden), str(m.heads), str(m.kv_heads),
                   str(m.ffn), str(m.vocab), str(m.seq_len)] for name, m in MODEL_PRESETS.items()]
    print_table("model presets (--model)", model_columns, model_rows, wide=args.wide)
    cluster_columns = [Column("name", left=True, keep=True), Column("gpu", left=True, keep=True),
                       Column("gpus/node", priority=2), Column("GPU memory", keep=True),
                       Column("bf16/fp16 TFLOP/s", priority=3), Column("NVLink GB/s", priority=1),
                       Column("network GB/s/node", priority=0), Column("fabric", left=True, priority=-1)]
    cluster_rows = []
    for name in CLUSTER_PRESETS:
        spec = cluster_preset(name)
        g, n = spec.gpu, spec.node
        cluster_rows.append([name, g.name, str(n.gpus_per_node), f"{g.memory_bytes / 2**30:.0f} GiB",
                             f"{(g.bf16_flop_per_s or g.fp16_flop_per_s) / 1e12:.0f}",
                             f"{n.intra_node_bytes_per_s / 1e9:.0f}", f"{n.inter_node_bytes_per_s / 1e9:.1f}",
                             spec.fabric.describe()])
    print_table("cluster presets (--cluster, with --nodes N)", cluster_columns, cluster_rows, wide=args.wide)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``autopar`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error argparse has already printed
            return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_BAD_INPUT)
        try:
            code: int = args.handler(args)
        except AutoparError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:  # `autopar presets --json | head -1`: the reader has what it wanted
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())

"""``autopar search ... --emit TARGETS --out DIR``: write the launch files of a ranked configuration.

Targets: ``deepspeed`` (ds_config.json), ``megatron`` (pretrain_gpt.py arguments checked
against the pinned Megatron-LM flag list), ``megatron-deepspeed`` (the fork's arguments plus
ds_config.json), ``torchtitan`` (a config module for torchtitan 0.3), ``torchrun``,
``deepspeed-launcher`` (hostfile), ``slurm`` (sbatch script). The launchers run the training
entry point of the configuration's framework with its arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from search import SearchResult, SpecError, TrainingSpec
from service._spec_files import parse_choices
from service.launch._targets import LAUNCH_TARGETS

EMIT_TARGETS = LAUNCH_TARGETS


def add_emit_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--emit`` options of ``autopar search``."""
    p.add_argument("--emit", metavar="LIST",
                   help=f"write launch files for a ranked configuration: comma-separated {','.join(EMIT_TARGETS)}")
    p.add_argument("--out", type=Path, default=Path("launch"), metavar="DIR",
                   help="directory for --emit files (default: ./launch)")
    p.add_argument("--rank", type=int, default=1, metavar="N", help="which ranked configuration to emit (default: 1)")
    p.add_argument("--hosts", metavar="H1,H2,...",
                   help="node host names for the launchers (default: node0, node1, ...)")
    p.add_argument("--train-script", default="pretrain_gpt.py", metavar="PATH", help="training entry point to launch")


def parse_targets(text: str) -> tuple[str, ...]:
    """``--emit`` as known targets, or a SpecError listing them."""
    return parse_choices(text, EMIT_TARGETS, "--emit", "an emit target")


def emit(result: SearchResult, args: argparse.Namespace, cluster: object, model: object) -> None:
    """Write the files of ``--rank`` for each ``--emit`` target into ``--out`` and print the commands."""
    from search import ClusterSpec, ModelSpec
    from service.launch import LaunchRequest, emit_target

    targets = parse_targets(args.emit)
    if not result.top:
        raise SpecError("--emit", "no configuration fits, so there is nothing to launch", "see the hints above")
    if not 1 <= args.rank <= len(result.top):
        raise SpecError("--rank", f"{args.rank} is not a rank in the top {len(result.top)}",
                        f"give 1..{len(result.top)} (or a larger --top)")
    chosen = result.top[args.rank - 1]
    if not isinstance(cluster, ClusterSpec) or not isinstance(model, ModelSpec):
        raise TypeError("emit needs the searched model and cluster")
    hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip()) if args.hosts else ()
    if hosts and len(hosts) != cluster.num_nodes:
        raise SpecError("--hosts", f"{len(hosts)} hosts for {cluster.num_nodes} nodes", "give one host per node")
    training = TrainingSpec(args.global_batch, args.precision, framework=chosen.framework)  # type: ignore[arg-type]
    request = LaunchRequest(model=model, cluster=cluster, config=chosen.config, training=training, hosts=hosts,
                            train_script=args.train_script, profile=cluster.profile)
    args.out.mkdir(parents=True, exist_ok=True)
    for target in targets:
        files = emit_target(request, target, launch_dir=str(args.out.resolve()))
        for name, text in files.files.items():
            path = args.out / name
            path.write_text(text)
            print(f"wrote {path}", file=sys.stderr)
        if files.command:
            print(f"{target}: {files.command}")

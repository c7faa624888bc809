"""``autopar search ... --emit TARGETS --out DIR``: write the launch files of a ranked configuration.

Targets: ``deepspeed`` (ds_config.json), ``megatron`` (pretrain_gpt.py arguments checked
against the pinned Megatron-LM flag list), ``megatron-deepspeed`` (the fork's arguments plus
ds_config.json), ``torchtitan`` (a config module for torchtitan 0.3), ``torchrun``,
``deepspeed-launcher`` (hostfile and launch script), ``slurm`` (sbatch script). The launchers run
the training entry point of the configuration's framework with its arguments.

The training recipe (data, tokenizer, learning rate and schedule, length, checkpoints, logging)
comes from ``--recipe FILE.json`` and the flags below, which win over the file; ``--tokens`` (the
search's token budget) is also the run's length unless ``--train-iters`` is given. What is missing
becomes a placeholder the launch stops at, naming the variable (said in a note). Every target is
written by autopar alone; ``--check`` also runs the frameworks' own validators where installed.
A target that cannot run the configuration is an error (exit 2) after the others are written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from search import ClusterSpec, ModelSpec, SearchResult, SpecError, TrainingSpec
from service._spec_files import parse_choices, read_json_object
from service.launch._recipe import LR_SCHEDULES, TrainingRecipe, recipe_from_dict
from service.launch._targets import LAUNCH_TARGETS

EMIT_TARGETS = LAUNCH_TARGETS
_RECIPE_FLAGS = ("data_path", "dataset", "tokenizer", "lr", "min_lr", "lr_schedule", "warmup_iters", "train_iters",
                 "save", "load", "save_interval", "log_interval", "tensorboard_dir")


def add_emit_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--emit`` options of ``autopar search``, and the training recipe's."""
    g = p.add_argument_group("launch files (--emit)")
    g.add_argument("--emit", metavar="LIST",
                   help=f"write launch files for a ranked configuration: comma-separated {','.join(EMIT_TARGETS)}")
    g.add_argument("--out", type=Path, default=Path("launch"), metavar="DIR",
                   help="directory for --emit files (default: ./launch)")
    g.add_argument("--rank", type=int, default=1, metavar="N", help="which ranked configuration to emit (default: 1)")
    g.add_argument("--hosts", metavar="H1,H2,...",
                   help="node host names for the launchers (default: node0, node1, ...)")
    g.add_argument("--train-script", metavar="PATH",
                   help="training entry point (default: pretrain_gpt.py for the Megatron forks; for plain "
                        "DeepSpeed, $TRAIN_SCRIPT at launch)")
    g.add_argument("--check", action="store_true",
                   help="also check the files with the frameworks' own validators where installed (DeepSpeed, "
                        "torchtitan); a framework that is not installed is a note")
    r = p.add_argument_group("training recipe (--emit; missing values are read from the environment at launch)")
    r.add_argument("--recipe", metavar="FILE.json", help="recipe file: a JSON object of these fields "
                   "(data_path, tokenizer, lr, ...; see examples/recipe-llama3-8b.json); the flags win")
    r.add_argument("--data-path", nargs="+", metavar="PATH",
                   help="Megatron --data-path (tokenized prefix, or weight prefix pairs); torchtitan dataset_path")
    r.add_argument("--dataset", metavar="NAME", help="torchtitan's registered dataset (e.g. c4)")
    r.add_argument("--tokenizer", metavar="ID|DIR", help="Hugging Face tokenizer (torchtitan: a directory)")
    r.add_argument("--lr", type=float, metavar="LR", help="peak learning rate")
    r.add_argument("--min-lr", type=float, metavar="LR", help="final learning rate (default: 0)")
    r.add_argument("--lr-schedule", choices=LR_SCHEDULES, help="decay after the warmup (default: cosine)")
    r.add_argument("--warmup-iters", type=int, metavar="N", help="warmup steps (default: 1%% of the run)")
    r.add_argument("--train-iters", type=int, metavar="N", help="optimizer steps (default: --tokens in steps)")
    r.add_argument("--save", metavar="DIR", help="checkpoint directory (default: no checkpoints)")
    r.add_argument("--load", metavar="DIR", help="checkpoint to resume from (default: --save)")
    r.add_argument("--save-interval", type=int, metavar="N", help="steps between checkpoints (default: 1000)")
    r.add_argument("--log-interval", type=int, metavar="N", help="steps between log lines (default: 10)")
    r.add_argument("--tensorboard-dir", metavar="DIR", help="TensorBoard directory")


def parse_targets(text: str) -> tuple[str, ...]:
    """``--emit`` as known targets, or a SpecError listing them."""
    return parse_choices(text, EMIT_TARGETS, "--emit", "an emit target")


def recipe_of(args: argparse.Namespace) -> TrainingRecipe:
    """The recipe of ``--recipe`` and the recipe flags (the flags win); ``--tokens`` is the run's length
    unless the recipe gives one."""
    values: dict[str, Any] = {}
    if args.recipe:
        values = read_json_object("--recipe", args.recipe)
        recipe_from_dict(values, f"--recipe {args.recipe}")  # names a bad key before the flags are merged
    flags = {name: getattr(args, name) for name in _RECIPE_FLAGS if getattr(args, name) is not None}
    if args.tokens is not None and "train_iters" not in flags:
        flags["train_tokens"] = args.tokens
    values.update(flags)
    if "train_iters" in flags:  # the run's length from a flag replaces the file's, in either form
        values.pop("train_tokens", None)
    elif "train_tokens" in flags:
        values.pop("train_iters", None)
    return recipe_from_dict(values, "--recipe" if args.recipe is None else f"--recipe {args.recipe}")


def emit(result: SearchResult, args: argparse.Namespace, cluster: ClusterSpec, model: ModelSpec) -> int:
    """Write the files of ``--rank`` for each ``--emit`` target into ``--out``, print the commands and
    notes; 0, or 2 when a target cannot run the configuration (the others are written)."""
    from service.launch import LaunchRequest, emit_target, verify

    targets = parse_targets(args.emit)
    if not result.top:
        raise SpecError("--emit", "no configuration fits, so there is nothing to launch", "see the hints above")
    if not 1 <= args.rank <= len(result.top):
        raise SpecError("--rank", f"{args.rank} is not a rank in the top {len(result.top)}",
                        f"give 1..{len(result.top)} (or a larger --top)")
    chosen = result.top[args.rank - 1]
    hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip()) if args.hosts else ()
    if hosts and len(hosts) != cluster.num_nodes:
        raise SpecError("--hosts", f"{len(hosts)} hosts for {cluster.num_nodes} nodes", "give one host per node")
    # What the search predicted the configuration with (a search with the flag ranks Megatron-Core alone).
    training = TrainingSpec(args.global_batch, args.precision, framework=chosen.framework,
                            grad_reduce_in_bf16=args.grad_reduce_in_bf16)
    request = LaunchRequest(model=model, cluster=cluster, config=chosen.config, training=training, hosts=hosts,
                            train_script=args.train_script, profile=cluster.profile, recipe=recipe_of(args))
    args.out.mkdir(parents=True, exist_ok=True)
    failed, notes = 0, dict[str, None]()
    for target in targets:
        try:
            files = emit_target(request, target)
            checked = verify(request, files) if args.check else ()
        except SpecError as err:
            print(f"autopar: error: --emit {target}: {err}", file=sys.stderr)
            failed += 1
            continue
        for name, text in files.files.items():
            path = args.out / name
            path.write_text(text)
            if name.endswith((".sh", ".sbatch")):
                path.chmod(0o755)
            print(f"wrote {path}", file=sys.stderr)
        if files.command:
            print(f"{target}: {files.command}")
        notes.update(dict.fromkeys((*files.notes, *checked)))
    for note in notes:
        print(f"autopar: note: {note}", file=sys.stderr)
    return 2 if failed else 0

"""One entry point for every launch target, shared by ``autopar search --emit`` and the
service's launch endpoint: :func:`emit_target` runs the target's emitter with the training
entry point and arguments of the configuration's framework.

Emission needs nothing but autopar: every target is written and checked by autopar's own code
(the flag lists and ``validate_args`` rules of the Megatron forks, DeepSpeed's config rules,
torchtitan's layout rules). :func:`verify` adds the frameworks' own validators where they are
installed (``autopar search --emit ... --check``) and says in a note which ones are not.
"""

from __future__ import annotations

import dataclasses

from search import SpecError

from ._base import LaunchFiles, LaunchRequest
from ._deepspeed import deepspeed_notes, emit_deepspeed
from ._launchers import deepspeed_launcher, slurm, torchrun
from ._megatron import emit_megatron, megatron_args_and_notes
from ._megatron_deepspeed import emit_megatron_deepspeed, megatron_deepspeed_args_and_notes
from ._shell import in_launch_dir
from ._torchtitan import CONFIG_FUNCTION, CONFIG_MODULE, TRAIN_MODULE, emit_torchtitan

LAUNCH_TARGETS: tuple[str, ...] = ("deepspeed", "megatron", "megatron-deepspeed", "torchtitan", "torchrun",
                                   "deepspeed-launcher", "slurm")


def script_args_and_notes(request: LaunchRequest) -> tuple[list[str], tuple[str, ...]]:
    """The arguments the launchers pass to the training entry point for this framework, and its notes."""
    framework = request.training.framework
    if framework == "deepspeed":
        return ["--deepspeed", "--deepspeed_config", in_launch_dir("ds_config.json")], deepspeed_notes(request)
    if framework == "megatron-deepspeed":
        args, notes = megatron_deepspeed_args_and_notes(request)
        return args, tuple(notes)
    if framework == "megatron":
        args, notes = megatron_args_and_notes(request)
        return args, tuple(notes)
    # fsdp: torchtitan, whose configuration is the emitted module
    return ["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION], emit_torchtitan(request).notes


def script_args(request: LaunchRequest) -> list[str]:
    """The arguments the launchers pass to the training entry point for this framework."""
    return script_args_and_notes(request)[0]


def emit_target(request: LaunchRequest, target: str) -> LaunchFiles:
    """The files, command and notes of ``target`` (one of :data:`LAUNCH_TARGETS`) for ``request``."""
    if target == "deepspeed":
        return emit_deepspeed(request)
    if target == "megatron":
        return emit_megatron(request)
    if target == "megatron-deepspeed":
        return emit_megatron_deepspeed(request)
    if target == "torchtitan":
        return emit_torchtitan(request)
    if target not in ("torchrun", "deepspeed-launcher", "slurm"):
        raise SpecError("target", f"{target!r} is not a launch target", f"use one of: {', '.join(LAUNCH_TARGETS)}")
    args, notes = script_args_and_notes(request)
    if request.training.framework == "fsdp":  # torchtitan runs as a module, its config module on PYTHONPATH
        env = emit_torchtitan(request).env
        if target == "torchrun":
            out = torchrun(request, args, module=TRAIN_MODULE, env=env)
        elif target == "slurm":
            out = slurm(request, args, module=TRAIN_MODULE, env=env)
        else:
            raise SpecError("target", "the deepspeed launcher does not run torchtitan",
                            "use target torchrun or slurm for framework fsdp (torchtitan)")
    elif target == "torchrun":
        out = torchrun(request, args)
    elif target == "deepspeed-launcher":
        out = deepspeed_launcher(request, args)
    else:
        out = slurm(request, args)
    return dataclasses.replace(out, notes=(*out.notes, *notes))

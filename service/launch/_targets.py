"""One entry point for every launch target, shared by ``autopar search --emit`` and the
service's launch endpoint: :func:`emit_target` runs the target's emitter with the training
entry point and arguments of the configuration's framework."""

from __future__ import annotations

from search import SpecError

from ._base import LaunchFiles, LaunchRequest
from ._deepspeed import emit_deepspeed
from ._launchers import deepspeed_launcher, slurm, torchrun
from ._megatron import emit_megatron, megatron_args
from ._megatron_deepspeed import emit_megatron_deepspeed, megatron_deepspeed_args

LAUNCH_TARGETS: tuple[str, ...] = ("deepspeed", "megatron", "megatron-deepspeed", "torchrun", "deepspeed-launcher",
                                   "slurm")


def script_args(request: LaunchRequest) -> list[str]:
    """The arguments the launchers pass to the training entry point for this framework."""
    framework = request.training.framework
    if framework == "deepspeed":
        return ["--deepspeed", "--deepspeed_config", "ds_config.json"]
    if framework == "megatron-deepspeed":
        return megatron_deepspeed_args(request)
    if framework == "megatron":
        return megatron_args(request)
    return []


def emit_target(request: LaunchRequest, target: str) -> LaunchFiles:
    """The files and command of ``target`` (one of :data:`LAUNCH_TARGETS`) for ``request``."""
    if target == "deepspeed":
        return emit_deepspeed(request)
    if target == "megatron":
        return emit_megatron(request)
    if target == "megatron-deepspeed":
        return emit_megatron_deepspeed(request)
    if target == "torchrun":
        return torchrun(request, script_args(request))
    if target == "deepspeed-launcher":
        return deepspeed_launcher(request, script_args(request))
    if target == "slurm":
        return slurm(request, script_args(request))
    raise SpecError("target", f"{target!r} is not a launch target", f"use one of: {', '.join(LAUNCH_TARGETS)}")

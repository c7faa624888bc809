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
from ._torchtitan import CONFIG_FUNCTION, CONFIG_MODULE, TRAIN_MODULE, emit_torchtitan

LAUNCH_TARGETS: tuple[str, ...] = ("deepspeed", "megatron", "megatron-deepspeed", "torchtitan", "torchrun",
                                   "deepspeed-launcher", "slurm")


def script_args(request: LaunchRequest) -> list[str]:
    """The arguments the launchers pass to the training entry point for this framework."""
    framework = request.training.framework
    if framework == "deepspeed":
        return ["--deepspeed", "--deepspeed_config", "ds_config.json"]
    if framework == "megatron-deepspeed":
        return megatron_deepspeed_args(request)
    if framework == "megatron":
        return megatron_args(request)
    return ["--module", CONFIG_MODULE, "--config", CONFIG_FUNCTION]  # fsdp: torchtitan


def emit_target(request: LaunchRequest, target: str, *, launch_dir: str = ".") -> LaunchFiles:
    """The files and command of ``target`` (one of :data:`LAUNCH_TARGETS`) for ``request``.

    ``launch_dir``: where the files will lie on the nodes (torchtitan's config module is imported
    from there; relative paths resolve against the directory the command runs in).
    """
    if target == "deepspeed":
        return emit_deepspeed(request)
    if target == "megatron":
        return emit_megatron(request)
    if target == "megatron-deepspeed":
        return emit_megatron_deepspeed(request)
    if target == "torchtitan":
        return emit_torchtitan(request, launch_dir=launch_dir)
    if target not in ("torchrun", "deepspeed-launcher", "slurm"):
        raise SpecError("target", f"{target!r} is not a launch target", f"use one of: {', '.join(LAUNCH_TARGETS)}")
    args = script_args(request)
    if request.training.framework == "fsdp":  # torchtitan runs as a module, its config module on PYTHONPATH
        env = emit_torchtitan(request, launch_dir=launch_dir).env
        if target == "torchrun":
            return torchrun(request, args, module=TRAIN_MODULE, env=env)
        if target == "slurm":
            return slurm(request, args, module=TRAIN_MODULE, env=env)
        raise SpecError("target", "the deepspeed launcher does not run torchtitan",
                        "use target torchrun or slurm for framework fsdp (torchtitan)")
    if target == "torchrun":
        return torchrun(request, args)
    if target == "deepspeed-launcher":
        return deepspeed_launcher(request, args)
    return slurm(request, args)

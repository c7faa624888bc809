"""Launch targets: the files and command lines that run a ranked configuration.

Every target follows one contract, :class:`LaunchTarget` (a name, the frameworks it runs, ``emit``),
and is registered once in :data:`TARGETS`: the frameworks' own files (deepspeed, megatron,
megatron-deepspeed, torchtitan) and the launchers (torchrun, deepspeed-launcher, slurm), which run
the :data:`ENTRY_POINTS` entry of the configuration's framework. ``emit`` takes a
:class:`LaunchRequest` (with its :class:`TrainingRecipe`) and returns :class:`LaunchFiles`; values
that reach a shell are quoted by :func:`quote`, recipe values that were not given become
:func:`placeholder` words the shell fills in at launch. Emission needs no framework installed;
:func:`verify` runs the installed frameworks' own validators on the files. ``autopar search --emit``
and the service's launch endpoint (``GET /v1/searches/{id}/configs/{rank}/launch``) use the same
:func:`emit_target`.
"""

from service.launch._base import EntryPoint, LaunchFiles, LaunchRequest, LaunchTarget
from service.launch._deepspeed import check_ds_config, ds_config, emit_deepspeed, refuse_ds_config
from service.launch._launchers import deepspeed_launcher, framework_env, slurm, torchrun
from service.launch._megatron import emit_megatron, megatron_args
from service.launch._megatron_checks import check_megatron_args
from service.launch._megatron_deepspeed import (
    check_megatron_deepspeed_args,
    emit_megatron_deepspeed,
    megatron_deepspeed_args,
)
from service.launch._recipe import LR_SCHEDULES, REQUIRED, TrainingRecipe, recipe_from_dict
from service.launch._shell import ShellExpr, command, export_lines, placeholder, quote
from service.launch._targets import (
    ENTRY_POINTS,
    LAUNCH_TARGETS,
    TARGETS,
    FrameworkTarget,
    LauncherTarget,
    emit_target,
    launch_target,
    script_args,
)
from service.launch._torchtitan import emit_torchtitan, torchtitan_config
from service.launch._verify import verify

__all__ = [
    "ENTRY_POINTS",
    "LAUNCH_TARGETS",
    "LR_SCHEDULES",
    "REQUIRED",
    "TARGETS",
    "EntryPoint",
    "FrameworkTarget",
    "LaunchFiles",
    "LaunchRequest",
    "LaunchTarget",
    "LauncherTarget",
    "ShellExpr",
    "TrainingRecipe",
    "check_ds_config",
    "check_megatron_args",
    "check_megatron_deepspeed_args",
    "command",
    "deepspeed_launcher",
    "ds_config",
    "emit_deepspeed",
    "emit_megatron",
    "emit_megatron_deepspeed",
    "emit_target",
    "emit_torchtitan",
    "export_lines",
    "framework_env",
    "launch_target",
    "megatron_args",
    "megatron_deepspeed_args",
    "placeholder",
    "quote",
    "recipe_from_dict",
    "refuse_ds_config",
    "script_args",
    "slurm",
    "torchrun",
    "torchtitan_config",
    "verify",
]

"""Launch targets: the files and command lines that run a ranked configuration.

Each emitter takes a :class:`LaunchRequest` (with its :class:`TrainingRecipe`) and returns
:class:`LaunchFiles`; values that reach a shell are quoted by :func:`quote`, recipe values that
were not given become :func:`placeholder` words the shell fills in at launch. Emission needs no
framework installed; :func:`verify` runs the installed frameworks' own validators on the files.
``autopar search --emit`` and the service's launch endpoint use the same :func:`emit_target`.
"""

from service.launch._base import LaunchFiles, LaunchRequest
from service.launch._deepspeed import check_ds_config, ds_config, emit_deepspeed, refuse_ds_config
from service.launch._launchers import deepspeed_launcher, framework_env, slurm, torchrun
from service.launch._megatron import check_megatron_args, emit_megatron, megatron_args
from service.launch._megatron_deepspeed import (
    check_megatron_deepspeed_args,
    emit_megatron_deepspeed,
    megatron_deepspeed_args,
)
from service.launch._recipe import LR_SCHEDULES, REQUIRED, TrainingRecipe, recipe_from_dict
from service.launch._shell import ShellExpr, command, export_lines, placeholder, quote
from service.launch._targets import LAUNCH_TARGETS, emit_target, script_args
from service.launch._torchtitan import emit_torchtitan, torchtitan_config
from service.launch._verify import verify

__all__ = [
    "LAUNCH_TARGETS",
    "LR_SCHEDULES",
    "REQUIRED",
    "LaunchFiles",
    "LaunchRequest",
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

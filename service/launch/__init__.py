"""Launch targets: the files and command lines that run a ranked configuration.

Each emitter takes a :class:`LaunchRequest` and returns :class:`LaunchFiles`; values that reach a
shell are quoted by :func:`quote`. The service's launch endpoint (later) uses the same emitters.
"""

from service.launch._base import LaunchFiles, LaunchRequest
from service.launch._deepspeed import check_ds_config, ds_config, emit_deepspeed
from service.launch._launchers import deepspeed_launcher, framework_env, slurm, torchrun
from service.launch._megatron import check_megatron_args, emit_megatron, megatron_args
from service.launch._megatron_deepspeed import (
    check_megatron_deepspeed_args,
    emit_megatron_deepspeed,
    megatron_deepspeed_args,
)
from service.launch._shell import command, export_lines, quote
from service.launch._targets import LAUNCH_TARGETS, emit_target, script_args
from service.launch._torchtitan import emit_torchtitan, torchtitan_config

__all__ = [
    "LAUNCH_TARGETS",
    "LaunchFiles",
    "LaunchRequest",
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
    "quote",
    "script_args",
    "slurm",
    "torchrun",
    "torchtitan_config",
]

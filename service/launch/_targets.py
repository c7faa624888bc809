"""The launch targets, each registered once, and the one entry point to them shared by ``autopar search
--emit`` and the service's launch endpoint: :func:`emit_target`.

Two kinds of :class:`~service.launch._base.LaunchTarget`:

* a framework's own files (:class:`FrameworkTarget`): DeepSpeed's ``ds_config.json``, Megatron-LM's
  and Megatron-DeepSpeed's argument lists, torchtitan's config module, each with the torchrun line
  that runs it where the framework has an entry point of its own;
* a launcher (:class:`LauncherTarget`): torchrun, the deepspeed launcher, Slurm, which run the
  :data:`ENTRY_POINTS` entry of the configuration's framework.

Emission needs nothing but autopar: every target is written and checked by autopar's own code
(the flag lists and ``validate_args`` rules of the Megatron forks, DeepSpeed's config rules,
torchtitan's layout rules). :func:`verify` adds the frameworks' own validators where they are
installed (``autopar search --emit ... --check``) and says in a note which ones are not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from search import SpecError
from search._parallel_spec import FRAMEWORKS, Framework

from ._base import EntryPoint, LaunchFiles, LaunchRequest, LaunchTarget
from ._deepspeed import deepspeed_entry, emit_deepspeed
from ._launchers import deepspeed_launcher, slurm, torchrun
from ._megatron import emit_megatron, megatron_entry
from ._megatron_deepspeed import emit_megatron_deepspeed, megatron_deepspeed_entry
from ._torchtitan import emit_torchtitan, torchtitan_entry

ENTRY_POINTS: Mapping[Framework, Callable[[LaunchRequest], EntryPoint]] = {
    "deepspeed": deepspeed_entry,
    "megatron": megatron_entry,
    "megatron-deepspeed": megatron_deepspeed_entry,
    "fsdp": torchtitan_entry,
}
"""What the launchers run for each framework (the training entry point's arguments, module, environment)."""


def _refuse_other_frameworks(target: LaunchTarget, request: LaunchRequest) -> None:
    framework = request.training.framework
    if framework not in target.frameworks:
        runs = [t.name for t in TARGETS if framework in t.frameworks]
        raise SpecError("target", f"target {target.name!r} does not run {framework} configurations "
                        f"(it runs {', '.join(target.frameworks)})", f"use target {' or '.join(runs)}")


@dataclass(frozen=True, slots=True)
class FrameworkTarget:
    """A framework's files (and the torchrun line where the framework has its own entry point)."""

    name: str
    frameworks: tuple[Framework, ...]
    emitter: Callable[[LaunchRequest], LaunchFiles]

    def emit(self, request: LaunchRequest) -> LaunchFiles:
        """The emitter's files for a configuration of one of :attr:`frameworks`."""
        _refuse_other_frameworks(self, request)
        return self.emitter(request)


def _torchrun(request: LaunchRequest, entry: EntryPoint) -> LaunchFiles:
    return torchrun(request, entry.args, module=entry.module, env=entry.env)


def _slurm(request: LaunchRequest, entry: EntryPoint) -> LaunchFiles:
    return slurm(request, entry.args, module=entry.module, env=entry.env)


def _deepspeed_launcher(request: LaunchRequest, entry: EntryPoint) -> LaunchFiles:
    if entry.module is not None or entry.env:  # no framework that needs them is in its frameworks
        raise SpecError("target", "the deepspeed launcher runs a train script with the framework's environment",
                        "use target torchrun or slurm")
    return deepspeed_launcher(request, entry.args)


@dataclass(frozen=True, slots=True)
class LauncherTarget:
    """A launcher's script, which runs the :data:`ENTRY_POINTS` entry of the configuration's framework."""

    name: str
    frameworks: tuple[Framework, ...]
    launcher: Callable[[LaunchRequest, EntryPoint], LaunchFiles]

    def emit(self, request: LaunchRequest) -> LaunchFiles:
        """The launcher's files and command for the framework's entry point, with the entry point's notes."""
        _refuse_other_frameworks(self, request)
        entry = ENTRY_POINTS[request.training.framework](request)
        out = self.launcher(request, entry)
        return dataclasses.replace(out, notes=(*out.notes, *entry.notes))


TARGETS: tuple[LaunchTarget, ...] = (
    FrameworkTarget("deepspeed", ("deepspeed", "megatron-deepspeed"), emit_deepspeed),
    FrameworkTarget("megatron", ("megatron",), emit_megatron),
    FrameworkTarget("megatron-deepspeed", ("megatron-deepspeed",), emit_megatron_deepspeed),
    FrameworkTarget("torchtitan", ("fsdp",), emit_torchtitan),
    LauncherTarget("torchrun", FRAMEWORKS, _torchrun),
    LauncherTarget("deepspeed-launcher", ("deepspeed", "megatron", "megatron-deepspeed"), _deepspeed_launcher),
    LauncherTarget("slurm", FRAMEWORKS, _slurm),
)
"""Every launch target, in the order ``--emit`` and the launch endpoint list them."""

LAUNCH_TARGETS: tuple[str, ...] = tuple(t.name for t in TARGETS)
_BY_NAME: dict[str, LaunchTarget] = {t.name: t for t in TARGETS}


def launch_target(name: str) -> LaunchTarget:
    """The target called ``name`` (one of :data:`LAUNCH_TARGETS`)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SpecError("target", f"{name!r} is not a launch target",
                        f"use one of: {', '.join(LAUNCH_TARGETS)}") from None


def emit_target(request: LaunchRequest, target: str) -> LaunchFiles:
    """The files, command and notes of ``target`` (one of :data:`LAUNCH_TARGETS`) for ``request``."""
    return launch_target(target).emit(request)


def script_args(request: LaunchRequest) -> list[str]:
    """The arguments the launchers pass to the training entry point for this framework."""
    return list(ENTRY_POINTS[request.training.framework](request).args)

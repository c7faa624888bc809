"""The launch-target contract (:class:`service.launch.LaunchTarget`), run against every registered target over
every enumerated configuration of every framework: a target writes non-empty files (and a launcher a command)
for the frameworks it declares, the same files each time, and refuses every other framework by naming the
targets that run it."""

from __future__ import annotations

import pytest

from search import SpecError
from search._parallel_spec import FRAMEWORKS
from service.launch import (
    ENTRY_POINTS,
    LAUNCH_TARGETS,
    TARGETS,
    LauncherTarget,
    LaunchFiles,
    LaunchRequest,
    LaunchTarget,
    emit_target,
    launch_target,
)
from tests.service.launch.enumerated import every_framework, request_id

REQUESTS = every_framework()


def test_every_target_is_registered_once_and_every_framework_can_be_launched() -> None:
    names = [t.name for t in TARGETS]
    assert len(set(names)) == len(names) and tuple(names) == LAUNCH_TARGETS
    assert set(LAUNCH_TARGETS) >= {"deepspeed", "megatron", "megatron-deepspeed", "torchtitan", "torchrun",
                                   "deepspeed-launcher", "slurm"}
    assert set(ENTRY_POINTS) == set(FRAMEWORKS), "each framework says what the launchers run for it"
    for target in TARGETS:
        assert target.frameworks and set(target.frameworks) <= set(FRAMEWORKS), target.name
        assert launch_target(target.name) is target
    for framework in FRAMEWORKS:
        serving = [t for t in TARGETS if framework in t.frameworks]
        assert any(isinstance(t, LauncherTarget) for t in serving), framework
        assert any(not isinstance(t, LauncherTarget) for t in serving), f"{framework} has no files of its own"
    assert {r.training.framework for r in REQUESTS} == set(FRAMEWORKS), "the enumerations cover every framework"


def test_an_unknown_target_names_the_known_ones() -> None:
    with pytest.raises(SpecError, match="not a launch target") as err:
        emit_target(REQUESTS[0], "mpirun")
    assert err.value.field == "target" and all(name in err.value.fix for name in LAUNCH_TARGETS)


def _emit(target: LaunchTarget, request: LaunchRequest) -> LaunchFiles | SpecError:
    try:
        return target.emit(request)
    except SpecError as err:
        return err


@pytest.mark.parametrize("request_", REQUESTS, ids=request_id)
def test_every_target_keeps_the_contract(request_: LaunchRequest) -> None:
    framework = request_.training.framework
    refused: dict[str, SpecError] = {}
    for target in TARGETS:
        out = _emit(target, request_)
        if framework not in target.frameworks:
            assert isinstance(out, SpecError), f"{target.name} emitted a {framework} configuration it does not run"
            assert out.field == "target" and framework in out.problem, (target.name, out)
            assert all(t.name in out.fix for t in TARGETS if framework in t.frameworks), (target.name, out.fix)
            continue
        if isinstance(out, SpecError):
            assert out.field != "target", f"{target.name} declares {framework} but refuses it: {out}"
            refused[target.name] = out
            continue
        assert out.files and all(out.files.values()), f"{target.name}: an empty file in {sorted(out.files)}"
        if isinstance(target, LauncherTarget):
            assert out.command, f"{target.name}: a launcher without a command"
        assert out == target.emit(request_), f"{target.name}: two emissions differ"
        assert out == emit_target(request_, target.name)
    if refused:  # a configuration the framework cannot run: every launcher of its entry point refuses it too
        launchers = {t.name for t in TARGETS if isinstance(t, LauncherTarget) and framework in t.frameworks}
        assert launchers <= set(refused), f"{sorted(refused)} refuse it, {sorted(launchers - set(refused))} do not"

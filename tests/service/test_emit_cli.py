"""``autopar search ... --emit``: the launch files of a ranked configuration, written and valid."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from service.cli import main
from service.launch import check_ds_config

SMALL = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64", "--top", "3"]


def test_emit_writes_every_target_for_the_best_configuration(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "launch"
    code = main([*SMALL, "--framework", "deepspeed", "--emit", "deepspeed,torchrun,deepspeed-launcher,slurm",
                 "--out", str(out), "--hosts", "gpu-a"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["ds_config.json", "hostfile", "job.sbatch", "launch_torchrun.sh"]
    cfg = json.loads((out / "ds_config.json").read_text())
    check_ds_config(cfg, dp=cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"]
                                                        * cfg["gradient_accumulation_steps"]))
    assert (out / "hostfile").read_text().strip() == "gpu-a slots=8"
    stdout = capsys.readouterr().out
    torchrun = next(line for line in stdout.splitlines() if line.startswith("torchrun: "))
    argv = shlex.split(torchrun.removeprefix("torchrun: "))
    assert argv[:3] == ["torchrun", "--nnodes", "1"] and "--deepspeed_config" in argv


@pytest.mark.parametrize(("extra", "needle"), [
    (["--emit", "megatron-lm"], "--emit"),
    (["--emit", "deepspeed", "--rank", "9"], "--rank"),
    (["--emit", "torchrun", "--nodes", "1:2"], "node range"),
    (["--emit", "torchrun", "--hosts", "a,b"], "--hosts"),
])
def test_emit_errors_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                               needle: str) -> None:
    assert main([*SMALL, "--framework", "deepspeed", "--out", str(tmp_path), *extra]) == 2
    assert needle in capsys.readouterr().err


def test_emit_megatron_writes_checked_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from service.launch import check_megatron_args

    out = tmp_path / "launch"
    assert main([*SMALL, "--framework", "megatron", "--emit", "megatron", "--out", str(out)]) == 0
    argv = (out / "megatron_args.txt").read_text().split()
    check_megatron_args(argv, world_size=8)
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("megatron: "))
    assert shlex.split(command.removeprefix("megatron: "))[-len(argv):] == argv

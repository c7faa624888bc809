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
    assert sorted(p.name for p in out.iterdir()) == ["ds_config.json", "hostfile", "job.sbatch", "launch_deepspeed.sh",
                                                     "launch_torchrun.sh"]
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
    argv = (out / "megatron_args.txt").read_text().splitlines()
    check_megatron_args(argv, world_size=8)
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("megatron: "))
    assert shlex.split(command.removeprefix("megatron: "))[-len(argv):] == argv


def test_emit_megatron_deepspeed_writes_args_and_a_matching_ds_config(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from service.launch import check_megatron_deepspeed_args

    out = tmp_path / "launch"
    assert main([*SMALL, "--framework", "megatron-deepspeed", "--emit", "megatron-deepspeed,torchrun",
                 "--out", str(out)]) == 0
    argv = (out / "megatron_deepspeed_args.txt").read_text().splitlines()
    cfg = json.loads((out / "ds_config.json").read_text())
    check_megatron_deepspeed_args(argv, world_size=8, ds_zero_stage=cfg["zero_optimization"]["stage"])
    torchrun = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("torchrun: "))
    assert shlex.split(torchrun.removeprefix("torchrun: "))[-len(argv):] == argv


def test_emit_torchtitan_for_an_fsdp_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torchtitan runs llama3 flavors: the config module lands in --out and the torchrun line runs
    -m torchtitan.train with it, PYTHONPATH pointing at the script's own directory."""
    out = tmp_path / "launch"
    args = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "64", "--top", "1",
            "--framework", "fsdp", "--emit", "torchtitan,torchrun", "--out", str(out)]
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == ["autopar_torchtitan.py", "launch_torchrun.sh"]
    compile((out / "autopar_torchtitan.py").read_text(), "autopar_torchtitan.py", "exec")
    script = (out / "launch_torchrun.sh").read_text()
    assert 'export PYTHONPATH="${LAUNCH_DIR:-.}${PYTHONPATH:+:$PYTHONPATH}"' in script  # no emitting-host path
    assert str(tmp_path) not in script
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("torchrun: "))
    argv = shlex.split(line.removeprefix("torchrun: "))
    assert argv[argv.index("-m") + 1:] == ["torchtitan.train", "--module", "autopar_torchtitan", "--config", "autopar"]


def test_check_runs_the_frameworks_own_validators_where_installed(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--check: DeepSpeed's config classes and torchtitan's ConfigManager run on the files (skipped where the
    test environment lacks them; their absence is covered by test_emit_without_frameworks.py)."""
    pytest.importorskip("deepspeed")
    pytest.importorskip("torchtitan.config")
    out = tmp_path / "launch"
    assert main([*SMALL, "--framework", "deepspeed", "--emit", "deepspeed", "--out", str(out), "--check"]) == 0
    assert "checked: DeepSpeed's DeepSpeedZeroConfig and DeepSpeedConfig accept ds_config.json" in (
        capsys.readouterr().err)
    args = ["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "64", "--top", "1",
            "--framework", "fsdp", "--emit", "torchtitan", "--out", str(out), "--check"]
    assert main(args) == 0
    assert "checked: torchtitan's ConfigManager builds autopar_torchtitan.py's config" in capsys.readouterr().err

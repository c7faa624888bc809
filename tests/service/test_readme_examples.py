"""The README's command-line examples produce what the README says they produce.

Every ``autopar --version|presets|predict|search`` line of the README's bash blocks runs here
(``autopar search ... --json`` repeats the block's first command with the extra options, as the
README means it); only ``--storage`` (a PostgreSQL server) and the sketches of the profile section
(``autopar predict ... --profile hw.json``) are left out, and ``--out`` is moved to a temporary
directory."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from service.cli import main

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
COMMANDS = ("--version", "presets", "predict", "search")


def readme_commands() -> list[list[str]]:
    """The argv of each example, ``...`` expanded to the block's first command of the same subcommand."""
    out: list[list[str]] = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        full: dict[str, list[str]] = {}
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith("autopar "):
                continue
            words = shlex.split(line, comments=True)
            if len(words) < 2 or words[0] != "autopar" or words[1] not in COMMANDS:
                continue
            argv = words[1:]
            if "..." in argv:
                if argv[0] not in full:  # `autopar predict ... --profile hw.json`: a sketch, not a command
                    continue
                i = argv.index("...")
                argv = [*full[argv[0]], *argv[i + 1:]]
            else:
                full.setdefault(argv[0], argv)
            if "--storage" not in argv:
                out.append(argv)
    return out


EXAMPLES = readme_commands()


def test_the_readme_has_examples_of_each_command() -> None:
    assert {argv[0] for argv in EXAMPLES} == set(COMMANDS)
    assert any("--emit" in argv for argv in EXAMPLES) and any("--json" in argv for argv in EXAMPLES)


@pytest.mark.parametrize("argv", EXAMPLES, ids=lambda a: " ".join(a)[:90])
def test_readme_example(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # the examples name files relative to a clone (examples/...)
    if "--out" in argv:
        argv = [*argv[:argv.index("--out") + 1], str(tmp_path / "launch"), *argv[argv.index("--out") + 2:]]
    assert main(argv) == 0
    out = capsys.readouterr().out
    if argv[0] == "predict":
        if "--json" in argv:
            assert json.loads(out)["feasible"] is True
        else:  # "one line naming the model, the cluster and the configuration ... and feasible"
            lines = out.splitlines()
            model = argv[argv.index("--model") + 1]
            name = Path(model).stem if model.endswith(".json") else model  # a model file's name is its stem
            verdict = [line for line in lines if not line.startswith("warning: ")][-1]  # warnings follow it
            assert lines[0].startswith(f"{name} on ") and verdict == "feasible"
    if argv[0] == "search":
        assert "NO FEASIBLE" not in out
        if "--json" in argv:
            json.loads(out)
        elif "--versus" in argv:
            assert "best configuration per cluster" in out and "nvlink" in out
        elif ":" in argv[len(argv) - argv[::-1].index("--nodes")]:  # the last --nodes wins
            assert "best configuration per cluster size" in out and "GPU-hours" in out
        else:
            assert re.search(r"top \d+ by (throughput|cost|pareto)", out)
        if "--emit" in argv:
            args = (tmp_path / "launch" / "megatron_args.txt").read_text()
            assert "${" not in args  # the recipe file and the flags left nothing to the environment
            assert "--lr\n0.0002\n" in args and "--rotary-base\n500000\n" in args
            assert {"launch_torchrun.sh", "job.sbatch"} <= {p.name for p in (tmp_path / "launch").iterdir()}

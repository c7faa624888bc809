"""Command-line conventions: --version, exit codes (0 answered, 2 bad input, 3 nothing feasible, 130
interrupted), a reader that closes the pipe early, tables that fit the terminal, models from files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import service._cli_output as cli_output
from search import MODEL_PRESETS
from service import cli
from service._spec_files import load_model
from service.cli import main

ROOT = Path(__file__).parents[2]
LLAMA31 = ROOT / "examples" / "hf" / "llama-3.1-8b"
PREDICT = ["--cluster", "dgx-h100", "--tp", "8", "--micro-batch", "1", "--global-batch", "64",
           "--recompute", "selective", "--sp", "--zero-stage", "1"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("autopar ") and out.split()[1][0].isdigit()


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["search", "--help"], ["predict", "--help"]):
        assert main(argv) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "exit status: 0 answered; 2 bad input" in text and "3 nothing feasible" in text
        assert "130 interrupted" in text


def test_closed_pipe_is_quiet() -> None:
    """`autopar presets --json | head -1`: the reader leaves early; no traceback, exit 141 (SIGPIPE's)."""
    child = subprocess.Popen([sys.executable, "-m", "service.cli", "presets", "--json"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # before the child has written anything: its first write meets a closed pipe
    with child.stderr:
        err = child.stderr.read()
    assert child.wait(timeout=60) == 141
    assert err == b""
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m service.cli presets --json | head -1"],
                          cwd=ROOT, capture_output=True, check=False)
    assert done.stdout == b"{\n" and b"Traceback" not in done.stderr and b"Error" not in done.stderr


def test_infeasible_prediction_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama3-70b", *PREDICT]) == 3
    assert "NOT feasible" in capsys.readouterr().out
    assert main(["predict", "--model", "llama3-8b", *PREDICT]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("feasible") and "NOT feasible" not in out
    assert main(["predict", "--model", "llama3-70b", *PREDICT, "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["feasible"] is False


def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "llama3-8b", *PREDICT, "--tp", "3"]) == 2
    assert capsys.readouterr().err.startswith("autopar: error: ")
    assert main(["predict", "--model", "llama3-8b"]) == 2  # usage: --cluster missing


def test_interrupt_exits_130(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_presets", interrupted)
    assert main(["presets"]) == 130
    assert capsys.readouterr().err == "autopar: interrupted\n"


def test_preset_json_entries_are_model_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    for name, entry in models.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(entry))
        assert load_model(str(path)) == MODEL_PRESETS[name]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**models["llama3-8b"], "params": 7}))
    assert main(["predict", "--model", str(wrong), *PREDICT]) == 2
    assert "params" in capsys.readouterr().err


def test_seq_len_and_hf_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert load_model("llama3-8b", 4096).seq_len == 4096
    assert main(["predict", "--model", f"hf:{LLAMA31}", "--seq-len", "8192", *PREDICT]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("llama-3.1-8b on ") and err == ""
    assert main(["predict", "--model", f"hf:{LLAMA31 / 'config.json'}", *PREDICT]) in (0, 3)
    assert "seq_len = max_position_embeddings (131072)" in capsys.readouterr().err
    mixtral = ROOT / "examples/hf/mixtral-8x7b"
    assert main(["predict", "--model", f"hf:{mixtral}", "--seq-len", "4096", *PREDICT]) in (0, 3)
    assert capsys.readouterr().out.startswith("mixtral-8x7b on ")  # a mixture of experts, read as one
    windowed = tmp_path / "config.json"
    windowed.write_text(json.dumps({**json.loads((mixtral / "config.json").read_text()), "sliding_window": 1024}))
    assert main(["predict", "--model", f"hf:{windowed}", "--seq-len", "4096", *PREDICT]) == 2
    assert "sliding_window" in capsys.readouterr().err


def test_ranked_table_fits_the_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64", "--top", "5"]
    monkeypatch.setattr(cli_output, "output_width", lambda: 100)
    assert main(argv) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 100
    assert "bottleneck" not in "".join(table) and "--wide shows every column" in out
    assert main([*argv, "--wide"]) == 0
    out = capsys.readouterr().out
    assert "bottleneck" in out and "left out" not in out

"""The ``autopar`` command line, called in-process through ``main`` and once as a real program."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from search._model_presets import MODEL_PRESETS
from service.cli import main

REPO = Path(__file__).resolve().parents[2]

# GPT-3 175B on 1024 A100s as in Narayanan et al. 2021 (arXiv:2104.04473) Table 1.
GPT3_ON_A100 = [
    "predict", "--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--nodes", "128",
    "--tp", "8", "--pp", "16", "--dp", "8", "--micro-batch", "1", "--global-batch", "1536",
    "--recompute", "full", "--precision", "fp16",
]

# A GPT-3 XL-shaped model (Brown et al. 2020 Table 2.1), written as a user's JSON file would be.
SMALL_MODEL = {
    "name": "gpt-1.3b", "layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 50304, "seq_len": 2048,
}


def write_json(path: Path, data: object) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def small_predict(model: str, *extra: str) -> list[str]:
    """One dgx-a100-80gb node, tp=2, dp derived (= 4) unless ``extra`` says otherwise."""
    return ["predict", "--model", model, "--cluster", "dgx-a100-80gb", "--tp", "2", "--global-batch", "32", *extra]


def test_predict_preset_prints_iteration_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(GPT3_ON_A100) == 0
    out, err = capsys.readouterr()
    header, _, body = out.partition("\n")
    assert "gpt3-175b" in header and "dgx-a100-80gb" in header
    assert "128 x 8 = 1024 GPUs" in header and "dp=8 tp=8 pp=16" in header
    assert "iteration time" in body and "time breakdown" in body
    assert err == ""


def test_predict_json_breakdown_adds_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*GPT3_ON_A100, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    total = result["iteration_time_s"]
    assert total > 0
    assert result["num_micro_batches"] == 1536 // 8
    assert math.isclose(math.fsum(result["time_breakdown_s"].values()), total, rel_tol=1e-9, abs_tol=0.0)
    assert result["bottleneck"] in result["time_breakdown_s"]


def test_tp_that_does_not_divide_heads_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    # 5 nodes = 40 GPUs = dp 8 * tp 5, but 5 does not divide GPT-3's 96 heads.
    argv = ["predict", "--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--nodes", "5",
            "--tp", "5", "--dp", "8", "--global-batch", "1536"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("autopar: error: ParallelConfig.tp: 5 does not divide heads=96")
    assert "Traceback" not in err


def test_unknown_model_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(small_predict("gpt-5-giant")) == 2
    err = capsys.readouterr().err
    assert err.startswith("autopar: error: ") and "'gpt-5-giant'" in err
    assert MODEL_PRESETS, "no model presets to list"
    for name in MODEL_PRESETS:
        assert name in err


def test_unknown_cluster_lists_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--model", "gpt3-175b", "--cluster", "dgx-z", "--global-batch", "8"]) == 2
    err = capsys.readouterr().err
    assert "'dgx-z'" in err and "dgx-a100-80gb" in err and "dgx-h100" in err


def test_model_from_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(tmp_path / "xl.json", SMALL_MODEL)
    assert main(small_predict(path)) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpt-1.3b on dgx-a100-80gb, 1 x 8 = 8 GPUs")
    assert "iteration time" in out


def test_model_file_without_name_takes_the_stem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(tmp_path / "my-model.json", {k: v for k, v in SMALL_MODEL.items() if k != "name"})
    assert main(small_predict(path)) == 0
    assert capsys.readouterr().out.startswith("my-model on ")


def test_cluster_from_json_file_matches_the_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets", "--json"]) == 0
    preset = json.loads(capsys.readouterr().out)["clusters"]["dgx-a100-80gb"]
    path = write_json(tmp_path / "mine.json", {**preset, "num_nodes": 2})
    model = write_json(tmp_path / "xl.json", SMALL_MODEL)
    common = ["--model", model, "--tp", "2", "--global-batch", "64", "--json"]
    assert main(["predict", "--cluster", path, *common]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["predict", "--cluster", "dgx-a100-80gb", "--nodes", "2", *common]) == 0
    from_preset = json.loads(capsys.readouterr().out)
    assert from_file == from_preset


@pytest.mark.parametrize("option", ["--model", "--cluster"])
def test_missing_file_exits_2(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.json")
    argv = ["predict", "--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--global-batch", "8", option, missing]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"autopar: error: {option}: file {missing} does not exist")
    assert "Traceback" not in err


def test_invalid_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"layers": 24,', encoding="utf-8")
    assert main(small_predict(str(path))) == 2
    assert "is not valid JSON" in capsys.readouterr().err


def test_misspelt_field_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(tmp_path / "typo.json", {**SMALL_MODEL, "hiden": 2048})
    assert main(small_predict(path)) == 2
    err = capsys.readouterr().err
    assert "unknown field(s) hiden" in err


def test_invalid_field_value_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_json(tmp_path / "bad.json", {**SMALL_MODEL, "layers": 0})
    assert main(small_predict(path)) == 2
    assert "ModelSpec.layers" in capsys.readouterr().err


def test_dp_is_derived_from_the_world_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_json(tmp_path / "xl.json", SMALL_MODEL)
    assert main(small_predict(model, "--nodes", "4", "--pp", "2")) == 0
    assert "4 x 8 = 32 GPUs: dp=8 tp=2 pp=2 " in capsys.readouterr().out


def test_non_integral_dp_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_json(tmp_path / "xl.json", SMALL_MODEL)
    assert main(small_predict(model, "--pp", "3")) == 2
    err = capsys.readouterr().err
    assert err.startswith("autopar: error: ParallelConfig.dp: cannot derive dp")
    assert "8 GPUs are not divisible by tp*pp*cp = 2*3*1 = 6" in err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(small_predict("gpt3-175b", "--recompute", "sometimes")) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_presets_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["presets"]) == 0
    table = capsys.readouterr().out
    for name in [*MODEL_PRESETS, "dgx-a100-80gb", "dgx-h100"]:
        assert name in table
    assert main(["presets", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert set(listed["models"]) == set(MODEL_PRESETS)
    assert listed["models"]["gpt3-175b"]["params"] == MODEL_PRESETS["gpt3-175b"].params


def test_console_script_runs(tmp_path: Path) -> None:
    script = shutil.which("autopar", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "service.cli"]
    done = subprocess.run([*command, *GPT3_ON_A100, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["iteration_time_s"] > 0
    bad = subprocess.run([*command, "predict", "--model", str(tmp_path / "none.json"), "--cluster", "dgx-h100",
                          "--global-batch", "8"], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=False, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2
    assert bad.stderr.startswith("autopar: error: --model: file ") and "Traceback" not in bad.stderr

"""``autopar search``, called in-process through ``service.cli.main``."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from search import (
    Fingerprint,
    GemmSample,
    HardwareProfile,
    ParallelConfig,
    SpecError,
    TrainingSpec,
    apply_profile,
    cluster_preset,
    model_preset,
    predict,
)
from service._search_cli import OBJECTIVES, _ProgressBar, parse_nodes
from service.cli import main

# Megatron-LM's 1.7B GPT (Narayanan et al. 2021 Table 1) on one 8-GPU A100 node: a space small
# enough to sweep exhaustively in well under a second.
SMALL = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64",
         "--framework", "megatron"]
# 1T parameters need ~18 TB of weights and optimizer state: nothing fits on 8 GPUs with Megatron.
TOO_BIG = ["search", "--model", "gpt-1t", "--cluster", "dgx-a100-80gb", "--nodes", "1", "--global-batch", "64",
           "--framework", "megatron"]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> Any:
    assert main([*argv, "--json"]) == code
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_search_prints_table_counts_and_best(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--top", "5"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    header = out.splitlines()[0]
    assert "gpt-1.7b on 1 x dgx-a100-80gb = 8 GPUs" in header and "framework megatron" in header
    for column in ("rank", "framework", "tokens/s", "MFU", "iteration s", "peak GiB", "bottleneck"):
        assert column in out
    assert "top 5 by throughput" in out
    counts = next(line for line in out.splitlines() if line.startswith("space "))
    for word in ("valid", "feasible", "timed", "(exhaustive", "study autopar-gpt-1.7b"):
        assert word in counts
    assert "best: megatron dp=" in out and "tokens/s, MFU" in out
    assert "Pareto front (tokens/s vs memory headroom):" in out
    assert "NO FEASIBLE" not in out


def test_json_top_is_ranked_and_re_predicts(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, *SMALL)
    assert result["model"] == "gpt-1.7b" and result["world_size"] == 8 and result["objective"] == "throughput"
    assert result["exhaustive"] is True
    assert 0 < result["n_evaluated"] <= result["n_feasible"] <= result["n_valid"] <= result["space_size"]
    top = result["top"]
    assert 1 <= len(top) <= 10
    assert [r["rank"] for r in top] == list(range(1, len(top) + 1))
    speeds = [r["prediction"]["tokens_per_s"] for r in top if not r["equivalent_to_best"]]
    assert speeds == sorted(speeds, reverse=True)  # past the equivalents (simplest first), by throughput
    fastest = max(r["prediction"]["tokens_per_s"] for r in top)
    for r in top:
        if r["equivalent_to_best"]:
            assert r["prediction"]["tokens_per_s"] >= fastest * (1 - r["prediction"]["error_band"]) - 1e-6
    model, cluster = model_preset("gpt-1.7b"), cluster_preset("dgx-a100-80gb")
    for r in top:
        assert r["framework"] == "megatron"
        training = TrainingSpec(global_batch=64, precision="bf16", framework=r["framework"])
        again = predict(model, cluster, ParallelConfig(**r["config"]), training)
        assert again.feasible
        assert again.tokens_per_s == pytest.approx(r["prediction"]["tokens_per_s"], rel=1e-12)
        assert r["score"] == pytest.approx(again.tokens_per_s, rel=1e-12)
    assert result["pareto"], "a feasible space has a non-empty Pareto front"


def test_node_range_gives_one_row_per_power_of_two(capsys: pytest.CaptureFixture[str]) -> None:
    tokens = 300e9
    rows = run_json(capsys, *SMALL, "--nodes", "1:4", "--tokens", "300e9")
    assert [row["num_nodes"] for row in rows] == [1, 2, 4]
    assert [row["world_size"] for row in rows] == [8, 16, 32]
    for row in rows:
        assert set(row) == {"num_nodes", "world_size", "best", "time_to_train_days", "gpu_hours", "n_valid",
                            "n_feasible", "elapsed_s"}
        tps = row["best"]["prediction"]["tokens_per_s"]
        assert math.isclose(row["time_to_train_days"], tokens / tps / 86400, rel_tol=1e-12)
        assert math.isclose(row["gpu_hours"], row["world_size"] * tokens / tps / 3600, rel_tol=1e-12)
        assert 0 < row["n_feasible"] <= row["n_valid"]


def test_node_range_table_without_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--nodes", "1:2"]) == 0
    out = capsys.readouterr().out
    assert "best configuration per cluster size" in out and "days" not in out
    assert sum("megatron dp=" in line for line in out.splitlines()) == 2


def test_node_range_json_has_no_time_without_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, *SMALL, "--nodes", "1:2")
    assert [(row["time_to_train_days"], row["gpu_hours"]) for row in rows] == [(None, None)] * 2


@pytest.mark.parametrize(("text", "counts"), [
    ("5", [5]), ("4:4", [4]), ("1:4", [1, 2, 4]), ("8:256", [8, 16, 32, 64, 128, 256]), ("3:20", [3, 6, 12, 20]),
])
def test_parse_nodes(text: str, counts: list[int]) -> None:
    assert parse_nodes(text) == counts


@pytest.mark.parametrize("text", ["8:", ":8", "a:b", "8:4", "0:4", "0", "1:2:3", "-1", "2.5", ""])
def test_bad_nodes_exits_2(capsys: pytest.CaptureFixture[str], text: str) -> None:
    assert main([*SMALL, "--nodes", text]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("autopar: error: --nodes: ") and "Traceback" not in err
    with pytest.raises(SpecError):
        parse_nodes(text)


def test_cost_objective_without_price_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--objective", "cost"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("autopar: error: --price-per-gpu-hour: ") and "price" in err


def test_cost_objective_ranks_by_dollars_per_token(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, *SMALL, "--objective", "cost", "--price-per-gpu-hour", "2.0")
    scores = [r["score"] for r in result["top"] if not r["equivalent_to_best"]]
    assert scores == sorted(scores)
    best = min(result["top"], key=lambda r: r["score"])
    assert math.isclose(best["score"], 2.0 * 8 / 3600 / best["prediction"]["tokens_per_s"] * 1e6, rel_tol=1e-12)
    assert main([*SMALL, "--objective", "cost", "--price-per-gpu-hour", "2.0"]) == 0
    assert "$/M tokens" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [
    ["--top", "0"], ["--tokens", "-1"], ["--price-per-gpu-hour", "0"], ["--storage", "sqlite:///x.db"],
    ["--global-batch", "0"],
])
def test_bad_options_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    assert main([*SMALL, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("autopar: error: --")


def test_missing_model_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["search", "--model", str(tmp_path / "nope.json"), "--cluster", "dgx-a100-80gb", "--global-batch", "8"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("autopar: error: --model: file ")


def test_nothing_fits_is_said_plainly_with_hints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(TOO_BIG) == 3  # nothing feasible: a CI step can tell
    out, err = capsys.readouterr()
    assert err == ""
    assert "NO FEASIBLE CONFIGURATION: none of the" in out and "gpt-1t" in out
    assert "feasible 0," in out
    assert "hint: closest: megatron" in out
    assert "rank" not in out  # no empty table
    result = run_json(capsys, *TOO_BIG, code=3)
    assert result["top"] == [] and result["n_feasible"] == 0 and result["hints"]


def without_elapsed(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: without_elapsed(v) for k, v in data.items() if k != "elapsed_s"}
    if isinstance(data, list):
        return [without_elapsed(v) for v in data]
    return data


def test_same_seed_same_answer_exhaustive(capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json(capsys, *SMALL, "--seed", "7")
    second = run_json(capsys, *SMALL, "--seed", "7")
    assert without_elapsed(first) == without_elapsed(second)


def test_same_seed_same_answer_sampled(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--seed", "3", "--trials", "40"]
    first = run_json(capsys, *argv)
    second = run_json(capsys, *argv)
    assert first["exhaustive"] is False and first["n_evaluated"] <= first["n_valid"]
    assert without_elapsed(first) == without_elapsed(second)


def write_profile(path: Path, days_old: float) -> str:
    fingerprint = Fingerprint(
        gpu_name="NVIDIA A100-SXM4-80GB", gpu_count=8, gpus_per_node=8,
        created_at=(datetime.now(UTC) - timedelta(days=days_old)).isoformat(), driver="550.54.15", cuda="12.4",
        nccl="2.21.5", torch="2.13.0", cpu_model="AMD EPYC 7742", cpu_memory_bytes=2**40, hostnames=("node-a",),
    )
    n = 8192
    profile = HardwareProfile(fingerprint=fingerprint, gemm=(GemmSample(n, n, n, "bf16", 2.0 * n**3 / 200e12),))
    path.write_text(profile.to_json(), encoding="utf-8")
    return str(path)


def test_profile_is_applied_as_predict_applies_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path / "profile.json", days_old=400)
    assert main([*SMALL, "--profile", path, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "autopar: warning: stale profile: measured 400 days ago" in err
    assert "autopar: warning: no intra-node all-reduce measurement" in err
    best = json.loads(out)["top"][0]
    cluster, _notes = apply_profile(cluster_preset("dgx-a100-80gb"), HardwareProfile.load(path))
    training = TrainingSpec(global_batch=64, precision="bf16", framework="megatron")
    again = predict(model_preset("gpt-1.7b"), cluster, ParallelConfig(**best["config"]), training)
    assert again.tokens_per_s == pytest.approx(best["prediction"]["tokens_per_s"], rel=1e-12)
    plain = run_json(capsys, *SMALL)["top"][0]["prediction"]["tokens_per_s"]
    assert plain != pytest.approx(again.tokens_per_s)  # the measured 200 TFLOP/s changed the answer


def test_profile_warnings_are_said_once_per_range(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_profile(tmp_path / "profile.json", days_old=400)
    assert main([*SMALL, "--nodes", "1:2", "--profile", path, "--json"]) == 0
    err = capsys.readouterr().err
    assert err.count("stale profile: measured 400 days ago") == 1


def test_objectives_match_the_search() -> None:
    from search._search import OBJECTIVES as SEARCH_OBJECTIVES

    assert SEARCH_OBJECTIVES == OBJECTIVES


def test_progress_bar_only_where_it_helps(capsys: pytest.CaptureFixture[str]) -> None:
    with _ProgressBar("small sweep", quiet=False) as bar:
        bar(10, 100)
    with _ProgressBar("large sweep, json", quiet=True) as bar:
        bar(10, 50_000)
    assert capsys.readouterr() == ("", "")
    with _ProgressBar("large sweep", quiet=False) as bar:
        bar(25_000, 50_000)
        bar(50_000, 50_000)
    out, err = capsys.readouterr()
    assert out == "" and "large sweep" in err and "100%" in err


@pytest.mark.slow  # SQLite storage: ~15 s for the 42 trials
def test_shared_storage_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    argv = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "8",
            "--framework", "deepspeed", "--storage", url, "--study-name", "cli-test"]
    result = run_json(capsys, *argv)
    assert result["study_name"] == "cli-test" and result["exhaustive"] is True
    assert result["n_evaluated"] == result["n_valid"]

"""``--grad-reduce-in-bf16`` (Megatron-Core's option: a bf16 gradient buffer) on ``autopar predict`` and
``autopar search`` (its ranking, ``--versus`` and ``--emit``), and the refused combinations as the
one-line error with status 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict, search
from service._search_cli import versus_cluster
from service.cli import main

PREDICT = ["predict", "--model", "llama3-70b", "--cluster", "dgx-h100", "--nodes", "8", "--tp", "8", "--pp", "2",
           "--sp", "--zero-stage", "1", "--recompute", "selective", "--global-batch", "512"]
CONFIG = ParallelConfig(dp=4, tp=8, pp=2, sp=True, micro_batch=1, zero_stage=1, recompute="selective")
SEARCH = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64", "--top", "3"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> Any:
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def test_predict_takes_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    flagged = _json([*PREDICT, "--grad-reduce-in-bf16", "--json"], capsys)
    plain = _json([*PREDICT, "--json"], capsys)
    expected = predict(model_preset("llama3-70b"), cluster_preset("dgx-h100", 8), CONFIG,
                       TrainingSpec(512, grad_reduce_in_bf16=True))
    flagged.pop("calibration")
    assert flagged == expected.to_dict()
    grads = flagged["memory_breakdown_bytes"]["gradients"]
    assert grads > 0 and grads == plain["memory_breakdown_bytes"]["gradients"] / 2
    assert main([*PREDICT, "--grad-reduce-in-bf16"]) == 0
    assert " bf16 grad-reduce-in-bf16 megatron" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize(("extra", "problem"), [
    (["--framework", "deepspeed"], "is a Megatron-Core option, not deepspeed's"),
    (["--framework", "fsdp"], "is a Megatron-Core option, not fsdp's"),
    (["--precision", "fp16"], "fp16 training already reduces its gradients in fp16"),
])
def test_predict_refuses_the_combinations_trainingspec_refuses(extra: list[str], problem: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PREDICT, *extra, "--grad-reduce-in-bf16"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"autopar: error: TrainingSpec.grad_reduce_in_bf16: {problem}") and err.count("\n") == 1


def test_search_takes_the_flag_and_ranks_megatron_alone(capsys: pytest.CaptureFixture[str]) -> None:
    result = _json([*SEARCH, "--grad-reduce-in-bf16", "--json"], capsys)
    expected = search(model_preset("gpt-1.7b"), cluster_preset("dgx-a100-80gb"), 64, top_k=3,
                      grad_reduce_in_bf16=True)
    assert result["framework"] == "megatron" and {r["framework"] for r in result["top"]} == {"megatron"}
    assert [(r["config"], r["prediction"]) for r in result["top"]] == [
        (e.to_dict()["config"], e.prediction.to_dict()) for e in expected.top]
    plain = _json([*SEARCH, "--framework", "megatron", "--json"], capsys)
    assert result["n_feasible"] >= plain["n_feasible"]
    assert [r["prediction"] for r in result["top"]] != [r["prediction"] for r in plain["top"]]
    assert main([*SEARCH, "--grad-reduce-in-bf16"]) == 0
    assert "global batch 64, bf16 (gradients reduced in bf16), framework megatron" in capsys.readouterr().out


def test_versus_searches_every_cluster_with_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(["search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "32",
                  "--top", "3", "--grad-reduce-in-bf16", "--versus", "dgx-a100-80gb", "--json"], capsys)
    model = model_preset("llama3-8b")
    for row, cluster in zip(rows, (cluster_preset("dgx-h100", 2), versus_cluster("dgx-a100-80gb", 16)), strict=True):
        best = search(model, cluster, 32, top_k=3, grad_reduce_in_bf16=True).best
        assert best is not None and row["best"]["framework"] == "megatron"
        assert row["best"]["prediction"] == best.prediction.to_dict()


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed", "fsdp"])
def test_search_refuses_a_runtime_without_the_option(framework: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SEARCH, "--framework", framework, "--grad-reduce-in-bf16"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"autopar: error: grad_reduce_in_bf16: is a Megatron-Core option (--grad-reduce-in-bf16), "
                          f"not {framework}'s; ") and err.count("\n") == 1


def test_search_refuses_fp16_with_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SEARCH, "--precision", "fp16", "--grad-reduce-in-bf16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autopar: error: TrainingSpec.grad_reduce_in_bf16: fp16 training already reduces")


def test_emit_writes_the_flag_exactly_when_the_search_assumed_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from service.launch import check_megatron_args

    for flag, out in ((["--grad-reduce-in-bf16"], tmp_path / "flagged"), ([], tmp_path / "plain")):
        assert main([*SEARCH, "--framework", "megatron", *flag, "--emit", "megatron", "--out", str(out)]) == 0
        argv = (out / "megatron_args.txt").read_text().splitlines()
        check_megatron_args(argv, world_size=8)
        assert ("--grad-reduce-in-bf16" in argv) == bool(flag)
    capsys.readouterr()

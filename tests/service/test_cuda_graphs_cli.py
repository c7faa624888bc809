"""Megatron-Core's full-iteration CUDA graph on the command line: ``autopar predict --cuda-graphs`` costs the
configuration with it, ``autopar search --cuda-graphs`` ranks the configurations that run it (a column where a
top configuration has one; ``--json`` carries it) and refuses it for another runtime."""

from __future__ import annotations

import json

import pytest

import service.cli as cli

PREDICT = ("predict", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tp", "2", "--sp", "--zero-stage", "1",
           "--global-batch", "64", "--json")
SEARCH = ("search", "--model", "llama3-8b", "--cluster", "dgx-h100", "--global-batch", "64", "--top", "5")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_predict_costs_the_graph_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *PREDICT)
    assert code == 0, err
    eager = json.loads(out)
    code, out, err = _run(capsys, *PREDICT, "--cuda-graphs", "full-iteration")
    assert code == 0, err
    graphed = json.loads(out)
    assert graphed["iteration_time_s"] < eager["iteration_time_s"]  # no host overhead per micro-batch
    code, out, err = _run(capsys, *PREDICT[:-1], "--cuda-graphs", "full-iteration")
    assert code == 0 and "cuda-graph=full-iteration" in out.splitlines()[0], err
    code, out, err = _run(capsys, *PREDICT[:-1])
    assert code == 0 and "cuda-graph" not in out.splitlines()[0], err


def test_predict_refuses_an_unknown_graph_and_another_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, *PREDICT, "--cuda-graphs", "transformer_engine")
    assert code == 2 and "invalid choice" in err
    code, _, err = _run(capsys, *PREDICT, "--cuda-graphs", "full-iteration", "--framework", "megatron-deepspeed")
    assert code != 0 and "cuda_graphs" in err, err


def test_search_ranks_graphed_configurations_and_shows_the_graph(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, *SEARCH, "--cuda-graphs", "full-iteration", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["framework"] == "megatron"  # 'any' narrows to the runtime that has the graph
    graphs = {r["config"]["cuda_graphs"] for r in result["top"]}
    assert "full-iteration" in graphs
    for r in result["top"]:  # Megatron-FSDP (ZeRO-2/3) runs without it: untested
        assert (r["config"]["cuda_graphs"] == "full-iteration") == (r["config"]["zero_stage"] < 2), r["config"]
    code, out, err = _run(capsys, *SEARCH, "--cuda-graphs", "full-iteration", "--wide")
    assert code == 0 and "cuda graph" in out and "full-iteration" in out, err
    code, out, err = _run(capsys, *SEARCH, "--framework", "megatron", "--wide")
    assert code == 0 and "cuda graph" not in out, err  # no column where no configuration has one


def test_search_refuses_the_graph_for_another_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, *SEARCH, "--cuda-graphs", "full-iteration", "--framework", "deepspeed")
    assert code == 2 and "cuda_graphs" in err and "Megatron-Core" in err

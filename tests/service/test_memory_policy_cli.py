"""``autopar predict`` takes the fine-grained memory policies, tiling and the host safety factor
(issues 18 and 20), and refuses what a runtime does not run with exit 2 naming the field."""

from __future__ import annotations

import json

import pytest

from service.cli import main

LLAMA_2_NODES = ["predict", "--model", "llama3-70b", "--seq-len", "8192", "--cluster", "dgx-a100-40gb", "--nodes", "2",
                 "--tp", "8", "--pp", "2", "--sp", "--zero-stage", "1", "--global-batch", "512"]
GPT_2T_512_V100 = ["predict", "--model", "gpt3-175b", "--cluster", "dgx-2", "--nodes", "32", "--zero-stage", "3",
                   "--offload-optimizer", "cpu", "--offload-param", "cpu", "--recompute", "full",
                   "--global-batch", "512", "--framework", "deepspeed", "--precision", "fp16"]


def test_partial_policies_reach_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    main([*LLAMA_2_NODES, "--offload-optimizer", "cpu", "--recompute", "full", "--json"])
    whole = json.loads(capsys.readouterr().out)
    main([*LLAMA_2_NODES, "--offload-optimizer", "cpu", "--offload-fraction", "0.5", "--recompute", "full",
          "--recompute-layers", "17", "--json"])
    part = json.loads(capsys.readouterr().out)
    assert part["cpu_memory_breakdown_bytes"]["optimizer_states"] == pytest.approx(
        0.5 * whole["cpu_memory_breakdown_bytes"]["optimizer_states"])
    assert part["time_breakdown_s"]["recompute"] == pytest.approx(17 / 40 * whole["time_breakdown_s"]["recompute"])
    main([*LLAMA_2_NODES, "--offload-optimizer", "cpu", "--offload-fraction", "0.5", "--recompute", "full",
          "--recompute-layers", "17"])
    header = capsys.readouterr().out.splitlines()[0]
    assert "offload-fraction=0.5" in header and "recompute-layers=17" in header


def test_host_safety_factor_is_required_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    main([*GPT_2T_512_V100, "--json"])
    plain = json.loads(capsys.readouterr().out)
    main([*GPT_2T_512_V100, "--host-safety-factor", "1.5", "--json"])
    strict = json.loads(capsys.readouterr().out)
    assert "safety_margin" not in plain["cpu_memory_breakdown_bytes"]
    assert strict["cpu_memory_bytes_per_node"] - plain["cpu_memory_bytes_per_node"] == pytest.approx(
        plain["host_estimator_margin_bytes"])


@pytest.mark.parametrize(("extra", "field"), [
    (["--activation-offload-layers", "4"], "activation_offload_layers"),  # pp 2
    (["--pp", "1", "--tiles", "4", "--zero-stage", "3"], "tiles"),  # Megatron has no tiling
    (["--offload-fraction", "0.5"], "optimizer_offload_fraction"),  # no optimizer offload
])
def test_refusals_exit_2_naming_the_field(capsys: pytest.CaptureFixture[str], extra: list[str], field: str) -> None:
    assert main([*LLAMA_2_NODES, *extra]) == 2
    assert field in capsys.readouterr().err

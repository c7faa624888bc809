"""Megatron-Core's full-iteration CUDA graph (ParallelConfig.cuda_graphs): what it removes from the
step (the per-micro-batch host overhead, nothing else), which runtimes and layouts may run it (the
support matrix), and how the published runs that ran it are read."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, check_compatible, cluster_preset, model_preset, predict
from search._calibration import default_calibration
from search._runs_file import RecordRefused, run_from_record
from search._support import support_status, support_warnings

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
LLAMA = model_preset("llama3-8b")
DSV3 = model_preset("deepseek-v3")
BF16 = TrainingSpec(global_batch=256)
FP8 = TrainingSpec(global_batch=8192, precision="fp8")


def test_a_full_iteration_graph_removes_the_host_overhead_of_every_micro_batch_and_nothing_else() -> None:
    cluster = cluster_preset("dgx-h100", 2)
    eager = ParallelConfig(dp=4, tp=2, pp=2, micro_batch=2, zero_stage=1, sp=True)
    graphed = dataclasses.replace(eager, cuda_graphs="full-iteration")
    a, b = predict(LLAMA, cluster, eager, BF16), predict(LLAMA, cluster, graphed, BF16)
    cal = default_calibration()
    assert a.num_micro_batches == 32
    assert a.time_breakdown_s["host_overhead"] == pytest.approx(32 * cal.microbatch_overhead_s, rel=1e-9)
    assert b.time_breakdown_s["host_overhead"] == 0.0
    for term, seconds in a.time_breakdown_s.items():
        if term not in ("host_overhead", "pipeline_bubble"):  # the bubble holds one host overhead per stage
            assert b.time_breakdown_s[term] == pytest.approx(seconds, rel=1e-12), term
    assert b.iteration_time_s < a.iteration_time_s
    assert b.peak_memory_bytes_per_gpu == a.peak_memory_bytes_per_gpu


def test_cuda_graphs_is_validated_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"ParallelConfig\.cuda_graphs"):
        ParallelConfig(cuda_graphs="per-layer")  # type: ignore[arg-type]


@pytest.mark.parametrize(("runtime", "zero"), [("deepspeed", 1), ("megatron-deepspeed", 1), ("fsdp", 2)])
def test_only_megatron_core_runs_a_full_iteration_graph(runtime: str, zero: int) -> None:
    c = ParallelConfig(dp=8, zero_stage=zero, cuda_graphs="full-iteration")
    assert support_status(runtime, c) == "refused"
    assert support_status("megatron", dataclasses.replace(c, zero_stage=1)) == "supported"
    with pytest.raises(SpecError, match=r"ParallelConfig\.cuda_graphs"):
        check_compatible(LLAMA, 8, c, dataclasses.replace(BF16, framework=runtime))  # type: ignore[arg-type]


def test_an_moe_graph_needs_hybridep_expert_parallelism_and_no_activation_offload() -> None:
    base = {"dp": 1024, "ep": 64, "micro_batch": 1, "zero_stage": 1, "cuda_graphs": "full-iteration"}
    for dispatcher in ("alltoall", "flex-deepep"):  # both read token counts back on the host every layer
        c = ParallelConfig(**base, moe_dispatcher=dispatcher)  # type: ignore[arg-type]
        assert support_status("megatron", c) == "refused"
        with pytest.raises(SpecError, match="flex-hybridep"):
            check_compatible(DSV3, 1024, c, FP8)
    ok = ParallelConfig(**base, moe_dispatcher="flex-hybridep")  # type: ignore[arg-type]
    assert support_status("megatron", ok) == "supported"
    offload = dataclasses.replace(ok, activation_offload_layers=4)
    assert support_status("megatron", offload) == "refused"
    # Without expert parallelism dropless MoE sizes its buffers on the host: refused for the model.
    qwen = model_preset("qwen3-30b-a3b")
    with pytest.raises(SpecError, match=r"ParallelConfig\.cuda_graphs"):
        check_compatible(qwen, 8, ParallelConfig(dp=8, zero_stage=1, cuda_graphs="full-iteration"), FP8)


def test_megatron_fsdp_with_a_graph_is_untested_and_says_so() -> None:
    c = ParallelConfig(dp=8, zero_stage=3, cuda_graphs="full-iteration")
    assert support_status("megatron", c) == "untested"
    assert any("full-iteration CUDA graph with Megatron-FSDP" in w for w in support_warnings("megatron", c))


def _record(run_id: str) -> dict:
    return copy.deepcopy(next(r for r in json.loads((DATA / "runs_2024_2026.json").read_text()) if r["id"] == run_id))


QWEN_2606 = "mbridge-26.06-gb200-qwen3-30b-a3b-mxfp8-8g-gbs512-mbs4-tp1pp1cp1vp1ep8"


def test_a_run_record_states_its_graph_and_per_layer_graphs_are_refused() -> None:
    rec = _record(QWEN_2606)
    rec["config"].update(moe_dispatcher="flex-hybridep", moe_a2a_overlap=True)
    assert run_from_record(rec).config.cuda_graphs == "none"  # the table does not print it
    rec["config"]["cuda_graphs"] = "full-iteration"
    assert run_from_record(rec).config.cuda_graphs == "full-iteration"
    rec["config"]["cuda_graphs"] = "transformer_engine"
    with pytest.raises(RecordRefused) as info:
        run_from_record(rec)
    assert [(r.field, r.category) for r in info.value.refusals] == [("config.cuda_graphs", "runtime feature")]


def test_the_rows_whose_recipe_captured_a_full_iteration_graph_are_read_with_it() -> None:
    """benchmarks/data/errata.json completes the rows the audit of the Megatron-Bridge recipes found
    certain (2026-12-01): the 26.06+ DeepSeek-V3 (7), Qwen3-30B-A3B (3) and GPT-OSS 120B (3) rows and one
    25.11 Llama 3 8B row; the earlier MoE rows' per-layer graphs are not costed and not stated."""
    from benchmarks._errata import read_corrected

    got, applied = read_corrected(DATA / "runs_2024_2026.json")
    graphed = {run.id for run in got.runs if run.config.cuda_graphs == "full-iteration"}
    assert len(graphed) == 14
    assert sum(1 for i in graphed if "deepseek" in i) == 7 and sum(1 for i in graphed if "qwen3-30b" in i) == 3
    assert sum(1 for i in graphed if "gpt-oss" in i) == 3
    assert all(i.startswith(("mbridge-26.06", "mbridge-26.08")) for i in graphed if "llama" not in i)
    assert {e.id for e in applied if "cuda_graphs" in e.corrected} == graphed


def test_a_search_with_the_graph_runs_it_wherever_it_is_supported_and_stays_exact() -> None:
    """Every enumerated Megatron configuration but Megatron-FSDP's gets the graph; the bound includes
    it (the answer equals a brute-force pass over the same space), and no eager configuration is slower
    than its graphed twin."""
    from search import describe, enumerate_space, search

    model, cluster = model_preset("gpt-1.7b"), cluster_preset("dgx-a100-80gb", 1)
    result = search(model, cluster, 64, framework="any", top_k=5, cuda_graphs="full-iteration")
    assert result.framework == "megatron" and result.exhaustive
    space = enumerate_space(model, 8, 64, "megatron", cuda_graphs="full-iteration")
    configs = [cand.config for cand in space.candidates]
    assert {c.cuda_graphs for c in configs if c.zero_stage < 2} == {"full-iteration"}
    assert {c.cuda_graphs for c in configs if c.zero_stage >= 2} == {"none"}
    feasible = sorted((p.tokens_per_s for p in (predict(model, cluster, c, TrainingSpec(64)) for c in configs)
                       if p.feasible), reverse=True)
    assert max(r.prediction.tokens_per_s for r in result.top) == pytest.approx(feasible[0], rel=1e-12)
    eager = search(model, cluster, 64, framework="megatron", top_k=5)
    assert max(r.prediction.tokens_per_s for r in result.top) > max(r.prediction.tokens_per_s for r in eager.top)
    assert all("cuda-graph" in describe(r.framework, r.config) for r in result.top if r.config.zero_stage < 2)


def test_a_moe_search_graphs_only_its_hybridep_expert_layouts() -> None:
    from search import enumerate_space

    qwen = model_preset("qwen3-30b-a3b")
    space = enumerate_space(qwen, 16, 256, "megatron", moe_exchange=("flex-hybridep", False),
                            cuda_graphs="full-iteration")
    graphs = {(c.ep > 1, c.moe_dispatcher, c.zero_stage >= 2, c.cuda_graphs) for c in
              (cand.config for cand in space.candidates)}
    assert (True, "flex-hybridep", False, "full-iteration") in graphs
    assert all(g == "none" for ep, _d, fsdp, g in graphs if not ep or fsdp)
    for cand in space.candidates:
        check_compatible(qwen, 16, cand.config, TrainingSpec(256, precision="fp8"))


def test_a_search_refuses_an_unknown_graph_or_another_runtime_naming_the_field() -> None:
    from search import search

    cluster = cluster_preset("dgx-a100-80gb", 1)
    with pytest.raises(SpecError, match="cuda_graphs"):
        search(LLAMA, cluster, 64, cuda_graphs="per-layer")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="cuda_graphs"):
        search(LLAMA, cluster, 64, framework="fsdp", cuda_graphs="full-iteration")

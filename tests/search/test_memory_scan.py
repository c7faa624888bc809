"""The search's memory scan computes the very peak :func:`plan_memory` gives, from cached parts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from search import cluster_preset, model_preset
from search._calibration import default_calibration
from search._memory_plan import GpuPeak, holds_host_bytes, host_breakdown
from search._parallel_spec import TrainingSpec
from search._predict import predict_memory
from search._space import enumerate_space

CASES = [
    # dense, even and uneven pipelines, every runtime and offload policy
    ("llama3-70b", "dgx-a100-40gb", 2, 512, 1, "bf16"),
    ("gpt3-175b", "dgx-a100-80gb", 4, 256, 1, "bf16"),
    # FP8: Megatron keeps quantized linear inputs, the other runtimes 16-bit ones (the runtimes' activations differ)
    ("llama3-70b", "dgx-h100", 2, 512, 2, "fp8"),
    # MoE: expert states over the expert data-parallel group, MoE activations, MTP on the last rank
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, 1, "bf16"),
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, 2, "fp8"),
    ("deepseek-v3", "dgx-h100", 8, 512, 3, "bf16"),
]


@pytest.mark.parametrize(("model_name", "cluster_name", "nodes", "batch", "step", "precision"), CASES)
def test_scan_peak_equals_the_full_plan(model_name: str, cluster_name: str, nodes: int, batch: int,
                                        step: int, precision: str) -> None:
    model, cluster, cal = model_preset(model_name), cluster_preset(cluster_name, nodes), default_calibration()
    space = enumerate_space(model, cluster.world_size, batch, "any").candidates[::step]
    assert len(space) > 500
    peak = GpuPeak(model, cal, precision)
    for cand in space:
        # A memory policy the enumeration leaves to refinement (issue 18) is checked too.
        configs = [cand.config]
        c = cand.config
        if cand.framework == "megatron" and c.recompute == "full" and c.pp > 1:
            configs.append(replace(c, recompute_layers=1))
        if c.offload_optimizer == "cpu" and cand.framework == "megatron":
            configs.append(replace(c, optimizer_offload_fraction=0.35))
        for config in configs:
            training = TrainingSpec(batch, precision, framework=cand.framework)  # type: ignore[arg-type]
            m = batch // (config.dp * config.micro_batch)
            plan = predict_memory(model, cluster, config, training, cal)
            assert peak(config, cand.framework, m) == plan.peak_bytes, (cand.framework, config)
            if holds_host_bytes(config):
                cpu, nvme, _states = host_breakdown(model, cluster, config, m)
                assert (sum(cpu.values()), nvme) == (plan.cpu_bytes_per_node, plan.nvme_bytes_per_node)
            else:
                assert plan.cpu_bytes_per_node == plan.nvme_bytes_per_node == 0.0


@pytest.mark.parametrize(("model_name", "cluster_name", "nodes", "batch", "step", "precision"), [
    ("llama3-70b", "dgx-a100-40gb", 2, 512, 1, "bf16"),
    ("llama3-70b", "dgx-h100", 2, 512, 2, "fp8"),
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, 1, "bf16"),
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, 2, "fp8"),
])
def test_scan_peak_with_bf16_gradient_reduction_equals_the_full_plan(
        model_name: str, cluster_name: str, nodes: int, batch: int, step: int, precision: str) -> None:
    """Megatron-Core's ``--grad-reduce-in-bf16`` (a 2-byte gradient buffer): the scan's peak is the
    plan's for the flag-set TrainingSpec, and below the peak without the flag where gradients are held."""
    model, cluster, cal = model_preset(model_name), cluster_preset(cluster_name, nodes), default_calibration()
    space = [c for c in enumerate_space(model, cluster.world_size, batch, "megatron").candidates[::step]]
    assert len(space) > 500
    peak, fp32_peak = GpuPeak(model, cal, precision, True), GpuPeak(model, cal, precision)
    training = TrainingSpec(batch, precision, framework="megatron", grad_reduce_in_bf16=True)  # type: ignore[arg-type]
    lower = 0
    for cand in space:
        c = cand.config
        m = batch // (c.dp * c.micro_batch)
        plan = predict_memory(model, cluster, c, training, cal)
        assert peak(c, "megatron", m) == plan.peak_bytes, c
        lower += peak(c, "megatron", m) < fp32_peak(c, "megatron", m)
    assert lower > len(space) // 2


def test_search_scan_with_bf16_gradient_reduction_plans_each_runtime_as_predict_does() -> None:
    """A search's Evaluator with the flag: its scan keeps exactly the candidates whose full plan fits,
    each at the plan's peak, Megatron's planned with the flag and the other runtimes' without it
    (TrainingSpec refuses it for them)."""
    from search._evaluator import Evaluator

    model, cluster, cal = model_preset("llama3-70b"), cluster_preset("dgx-a100-40gb", 2), default_calibration()
    batch = 512
    space = enumerate_space(model, cluster.world_size, batch, "any")
    ev = Evaluator(model, cluster, batch, "bf16", cal, "throughput", None, grad_reduce_in_bf16=True)
    assert ev.trainings["megatron"].grad_reduce_in_bf16
    assert not any(ev.trainings[fw].grad_reduce_in_bf16 for fw in ("deepspeed", "megatron-deepspeed", "fsdp"))
    rows = ev.scan_memory(space.blocks)

    def training(fw: str) -> TrainingSpec:
        return TrainingSpec(batch, "bf16", framework=fw, grad_reduce_in_bf16=fw == "megatron")  # type: ignore[arg-type]

    fits = [cand for cand in space.candidates if ev.fits(predict_memory(model, cluster, cand.config,
                                                                       training(cand.framework), cal))]
    assert [row.candidate() for row in rows.rows] == fits
    assert {row.runtime for row in rows.rows} >= {"megatron", "deepspeed"}
    for row in rows.rows:
        cand = row.candidate()
        assert row.peak_bytes == predict_memory(model, cluster, cand.config, training(cand.framework), cal).peak_bytes

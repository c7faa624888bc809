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

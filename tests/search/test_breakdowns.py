"""A prediction's breakdowns are typed frozen dataclasses (one field per term, units in the names)
that read as mappings from the term's name, as the API and tables print them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from search import ParallelConfig, SpecError, TrainingSpec, cluster_preset, model_preset, predict
from search._breakdowns import MemoryBreakdown, TimeBreakdown
from search._prediction import Prediction


def _prediction(model_name: str = "llama3-8b") -> Prediction:
    config = ParallelConfig(dp=4, tp=2, pp=1, sp=True, micro_batch=1, zero_stage=1)
    return predict(model_preset(model_name), cluster_preset("dgx-h100", 1), config, TrainingSpec(32))


def test_terms_add_up_and_read_by_attribute_and_by_name() -> None:
    p = _prediction()
    t, m = p.time_breakdown_s, p.memory_breakdown_bytes
    assert isinstance(t, TimeBreakdown) and isinstance(m, MemoryBreakdown)
    assert t.total == pytest.approx(p.iteration_time_s, rel=1e-12)
    assert m.total == p.peak_memory_bytes_per_gpu
    assert t["compute"] == t.compute_s > 0 and m["weights"] == m.weights_bytes > 0
    assert "ep_comm" not in t and t.ep_comm_s is None  # a dense model has no expert dispatch
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.compute_s = 0.0  # type: ignore[misc]


def test_an_moe_model_has_its_dispatch_term() -> None:
    config = ParallelConfig(dp=8, ep=8, micro_batch=1, zero_stage=1)
    p = predict(model_preset("qwen3-30b-a3b"), cluster_preset("dgx-h100", 1), config, TrainingSpec(32))
    assert p.time_breakdown_s.ep_comm_s is not None and p.time_breakdown_s.ep_comm_s > 0
    assert p.time_breakdown_s["ep_comm"] == p.time_breakdown_s.ep_comm_s


def test_json_keeps_the_term_names() -> None:
    out = json.loads(json.dumps(_prediction().to_dict()))
    assert "compute" in out["time_breakdown_s"] and "compute_s" not in out["time_breakdown_s"]
    assert set(out["memory_breakdown_bytes"]) == {"weights", "gradients", "optimizer_states", "gathered_params",
                                                   "activations", "comm_buffers", "runtime_overhead"}


def test_an_unknown_term_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"unknown term.*use: compute"):
        TimeBreakdown.of({"compute": 1.0, "warp_drive": 2.0})

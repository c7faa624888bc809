"""Rules of the Megatron-Core runtime and the Megatron-Bridge recipes the cost model applies in
general (issue 15): the interleaved schedule's p2p overlap, and the flags a Megatron-Bridge
performance row leaves null (sequence parallelism and TP overlap with tp > 1)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict
from search._runs_file import megatron_bridge_defaults, run_from_record
from search._schedule import pp_p2p_exposed_s

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
ROWS = json.loads((DATA / "runs_2024_2026.json").read_text())
MB_405B = next(r for r in ROWS if r["id"] == "mbridge-26.04-gb200-llama3.1-405b-fp8-256g-gbs1536-mbs1-tp4pp16cp1vp4")
"""A Megatron-Bridge row with tp = 4 and sp, recompute and TP overlap left null."""


def _with(rec: dict[str, Any], **config: Any) -> dict[str, Any]:
    out = copy.deepcopy(rec)
    out["config"].update(config)
    return out


def test_p2p_overlapped_exposes_only_what_one_chunk_cannot_hide() -> None:
    assert pp_p2p_exposed_s(0.010, 0.004, overlapped=True) == pytest.approx(0.006)
    assert pp_p2p_exposed_s(0.003, 0.004, overlapped=True) == 0.0
    assert pp_p2p_exposed_s(0.003, 0.004, overlapped=False) == 0.003


def test_megatron_interleaved_schedule_hides_its_p2p_behind_the_next_chunk() -> None:
    # 8-GPU DGX H100 nodes and tp = 8: every pp hop crosses the network.
    model = model_preset("llama3-70b")
    cluster = cluster_preset("dgx-h100", 4)
    training = TrainingSpec(global_batch=64, framework="megatron")
    interleaved = ParallelConfig(tp=8, pp=4, vp=2, sp=True, dp=1)
    plain = replace(interleaved, vp=1)
    p_vp = predict(model, cluster, interleaved, training)
    p_1 = predict(model, cluster, plain, training)
    # Without interleaving Megatron batches the sends (batch_p2p_comm): all of it is exposed.
    assert p_1.time_breakdown_s["pp_p2p"] > 0.0
    # A 70B layer's compute (~tens of ms per chunk) hides a 16 MiB send over one 400G rail.
    assert p_vp.time_breakdown_s["pp_p2p"] == 0.0


def test_megatron_bridge_rows_take_the_recipes_sp_and_tp_overlap() -> None:
    run = run_from_record(MB_405B)
    assert run.config.sp is True and run.config.tp_comm_overlap is True
    assert "sp" not in run.unknown
    assert megatron_bridge_defaults(MB_405B, 4, "fp8") == {"sp": True, "tp_comm_overlap": True,
                                                            "grad_reduce_in_bf16": True, "dropout": False}


def test_nvfp4_rows_run_without_tp_overlap_and_tp1_rows_without_sp() -> None:
    nvfp4 = run_from_record(_with(MB_405B, precision="nvfp4", fp8_recipe="nvfp4"))
    assert nvfp4.config.sp is True and nvfp4.config.tp_comm_overlap is False
    assert megatron_bridge_defaults(MB_405B, 1, "fp8") == {"sp": False, "tp_comm_overlap": False,
                                                            "grad_reduce_in_bf16": True, "dropout": False}


def test_a_stated_flag_wins_and_other_sources_keep_sp_open() -> None:
    stated = run_from_record(_with(MB_405B, sp=False, tp_comm_overlap=False))
    assert stated.config.sp is False and stated.config.tp_comm_overlap is False
    nemo = copy.deepcopy(MB_405B)
    nemo["software"] = "NeMo 24.07 container (NeMo 1.0 / Megatron-Core)"
    run = run_from_record(nemo)
    assert "sp" in run.unknown and run.config.tp_comm_overlap is False

"""The memory scan walks blocks (search._evaluator.Evaluator.scan_memory): what it finds per block is shared by the
blocks with the same bytes (TP overlap, the MoE exchange and the CUDA graph apart), and its fitting rows are kept
block by block. Whatever it shares or skips, its rows are the candidates a full plan finds to fit, in the space's
order and with the plan's peak, and what refinements ask of it agrees with the plans of the twins they name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from search import cluster_preset, model_preset
from search._calibration import default_calibration
from search._evaluator import Evaluator
from search._parallel_spec import ParallelConfig
from search._space import Candidate, enumerate_space

GiB = 2**30

CASES: list[tuple[str, str, int, int, str, str, dict[str, Any], float]] = [
    # MoE, one runtime: each block's rows are the first of its walk; TP overlap twins share what the scan finds
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, "megatron", "fp8", {}, 0.0),
    # ... and blocks that also differ in the MoE exchange and the CUDA graph
    ("qwen3-30b-a3b", "dgx-h100", 2, 64, "megatron", "bf16",
     {"moe_exchange": ("flex-hybridep", True), "cuda_graphs": "full-iteration"}, 0.0),
    # every runtime, DeepSpeed's tilings, offloads: several (runtime, tiles) pairs per block, with a headroom asked
    ("llama3-8b", "dgx-h100", 1, 64, "any", "bf16", {"allow_tiling": True}, 4.0 * GiB),
    ("gpt3-175b", "dgx-a100-40gb", 2, 64, "any", "bf16", {"allow_tiling": True}, 0.0),
]


def _setup(model_name: str, cluster_name: str, nodes: int, batch: int, framework: str, precision: str,
           space_args: dict[str, Any], headroom: float) -> tuple[Any, ...]:
    model, cluster = model_preset(model_name), cluster_preset(cluster_name, nodes)
    space = enumerate_space(model, cluster.world_size, batch, framework, **space_args)
    ev = Evaluator(model, cluster, batch, precision, default_calibration(), "throughput", None,
                   min_headroom_bytes=headroom)
    return space, ev


@pytest.mark.parametrize(("model_name", "cluster_name", "nodes", "batch", "framework", "precision", "space_args",
                          "headroom"), CASES)
def test_scan_rows_are_the_candidates_whose_plan_fits(model_name: str, cluster_name: str, nodes: int, batch: int,
                                                      framework: str, precision: str, space_args: dict[str, Any],
                                                      headroom: float) -> None:
    space, ev = _setup(model_name, cluster_name, nodes, batch, framework, precision, space_args, headroom)
    fitting = ev.scan_memory(space.blocks)
    plans = [(cand, ev.memory(cand)) for cand in space.candidates]
    fits = [(cand, plan.peak_bytes) for cand, plan in plans if ev.fits(plan)]
    assert 0 < len(fits) < len(plans)
    assert ev.n_feasible == len(fitting) == len(fits)
    assert [(cand, peak) for cand, peak in zip(fitting, fitting.peaks, strict=True)] == fits
    # The columns, the rows and the candidates built on access say the same.
    rows = fitting.rows
    assert [(row.micro_batch, (row.runtime, row.placement, row.tiles), row.peak_bytes) for row in rows] == list(
        zip(fitting.micro_batches, fitting.variants, fitting.peaks, strict=True))
    assert [row.candidate() for row in rows] == fitting[:] == [cand for cand, _peak in fits]
    assert fitting.runtimes == {cand.framework for cand, _peak in fits}
    # The closest misses are candidates that do not fit, the closest by GPU bytes among them (the first of a
    # (runtime, tiles) pair not to fit holds the fewest of its misses: the scan skips the rest).
    assert ev.closest and all(cand in space.candidates and not ev.fits(plan) for *_rank, cand, plan in ev.closest)
    assert min(plan.peak_bytes for *_rank, _cand, plan in ev.closest) == min(
        plan.peak_bytes for _cand, plan in plans if not ev.fits(plan))


@pytest.mark.parametrize(("model_name", "cluster_name", "nodes", "batch", "framework", "precision", "space_args",
                          "headroom"), CASES)
def test_what_refinements_ask_of_the_scan_agrees_with_the_twins_plans(
        model_name: str, cluster_name: str, nodes: int, batch: int, framework: str, precision: str,
        space_args: dict[str, Any], headroom: float) -> None:
    """Whether a twin with another recomputation or optimizer offload is enumerated and fits
    (Evaluator._scanned_fit), and the peak of a twin that was the first of its pair not to fit
    (Evaluator._twin_peak), for the fitting rows refinements start from."""
    space, ev = _setup(model_name, cluster_name, nodes, batch, framework, precision, space_args, headroom)
    fitting = ev.scan_memory(space.blocks)

    def plain(cand: Candidate) -> tuple[str, ParallelConfig]:
        """A candidate less what the search sets per block (a twin's exchange and graph are its block's)."""
        return cand.framework, replace(cand.config, moe_dispatcher="alltoall", moe_a2a_overlap=False,
                                       cuda_graphs="none")

    enumerated = {plain(cand): cand for cand in space.candidates}
    checked = peaks = 0
    for i in range(0, len(fitting), 3):
        row = fitting.row(i)
        cand = row.candidate()
        c = cand.config
        for twin_args in ({"recompute": "none"}, {"recompute": "selective"}, {"offload_optimizer": "none"}):
            field, value = next(iter(twin_args.items()))
            if getattr(c, field) == value:
                continue
            twin = enumerated.get(plain(replace(cand, config=replace(c, **twin_args))))  # type: ignore[arg-type]
            scan_says = ev._scanned_fit(row.block, row.micro_batch, row.runtime, row.tiles, **twin_args)
            assert scan_says == (twin is not None and ev.fits(ev.memory(twin))), (cand, twin_args)
            checked += 1
            peak = ev._twin_peak(row.runtime, c, **twin_args)
            if peak is not None:
                assert twin is not None and not ev.fits(ev.memory(twin))
                assert peak == ev.memory(twin).peak_bytes
                peaks += 1
    assert checked > 100 and peaks > 0

"""Ranking timed configurations: the objective's score, the Pareto front, the simplest among those
the model cannot tell apart (issue 11), and the one-line labels a search prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from search._error_band import within_band
from search._errors import SpecError
from search._parallel_spec import ParallelConfig
from search._prediction import Prediction
from search._search_result import RankedConfig
from search._space import DEFAULT_PLACEMENT, Candidate
from search._support import support_status

if TYPE_CHECKING:
    from search._evaluator import Evaluator


def describe(framework: str, c: ParallelConfig) -> str:
    """A compact one-line label of a configuration."""
    share = f"x{c.optimizer_offload_fraction:g}" if c.optimizer_offload_fraction < 1 else ""
    offload = "" if c.offload_optimizer == c.offload_param == "none" else (
        f" offload(opt={c.offload_optimizer}{share},param={c.offload_param})")
    recompute = c.recompute + (f"({c.recompute_layers} layers/stage)" if c.recompute_layers is not None else "")
    return (f"{framework} dp={c.dp} tp={c.tp} pp={c.pp}" + (f" vp={c.vp}" if c.vp > 1 else "")
            + (f" layers={'/'.join(map(str, c.stage_layers))}" if c.stage_layers is not None else "")
            + (f" cp={c.cp}" if c.cp > 1 else "") + (" sp" if c.sp else "")
            + (f" ep={c.ep}" if c.ep > 1 else "") + (f" etp={c.etp}" if c.etp > 1 else "")
            + (f" {c.moe_dispatcher}" if c.moe_dispatcher != "alltoall" else "")
            + (" ep-overlap" if c.moe_a2a_overlap else "")
            + (" cuda-graph" if c.cuda_graphs != "none" else "")
            + (" tp-overlap" if c.tp_comm_overlap else "")
            + (f" order={c.placement}" if c.placement != "tp-cp-ep-dp-pp" else "")
            + f" mb={c.micro_batch} zero={c.zero_stage}{offload} recompute={recompute}"
            + (f" act-offload={c.activation_offload_layers}" if c.activation_offload_layers else "")
            + (f" tiles={c.tiles}" if c.tiles > 1 else ""))


def objective_score(prediction: Prediction, objective: str, world_size: int, price_per_gpu_hour: float | None) -> float:
    """The value a configuration is ranked by: tokens/s (higher is better), or for ``cost`` the
    dollars per million tokens (lower is better)."""
    if objective == "cost":
        if price_per_gpu_hour is None:
            raise SpecError("price_per_gpu_hour", "the cost objective needs a price", "give $ per GPU-hour")
        return price_per_gpu_hour * world_size / 3600.0 / prediction.tokens_per_s * 1e6
    return prediction.tokens_per_s


def pareto_front(items: Sequence[tuple[float, float, int]]) -> list[int]:
    """Indices of the (tokens/s, headroom) points no other point beats on both (both maximised)."""
    front: list[int] = []
    best_headroom = float("-inf")
    for _tps, headroom, index in sorted(items, key=lambda x: (-x[0], -x[1])):
        if headroom > best_headroom:
            front.append(index)
            best_headroom = headroom
    return front


def complexity(framework: str, c: ParallelConfig) -> tuple[int, int, int, int]:
    """How far a configuration is from the simplest, best-proven one that runs (issue 11's order:
    supported over merely accepted, fewer parallel dimensions, the runtime's defaults).

    (untested on its runtime; offloads to CPU or NVMe: their predictions rest on host-side
    figures a measured profile should replace and on few published runs; parallel dimensions in
    use beyond data parallelism: tp, pp, vp, cp, ep, etp; other departures from the runtime's defaults:
    ZeRO-2/3, recomputation, TP overlap, memory-centric tiling, a non-default placement; not the MoE token
    dispatcher, the EP overlap and CUDA graphs, which a search asks for as a whole and runs wherever it can). Lower is
    simpler; among configurations the model cannot tell apart, the simpler ranks first."""
    untested = int(support_status(framework, c) == "untested")
    offloads = (c.offload_optimizer != "none") + (c.offload_param != "none")
    dims = sum((c.tp > 1, c.pp > 1, c.vp > 1, c.cp > 1, c.ep > 1, c.etp > 1))
    departures = sum((c.zero_stage >= 2, c.recompute != "none", c.tp_comm_overlap, c.tiles > 1,
                      c.placement != "tp-cp-ep-dp-pp", c.optimizer_offload_fraction < 1, c.recompute_layers is not None,
                      c.activation_offload_layers > 0))
    return untested, offloads, dims, departures


def _simpler_because(a: tuple[str, ParallelConfig], b: tuple[str, ParallelConfig]) -> str:
    ca, cb = complexity(*a), complexity(*b)
    if ca[0] < cb[0]:
        return "supported by its runtime, the faster one only accepted"
    if ca[1] < cb[1]:
        return f"{ca[1]} offload(s) to CPU/NVMe instead of {cb[1]} (less proven: host-side figures)"
    if ca[2] < cb[2]:
        return f"{ca[2]} parallel dimension(s) beyond data parallelism (tp, pp, vp, cp, ep, etp) instead of {cb[2]}"
    return (f"{ca[3]} departure(s) from the runtime's defaults (ZeRO-2/3, recomputation, TP overlap, tiling, "
            "placement) "
            f"instead of {cb[3]}")


def listing_key(cand: Candidate, pred: Prediction) -> tuple[Any, ...]:
    """What :func:`rank` lists once: the configuration in Megatron's default placement with its
    predicted time and memory (runtime and placement twins with the very same prediction share it)."""
    config = cand.config if cand.config.placement == DEFAULT_PLACEMENT else replace(
        cand.config, placement=DEFAULT_PLACEMENT)
    return config, pred.iteration_time_s, pred.peak_memory_bytes_per_gpu


def _once(ordered: list[tuple[Candidate, Prediction, float]]
          ) -> tuple[list[tuple[Candidate, Prediction, float]], dict[int, list[str]]]:
    """Drop the repeats of a configuration that another runtime runs with the very same prediction
    (DeepSpeed and Megatron-DeepSpeed without model parallelism: one engine, one cost); the first
    listed stays, with the other runtimes' names (by position) for its note. Placement twins with
    the very same prediction (both orders give every group the same links) are one configuration
    too: Megatron's default order stays."""
    kept: list[tuple[Candidate, Prediction, float]] = []
    first: dict[tuple[Any, ...], int] = {}
    also: dict[int, list[str]] = {}
    for item in ordered:
        cand, pred, _score = item
        key = listing_key(cand, pred)
        if key in first:
            at = first[key]
            if kept[at][0].framework != cand.framework:
                also.setdefault(at, []).append(cand.framework)
            elif cand.config.placement == DEFAULT_PLACEMENT:
                kept[at] = item
            continue
        first[key] = len(kept)
        kept.append(item)
    return kept, also


def _score_text(score: float, objective: str) -> str:
    return f"${score:.4g} per million tokens" if objective == "cost" else f"{score:,.0f} tokens/s"


def fastest_at(ordered: Sequence[tuple[Candidate, Prediction, float]], sign: float, top_k: int) -> int:
    """Position of the best score among the first ``top_k``."""
    shown = ordered[:top_k]
    return max(range(len(shown)), key=lambda i: sign * shown[i][2], default=0)


def rank(ev: Evaluator, objective: str, top_k: int) -> tuple[tuple[RankedConfig, ...], tuple[RankedConfig, ...]]:
    """The top ``top_k`` by the objective and the Pareto front.

    Configurations whose score is within the best one's error band (the model's measured error
    for that runtime and GPU, :attr:`Prediction.error_band`) are equivalent: the data cannot order
    them. They come first, the simplest (:func:`complexity`) first and by score within the same
    simplicity, each marked ``equivalent_to_best`` and the first one saying why it leads. A
    configuration two runtimes run with the very same prediction is listed once (:func:`_once`).
    """
    points = [(p.tokens_per_s, p.memory_headroom_bytes, i) for i, (_c, p, _s) in enumerate(ev.feasible)]
    pareto = tuple(RankedConfig(i + 1, ev.feasible[j][0].framework, ev.feasible[j][0].config, ev.feasible[j][1],
                                ev.feasible[j][2]) for i, j in enumerate(pareto_front(points)))
    if objective == "pareto":  # the answer is the front itself, fastest first; --top does not cut it
        return pareto, pareto
    sign = -1.0 if objective == "cost" else 1.0
    # Best score first; equal scores go to the one with more memory headroom (safer to launch).
    ordered = sorted(ev.feasible, key=lambda x: (sign * x[2], x[1].memory_headroom_bytes), reverse=True)
    lead_note = ""
    equivalent_ids: set[int] = set()
    band = ordered[0][1].error_band if ordered else 0.0
    if ordered:
        best_c, _best_p, best_s = ordered[0]
        equivalent = [x for x in ordered if within_band(x[2], best_s, band)]
        if len(equivalent) > 1:
            equivalent_ids = {id(x) for x in equivalent}
            equivalent.sort(key=lambda x: (complexity(x[0].framework, x[0].config), -sign * x[2]))
            ordered = equivalent + ordered[len(equivalent):]
            lead = ordered[0][0]
            if lead != best_c:
                why = _simpler_because((lead.framework, lead.config), (best_c.framework, best_c.config))
                lead_note = (f"within the model's error (+-{band:.0%}) of the fastest, "
                             f"{describe(best_c.framework, best_c.config)} ({_score_text(best_s, objective)}); "
                             "ranked first as the "
                             f"simpler: {why}")
            else:
                lead_note = f"fastest of the simplest configurations within +-{band:.0%} of it"
    ordered, also = _once(ordered)
    fastest = max(range(len(ordered)), key=lambda i: sign * ordered[i][2], default=0)
    if 1 < top_k <= fastest:  # the fastest is always listed: it takes the last place shown
        ordered.insert(top_k - 1, ordered.pop(fastest))
        also = {(top_k - 1 if i == fastest else i + (top_k - 1 <= i < fastest)): v for i, v in also.items()}
    top = []
    for i, item in enumerate(ordered[:top_k]):
        c, p, s = item
        equivalent_one = id(item) in equivalent_ids
        notes = [lead_note if i == 0 else ""]
        if equivalent_one and i > 0:
            notes.append(f"within the model's error (+-{band:.0%}) of the best")
        if i == top_k - 1 and i == fastest_at(ordered, sign, top_k) and i > 0:
            notes.append("the fastest predicted, listed although simpler equivalents rank before it")
        if also.get(i):
            notes.append(f"the same configuration runs as {', '.join(also[i])} with the same prediction "
                         "(listed once)")
        top.append(RankedConfig(i + 1, c.framework, c.config, p, s, equivalent_one, "; ".join(n for n in notes if n)))
    return tuple(top), pareto

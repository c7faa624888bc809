"""Pipeline layouts: how many transformer layers each pipeline rank holds, in each framework's terms.

A layout is a tuple of per-rank layer counts, first rank to last (``ParallelConfig.stage_layers``);
the embedding sits on the first rank, the output layer and the loss on the last. The functions
below build the layouts the frameworks can express (facts from ``shared/reference/frameworks_2.md``
sec. 1, each with its source) and raise :class:`SpecError` naming the rule a layout breaks:

* Megatron-Core 0.19: :func:`megatron_first_last` (``--decoder-first/last-pipeline-num-layers``),
  :func:`megatron_account_for` (``--account-for-embedding/loss-in-pipeline-split``),
  :func:`megatron_layout` (``--pipeline-model-parallel-layout``, e.g. ``"E|(t|)*126,L"``);
* DeepSpeed's ``PipelineModule`` (Megatron-DeepSpeed): :func:`deepspeed_partition`;
* torchtitan 0.3.0: :func:`torchtitan_split` (``pipeline_parallel_first/last_stage_less_layers``);
* :func:`balanced` gives the split that minimises the slowest rank, the search's candidate;
* :func:`pipeline_options` lists, for pp ranks, every (vp, layout) each runtime can express.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cache, partial

from search._checks import divisors
from search._errors import SpecError
from search._model_spec import ModelSpec
from search._parallel_spec import FRAMEWORKS, Framework

Layout = tuple[int, ...]
FIELD = "ParallelConfig.stage_layers"


def even(layers: int, pp: int) -> Layout:
    """``layers / pp`` on every rank (Megatron's default: ``num_layers % PP == 0`` is asserted)."""
    if layers % pp:
        raise SpecError("ParallelConfig.pp", f"{pp} does not divide layers={layers}",
                        "use an uneven layout, or a pp that divides the layer count")
    return (layers // pp,) * pp


def megatron_first_last(layers: int, pp: int, vp: int, first: int, last: int) -> Layout:
    """``--decoder-first-pipeline-num-layers first --decoder-last-pipeline-num-layers last``: the rest
    split evenly over the middle ranks (``transformer_config.py:1989-2062``: first and last > 0,
    each and the middle ranks' counts divisible by vp, middle layers iff middle ranks)."""
    if pp < 2:
        raise SpecError(FIELD, "first/last-stage layer counts need pp >= 2", "set pp >= 2")
    if first <= 0 or last <= 0:
        raise SpecError(FIELD, f"first={first} and last={last} must both be > 0 (Megatron-Core)",
                        "give each end at least one layer")
    middle_layers, middle_ranks = layers - first - last, pp - 2
    if middle_layers < 0 or (middle_ranks == 0) != (middle_layers == 0) or (
            middle_ranks and middle_layers % middle_ranks):
        raise SpecError(FIELD, f"{middle_layers} layers do not split evenly over the {middle_ranks} middle ranks",
                        "choose first and last so that the rest divides by pp - 2")
    per_middle = middle_layers // middle_ranks if middle_ranks else 0
    if first % vp or last % vp or per_middle % vp:
        raise SpecError(FIELD, f"with vp={vp} the first ({first}), last ({last}) and middle ({per_middle}) counts "
                        "must be multiples of vp (Megatron-Core)", "choose counts divisible by vp, or vp=1")
    return (first, *((per_middle,) * middle_ranks), last)


def megatron_account_for(layers: int, pp: int, vp: int, embedding: bool = True, loss: bool = True) -> Layout:
    """``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``: the
    embedding and the loss each take one layer slot; ``layers + slots`` must divide by pp, and the
    slots per rank by vp (``transformer_config.py:2064-2110``)."""
    total = layers + int(embedding) + int(loss)
    if pp < 2 or total % pp or (total // pp) % vp:
        raise SpecError(FIELD, f"layers + embedding/loss slots = {total} do not split into pp={pp} ranks of a "
                        f"multiple of vp={vp} slots", "choose pp and vp that divide the slot count")
    per = total // pp
    out = [per] * pp
    out[0] -= int(embedding)
    out[-1] -= int(loss)
    return tuple(out)


_REPEAT = re.compile(r"\(([^()]*)\)\*(\d+)")
_ITEM = re.compile(r"([EtLm])(?:\*(\d+))?")


def megatron_layout(spec: str, pp: int) -> tuple[Layout, int]:
    """Per-rank layer counts and vp of a ``--pipeline-model-parallel-layout`` string
    (``pipeline_parallel_layer_layout.py``: ``E`` embedding, ``t`` layer, ``L`` loss, ``|`` between
    stages, ``x*n`` / ``(...)*n`` repeat; stage ``i = vpp_rank * pp + pp_rank``). One ``E`` first, one
    ``L`` last, stages a multiple of pp (``validate_layer_layout``, ``arguments.py:907-917``)."""
    text = spec.replace(",", "").replace(" ", "")
    while _REPEAT.search(text):
        text = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    if len(stages) % pp:
        raise SpecError(FIELD, f"the layout has {len(stages)} stages, not a multiple of pp={pp}",
                        "give pp * vp stages separated by '|'")
    counts: list[dict[str, int]] = []
    for stage in stages:
        found: dict[str, int] = {"E": 0, "t": 0, "L": 0, "m": 0}
        pos = 0
        for m in _ITEM.finditer(stage):
            if m.start() != pos:
                break
            found[m.group(1)] += int(m.group(2) or 1)
            pos = m.end()
        if pos != len(stage):
            raise SpecError(FIELD, f"cannot read stage {stage!r} of the layout", "use E, t, L, '|', x*n and (...)*n")
        counts.append(found)
    if any(c["m"] for c in counts):
        raise SpecError(FIELD, "multi-token-prediction layers (m) are not modelled", "leave them out of the layout")
    one_e = sum(c["E"] for c in counts) == 1 and counts[0]["E"] == 1
    one_l = sum(c["L"] for c in counts) == 1 and counts[-1]["L"] == 1
    if not (one_e and one_l):
        raise SpecError(FIELD, "the layout needs one E in the first stage and one L in the last",
                        "start with E and end with L")
    vp = len(stages) // pp
    per_rank = [0] * pp
    for i, c in enumerate(counts):
        per_rank[i % pp] += c["t"]
    return tuple(per_rank), vp


def deepspeed_partition(layers: int, pp: int, method: str = "type:transformer") -> Layout:
    """DeepSpeed ``PipelineModule`` ``partition_method`` over Megatron-DeepSpeed's layer list
    (embedding, transformer layers, the tied embedding at the end), as DeepSpeed 0.19's
    ``partition_balanced`` splits it: the linear partition that minimises the spread of part
    weights (PR #4312), i.e. ``W // pp`` weight per part and one more on the first ``W % pp``.
    ``type:transformer`` (what deepspeedai/Megatron-DeepSpeed hard-codes, ``gpt_model.py:463``)
    weighs the transformer layers only, so the embeddings ride on the end parts for free;
    ``type:transformer|embedding`` (the BigScience fork's ``--pp-partition-method``, used for BLOOM)
    counts both embeddings as layers: 70 layers on pp=12 give (5, 6 x 10, 5). Which parts get
    the lighter share when weights do not divide is our reading ("6x10 + 5 + 5"), not checked
    against the DP's tie-breaking."""
    if method == "type:transformer":
        embedding_weight = 0
    elif method == "type:transformer|embedding":
        embedding_weight = 1
    else:
        raise SpecError(FIELD, f"partition method {method!r} is not modelled",
                        "use type:transformer or type:transformer|embedding")
    weight = layers + 2 * embedding_weight
    base, extra = divmod(weight, pp)
    counts = [base + (1 if r < extra else 0) for r in range(pp)]
    counts[0] -= embedding_weight
    counts[-1] -= embedding_weight
    if min(counts) < 1:
        raise SpecError(FIELD, f"{method} leaves a pipeline rank without a transformer layer, which the "
                        "pipeline engine fails on", "use fewer pipeline stages")
    return tuple(counts)


def torchtitan_split(layers: int, pp: int, vp: int, first_less: int = 1, last_less: int = 1) -> Layout:
    """torchtitan 0.3.0 ``_generate_llm_fqn_per_model_part``: ``pp * vp`` stages over
    ``layers + first_less + last_less`` slots, ``slots // stages`` each and one more on the first
    ``slots % stages``; stage 0 gives up ``first_less`` slots to the embedding, the last stage
    ``last_less`` to the norm and head; stage ``s`` runs on rank ``s % pp`` ("loop" mapping)."""
    stages = pp * vp
    effective = layers + first_less + last_less
    base, extra = divmod(effective, stages)
    if stages > effective or base == 0 or first_less > base or last_less > base:
        raise SpecError(FIELD, f"{stages} stages over {effective} slots leave a stage too small (torchtitan)",
                        "use fewer stages or fewer 'less' layers")
    shares = [base + (1 if s < extra else 0) for s in range(stages)]
    shares[0] -= first_less
    shares[-1] -= last_less
    per_rank = [0] * pp
    for s, n in enumerate(shares):
        per_rank[s % pp] += n
    return tuple(per_rank)


def balanced(layers: int, pp: int, head_layers: float, embedding_layers: float = 0.0) -> Layout:
    """The split that minimises the slowest rank when the first rank also carries the embedding and
    the last the output layer + loss, each worth that many layers of time; ties go to the even
    middle (every middle rank the same count, as Megatron's first/last form needs)."""
    if pp == 1:
        return (layers,)
    if layers < pp:
        raise SpecError(FIELD, f"{layers} layers cannot fill {pp} pipeline ranks", "use fewer pipeline stages")
    if pp == 2:
        first = min(range(1, layers), key=lambda f: (max(f + embedding_layers, layers - f + head_layers), -f))
        return (first, layers - first)
    extra = (embedding_layers,) + (0.0,) * (pp - 2) + (head_layers,)
    best: Layout | None = None
    for middle in range(math.ceil(layers / pp) - 1, layers + 1):
        rest = layers - middle * (pp - 2)
        if rest < 2:
            continue
        ends = sorted(((f, rest - f) for f in range(1, rest)), key=lambda fl: max(
            fl[0] + extra[0], fl[1] + extra[-1], middle))
        first, last = ends[0]
        candidate = (first, *((middle,) * (pp - 2)), last)
        cost = max(n + e for n, e in zip(candidate, extra, strict=True))
        if best is None or cost < max(n + e for n, e in zip(best, extra, strict=True)) - 1e-12:
            best = candidate
    if best is None:
        raise SpecError(FIELD, f"{layers} layers cannot fill {pp} pipeline ranks", "use fewer pipeline stages")
    return best


def head_layers(vocab: int, hidden: int, params_per_layer: int, seq_len: int) -> float:
    """The output layer + loss in layers of work: its GEMM ``2 s h V`` against a layer's
    ``2 s P_layer + 2 s^2 h`` (causal attention counted half) forward FLOPs."""
    return hidden * vocab / (params_per_layer + seq_len * hidden)


def last_stage_extra_layers(model: ModelSpec) -> float:
    """What the last pipeline rank carries besides its transformer layers, in layers of work: the
    output layer + loss (:func:`head_layers`, a layer's work counted by the parameters a token passes:
    with experts, the dense parts and ``topk`` routed experts of an MoE layer), and each
    multi-token-prediction module, one more layer and one more output-layer pass (DeepSeek-V3,
    arXiv:2412.19437 Sec. 2.2; Megatron-Core builds them on the last stage)."""
    moe = model.moe
    per_layer = model.params_per_layer if moe is None else (
        model.moe_layer_dense_params + moe.topk * model.mlp_matrices * model.hidden * moe.expert_ffn)
    head = head_layers(model.vocab, model.hidden, per_layer, model.seq_len)
    return head + model.mtp_layers * (1.0 + head)



PipelineOption = tuple[int, Layout | None, tuple[Framework, ...]]
"""(vp, per-rank layer counts or None for the even split, the runtimes that express it)."""


@cache
def pipeline_options(runtimes: tuple[Framework, ...], layers: int, pp: int, head_w: float,
                      allow_untested: bool = False) -> tuple[PipelineOption, ...]:
    """The pipeline layouts each runtime can express for ``pp`` ranks (the forms above), what the
    search enumerates and ``benchmarks/_tuned.py`` completes an unstated split with:

    * even (``layers % pp == 0``), with every vp that divides the layers per rank (all runtimes;
      Megatron-DeepSpeed only vp = 1);
    * megatron: the embedding and loss counted as layer slots (``--account-for-*``, Llama 3
      405B's form) with each vp that divides the slots per rank, and the split that minimises the
      slowest rank given the output layer's weight ``head_w`` (in layers) where the
      first/last-stage flags express it;
    * fsdp: torchtitan's default split (one layer fewer on the first and the last stage) with 1 or
      2 stages per rank;
    * megatron-deepspeed: DeepSpeed's ``type:transformer`` partition (the pinned fork's), and with
      ``allow_untested`` ``type:transformer|embedding`` (BLOOM's: only the BigScience fork's
      ``--pp-partition-method`` makes it; the support matrix marks it untested).
    """
    if pp == 1:
        return ((1, None, runtimes),)
    found: dict[tuple[int, Layout | None], list[Framework]] = {}

    def add(vp: int, layout: Layout | None, runtime: Framework) -> None:
        if layout is not None and len(set(layout)) == 1 and layers % (pp * vp) == 0:
            layout = None  # an even split is the default, spelled once
        found.setdefault((vp, layout), [])
        if runtime not in found[(vp, layout)]:
            found[(vp, layout)].append(runtime)

    for runtime in runtimes:
        if layers % pp == 0:
            for vp in (divisors(layers // pp) if runtime != "megatron-deepspeed" else [1]):
                add(vp, None, runtime)
        try_forms: list[tuple[int, Callable[[], Layout]]] = []
        if runtime == "megatron":
            slots = layers + 2
            if slots % pp == 0:
                try_forms += [(vp, partial(megatron_account_for, layers, pp, vp)) for vp in divisors(slots // pp)]
            try:
                split = balanced(layers, pp, head_w)
            except SpecError:
                split = ()
            if split and len(set(split[1:-1])) <= 1:
                step = math.gcd(split[0], split[-1], split[1] if pp > 2 else 0)
                try_forms += [(vp, partial(megatron_first_last, layers, pp, vp, split[0], split[-1]))
                              for vp in divisors(step)]
        elif runtime == "fsdp":
            try_forms += [(vp, partial(torchtitan_split, layers, pp, vp)) for vp in (1, 2)]
        elif runtime == "megatron-deepspeed":
            methods = ("type:transformer", "type:transformer|embedding") if allow_untested else ("type:transformer",)
            try_forms += [(1, partial(deepspeed_partition, layers, pp, method)) for method in methods]
        for vp, build in try_forms:
            try:
                add(vp, build(), runtime)
            except SpecError:
                continue
    order = {r: i for i, r in enumerate(FRAMEWORKS)}
    return tuple((vp, layout, tuple(sorted(rs, key=order.__getitem__)))
                 for (vp, layout), rs in sorted(found.items(), key=lambda kv: (kv[0][1] is not None, kv[0][0],
                                                                                kv[0][1] or ())))


__all__ = ["Layout", "PipelineOption", "balanced", "deepspeed_partition", "even", "head_layers",
           "megatron_account_for", "megatron_first_last", "megatron_layout", "pipeline_options", "torchtitan_split"]

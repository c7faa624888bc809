"""A configuration's pipeline layout (``ParallelConfig.stage_layers``) in each framework's own terms.

Facts and rules from ``shared/reference/frameworks_2.md`` sec. 1; the layouts themselves come
from :mod:`search._pipeline_layout`, which the search enumerates per runtime. A layout a
framework cannot spell is refused with the reason, never emitted as something else.
"""

from __future__ import annotations

from search import ModelSpec, ParallelConfig, SpecError
from search._pipeline_layout import megatron_account_for, megatron_first_last, torchtitan_split

FIELD = "ParallelConfig.stage_layers"


def megatron_pipeline_args(model: ModelSpec, c: ParallelConfig) -> list[str]:
    """Megatron-Core 0.19 flags for the layout: none for the even split (plus
    ``--num-layers-per-virtual-pipeline-stage`` with vp); ``--account-for-embedding/loss-in-pipeline-split``
    when the layout is that form; ``--decoder-first/last-pipeline-num-layers`` when the middle ranks
    are even; else ``--pipeline-model-parallel-layout``. With an uneven split vp is given as
    ``--num-virtual-stages-per-pipeline-rank`` (``arguments.py:921`` refuses the other VP flag)."""
    layers, pp, vp = model.layers, c.pp, c.vp
    if c.stage_layers is None or pp == 1:
        if vp > 1:
            return ["--num-layers-per-virtual-pipeline-stage", str(layers // pp // vp)]
        return []
    layout = c.stage_layers
    vp_args = ["--num-virtual-stages-per-pipeline-rank", str(vp)] if vp > 1 else []
    try:
        if megatron_account_for(layers, pp, vp) == layout:
            return ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", *vp_args]
    except SpecError:
        pass
    try:
        if megatron_first_last(layers, pp, vp, layout[0], layout[-1]) == layout:
            return ["--decoder-first-pipeline-num-layers", str(layout[0]),
                    "--decoder-last-pipeline-num-layers", str(layout[-1]), *vp_args]
    except SpecError:
        pass
    return ["--pipeline-model-parallel-layout", megatron_layout_string(layout, vp)]


def megatron_layout_string(layout: tuple[int, ...], vp: int) -> str:
    """The ``--pipeline-model-parallel-layout`` string of per-rank layer counts: each rank's layers
    spread over its ``vp`` chunks as evenly as possible, stage ``v * pp + r`` holding chunk ``v`` of
    rank ``r``, ``E`` in the first stage and ``L`` in the last (``pipeline_parallel_layer_layout.py``)."""
    pp = len(layout)
    stages: list[str] = [""] * (pp * vp)
    for r, n in enumerate(layout):
        base, extra = divmod(n, vp)
        for v in range(vp):
            count = base + (1 if v < extra else 0)
            stages[v * pp + r] = f"t*{count}" if count > 1 else ("t" if count == 1 else "")
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return "|".join(stages)


def torchtitan_less_layers(model: ModelSpec, c: ParallelConfig) -> tuple[int, int]:
    """torchtitan 0.3.0 ``pipeline_parallel_first/last_stage_less_layers`` that produce the layout
    (``_generate_llm_fqn_per_model_part``): (0, 0) for the even split; refused when no pair up to 3
    reproduces it."""
    if c.stage_layers is None or c.pp == 1:
        return 0, 0
    for first_less in range(4):
        for last_less in range(4):
            try:
                if torchtitan_split(model.layers, c.pp, c.vp, first_less, last_less) == c.stage_layers:
                    return first_less, last_less
            except SpecError:
                continue
    raise SpecError(FIELD, f"torchtitan cannot split {model.layers} layers as {list(c.stage_layers)} on "
                    f"pp={c.pp} x vp={c.vp} stages with first/last_stage_less_layers",
                    "use torchtitan's split (one layer fewer on the first and last stage) or the even split")


def deepspeed_partition_method(model: ModelSpec, c: ParallelConfig) -> str:
    """The ``PipelineModule`` partition method that produces the layout in Megatron-DeepSpeed: the
    pinned deepspeedai fork hard-codes ``type:transformer`` (``megatron/model/gpt_model.py:463``); the
    BigScience fork's ``--pp-partition-method type:transformer|embedding`` (BLOOM's) is not in the
    pinned fork's arguments, so that layout is refused here with the reason."""
    from search._pipeline_layout import deepspeed_partition

    if c.stage_layers is None or c.pp == 1:
        return "type:transformer"
    if deepspeed_partition(model.layers, c.pp, "type:transformer") == c.stage_layers:
        return "type:transformer"
    if deepspeed_partition(model.layers, c.pp, "type:transformer|embedding") == c.stage_layers:
        raise SpecError(FIELD, "this split is DeepSpeed's type:transformer|embedding partition, which only the "
                        "BigScience fork of Megatron-DeepSpeed exposes (--pp-partition-method); the pinned "
                        "deepspeedai fork hard-codes type:transformer",
                        "run the BigScience fork with --pp-partition-method 'type:transformer|embedding', or "
                        "use the type:transformer split")
    raise SpecError(FIELD, f"{list(c.stage_layers)} is not a split DeepSpeed's PipelineModule makes",
                    "use the type:transformer split (the even one where pp divides the layers)")

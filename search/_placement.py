"""Where each parallel group lands: its ranks as (size, stride) dimensions for a placement order.

Megatron-Core lays the groups onto consecutive ranks in the order of ``ParallelConfig.placement``,
innermost first (``parallel_state.initialize_model_parallel``: ``RankGenerator(order=...)``;
``--use-tp-pp-dp-mapping`` switches the default ``tp-cp-ep-dp-pp`` to ``tp-cp-ep-pp-dp``). A group
of one dimension is every rank at a stride of the product of the degrees inside it; the dense
model's grid skips ``ep`` (expert parallelism folds into the attention layers' ranks), the expert
grid is ``etp, ep, edp, pp`` in the same order (``cp`` folded, MoE parallel folding,
arXiv:2504.14960). DeepSpeed, Megatron-DeepSpeed and torchtitan have one fixed order each, the
default one here: DeepSpeed's ``PipeModelDataParallelTopology`` axes ``['pipe', 'data', 'model']``
(model innermost, then data, pipe outermost; ``deepspeed/runtime/pipe/topology.py``) and
torchtitan's ``ParallelDims`` mesh ``pp, dp_replicate, dp_shard, cp, tp`` (tp innermost;
``torchtitan/distributed/parallel_dims.py``).
"""

from __future__ import annotations

from search._fabric import Fabric, Group, group_span
from search._parallel_spec import ParallelConfig


def _strides(config: ParallelConfig) -> tuple[int, int, int, int]:
    """Strides of tp, cp, dp and pp on the dense grid."""
    tp, cp = config.tp, config.cp
    if config.placement == "tp-cp-ep-pp-dp":
        return 1, tp, tp * cp * config.pp, tp * cp
    return 1, tp, tp * cp, tp * cp * config.dp


def tp_group(config: ParallelConfig) -> Group:
    """The tensor-parallel group: ``tp`` consecutive ranks."""
    return ((config.tp, 1),)


def cp_group(config: ParallelConfig) -> Group:
    """The context-parallel ring: ``cp`` ranks ``tp`` apart."""
    return ((config.cp, config.tp),)


def pp_group(config: ParallelConfig) -> Group:
    """The pipeline chain: ``pp`` ranks at the pipeline stride of the placement."""
    return ((config.pp, _strides(config)[3]),)


def dp_cp_group(config: ParallelConfig) -> Group:
    """The group dense gradients are reduced over (Megatron's data-parallel x context-parallel group):
    one run of ``cp * dp`` ranks ``tp`` apart when dp sits next to cp, else cp and dp apart."""
    _, cp_stride, dp_stride, _ = _strides(config)
    if dp_stride == cp_stride * config.cp:
        return ((config.cp * config.dp, cp_stride),)
    return ((config.cp, cp_stride), (config.dp, dp_stride))


def edp_group(config: ParallelConfig) -> Group:
    """The expert data-parallel group expert gradients are reduced over: ``edp`` ranks outside
    ``etp * ep``, behind the pipeline in the ``tp-cp-ep-pp-dp`` order."""
    stride = config.ep * config.etp
    if config.placement == "tp-cp-ep-pp-dp":
        stride *= config.pp
    return ((config.edp, stride),)


def ep_group(config: ParallelConfig) -> Group:
    """The expert-parallel group: ``ep`` ranks ``etp`` apart (etp innermost in either order)."""
    return ((config.ep, config.etp),)


def groups(config: ParallelConfig) -> dict[str, Group]:
    """Every communication group of ``config`` with more than one rank, by name: tp, cp, ep, dp (the
    dense gradients' dp x cp group), edp (the experts') and pp."""
    named = {"tp": tp_group(config), "cp": cp_group(config), "ep": ep_group(config), "dp": dp_cp_group(config),
             "edp": edp_group(config) if config.ep * config.etp > 1 else ((1, 1),), "pp": pp_group(config)}
    return {name: g for name, g in named.items() if _size(g) > 1}


def _size(group: Group) -> int:
    n = 1
    for size, _ in group:
        n *= size
    return n


def landing(config: ParallelConfig, gpus_per_node: int, domain_gpus: int, fabric: Fabric) -> dict[str, str]:
    """Where each group of :func:`groups` runs: ``nvlink`` inside one NVLink domain, else the name of
    the highest fabric tier it spans (``leaf``, ``spine``, ``core``)."""
    out = {}
    for name, group in groups(config).items():
        span = group_span(group, gpus_per_node, domain_gpus, fabric)
        out[name] = "nvlink" if span.tier < 0 else fabric.tiers[span.tier].name
    return out

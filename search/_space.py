"""The configuration space: every valid, de-duplicated parallel configuration of one training job.

:func:`enumerate_space` lists only points that :func:`search.check_compatible` accepts, so the
search never samples an invalid configuration (Calculon ``get_all_tensor_parallelisms``:
enumerate only valid values).

Dimensions (their raw product is :attr:`Space.size`):

* tp, pp, cp: divisors of ``world_size``; dp = world_size / (tp*pp*cp) is derived, not a dimension;
* vp: divisors of layers / pp (its raw range is counted at pp = 1: the divisors of layers);
* sp, tp_comm_overlap: (False, False), (True, False), (True, True) with tp > 1;
  micro_batch: divisors of global_batch / dp (raw: of global_batch), or the
  caller's list; zero_stage: 0-3; offload_optimizer, offload_param: none, cpu, nvme;
  recompute: none, selective, full; framework: the runtimes of the target (four for ``"any"``).

Model and batch rules, the same as ``check_compatible`` (Megatron-LM ``validate_args``):
tp divides heads, kv_heads and ffn; pp divides layers; pp*vp divides layers; cp > 1 needs
flash attention, no sliding window or softmax sinks (Transformer Engine runs those with all-to-all CP only,
not the ring autopar costs), and seq_len % (2*cp) == 0 (load-balanced causal CP); sp needs tp > 1;
vp > 1 needs pp > 1; global_batch % (dp*micro_batch) == 0 (DeepSpeed train_batch rule).

Runtime rules: the support matrix (:mod:`search._support`, each entry cited) decides, for every
candidate, whether its runtime runs it; ``refused`` combinations are never listed and ``untested``
ones only on request. In summary:

* megatron (Megatron-Core 0.19, sec. 5): TP, PP, VP, SP, CP. zero 0 = DDP, 1 =
  ``--use-distributed-optimizer``, 2/3 = Megatron-FSDP ``--data-parallel-sharding-strategy
  optim_grads`` / ``optim_grads_params``, with pp = 1 only (refused with pipelines; optimizer
  offload with it is untested). Offload: the optimizer only, to CPU only
  (``--optimizer-cpu-offload``, the flag ``check_runtime`` names; ParallelConfig asks zero >= 1).
* deepspeed: no TP, PP or CP of its own (tp = pp = cp = 1). zero 0-3 with ZeRO-Offload /
  ZeRO-Infinity rules (sec. 1.3, enforced by ParallelConfig): optimizer to cpu needs zero >= 1,
  to nvme zero 3; parameters (cpu/nvme) zero 3.
* megatron with vp > 1: micro-batches per step a multiple of pp (Megatron-Core's interleaved
  schedule with its default micro-batch group of pp).
* megatron-deepspeed: TP, PP, SP; no ``--context-parallel-size`` (sec. 5, Megatron-DeepSpeed)
  and no interleaved schedule in DeepSpeed's PipelineEngine, so cp = vp = 1. With pp > 1 the
  PipelineEngine asserts zero < 2 (``deepspeed/runtime/pipe/engine.py:77``, sec. 1.8) and we
  allow no offload; with pp = 1 DeepSpeed's rules above.
* fsdp (torchtitan FSDP2, sec. 7): TP, PP, VP (interleaved schedules), SP, CP; with pp > 1 only
  micro-batch counts torch's pipeline schedules run (1F1B: at least pp; Interleaved1F1B: a
  whole number per round). zero 2 =
  reshard_after_forward=False (SHARD_GRAD_OP), 3 = FULL_SHARD. Offload only as
  ``CPUOffloadPolicy`` (``training.enable_cpu_offload``): parameters, gradients and the
  optimizer step move to CPU together, so (cpu, cpu) with zero 3, else (none, none).

De-duplication (one entry per configuration that runs the same, the simplest kept):

* dp*cp == 1: ZeRO shards over the data-parallel ranks (Megatron's distributed optimizer over
  the dp x cp group); with one rank there is nothing to shard, so each offload pair keeps only
  the lowest zero stage the runtime permits for it (stage 0 without offload, FSDP's stage 2).
* flash attention: "selective" recompute (the attention core, Korthikanti et al. 2022,
  arXiv:2205.05198) equals "none", since FlashAttention recomputes the attention core in its
  backward anyway (Dao et al. 2022, arXiv:2205.14135); only "none" is kept.
* vp > 1 only with pp > 1 (vp = 1 otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Literal, NamedTuple, get_args

from search._checks import divisors
from search._errors import SpecError
from search._model_spec import ModelSpec
from search._parallel_spec import CudaGraphs, Framework, MoEDispatcher, Offload, ParallelConfig, Placement, Recompute
from search._pipeline_layout import Layout, last_stage_extra_layers, pipeline_options
from search._support import SupportStatus, cached_status, model_entries_for, model_status
from search._tiling import TILE_COUNTS

FrameworkTarget = Literal["megatron", "deepspeed", "megatron-deepspeed", "fsdp", "any"]
FRAMEWORK_TARGETS: tuple[FrameworkTarget, ...] = get_args(FrameworkTarget)
"""What :func:`enumerate_space` accepts: one runtime, or ``"any"`` for all four."""

_RUNTIMES: tuple[Framework, ...] = ("megatron", "deepspeed", "megatron-deepspeed", "fsdp")
_ZERO_STAGES = (0, 1, 2, 3)
_OFFLOADS: tuple[Offload, ...] = ("none", "cpu", "nvme")
_RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")
_FLASH_RECOMPUTES: tuple[Recompute, ...] = ("none", "full")

Policy = tuple[int, Offload, Offload]
"""(zero_stage, offload_optimizer, offload_param)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One point of the space: a configuration and the runtime that runs (and costs) it."""

    framework: Framework
    """A concrete runtime, never ``"any"``."""
    config: ParallelConfig
    """Parallel degrees and memory policies; passes ``check_compatible`` for ``framework``."""


MoEExchange = tuple[MoEDispatcher, bool]
"""(token dispatcher, EP all-to-all overlap) a search asks for (:func:`moe_exchange_of`)."""
NO_EXCHANGE: MoEExchange = ("alltoall", False)


def moe_exchange_of(asked: MoEExchange, pp: int, vp: int, ep: int, etp: int, recompute: str) -> MoEExchange:
    """The dispatcher and overlap a search asked for, where a configuration can run them (Megatron-Core
    only: the other runtimes have no expert parallelism): the flex dispatcher with ep > 1 and etp = 1,
    the overlap with ep > 1, no full recomputation and the interleaved schedule when pipelined
    (:mod:`search._support`; the model's own rule, at most one MTP layer, is checked when the search
    is asked: :func:`search._search.check_moe_exchange`); else the alltoall dispatcher without overlap."""
    dispatcher, overlap = asked
    if ep == 1:
        return NO_EXCHANGE
    return (dispatcher if etp == 1 else "alltoall",
            overlap and recompute != "full" and (pp == 1 or vp > 1))


def cuda_graphs_of(asked: CudaGraphs, moe: bool, ep: int, zero_stage: int, exchange: MoEExchange) -> CudaGraphs:
    """The CUDA graph a search asked for, where a configuration runs it supported (Megatron-Core only:
    :func:`search._search.check_cuda_graphs` narrows the runtime): not with Megatron-FSDP (ZeRO-2/3,
    untested), and for an MoE model only with expert parallelism on HybridEP (:mod:`search._support`);
    else none."""
    if asked == "none" or zero_stage >= 2:
        return "none"
    if moe and (ep == 1 or exchange[0] != "flex-hybridep"):
        return "none"
    return asked


Variant = tuple[Framework, Placement, int]
"""(runtime, placement, tiles) of one candidate of a :class:`Block` at one micro-batch."""
DEFAULT_PLACEMENT: Placement = "tp-cp-ep-dp-pp"


class Block(NamedTuple):
    """Candidates that differ only in the micro-batch, the runtime, the placement and the tiles:
    what a memory scan walks micro-batch by micro-batch (the peak never falls as it grows), building
    a configuration only where it has to look at one."""

    dp: int
    tp: int
    pp: int
    vp: int
    cp: int
    sp: bool
    tp_comm_overlap: bool
    stage_layers: Layout | None
    ep: int
    etp: int
    zero_stage: int
    offload_optimizer: Offload
    offload_param: Offload
    recompute: Recompute
    entries: tuple[tuple[int, tuple[Variant, ...]], ...]
    """(micro-batch, its variants in order), the micro-batch ascending."""
    moe_exchange: MoEExchange = ("alltoall", False)
    """(moe_dispatcher, moe_a2a_overlap) of the block's configurations (:func:`moe_exchange_of`)."""
    cuda_graphs: CudaGraphs = "none"
    """The block's CUDA graph (:func:`cuda_graphs_of`)."""

    def config(self, micro_batch: int, placement: Placement = DEFAULT_PLACEMENT, tiles: int = 1) -> ParallelConfig:
        return ParallelConfig.trusted(self.dp, self.tp, self.pp, self.vp, self.cp, self.sp, micro_batch,
                                      self.zero_stage, self.offload_optimizer, self.offload_param, self.recompute,
                                      tp_comm_overlap=self.tp_comm_overlap, stage_layers=self.stage_layers,
                                      ep=self.ep, etp=self.etp, placement=placement, tiles=tiles,
                                      moe_dispatcher=self.moe_exchange[0], moe_a2a_overlap=self.moe_exchange[1],
                                      cuda_graphs=self.cuda_graphs)

    def candidates(self) -> Iterator[Candidate]:
        """The block's candidates in the space's order; runtimes of one micro-batch share one configuration."""
        for mb, variants in self.entries:
            shared: ParallelConfig | None = None
            for runtime, placement, tiles in variants:
                if placement == DEFAULT_PLACEMENT and tiles == 1:
                    if shared is None:
                        shared = self.config(mb)
                    yield Candidate(runtime, shared)
                else:
                    yield Candidate(runtime, self.config(mb, placement, tiles))


_block: Callable[[tuple[object, ...]], Block] = partial(tuple.__new__, Block)
"""``Block(*fields)`` without the Python-level ``__new__`` of a named tuple (a space holds 10^4-10^5)."""


@dataclass(frozen=True, slots=True)
class Space:
    """The enumerated space of one job."""

    size: int
    """Raw size: product of the per-dimension choice counts before any rule (a report figure)."""
    blocks: tuple[Block, ...]
    """The valid configurations grouped by all but micro-batch, runtime, placement and tiles."""
    n_valid: int
    """How many candidates the blocks hold."""
    _expanded: list[tuple[Candidate, ...]] = field(default_factory=list, compare=False, repr=False)

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Every valid, de-duplicated configuration, in a deterministic order (tp, pp, cp, vp, sp,
        zero/offload, recompute, micro_batch, ascending). A configuration that several runtimes run
        appears once per runtime, adjacent, in ``FRAMEWORK_TARGETS`` order, sharing one
        ParallelConfig. Built on first use (an exhaustive search walks :attr:`blocks` instead)."""
        if not self._expanded:
            self._expanded.append(tuple(c for block in self.blocks for c in block.candidates()))
        return self._expanded[0]


def _config_allows(zero: int, opt: Offload, param: Offload) -> bool:
    """ParallelConfig's own rules (DeepSpeed ZeRO-Offload / ZeRO-Infinity): optimizer offload
    needs ZeRO >= 1, NVMe optimizer offload and any parameter offload ZeRO-3."""
    return not ((param != "none" and zero != 3) or (opt == "nvme" and zero != 3) or (opt != "none" and zero == 0))


def _status(runtime: Framework, tp: int, pp: int, vp: int, cp: int, sp: bool, zero: int, opt: Offload,
            param: Offload, recompute: Recompute, overlap: bool = False, expert: bool = False,
            tiled: bool = False, placed: bool = False) -> SupportStatus:
    """The support matrix's verdict (:func:`search._support.cached_status`, cached per key);
    ``expert``: ep or etp > 1; ``tiled``: tiles > 1; ``placed``: the tp-cp-ep-pp-dp placement."""
    return cached_status((runtime, tp > 1, pp > 1, vp > 1, cp > 1, sp, zero, opt, param, recompute, overlap,
                          expert, tiled, placed))


def _tp_divides(model: ModelSpec, t: int) -> bool:
    """tp splits the heads, the K/V heads and the dense MLP evenly (Megatron ``validate_args``)."""
    kv = int(model.kv_heads or model.heads)
    return (model.heads % t == 0 and kv % t == 0 and (not model.dense_layers or model.ffn % t == 0)
            and (model.moe is None or model.moe.shared_expert_ffn % t == 0))


def expert_options(model: ModelSpec, tp: int, cp: int, dp: int) -> tuple[tuple[int, int], ...]:
    """(ep, etp) pairs of Megatron-Core's MoE parallel folding for one attention layout: ep divides
    the experts, etp is 1 or tp (Megatron's default; the MoE README recommends 1 for fine-grained
    experts) and divides the expert MLP, and ep * etp divides tp * cp * dp (frameworks_2.md sec.
    3.2). (1, 1) only for a dense model."""
    if model.moe is None:
        return ((1, 1),)
    ranks = tp * cp * dp
    out = []
    for etp in sorted({1, tp}):
        if model.moe.expert_ffn % etp or (model.bias and etp > 1):
            continue
        out += [(ep, etp) for ep in divisors(model.moe.experts) if ranks % (ep * etp) == 0]
    return tuple(out)


def _admits(status: SupportStatus, allow_untested: bool) -> bool:
    return status == "supported" or (allow_untested and status == "untested")


@cache
def _policies(runtime: Framework, pipelined: bool, sharded: bool, allow_untested: bool) -> tuple[Policy, ...]:
    """The (zero, offload_optimizer, offload_param) choices of one runtime, de-duplicated.

    Policy entries of the support matrix look at the ZeRO stage, the offloads and whether the
    layout is pipelined only, so a representative layout decides them. ``sharded`` is
    dp*cp > 1; without it only the lowest permitted stage of each offload pair is kept.
    """
    pp = 2 if pipelined else 1
    allowed = [
        (zero, opt, param)
        for zero in _ZERO_STAGES
        for opt in _OFFLOADS
        for param in _OFFLOADS
        if _config_allows(zero, opt, param)
        and _admits(_status(runtime, 1, pp, 1, 1, False, zero, opt, param, "none"), allow_untested)
    ]
    if sharded:
        return tuple(allowed)
    lowest: dict[tuple[Offload, Offload], Policy] = {}
    for policy in allowed:  # zero ascends, so the first entry per offload pair is the lowest
        lowest.setdefault((policy[1], policy[2]), policy)
    return tuple(p for p in allowed if lowest[(p[1], p[2])] is p)


def _runs(runtime: Framework, tp: int, pp: int, cp: int, vp: int, allow_untested: bool) -> bool:
    """Whether ``runtime`` has these parallelisms with at least one of its policies."""
    return any(_admits(_status(runtime, tp, pp, vp, cp, False, zero, opt, param, "none"), allow_untested)
               for zero, opt, param in _policies(runtime, pp > 1, True, allow_untested))


# Megatron-Core's interleaved schedule (0.19.2 pipeline_parallel/schedules.py:1133-1153) groups
# micro-batches by microbatch_group_size_per_vp_stage (default: pp) and refuses a group larger
# than the micro-batch count or a remainder smaller than pp: with the default, the micro-batches
# per step must be a multiple of pp. A larger group would run, but it keeps more micro-batches in
# flight than the cost model's interleaved memory and bubble terms assume, so it is not emitted.


def _torch_schedule_runs(n_micro: int, pp: int, vp: int) -> bool:
    """Whether torch.distributed.pipelining (torchtitan's pipeline) runs ``n_micro`` micro-batches
    per step on ``pp`` stages: 1F1B needs at least ``pp`` of them; Interleaved1F1B splits them
    into ``n_micro // pp`` rounds and needs a whole number of micro-batches per round
    (torch 2.13 ``distributed/pipelining/schedules.py``; refusals seen through torchtitan 0.3.0)."""
    if vp == 1:
        return n_micro >= pp
    return n_micro % max(1, n_micro // pp) == 0


@cache
def _labelled_policies(
    runtimes: tuple[Framework, ...], pipelined: bool, sharded: bool, allow_untested: bool
) -> tuple[tuple[Policy, tuple[Framework, ...]], ...]:
    """Each policy any of ``runtimes`` permits, with the runtimes that permit it, lowest stage first."""
    labels: dict[Policy, list[Framework]] = {}
    for runtime in runtimes:
        for policy in _policies(runtime, pipelined, sharded, allow_untested):
            labels.setdefault(policy, []).append(runtime)
    order = {o: i for i, o in enumerate(_OFFLOADS)}
    ranked = sorted(labels, key=lambda p: (p[0], order[p[1]], order[p[2]]))
    return tuple((p, tuple(labels[p])) for p in ranked)


def _targets(framework: str) -> tuple[Framework, ...]:
    if framework == "any":
        return _RUNTIMES
    for runtime in _RUNTIMES:
        if framework == runtime:
            return (runtime,)
    raise SpecError("framework", f"{framework!r} is not a framework target",
                    f"use one of: {', '.join(FRAMEWORK_TARGETS)}")


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(name, f"{value!r} is not a positive integer", "give an integer >= 1")
    return value


def why_no_valid(model: ModelSpec, world_size: int, global_batch: int, framework: str,
                 allow_untested: bool = False) -> tuple[str, ...]:
    """Which rule leaves no valid configuration, and what would make some valid (for an empty space)."""
    reasons: list[str] = []
    for runtime in _targets(framework):
        for e in model_entries_for(runtime, model):
            if e.status == "refused" or (e.status == "untested" and not allow_untested):
                extra = " (allow untested combinations: --allow-untested)" if e.status == "untested" else ""
                reasons.append(f"{runtime}: {e.what}; {e.fix}{extra}")
    tps = [t for t in divisors(world_size) if _tp_divides(model, t)]
    if not any(global_batch % (world_size // (t * p)) == 0 for t in tps for p in divisors(world_size // t)):
        smallest = min(world_size // (t * p) for t in tps for p in divisors(world_size // t))
        reasons.append(f"global batch {global_batch} is divisible by no data-parallel size the GPUs allow "
                       f"(dp = GPUs / (tp*pp*cp), at least {smallest}); use a multiple of {smallest} sequences")
    if not reasons:
        reasons.append(f"no runtime of {framework!r} runs any (tp, pp, cp) of {world_size} GPUs for this model "
                       "(see search/_support.py); try framework 'any', another GPU count or allow untested "
                       "combinations")
    return tuple(reasons)


def enumerate_space(
    model: ModelSpec,
    world_size: int,
    global_batch: int,
    framework: str,
    micro_batches: Sequence[int] | None = None,
    *,
    allow_untested: bool = False,
    allow_tiling: bool = False,
    moe_exchange: MoEExchange = NO_EXCHANGE,
    cuda_graphs: CudaGraphs = "none",
) -> Space:
    """Every valid, de-duplicated configuration of ``model`` on ``world_size`` GPUs.

    ``framework`` is one of :data:`FRAMEWORK_TARGETS`; ``micro_batches`` restricts the
    micro-batch sizes (None: every divisor of global_batch / dp). Combinations the support
    matrix (:mod:`search._support`) marks ``untested`` are left out unless ``allow_untested``;
    ``refused`` ones always. ``allow_tiling`` adds DeepSpeed ZeRO-3 configurations with
    memory-centric tiling (:data:`search._tiling.TILE_COUNTS`; the model code must use
    ``TiledLinear``, so it is the caller's choice). ``moe_exchange`` is the MoE token dispatcher and
    EP overlap to run where a configuration can (:func:`moe_exchange_of`), ``cuda_graphs`` the CUDA graph
    (:func:`cuda_graphs_of`). Raises :class:`SpecError`
    for an unknown framework target or a bad argument.
    """
    if not isinstance(model, ModelSpec):
        raise SpecError("model", f"{type(model).__name__} is not a ModelSpec",
                        "pass a ModelSpec (search.model_preset(name) returns one)")
    runtimes = tuple(r for r in _targets(framework) if _admits(model_status(r, model), allow_untested))
    _positive("world_size", world_size)
    _positive("global_batch", global_batch)
    mbs = None if micro_batches is None else sorted({_positive("micro_batches", m) for m in micro_batches})

    world_divisors = divisors(world_size)
    flash = model.attention == "flash"
    moe = model.moe is not None
    tps = [t for t in world_divisors if _tp_divides(model, t)]
    pps = [p for p in world_divisors if p <= model.layers + 2]  # the embedding and head can fill a stage
    head_w = round(last_stage_extra_layers(model), 3)
    ring_cp = flash and model.attention_window is None and not model.softmax_sinks  # see check_compatible
    cps = [c for c in world_divisors if c == 1 or (ring_cp and model.seq_len % (2 * c) == 0)]
    recomputes = _FLASH_RECOMPUTES if flash else _RECOMPUTES

    blocks: list[Block] = []
    n_valid = 0
    labelled: dict[tuple[object, ...], list[_Labelled]] = {}
    # What moe_exchange_of and cuda_graphs_of give every block when nothing is asked for (most searches).
    no_exchange, no_graphs = moe_exchange == NO_EXCHANGE, cuda_graphs == "none"
    variants_of: dict[tuple[object, ...], tuple[Variant, ...]] = {}
    # A block's micro-batch entries and their count, shared by the blocks that run the same runtimes
    # over the same micro-batches and schedule.
    entries_of: dict[tuple[object, ...], tuple[tuple[tuple[int, tuple[Variant, ...]], ...], int]] = {}
    # Loops in the order tp, pp, cp, vp, sp, zero/offload, recompute, micro_batch; integer checks
    # first, and per micro-batch the runtimes that run it (one ParallelConfig, labelled once per
    # runtime), Megatron's other placement and DeepSpeed's tilings.
    for tp in tps:
        # (sp, tp_comm_overlap): overlap needs sp, and only Megatron has it (the matrix says so).
        sps = ((False, False), (True, False), (True, True)) if tp > 1 else ((False, False),)
        for pp in pps:
            if world_size % (tp * pp):
                continue
            layouts = pipeline_options(runtimes, model.layers, pp, head_w, allow_untested)
            if not layouts:
                continue
            for cp in cps:
                mp = tp * pp * cp
                if world_size % mp or global_batch % (world_size // mp):
                    continue
                dp = world_size // mp
                experts = expert_options(model, tp, cp, dp)
                per_rank = global_batch // dp
                micro = divisors(per_rank) if mbs is None else [m for m in mbs if per_rank % m == 0]
                for vp, layout, expressed_by in layouts:
                    live = tuple(r for r in expressed_by if _runs(r, tp, pp, cp, vp, allow_untested))
                    if not live:
                        continue
                    options = _labelled_policies(live, pp > 1, dp * cp > 1, allow_untested)
                    for (sp, overlap), (ep, etp) in ((s, e) for s in sps for e in experts):
                        # The runtimes of a policy depend on the expert degrees only through whether there are
                        # any, and on tp, pp, vp and cp through whether each is above 1 (the support matrix's
                        # key, _status): listed once per such key.
                        runs_key = (options, tp > 1, pp > 1, vp > 1, cp > 1, sp, overlap, ep * etp > 1, dp > 1)
                        runs = labelled.get(runs_key)
                        if runs is None:
                            runs = labelled[runs_key] = _labelled_runs(
                                options, recomputes, tp, pp, vp, cp, sp, overlap, ep * etp > 1, dp > 1, allow_untested)
                        for zero, opt, param, rc, labels, placed in runs:
                            tiled = allow_tiling and zero == 3 and "deepspeed" in labels
                            ekey = (labels, placed, tiled, per_rank, pp, vp)  # ``micro`` follows per_rank
                            entries_n = entries_of.get(ekey)
                            if entries_n is None:
                                entries: list[tuple[int, tuple[Variant, ...]]] = []
                                for mb in micro:
                                    vkey = (labels, placed, tiled, per_rank // mb, pp, vp)
                                    variants = variants_of.get(vkey)
                                    if variants is None:
                                        variants = variants_of[vkey] = _variants(labels, placed, tiled,
                                                                                 per_rank // mb, pp, vp)
                                    if variants:
                                        entries.append((mb, variants))
                                entries_n = entries_of[ekey] = (tuple(entries),
                                                                 sum(len(v) for _mb, v in entries))
                            if entries_n[0]:
                                n_valid += entries_n[1]
                                exchange = NO_EXCHANGE if no_exchange else moe_exchange_of(moe_exchange, pp, vp, ep,
                                                                                           etp, rc)
                                blocks.append(_block((dp, tp, pp, vp, cp, sp, overlap, layout, ep, etp, zero, opt,
                                                      param, rc, entries_n[0], exchange,
                                                      "none" if no_graphs else cuda_graphs_of(cuda_graphs, moe, ep,
                                                                                              zero, exchange))))

    n_micro = len(mbs) if mbs is not None else len(divisors(global_batch))
    size = (len(runtimes) * len(world_divisors) ** 3 * len(divisors(model.layers)) * 3 * n_micro
            * len(_ZERO_STAGES) * len(_OFFLOADS) ** 2 * len(_RECOMPUTES))
    return Space(size=size, blocks=tuple(blocks), n_valid=n_valid)


_Labelled = tuple[int, Offload, Offload, Recompute, tuple[Framework, ...], bool]
"""(zero, offload_optimizer, offload_param, recompute, the runtimes that run it, whether Megatron also
runs it with the tp-cp-ep-pp-dp placement) of one policy and recomputation (:func:`_labelled_runs`)."""


def _labelled_runs(options: tuple[tuple[Policy, tuple[Framework, ...]], ...], recomputes: tuple[Recompute, ...],
                   tp: int, pp: int, vp: int, cp: int, sp: bool, overlap: bool, expert: bool, data_parallel: bool,
                   allow_untested: bool) -> list[_Labelled]:
    """Each policy of ``options`` and recomputation, in the space's order, with the runtimes of its
    labels that run it (the support matrix; none: left out), and whether Megatron also runs it with
    the tp-cp-ep-pp-dp placement (``--use-tp-pp-dp-mapping``, the one runtime with the knob,
    search._support): a different layout only when both dp and pp > 1."""
    out = []
    for (zero, opt, param), all_labels in options:
        for rc in recomputes:
            labels = tuple(r for r in all_labels if _admits(
                _status(r, tp, pp, vp, cp, sp, zero, opt, param, rc, overlap, expert), allow_untested))
            if not labels:
                continue
            placed = (data_parallel and pp > 1 and "megatron" in labels
                      and _admits(_status("megatron", tp, pp, vp, cp, sp, zero, opt, param, rc, overlap, expert,
                                          placed=True), allow_untested))
            out.append((zero, opt, param, rc, labels, placed))
    return out


def _variants(labels: tuple[Framework, ...], placed: bool, tiled: bool, n_micro: int, pp: int,
              vp: int) -> tuple[Variant, ...]:
    """The candidates of one configuration at one micro-batch: each runtime of ``labels`` whose
    schedule runs ``n_micro`` micro-batches per step, Megatron's tp-cp-ep-pp-dp placement where
    ``placed``, and DeepSpeed's tilings where ``tiled``."""
    out: list[Variant] = []
    for runtime in labels:
        if runtime == "fsdp" and pp > 1 and not _torch_schedule_runs(n_micro, pp, vp):
            continue
        if runtime == "megatron" and vp > 1 and n_micro % pp:
            continue
        out.append((runtime, DEFAULT_PLACEMENT, 1))
    if placed and (vp == 1 or n_micro % pp == 0):
        out.append(("megatron", "tp-cp-ep-pp-dp", 1))
    if tiled:
        out += [("deepspeed", DEFAULT_PLACEMENT, n) for n in TILE_COUNTS]
    return tuple(out)

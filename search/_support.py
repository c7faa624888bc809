"""What each runtime really runs: the support matrix, one source of truth for the search, the
cost model and the launch emitters.

Every entry names a combination of parallel degrees and memory policies of one runtime, its
status and the evidence (the framework's docs, ``validate_args``, an assert, or an upstream
issue; most are quoted with file and line in ``shared/reference/frameworks.md`` and
``frameworks_2.md``):

* ``refused``: the runtime raises, or its maintainers say it does not work; never enumerated,
  and :func:`search.check_compatible` raises with the entry's reason and fix.
* ``untested``: a parser accepts it, but no documentation, functional test or published run
  shows it running; enumerated only when the caller allows untested combinations, and every
  prediction of it carries the entry's warning.
* ``supported`` (model entries only): runs, and every prediction says the entry's known limit.

A combination no entry names is ``supported``. Versions pinned: megatron-core 0.19.x,
Megatron-DeepSpeed (2025-07-16), DeepSpeed 0.19, torchtitan 0.3.0 with torch FSDP2.

Predicates look only at whether a parallelism is in use (tp, pp, vp, cp > 1), at sp and at
the ZeRO stage, offloads, recomputation and TP-communication overlap, so the enumerator can
cache a status per combination of those (:func:`support_key`). The fine-grained memory policies
(offload fraction, recomputed layer count, activation offload) are never enumerated: the search
derives them per layout and checks them with :func:`support_status` directly. Nor are the MoE token
dispatcher, the EP overlap and CUDA graphs (``moe_dispatcher``, ``moe_a2a_overlap``, ``cuda_graphs``): a
configuration that states them is checked with :func:`support_status` too.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from search._errors import SpecError
from search._model_support import (  # re-exported: the enumerator and the checks read both halves here
    MODEL_SUPPORT,
    check_model_supported,
    model_entries_for,
    model_status,
    model_support_warnings,
)
from search._support_entry import SUPPORT_STATUSES, SupportEntry, SupportStatus, refuse, status_of, warnings_of

if TYPE_CHECKING:
    from search._parallel_spec import ParallelConfig

def megatron_fsdp(framework: str, zero_stage: int) -> bool:
    """Megatron's ZeRO-2/3 is Megatron-FSDP (``--use-megatron-fsdp``, ``optim_grads`` /
    ``optim_grads_params``)."""
    return framework == "megatron" and zero_stage >= 2


def _megatron_fsdp(c: ParallelConfig) -> bool:
    """:func:`megatron_fsdp` for the Megatron entries below."""
    return megatron_fsdp("megatron", c.zero_stage)


def _not_type_transformer(c: ParallelConfig) -> bool:
    """An uneven split that DeepSpeed's type:transformer partition does not make (layout entries
    look at ``stage_layers``, so the enumerator decides them itself, not by :func:`cached_status`)."""
    if c.stage_layers is None or c.pp == 1:
        return False
    from search._pipeline_layout import deepspeed_partition

    try:
        return deepspeed_partition(sum(c.stage_layers), c.pp, "type:transformer") != c.stage_layers
    except SpecError:
        return True


SUPPORT_MATRIX: tuple[SupportEntry, ...] = (
    # --- Megatron-LM / Megatron-Core ------------------------------------------------------------
    SupportEntry(
        "megatron", "megatron-fsdp-pipeline", "refused", "ParallelConfig.zero_stage",
        "Megatron-FSDP (ZeRO-2/3: --use-megatron-fsdp, optim_grads / optim_grads_params) with pipeline "
        "parallelism is not supported: documented only with TP, CP and EP, every functional test uses pp = 1, "
        "and pipeline support is an open upstream request",
        "use zero_stage 0 or 1 (DDP or --use-distributed-optimizer) with pp > 1, or pp=1 with ZeRO-2/3",
        "megatron-core 0.19 docs/user-guide/parallelism-guide.md ('Integrated with TP, CP, EP'); "
        "tests/functional_tests/test_cases/*fsdp*/model_config.yaml (pp 1); NVIDIA/Megatron-LM#1455; "
        "frameworks_2.md sec. 2.2",
        lambda c: _megatron_fsdp(c) and c.pp > 1,
    ),
    SupportEntry(
        "megatron", "megatron-offload-params", "refused", "ParallelConfig.offload_param",
        "Megatron offloads only the optimizer, and only to CPU (--optimizer-cpu-offload); it has no parameter "
        "or NVMe offload",
        "use offload_optimizer='cpu' and offload_param='none', or framework='deepspeed' for ZeRO-Infinity",
        "megatron-core 0.19 megatron/core/optimizer/cpu_offloading/README.md; arguments.py --optimizer-cpu-offload",
        lambda c: c.offload_param != "none" or c.offload_optimizer == "nvme",
    ),
    SupportEntry(
        "megatron", "megatron-fsdp-optimizer-offload", "untested", "ParallelConfig.offload_optimizer",
        "optimizer CPU offload together with Megatron-FSDP (ZeRO-2/3) passes the parser, but neither the "
        "cpu_offloading README nor the Megatron-FSDP docs or functional tests show the two together",
        "use zero_stage=1 with offload_optimizer='cpu', or no offload with ZeRO-2/3",
        "megatron-core 0.19 megatron/core/optimizer/cpu_offloading/README.md; docs/user-guide/features/"
        "megatron_fsdp.md (no offload section)",
        lambda c: _megatron_fsdp(c) and c.offload_optimizer != "none",
    ),
    SupportEntry(
        "megatron", "megatron-ep-tp-needs-sp", "refused", "ParallelConfig.sp",
        "expert parallelism together with tensor parallelism needs sequence parallelism (the MoE layer takes "
        "its tokens from the sequence-parallel shards)",
        "set sp=true, or tp=1, or ep=1",
        "megatron-core 0.19 docs/user-guide/parallelism-guide.md ('you must enable Sequence Parallelism'); "
        "model_parallel_config.py:560; frameworks_2.md sec. 3.2",
        lambda c: c.ep > 1 and c.tp > 1 and not c.sp,
    ),
    SupportEntry(
        "megatron", "megatron-ep-overlap-needs-vp", "refused", "ParallelConfig.moe_a2a_overlap",
        "--overlap-moe-expert-parallel-comm with pipeline parallelism needs the interleaved schedule (vp > 1)",
        "set vp >= 2, or pp=1, or moe_a2a_overlap=false",
        "megatron-core 0.19 transformer_config.py:2672-2700; frameworks_2.md sec. 1 item 10 and sec. 3.2",
        lambda c: c.moe_a2a_overlap and c.pp > 1 and c.vp == 1,
    ),
    SupportEntry(
        "megatron", "megatron-ep-overlap-full-recompute", "refused", "ParallelConfig.moe_a2a_overlap",
        "--overlap-moe-expert-parallel-comm does not work with full recomputation",
        "set recompute='none' or 'selective', or moe_a2a_overlap=false",
        "megatron-core 0.19 transformer_config.py:2672-2700; frameworks_2.md sec. 3.2",
        lambda c: c.moe_a2a_overlap and c.recompute == "full",
    ),
    SupportEntry(
        "megatron", "megatron-tp-comm-overlap-needs-sp", "refused", "ParallelConfig.tp_comm_overlap",
        "--tp-comm-overlap needs --sequence-parallel (and tp > 1)",
        "set sp=true with tp >= 2, or tp_comm_overlap=false",
        "megatron-core 0.19 arguments.py:1401 (assert); frameworks_2.md sec. 5",
        lambda c: c.tp_comm_overlap and not c.sp,
    ),
    # --- DeepSpeed (ZeRO, no model parallelism of its own) ---------------------------------------
    SupportEntry(
        "deepspeed", "deepspeed-model-parallel", "refused", "TrainingSpec.framework",
        "DeepSpeed alone has no tensor, pipeline or context parallelism",
        "use framework='megatron-deepspeed' for tp/pp with DeepSpeed, or tp=pp=cp=1",
        "frameworks.md sec. 1 (DeepSpeed config keys have no tp/cp degree); DeepSpeed PipelineModule needs "
        "model code (Megatron-DeepSpeed)",
        lambda c: c.tp > 1 or c.pp > 1 or c.cp > 1,
    ),
    # --- Megatron-DeepSpeed (Megatron model code, DeepSpeed engine) ------------------------------
    SupportEntry(
        "megatron-deepspeed", "megatron-deepspeed-cp", "refused", "ParallelConfig.cp",
        "Megatron-DeepSpeed has no --context-parallel-size",
        "set cp=1, or framework='megatron'",
        "Megatron-DeepSpeed megatron/arguments.py (2025-07-16; frameworks.md sec. 5)",
        lambda c: c.cp > 1,
    ),
    SupportEntry(
        "megatron-deepspeed", "deepspeed-pipeline-interleaved", "refused", "ParallelConfig.vp",
        "DeepSpeed's pipeline engine runs the synchronous 1F1B TrainSchedule only (no interleaved stages)",
        "set vp=1, or framework='megatron'",
        "deepspeed/runtime/pipe/schedule.py (TrainSchedule); frameworks_2.md sec. 1.5",
        lambda c: c.vp > 1,
    ),
    SupportEntry(
        "megatron-deepspeed", "deepspeed-pipeline-zero2", "refused", "ParallelConfig.zero_stage",
        "DeepSpeed's pipeline engine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'",
        "use zero_stage 0 or 1 with pp > 1, or pp=1",
        "deepspeed/runtime/pipe/engine.py:76; frameworks_2.md sec. 1.5 and 2.4",
        lambda c: c.pp > 1 and c.zero_stage >= 2,
    ),
    SupportEntry(
        "megatron-deepspeed", "deepspeed-pipeline-offload", "refused", "ParallelConfig.offload_optimizer",
        "DeepSpeed's pipeline engine runs without offload: ZeRO-Offload needs ZeRO-2/3 partitioned "
        "gradients or ZeRO-3 parameters, which the pipeline engine refuses, and no pipeline run with ZeRO-1 "
        "offload is documented",
        "set offload_optimizer='none' with pp > 1, or pp=1",
        "deepspeed/runtime/pipe/engine.py:76; docs/_tutorials/pipeline.md; frameworks_2.md sec. 2.4",
        lambda c: c.pp > 1 and (c.offload_optimizer != "none" or c.offload_param != "none"),
    ),
    SupportEntry(
        "megatron-deepspeed", "deepspeed-partition-not-type-transformer", "untested", "ParallelConfig.stage_layers",
        "a pipeline split other than DeepSpeed's type:transformer partition: the pinned deepspeedai fork "
        "hard-codes that method; BLOOM's type:transformer|embedding split needs the BigScience fork's "
        "--pp-partition-method, which the pinned fork's parser does not have",
        "use the type:transformer split (or the even one), or run the BigScience fork",
        "deepspeedai/Megatron-DeepSpeed megatron/model/gpt_model.py:463; bigscience-workshop/Megatron-DeepSpeed "
        "megatron/arguments.py:578; frameworks_2.md sec. 1.2",
        lambda c: _not_type_transformer(c),
    ),
    # --- torchtitan 0.3.0 / torch FSDP2 -----------------------------------------------------------
    SupportEntry(
        "fsdp", "fsdp-zero-stage", "refused", "ParallelConfig.zero_stage",
        "FSDP shards with ZeRO-2 or ZeRO-3 (SHARD_GRAD_OP: reshard_after_forward=False; FULL_SHARD), not DDP or ZeRO-1",
        "use zero_stage 2 or 3, or framework='megatron' for DDP / ZeRO-1",
        "torchtitan 0.3.0 parallelisms/fsdp (fully_shard); frameworks.md sec. 7",
        lambda c: c.zero_stage < 2,
    ),
    SupportEntry(
        "fsdp", "fsdp-offload-policy", "refused", "ParallelConfig.offload_optimizer",
        "FSDP2 offloads parameters, gradients and the optimizer step together, to CPU, with full sharding "
        "(CPUOffloadPolicy)",
        "use offload_optimizer='cpu' and offload_param='cpu' with zero_stage=3, or no offload",
        "torch.distributed.fsdp CPUOffloadPolicy; torchtitan training.enable_cpu_offload (frameworks.md sec. 7)",
        lambda c: ((c.offload_optimizer, c.offload_param) != ("none", "none")
                   and ((c.offload_optimizer, c.offload_param) != ("cpu", "cpu") or c.zero_stage != 3)),
    ),
    SupportEntry(
        "fsdp", "fsdp-offload-pipeline", "untested", "ParallelConfig.offload_optimizer",
        "FSDP2 CPU offload with torch pipelining: the pipeline stage keeps parameters and gradients unsharded "
        "across micro-batches (set_reshard_after_backward(False)), which CPU offload was not written for; no "
        "torchtitan test or published run combines them",
        "use pp=1 with CPU offload, or no offload with pp > 1",
        "torch distributed/pipelining/stage.py backward_maybe_with_nosync; frameworks_2.md sec. 2.3",
        lambda c: c.pp > 1 and c.offload_optimizer != "none",
    ),
    SupportEntry(
        "fsdp", "fsdp-tp-comm-overlap", "refused", "ParallelConfig.tp_comm_overlap",
        "TP communication overlap is a Megatron-Core / Transformer Engine option (torchtitan's async TP is "
        "a different mechanism, not modelled)",
        "set tp_comm_overlap=false, or framework='megatron'",
        "frameworks_2.md sec. 5 (--tp-comm-overlap)",
        lambda c: c.tp_comm_overlap,
    ),
    SupportEntry(
        "deepspeed", "deepspeed-tp-comm-overlap", "refused", "ParallelConfig.tp_comm_overlap",
        "TP communication overlap is a Megatron-Core / Transformer Engine option",
        "set tp_comm_overlap=false, or framework='megatron'",
        "frameworks_2.md sec. 5 (--tp-comm-overlap)",
        lambda c: c.tp_comm_overlap,
    ),
    SupportEntry(
        "megatron-deepspeed", "megatron-deepspeed-tp-comm-overlap", "refused", "ParallelConfig.tp_comm_overlap",
        "Megatron-DeepSpeed predates --tp-comm-overlap (its pinned flag list has no such option)",
        "set tp_comm_overlap=false, or framework='megatron'",
        "service/launch/megatron_deepspeed_flags.txt (Megatron-DeepSpeed 2025-07-16 parser)",
        lambda c: c.tp_comm_overlap,
    ),
    *(SupportEntry(
        runtime, f"{runtime}-expert-parallel", "refused", "ParallelConfig.ep",
        "autopar costs expert parallelism as Megatron-Core folds it (ep and etp over the attention layers' "
        "tp x cp x dp ranks); this runtime's expert groups are not modelled",
        "set ep=1 and etp=1, or framework='megatron'",
        "frameworks_2.md sec. 3.2 (MoE parallel folding) and 3.5 (DeepSpeed-MoE)",
        lambda c: c.ep > 1 or c.etp > 1,
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    SupportEntry(
        "megatron", "megatron-tp-pp-dp-mapping-cp-ep", "refused", "ParallelConfig.placement",
        "--use-tp-pp-dp-mapping (placement tp-cp-ep-pp-dp) is not for context or expert parallelism: "
        "megatron-core says to make sure EP and CP are not used with it (older releases build the order 'tp-pp-dp')",
        "use placement tp-cp-ep-dp-pp with cp > 1 or ep > 1, or cp=1 and ep=etp=1",
        "megatron-core model_parallel_config.py use_tp_pp_dp_mapping ('Make sure EP and CP aren't used with this "
        "option enabled'); megatron/training/initialize.py order='tp-pp-dp' in releases before tp-cp-ep-pp-dp",
        lambda c: c.placement != "tp-cp-ep-dp-pp" and (c.cp > 1 or c.ep > 1 or c.etp > 1),
    ),
    SupportEntry(
        "megatron", "megatron-tp-pp-dp-mapping-fsdp", "refused", "ParallelConfig.placement",
        "--use-tp-pp-dp-mapping is not supported with Megatron-FSDP (ZeRO-2/3): its alternative rank order "
        "conflicts with FSDP sharding",
        "use placement tp-cp-ep-dp-pp with zero_stage 2/3, or zero_stage 0/1",
        "Megatron-Bridge docs, Megatron FSDP ('use_tp_pp_dp_mapping is not supported with Megatron FSDP')",
        lambda c: c.placement != "tp-cp-ep-dp-pp" and _megatron_fsdp(c),
    ),
    *(SupportEntry(
        runtime, f"{runtime}-placement", "refused", "ParallelConfig.placement",
        "this runtime lays its groups in one fixed order, model (tp) innermost, then data, then pipeline "
        "outermost: the default placement tp-cp-ep-dp-pp",
        "use placement tp-cp-ep-dp-pp, or framework='megatron' (--use-tp-pp-dp-mapping)",
        "DeepSpeed deepspeed/runtime/pipe/topology.py PipeModelDataParallelTopology axes ['pipe', 'data', 'model'] "
        "(Megatron-DeepSpeed uses it); torchtitan torchtitan/distributed/parallel_dims.py mesh "
        "(pp, dp_replicate, dp_shard, cp, tp)",
        lambda c: c.placement != "tp-cp-ep-dp-pp",
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    *(SupportEntry(
        runtime, f"{runtime}-tiling", "refused", "ParallelConfig.tiles",
        "memory-centric tiling is DeepSpeed ZeRO-3's (deepspeed.zero.TiledLinear, whose tiles ZeRO-3 gathers and "
        "releases one at a time); this runtime's model code has no tiled linear layers",
        "set tiles=1, or framework='deepspeed' with zero_stage=3",
        "frameworks_2.md sec. 4.1 (DeepSpeed zero3.rst 'Memory-Centric Tiling'; deepspeed/runtime/zero/tiling.py)",
        lambda c: c.tiles > 1,
    ) for runtime in ("megatron", "megatron-deepspeed", "fsdp")),
    # --- Full-iteration CUDA graphs (ParallelConfig.cuda_graphs) -----------------------------------
    *(SupportEntry(
        runtime, f"{runtime}-cuda-graphs", "refused", "ParallelConfig.cuda_graphs",
        "the full-iteration CUDA graph is Megatron-Core's (--cuda-graph-impl full_iteration); this runtime's "
        "training step has no such capture",
        "set cuda_graphs='none', or framework='megatron'",
        "megatron-core 0.18 (458c8d0) megatron/core/full_cuda_graph.py:208-232, "
        "megatron/training/training.py:3291-3298",
        lambda c: c.cuda_graphs != "none",
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    SupportEntry(
        "megatron", "megatron-cuda-graphs-ep-needs-hybridep", "refused", "ParallelConfig.cuda_graphs",
        "a full-iteration CUDA graph needs static shapes and no host synchronization; with expert parallelism "
        "only HybridEP with a per-rank token budget (--moe-expert-rank-capacity-factor) sizes its buffers "
        "statically (the alltoall dispatcher and DeepEP read token counts back on the host every layer)",
        "set moe_dispatcher='flex-hybridep', or cuda_graphs='none'",
        "megatron-core 0.18 (458c8d0) token_dispatcher.py:1041-1055 ('HybridEP sizes buffers dynamically (CPU sync "
        "in dispatch)' without the budget), transformer_config.py:1515-1525 (the budget needs the hybridep backend "
        "and the Transformer Engine op fuser)",
        lambda c: c.cuda_graphs != "none" and c.ep > 1 and c.moe_dispatcher != "flex-hybridep",
    ),
    SupportEntry(
        "megatron", "megatron-cuda-graphs-moe-activation-offload", "refused",
        "ParallelConfig.activation_offload_layers",
        "with a full-iteration CUDA graph the experts' activations live in the paged stash "
        "(--moe-paged-stash), which forbids activation offloading",
        "set activation_offload_layers=0, or cuda_graphs='none'",
        "megatron-core 0.18 (458c8d0) transformer_config.py:1683-1696 (moe_paged_stash: no cpu_offloading)",
        lambda c: c.cuda_graphs != "none" and c.ep > 1 and c.activation_offload_layers > 0,
    ),
    SupportEntry(
        "megatron", "megatron-cuda-graphs-fsdp", "untested", "ParallelConfig.cuda_graphs",
        "a full-iteration CUDA graph with Megatron-FSDP (ZeRO-2/3) passes the parser, but no published run "
        "shows the two together",
        "use zero_stage=1 with cuda_graphs='full-iteration', or cuda_graphs='none' with ZeRO-2/3",
        "audit of the 100 Megatron-Bridge performance rows against their releases' recipes (2026-12-01, "
        "benchmarks/data/errata.json): the full-iteration rows all use the distributed optimizer; megatron-core "
        "docs/user-guide/features/megatron_fsdp.md (no CUDA graph section)",
        lambda c: c.cuda_graphs != "none" and _megatron_fsdp(c),
    ),
    # --- Fine-grained memory policies (issue 18) ---------------------------------------------------
    SupportEntry(
        "deepspeed", "deepspeed-partial-offload-below-zero3", "refused", "ParallelConfig.optimizer_offload_fraction",
        "a partial optimizer offload (offload_optimizer.ratio < 1) is ZeRO-3 only: DeepSpeedZeroOffloadOptimizerConfig "
        "raises 'Partial offloading only supported for ZeRO Stage 3.'",
        "set zero_stage=3, or optimizer_offload_fraction=1",
        "frameworks.md (DeepSpeed zero/offload_config.py offload_ratio_check)",
        lambda c: c.optimizer_offload_fraction < 1 and c.zero_stage != 3,
    ),
    *(SupportEntry(
        runtime, f"{runtime}-partial-offload", "refused", "ParallelConfig.optimizer_offload_fraction",
        "this runtime offloads the whole optimizer or none of it (no offload ratio or fraction option)",
        "set optimizer_offload_fraction=1, or framework 'megatron' / 'deepspeed' (ZeRO-3)",
        "Megatron-DeepSpeed's pinned flag list has no --optimizer-offload-fraction; torch FSDP2 CPUOffloadPolicy "
        "is all-or-nothing",
        lambda c: c.optimizer_offload_fraction < 1,
    ) for runtime in ("megatron-deepspeed", "fsdp")),
    *(SupportEntry(
        runtime, f"{runtime}-block-recompute", "refused", "ParallelConfig.recompute_layers",
        why,
        "set recompute_layers=null (every layer), or framework 'megatron'",
        cite,
        lambda c: c.recompute_layers is not None,
    ) for runtime, why, cite in (
        ("megatron-deepspeed", "DeepSpeed's pipeline does not run Megatron's block recompute method",
         "Megatron-DeepSpeed megatron/model/transformer.py ('deepspeed's pipeline doesn't support the block "
         "recompute method')"),
        ("deepspeed", "plain DeepSpeed checkpoints what the model code checkpoints; autopar emits no model code",
         "frameworks.md (DeepSpeed activation_checkpointing keys)"),
        ("fsdp", "torchtitan's selective_ac_option checkpoints every n-th layer, a different pattern, not modelled",
         "frameworks.md (torchtitan [activation_checkpoint] selective_ac_option)"))),
    *(SupportEntry(
        runtime, f"{runtime}-activation-offload", "refused", "ParallelConfig.activation_offload_layers",
        "activation offloading of whole layers is Megatron-Core's --cpu-offloading-num-layers; this runtime's is "
        "not modelled",
        "set activation_offload_layers=0, or framework 'megatron'",
        "megatron-core transformer_config.py (cpu_offloading); Megatron-Bridge docs/training/cpu-offloading.md",
        lambda c: c.activation_offload_layers > 0,
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
)
"""Every combination a runtime refuses or has never been shown to run, with its evidence."""


def entries_for(runtime: str, config: ParallelConfig) -> tuple[SupportEntry, ...]:
    """The matrix entries that apply to ``config`` on ``runtime`` (empty: supported)."""
    return tuple(e for e in SUPPORT_MATRIX if e.runtime == runtime and e.applies(config))


def support_status(runtime: str, config: ParallelConfig) -> SupportStatus:
    """``refused`` if any entry refuses, else ``untested`` if any is untested, else ``supported``."""
    return status_of(entries_for(runtime, config))


def support_warnings(runtime: str, config: ParallelConfig) -> tuple[str, ...]:
    """One warning per ``untested`` entry that applies (for a prediction's warnings)."""
    return warnings_of(entries_for(runtime, config), runtime)


def check_supported(config: ParallelConfig, runtime: str) -> None:
    """Raise :class:`SpecError` with the first refusing entry's reason and fix."""
    refuse(entries_for(runtime, config), runtime)


SupportKey = tuple[str, bool, bool, bool, bool, bool, int, str, str, str, bool, bool, bool, bool]


def support_key(runtime: str, config: ParallelConfig) -> SupportKey:
    """What the matrix's predicates look at (see the module docstring)."""
    c = config
    return (runtime, c.tp > 1, c.pp > 1, c.vp > 1, c.cp > 1, c.sp, c.zero_stage, c.offload_optimizer,
            c.offload_param, c.recompute, c.tp_comm_overlap, c.ep > 1 or c.etp > 1, c.tiles > 1,
            c.placement != "tp-cp-ep-dp-pp")


@cache
def cached_status(key: SupportKey) -> SupportStatus:
    """:func:`support_status` of a representative configuration of ``key`` (for enumerators)."""
    from search._parallel_spec import ParallelConfig

    runtime, tp, pp, vp, cp, sp, zero, opt, param, recompute, overlap, ep, tiled, placed = key
    rep = ParallelConfig.trusted(2, 2 if tp else 1, 2 if pp else 1, 2 if vp else 1, 2 if cp else 1, sp, 1, zero,
                                 opt, param, recompute,  # type: ignore[arg-type]
                                 tp_comm_overlap=overlap, ep=2 if ep else 1, tiles=2 if tiled else 1,
                                 placement="tp-cp-ep-pp-dp" if placed else "tp-cp-ep-dp-pp")
    return support_status(runtime, rep)


__all__ = ["MODEL_SUPPORT", "SUPPORT_MATRIX", "SUPPORT_STATUSES", "SupportEntry", "SupportStatus",
           "check_model_supported", "check_supported", "entries_for", "model_entries_for", "model_status",
           "model_support_warnings", "support_status", "support_warnings"]

"""How the per-layer and per-micro-batch times combine into one step: recomputation, the
pipeline schedule and the overlap of communication with compute."""

from __future__ import annotations

from search._compute_time import LayerTimes

TP_COLLECTIVES_BACKWARD_TO_FORWARD = 1.0
"""The backward pass of a Megatron block runs as many TP collectives as its forward (the
conjugate f/g operators: 2 all-reduces forward, 2 backward; Shoeybi et al. 2019 Fig. 3)."""


def overlapped_s(compute_s: float, traffic_s: float, overlap: float) -> float:
    """Time of two streams that overlap partially: ``max(c, m) + (1 - overlap) * min(c, m)``.

    ``overlap`` = 1 hides the shorter stream completely (the ideal of ZeRO-3 prefetching and
    of the ZeRO-Offload/Infinity engines, Rajbhandari et al. 2021 Sec. 6), 0 serialises them;
    measured runs sit in between because the collectives and copies compete with compute for
    SMs and memory bandwidth.
    """
    return max(compute_s, traffic_s) + (1.0 - overlap) * min(compute_s, traffic_s)


def chunked_overlap_s(compute_s: float, traffic_s: float, chunk_s: float) -> float:
    """Time of a micro-batch whose traffic a runtime prefetches and reduces chunk by chunk behind
    its compute: the longer stream, plus one chunk of the traffic nothing can hide (``chunk_s``: one
    layer's unit of all the micro-batch's gathers and reduce-scatters, for the first gather before
    the first layer can run and the last reduce-scatter after the last layer's backward).

    Megatron-FSDP (``optim_grads`` / ``optim_grads_params``) gathers the next unit's parameters
    while the current one computes (``--overlap-param-gather``, on for ZeRO-2/3; prefetching by
    ``suggested_communication_unit_size``, whose smaller values disable it; "full parallelization of
    FSDP communication and computation", Megatron-LM ``docs/discussions/megatron-fsdp-user-guide``;
    "Communication Overlapping ... of parameter all-gather and gradient reduce-scatter",
    ``megatron_fsdp`` README) and reduce-scatters each unit's gradients as its backward ends:
    "Gradient reduce-scatter is overlapped with backward compute" (megatron-core
    ``docs/user-guide/features/megatron_fsdp.md``, frameworks_2.md sec. 2.3); chunked DP
    communication "exposes only one DP communication chunk" (NeMo ``communication_overlap.rst``;
    frameworks_2.md sec. 5). A rule from the design, not a fitted share: the fitted
    :attr:`search.Calibration.zero3_overlap` stays PyTorch FSDP's and ZeRO-3's.
    """
    return max(compute_s, traffic_s) + min(chunk_s, traffic_s)


def recompute_per_layer_s(recompute: str, attention: str, lt: LayerTimes, tp_forward_s: float,
                          cp_forward_s: float) -> float:
    """Extra time per block and micro-batch spent recomputing activations in backward.

    Full: the block's forward again, with its TP and CP communication (Chen et al. 2016;
    Korthikanti et al. 2022 Sec. 5). Selective: only the attention core (Korthikanti et al.
    2022 Sec. 5), which FlashAttention recomputes in its own backward anyway, so it costs
    nothing extra there.
    """
    if recompute == "full":
        return lt.forward_s + tp_forward_s + cp_forward_s
    if recompute == "selective" and attention == "standard":
        return lt.attention_s
    return 0.0


def tp_comm_per_layer_s(tp_forward_s: float) -> float:
    """TP communication of one block per micro-batch, forward and backward."""
    return (1.0 + TP_COLLECTIVES_BACKWARD_TO_FORWARD) * tp_forward_s


def tp_exposed_s(comm_s: float, gemm_s: float, tp: int, overlap: bool) -> float:
    """The part of a pass's TP collectives left on the critical path.

    Without overlap all of it. With Megatron-Core ``--tp-comm-overlap`` (Transformer Engine
    userbuffers) each all-gather / reduce-scatter is split into ``tp`` ring chunks pipelined
    with the GEMM that consumes or produces it, and the bulk wgrad/dgrad overlaps have no data
    dependency: one chunk stays exposed (NeMo ``communication_overlap.rst``: pipelined RS
    "exposes one reduce-scatter chunk"; frameworks_2.md sec. 5), and whatever the pass's GEMMs
    are too short to cover is exposed too. A derived rule, not a published constant; the SMs
    the overlap kernels take from the GEMMs are not modelled. Userbuffers exchange through
    CUDA IPC / NVLink peer memory (Transformer Engine ``initialize_ub``), so the caller passes
    ``overlap=False`` for a TP group that spans nodes.
    """
    if not overlap or tp <= 1:
        return comm_s
    return max(comm_s / tp, comm_s - gemm_s)


def pipeline_bubble_s(pp: int, vp: int, stage_micro_batch_s: tuple[float, ...], p2p_s: float = 0.0) -> float:
    """Idle time of the 1F1B / interleaved schedule beyond ``m`` times the slowest stage.

    Narayanan et al. 2021 (arXiv:2104.04473) Sec. 2.2: with equal stages the bubble is
    ``(p - 1) / v`` stage times. With unequal stages the steady state runs at the slowest stage
    and the warm-up and cool-down pass one micro-batch through every other stage, so the bubble
    is ``(sum of the stage times - the slowest + (p - 1) p2p) / v`` (equal to the paper's with
    equal stages; the slowest stage paces warm-up and cool-down, Llama 3 (arXiv:2407.21783)
    Sec. 3.3.2 balances the first and last stages for that reason).
    """
    if pp == 1:
        return 0.0
    return (sum(stage_micro_batch_s) - max(stage_micro_batch_s) + (pp - 1) * p2p_s) / vp


P2P_OVERLAP_RUNTIMES = ("megatron",)
"""Runtimes whose interleaved schedule overlaps the pipeline sends and receives with the next model
chunk's compute: Megatron-Core, ``overlap_p2p_comm`` (Megatron-LM ``--overlap-p2p-communication``,
on by default; Megatron-Bridge ``comm_overlap.py`` sets ``overlap_p2p_comm=True,
batch_p2p_comm=False`` whenever vp > 1 and the non-interleaved 1F1B batches them instead)."""


def pp_p2p_exposed_s(p2p_s: float, stage_s: float, overlapped: bool) -> float:
    """The steady state's pipeline p2p per micro-batch left on the critical path.

    ``p2p_s`` is the micro-batch's ``2 v`` transfers (:func:`search._comm_terms.pp_p2p_per_micro_batch_s`),
    ``stage_s`` the slowest rank's compute for the micro-batch. Without overlap all of it is
    exposed. With Megatron-Core's interleaved ``overlap_p2p_comm`` each chunk's send and the next
    chunk's receive run on their own stream while the rank computes its next chunk
    (``schedules.py`` ``forward_backward_pipelining_with_interleaving``: ``wait_handles`` are waited
    on only before the chunk that needs the tensor), so a transfer is exposed only by what it takes
    beyond one chunk's compute, ``stage_s / (2 v)``: in sum ``max(0, p2p_s - stage_s)``. The
    warm-up and cool-down transfers stay in :func:`pipeline_bubble_s`."""
    if not overlapped:
        return p2p_s
    return max(0.0, p2p_s - stage_s)


def dp_exposed_s(reduce_s: float, gather_s: float, last_backward_s: float, first_forward_s: float,
                 overlap: float, last_bucket_s: float = 0.0, first_gather_bucket_s: float = 0.0) -> float:
    """Data-parallel traffic left on the critical path with bucketed overlap.

    The gradient reduction starts bucket by bucket during the last micro-batch's backward
    (PyTorch DDP buckets, Li et al. 2020 Sec. 3.2.3; Megatron ``--overlap-grad-reduce``;
    DeepSpeed ``overlap_comm``); the parameter all-gather of a sharded optimizer overlaps the
    next step's first forward (Megatron ``--overlap-param-gather``). ``overlap`` is the share of
    those passes that can hide traffic. The last gradient bucket is reduced after the backward
    ends, and the first parameter bucket gathered before the forward can start, so one bucket
    of each stays exposed (NeMo ``communication_overlap.rst``: "exposes only one DP
    communication chunk"; frameworks_2.md sec. 5).
    """
    return (max(last_bucket_s, reduce_s - overlap * last_backward_s)
            + max(first_gather_bucket_s, gather_s - overlap * first_forward_s))

"""Token dispatch and combine of a mixture-of-experts block with Megatron-Core's flex dispatcher
(DeepEP or HybridEP), and what ``--overlap-moe-expert-parallel-comm`` leaves exposed.

The alltoall dispatcher (:func:`search._moe_terms.dispatch_forward_s`) permutes one copy of each
token per routed expert and exchanges them with NCCL's all-to-all: ``T*k*h`` elements per rank and
direction, whichever ranks the experts sit on. The flex dispatcher's kernels send a token once per
destination GPU and reduce its expert outputs there before the combine sends them back (DeepEP
README, "Example use in model training": ``dispatch`` takes the top-k indices and returns the tokens
each rank receives; ``combine`` is its reverse, with the top-k weights): ``T*h`` elements per
*distinct* destination GPU. Across NVLink domains the tokens cross the network once per distinct
destination domain and are forwarded to their GPUs inside it over NVLink (DeepSeek-V3, arXiv:2412.19437
Sec. 3.2.2: IB to the GPU of the same in-node index on each target node, then NVLink; DeepEP README:
kernels "optimized for asymmetric-domain bandwidth forwarding"). DeepEP's
NVLink side spans at most 8 GPUs of one host (``NUM_MAX_NVL_PEERS 8``, ``csrc/kernels/configs.cuh``);
HybridEP's spans the whole NVLink domain, an NVL72 rack included (Megatron-Core MoE README: "flex +
hybridep: GB200 NVL72, Multi-Node NVLink"; frameworks_2.md sec. 3.1).

Routing is costed uniform over the experts (the load the force-balanced benchmarks route, and the
expectation of a balanced learned router); DeepSeek-V3's node-limited routing (at most 4 nodes per
token) is not: it only lowers the network share further.
"""

from __future__ import annotations

import math
from math import comb

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._collectives import rail_bytes_per_s
from search._fabric import group_span

DEEPEP_NVL_PEERS = 8
"""GPUs one DeepEP NVLink domain holds (``NUM_MAX_NVL_PEERS 8``, DeepEP ``csrc/kernels/configs.cuh``):
beyond them, or beyond the host, its tokens take RDMA."""


def distinct_destinations(experts: int, topk: int, groups: int) -> float:
    """Expected number of the ``groups`` equal groups of experts (GPUs, or NVLink domains) that one
    token's ``topk`` distinct experts fall in, routing uniform over ``experts``: ``groups x (1 -
    C(E - E/groups, k) / C(E, k))`` (the chance a group holds none of the k is the hypergeometric
    zero term)."""
    if groups <= 1:
        return 1.0
    per_group = experts // groups
    return groups * (1.0 - comb(experts - per_group, topk) / comb(experts, topk))


def flex_dispatch_s(token_bytes: float, tokens: float, experts: int, topk: int, ep: int, stride: int,
                    backend: str, cluster: ClusterSpec, cal: Calibration) -> float:
    """One flex dispatch (or combine, the same traffic back) of ``tokens`` tokens of ``token_bytes``
    each over an ep group of ``ep`` ranks ``stride`` apart: each token goes once to every distinct
    destination GPU (:func:`distinct_destinations`) other than its own, over NVLink inside the
    backend's NVLink domain; across domains once per distinct remote domain over the GPU's rail
    (at the leaf's rate to domains under the same leaf, at the highest tier's to the others), then on
    over NVLink. The two legs run concurrently: the slower sets the time, plus one collective latency.
    Domains are counted equal; the last, partly filled domain of an uneven split (an NVL72 rack of an
    ep group of 256: 72/72/72/40) is costed as a full one."""
    if ep <= 1 or tokens <= 0:
        return 0.0
    node = cluster.node
    domain = node.nvlink_domain if backend == "flex-hybridep" else min(node.gpus_per_node, DEEPEP_NVL_PEERS)
    gpus = distinct_destinations(experts, topk, ep)
    nvlink_bytes = tokens * token_bytes * gpus * (ep - 1) / ep
    span = group_span(((ep, stride),), node.gpus_per_node, domain, cluster.fabric)
    if span.domains <= 1:
        return cal.collective_latency_s + nvlink_bytes / node.intra_node_bytes_per_s
    remote = distinct_destinations(experts, topk, span.domains) * (span.domains - 1) / span.domains
    network_bytes = tokens * token_bytes * remote
    # The remote domains under rank 0's leaf take the rail at the leaf's rate, the others at the highest
    # tier's; they share the one NIC, so their times add (as search._collectives.all_to_all_group_s).
    per_domain = span.size / span.domains
    near = (min(span.domains, math.ceil(span.leaf_members / per_domain)) - 1) / (span.domains - 1)
    network_s = network_bytes * (near / rail_bytes_per_s(cluster, 0)
                                 + (1.0 - near) / rail_bytes_per_s(cluster, span.tier))
    return cal.collective_latency_s + max(nvlink_bytes / node.intra_node_bytes_per_s, network_s)


COMM_SM_SHARE = {"alltoall": 20 / 132, "flex-deepep": 20 / 132, "flex-hybridep": 32 / 148}
"""Share of the GPU's SMs the exchange kernels hold while they run beside compute: DeepEP 20 of an
H800's 132 (DeepSeek-V3, arXiv:2412.19437 Sec. 3.2.2, "only 20 SMs are sufficient"), HybridEP 32 of a
Blackwell GPU's 148 (DeepEP hybrid-ep branch ``HybridEpBuffer`` defaults ``num_sms_dispatch_api=32``,
``num_sms_combine_api=32``). NCCL's all-to-all has no published figure: costed as DeepEP's."""


def overlapped_ep_comm_s(ep_comm_s: float, block_compute_s: float, dispatcher: str = "alltoall") -> float:
    """Exposed dispatch/combine time per MoE block and micro-batch under Megatron-Core's
    ``--overlap-moe-expert-parallel-comm``: the forward of one micro-batch and the backward of another
    run as one merged schedule, each one's all-to-alls on a communication stream behind the other's
    attention and expert compute (the overlap of DeepSeek-V3's DualPipe, arXiv:2412.19437 Sec. 3.2.1;
    Megatron-Core's flag and its rules: frameworks_2.md sec. 3.2, ``transformer_config.py:2672-2700``).
    What the block's compute cannot cover stays exposed.
    While both run, the exchange holds :data:`COMM_SM_SHARE` of the SMs, so the compute beside it
    loses that share of the overlapped time. The first forward and last backward of each stage have
    no partner; with the tens of micro-batches the recipes run they are not costed apart."""
    hidden = min(ep_comm_s, block_compute_s)
    return ep_comm_s - hidden + COMM_SM_SHARE[dispatcher] * hidden


SYNCING_DISPATCHERS = ("alltoall", "flex-deepep")
"""Dispatchers that read a size computed on the GPU back on the host in every MoE layer: Megatron's
alltoall dispatcher (its all-to-all split sizes, or the dropped token count with a capacity factor:
``token_dispatcher.py`` ``cuda_sync_point`` ``before_ep_alltoall`` / ``before_permutation_1``) and
DeepEP's normal kernels (the tokens each rank receives). HybridEP sizes its buffers statically: no
host synchronization ("Zero CPU-GPU synchronization requirements", DeepEP hybrid-ep
``Hybrid-EP_Intra-node_Implementation.md``)."""


def syncs_host(dispatcher: str, pad_to_capacity: bool = False) -> bool:
    """Whether ``dispatcher`` reads a GPU-computed size back on the host in every MoE layer: the
    :data:`SYNCING_DISPATCHERS`, except the alltoall dispatcher padding every expert's input to its
    capacity, whose split sizes are static (``MoESpec.pad_to_capacity``; megatron-core 0.19.0
    ``token_dispatcher.py:511-535``: the drop-and-pad branch returns before any device-to-host copy,
    ``cuda_sync_point`` stays ``"no_sync"``)."""
    return dispatcher in SYNCING_DISPATCHERS and not (dispatcher == "alltoall" and pad_to_capacity)


def moe_sync_overhead_s(ep: int, vp: int, dispatcher: str, moe_sync_chunk_s: float,
                        pad_to_capacity: bool = False) -> float:
    """Host time a rank exposes per micro-batch when its MoE dispatcher synchronizes the host in every
    MoE layer (:func:`syncs_host`, ep > 1): :attr:`Calibration.moe_sync_chunk_s` for each of
    its ``vp`` pipeline chunks. Measured on the published runs, the residual per chunk is the same
    with 1 to 12 layers per chunk (17-22 ms on H100, B200 and B300) while it varies 13-fold per layer:
    the chunk's own host work, which the host can no longer run ahead of the GPU to hide."""
    if ep <= 1 or not syncs_host(dispatcher, pad_to_capacity):
        return 0.0
    return vp * moe_sync_chunk_s

"""Cost terms of a mixture-of-experts block (Megatron-Core MoE, alltoall token dispatcher).

Per GPU and micro-batch, with Megatron-Core's MoE parallel folding (experts over ep x etp ranks
of the attention layers' tp x cp x dp; frameworks_2.md sec. 3.2-3.3):

* tokens entering the block on one GPU: ``T = b*s/(cp*tp)`` with sequence parallelism (Megatron
  requires it with tp and ep), ``b*s/cp`` without;
* routed token copies one GPU's experts process: ``b*s*k*etp/(tp*cp)`` (MoE model zoo
  ``permute_out = s/TP*ETP*topk*h``), over ``E/ep`` local experts;
* dispatch and combine: an all-to-all of ``T*k*h`` 16-bit elements over the ep group, each way,
  forward and backward (4 per block and micro-batch), plus an all-gather / reduce-scatter over
  the etp group when etp > 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from search._calibration import Calibration
from search._cluster_spec import ClusterSpec
from search._collectives import all_gather_time_s, all_to_all_time_s, group_link
from search._compute_time import (
    BACKWARD_TO_FORWARD,
    Kernels,
    attention_core_times,
    attention_elementwise_bytes,
    block_overhead_s,
    gemm_time_s,
    gemm_work_s,
    linears_work_s,
    mlp_activation_bytes_per_token,
)
from search._errors import SpecError
from search._memory import layer_activation_bytes, mlp_saved_bytes_per_token
from search._model_spec import ModelSpec
from search._moe_dispatch import flex_dispatch_s
from search._moe_spec import MoESpec
from search._unfused_paths import (
    ExpertPath,
    clamp_saved_bytes_per_copy,
    clamp_total_bytes_per_copy,
    expert_bias_total_bytes_per_copy,
)
from search._units import BYTES_16BIT

DROPLESS_IMBALANCE = 1.14
"""Load of the busiest expert over the mean with a trained (auxiliary-loss balanced) router
and no token dropping: the Megatron MoE model zoo's long-context benchmarks publish the same
configurations with forced balance and dropless, the dropless runs 8-20 % slower
(benchmarks/data/README_2024_2026.md, 'MoE routing'); 1.14 is the middle. Applied to the routed
experts' compute of a learned router; force-balanced benchmarks pay 1.0."""
PERMUTE_BYTES_PER_COPY_PER_H = 8.0
"""Forward HBM bytes per routed token copy and unit of h of the permutation before the experts
and the un-permutation after (read + write 16-bit each: 2 x 4h)."""
LOCAL_SORT_TOTAL_BYTES_PER_COPY_PER_H = 16.0
"""HBM bytes per routed token copy and unit of h, forward and backward together, of the alltoall
dispatcher's two sorts by local expert: after the dispatch all-to-all the received copies come grouped
by source rank and are sorted into expert order, and before the combine they are sorted back
(megatron-core ``token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` /
``combine_preprocess``: ``sort_chunks_by_idxs`` when ``num_local_experts > 1``, core_v0.13.0 to
core_v0.19.0; core_v0.19.0 lines 750-781 and 796-815). Each sort reads and writes every copy in 16-bit
(4h) and its backward is the inverse sort (4h): 2 x (4 + 4). The flex dispatchers permute inside their
own path (DeepEP's ``permute`` after the dispatch, HybridEP's dispatch kernel): no second sort."""
ROUTER_BYTES_PER_TOKEN_PER_EXPERT = 12.0
"""Forward bytes per token and expert of the router's fp32 softmax/top-k and the probabilities it
keeps (read + write 4 + 4, row map 4)."""


def _experts(model: ModelSpec) -> MoESpec:
    """The model's MoE part; a dense model has none to cost (a SpecError, not an assert)."""
    if model.moe is None:
        raise SpecError("ModelSpec.moe", f"{model.name} has no mixture of experts to cost",
                        "describe its experts (ModelSpec.moe) or cost it as a dense model")
    return model.moe


def tokens_per_gpu(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool) -> float:
    """Tokens of one micro-batch entering an MoE block on one GPU (the sequence-parallel shard)."""
    return micro_batch * model.seq_len / cp / (tp if sp else 1)


def routed_copies_per_gpu(model: ModelSpec, micro_batch: int, tp: int, cp: int, etp: int) -> float:
    """Token copies the local experts of one GPU process per micro-batch, load balanced:
    ``b*s*k*etp/(tp*cp)``."""
    return micro_batch * model.seq_len * _experts(model).topk * etp / (tp * cp)


def expert_load_factor(model: ModelSpec) -> float:
    """Busiest expert's load over the mean: the capacity factor when every expert's input is padded to
    its capacity (``MoESpec.pad_to_capacity``: each computes that much, routed or padding); else 1 for
    force-balanced routing; :data:`DROPLESS_IMBALANCE` for a learned router, capped by the capacity
    factor when tokens beyond it are dropped."""
    moe = model.moe
    if moe is not None and moe.pad_to_capacity and moe.capacity_factor is not None:
        return moe.capacity_factor
    if moe is None or moe.router_load == "force-balanced":
        return 1.0
    if moe.capacity_factor is not None:
        return min(moe.capacity_factor, DROPLESS_IMBALANCE)
    return DROPLESS_IMBALANCE


def local_sort_total_bytes_per_copy(model: ModelSpec, dispatcher: str, local_experts: int) -> float:
    """Bytes (forward and backward) per routed copy of the alltoall dispatcher's sorts by local expert
    (:data:`LOCAL_SORT_TOTAL_BYTES_PER_COPY_PER_H`); 0 for the flex dispatchers and for one local expert."""
    if dispatcher != "alltoall" or local_experts <= 1:
        return 0.0
    return LOCAL_SORT_TOTAL_BYTES_PER_COPY_PER_H * model.hidden


def grouped_gemm_time_s(groups: int, m: float, n: float, k: float, kernels: Kernels) -> float:
    """``groups`` GEMMs of (m x k) @ (k x n) in one grouped kernel (``--moe-grouped-gemm``): each
    costs its roofline (so few tokens per expert leave the GEMM bound by reading the expert's
    weights); the block's fixed time is charged once per block (:func:`block_overhead_s`)."""
    if groups <= 0 or m <= 0:
        return 0.0
    return groups * gemm_work_s(m, n, k, kernels)


@dataclass(frozen=True, slots=True)
class MoELayerTimes:
    """Forward times of one MoE block on one GPU."""

    gemm_s: float
    """Attention projections, router, shared experts and routed experts."""
    attention_s: float
    attention_backward_s: float
    elementwise_s: float
    dispatch_s: float
    """Forward all-to-all (dispatch + combine) and the etp gather/scatter: exposed."""

    @property
    def forward_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s


def moe_layer_times(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool, ep: int, etp: int,
                    kernels: Kernels, cluster: ClusterSpec, cal: Calibration,
                    dispatcher: str = "alltoall", path: ExpertPath = "eager") -> MoELayerTimes:
    """Forward time of one MoE block (attention as in a dense block, then router, routed and shared
    experts and the token exchange), with a dense block's fixed time (:func:`block_overhead_s`) and
    one more for the router. The routed copies' memory-bound work: the permutation, the activation (none
    where Transformer Engine's fused grouped GEMMs run it in FC1's epilogue: ``path`` ``fused``) and, where
    Megatron-Core runs them eagerly, a GLU clamp and the per-expert bias (:mod:`search._unfused_paths`)."""
    moe = _experts(model)
    h = model.hidden
    tokens = micro_batch * model.seq_len / cp  # the attention's GEMM rows on one TP rank
    sp_tokens = tokens_per_gpu(model, micro_batch, tp, cp, sp)
    attn_gemm = linears_work_s(model.attention_linears(), tokens, tp, kernels)
    attention, attention_bwd = attention_core_times(model, tokens, model.seq_len, tp, kernels)
    # The router is the MoE block's own step (its GEMM, softmax and top-k, the permutation's bookkeeping):
    # charged as a GEMM on its own, fixed time included, like the LM head; the rest as a dense block.
    router = gemm_time_s(sp_tokens, moe.experts, h, kernels)
    shared = (linears_work_s(model.mlp_linears(moe.shared_expert_ffn), tokens, tp, kernels)
              if moe.shared_expert_ffn else 0.0)
    local = moe.experts // ep
    per_expert = routed_copies_per_gpu(model, micro_batch, tp, cp, etp) / local * expert_load_factor(model)
    f = moe.expert_ffn / etp
    experts = (grouped_gemm_time_s(local, per_expert, f * (model.mlp_matrices - 1), h, kernels)
               + grouped_gemm_time_s(local, per_expert, h, f, kernels))
    copies = local * per_expert
    # Megatron-Core's eager clamp and per-expert bias (search._unfused_paths) and the alltoall dispatcher's sorts
    # by local expert: totals, charged as forward shares.
    unfused = ((clamp_total_bytes_per_copy(model, f, path) + expert_bias_total_bytes_per_copy(model, path)
                + local_sort_total_bytes_per_copy(model, dispatcher, local)) / (1.0 + BACKWARD_TO_FORWARD))
    activation = 0.0 if path == "fused" else mlp_activation_bytes_per_token(model, f)
    elementwise = (attention_elementwise_bytes(model, tokens, tp, sp)
                   + copies * (activation + PERMUTE_BYTES_PER_COPY_PER_H * h + unfused)
                   + sp_tokens * moe.experts * ROUTER_BYTES_PER_TOKEN_PER_EXPERT
                   + (tokens * mlp_activation_bytes_per_token(model, moe.shared_expert_ffn / tp)))
    return MoELayerTimes(attn_gemm + router + shared + experts + block_overhead_s(kernels), attention, attention_bwd,
                         elementwise / kernels.hbm_bytes_per_s,
                         dispatch_forward_s(model, micro_batch, tp, cp, sp, ep, etp, cluster, cal, dispatcher))


MOE_DISPATCH_WARNING = (
    "costed with Megatron's alltoall token dispatcher and its all-to-all exposed; the flex dispatcher "
    "(moe_dispatcher flex-deepep / flex-hybridep) and --overlap-moe-expert-parallel-comm (moe_a2a_overlap), which "
    "most of NVIDIA's published MoE recipes run, are options"
)
"""Said on every alltoall mixture-of-experts prediction with expert parallelism: what its all-to-all term assumes."""
MOE_FLEX_WARNING = (
    "token exchange costed as traffic at link rate (the flex dispatcher: one copy per destination GPU; the EP "
    "overlap: hidden behind the block's compute, less the SMs its kernels hold at DeepEP's and HybridEP's "
    "default counts); the kernels' own rate, per-layer CUDA graphs and --delay-wgrad-compute are not "
    "modelled (a full-iteration graph is: cuda_graphs), and NVIDIA's published runs with them are predicted "
    "within the MoE error band only (docs/cost-model.md, Known limits)"
)
MOE_DEEPEP_NVL_WARNING = (
    "flex-deepep on a multi-node NVLink domain: DeepEP's NVLink side is one host's GPUs (its default), so the "
    "rest of the ep group is costed over the network; HybridEP (flex-hybridep) spans the whole NVLink domain"
)
"""Said on every prediction with the flex dispatcher or the EP overlap: how its exchange is costed."""


def moe_warnings(model: ModelSpec, ep: int, dispatcher: str = "alltoall", overlap: bool = False,
                 cluster: ClusterSpec | None = None) -> tuple[str, ...]:
    """What the token exchange of an MoE model whose experts are spread (ep > 1) assumes:
    :data:`MOE_DISPATCH_WARNING` for the exposed alltoall dispatcher, :data:`MOE_FLEX_WARNING` for the
    flex dispatcher or the EP overlap, and :data:`MOE_DEEPEP_NVL_WARNING` for DeepEP where the NVLink
    domain is larger than a node (an NVL72 rack); none otherwise."""
    if model.moe is None or ep == 1:
        return ()
    if dispatcher == "alltoall" and not overlap:
        return (MOE_DISPATCH_WARNING,)
    node = cluster.node if cluster is not None else None
    mnnvl = node is not None and node.nvlink_domain > node.gpus_per_node
    return (MOE_FLEX_WARNING, *((MOE_DEEPEP_NVL_WARNING,) if dispatcher == "flex-deepep" and mnnvl else ()))


def dispatch_forward_s(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool, ep: int, etp: int,
                       cluster: ClusterSpec, cal: Calibration, dispatcher: str = "alltoall") -> float:
    """Forward token exchange of one MoE block: dispatch and combine all-to-alls of ``T*k*h``
    16-bit elements over the ep group (ranks ``etp`` apart: Megatron's expert grid orders etp
    innermost, then ep), and with etp > 1 the all-gather of the routed tokens over the etp group
    and its reduce-scatter on the way back (the alltoall dispatcher's A2A-then-AllGather,
    frameworks_2.md sec. 3.3); padded to capacity, ``capacity_factor`` times as many
    (:func:`padded_send_factor`). Megatron runs them on the compute stream between the expert
    GEMMs: nothing overlaps them without ``--overlap-moe-expert-parallel-comm``
    (:func:`search._moe_dispatch.overlapped_ep_comm_s`). The flex dispatcher (``dispatcher``
    ``flex-deepep`` or ``flex-hybridep``, ep > 1 and etp = 1) sends each token once per destination
    GPU instead (:func:`search._moe_dispatch.flex_dispatch_s`)."""
    moe = _experts(model)
    tokens = tokens_per_gpu(model, micro_batch, tp, cp, sp)
    if dispatcher != "alltoall":
        return 2.0 * flex_dispatch_s(model.hidden * BYTES_16BIT, tokens, moe.experts, moe.topk, ep, etp, dispatcher,
                                     cluster, cal)
    sent = tokens * moe.topk * model.hidden * BYTES_16BIT * padded_send_factor(moe)
    a2a = 2.0 * all_to_all_time_s(sent, ep, cluster, etp, cal)
    if etp > 1:
        link = group_link(cluster, etp, 1, cal)
        a2a += 2.0 * all_gather_time_s(sent * etp, etp, link)
    return a2a


def padded_send_factor(moe: MoESpec) -> float:
    """Tokens the alltoall dispatcher sends per routed copy: the capacity factor when it pads every
    expert's input to capacity (it sends ``capacity x experts`` rows, ``capacity = ceil(T k cf / E)``:
    megatron-core 0.19.0 ``token_dispatcher.py:517-521``), else 1 (dropped copies are not sent, and
    the cap only trims the busiest experts)."""
    return moe.capacity_factor if moe.pad_to_capacity and moe.capacity_factor is not None else 1.0


def moe_layer_activation_bytes(model: ModelSpec, micro_batch: int, tp: int, cp: int, sp: bool, etp: int,
                               recompute: str, linear_input_bytes: float = BYTES_16BIT) -> float:
    """Activation bytes one MoE block keeps for backward per micro-batch on one GPU: the attention
    part as a dense block's (Korthikanti et al. 2022 Sec. 4: 8h replicated + 4h + 4 kv_dim split
    per token), and for the MLP the routed copies' permuted inputs and expert intermediates (MoE
    model zoo ``deepseek_mem_estimate.py``: ``permute_out = s/TP*ETP*k*h``, ``expert_fc1_out``),
    the router's probabilities and row map, and the shared experts' intermediates. Full
    recomputation keeps the block input only. ``linear_input_bytes`` is what the linears keep of
    their inputs (:func:`search._memory.saved_linear_input_bytes`): the attention and shared-expert
    linears as in a dense block (:func:`search._memory.layer_activation_bytes`), and the routed
    experts' grouped GEMMs alike, whose first input is the permuted copy and whose second is the
    activation's output (Transformer Engine ``_GroupedLinear.forward`` saves its quantized inputs,
    column-wise only, for the weight gradient); the activation keeps the first GEMM's 16-bit outputs,
    and a GLU clamp one more copy of them (:func:`search._unfused_paths.clamp_saved_bytes_per_copy`)."""
    moe = _experts(model)
    attention = layer_activation_bytes(model, micro_batch, tp, cp, sp, recompute, ffn=moe.shared_expert_ffn,
                                       linear_input_bytes=linear_input_bytes)
    if recompute == "full":
        return attention  # the block input only
    h = model.hidden
    copies = routed_copies_per_gpu(model, micro_batch, tp, cp, etp) * expert_load_factor(model)
    lb = linear_input_bytes
    # Per copy: the permuted input (the first grouped GEMM's), then the MLP's own (the second's input at lb).
    routed = copies * (lb * h + mlp_saved_bytes_per_token(model, moe.expert_ffn / etp, lb)
                       + clamp_saved_bytes_per_copy(model, moe.expert_ffn / etp))
    router = tokens_per_gpu(model, micro_batch, tp, cp, sp) * moe.experts * ROUTER_BYTES_PER_TOKEN_PER_EXPERT
    return attention + routed + router

"""How a run is parallelised (:class:`ParallelConfig`) and what it trains (:class:`TrainingSpec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from search._checks import divisors, one_of, positive_int
from search._errors import SpecError
from search._fp8_attention import FP8_ATTENTION_PRECISIONS
from search._model_spec import ModelSpec
from search._support import check_model_supported, check_supported

Offload = Literal["none", "cpu", "nvme"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]
Framework = Literal["megatron", "deepspeed", "megatron-deepspeed", "fsdp"]
Placement = Literal["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]
MoEDispatcher = Literal["alltoall", "flex-deepep", "flex-hybridep"]
CudaGraphs = Literal["none", "full-iteration"]

OFFLOADS: tuple[Offload, ...] = get_args(Offload)
RECOMPUTES: tuple[Recompute, ...] = get_args(Recompute)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
BLACKWELL_PRECISIONS = ("mxfp8", "nvfp4")
"""Recipes with block scales that only Blackwell tensor cores run (Transformer Engine: MXFP8 and
NVFP4 need compute capability 10.x) and only Megatron-Core emits (``--fp8-recipe mxfp8``,
``--fp4-format e2m1 --fp4-recipe nvfp4``)."""
FRAMEWORKS: tuple[Framework, ...] = get_args(Framework)
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)
"""Orders in which the parallel groups are laid onto consecutive ranks, innermost first:
Megatron-Core's default ``tp-cp-ep-dp-pp`` and ``tp-cp-ep-pp-dp`` (``--use-tp-pp-dp-mapping``,
megatron/training/arguments.py; parallel_state.initialize_model_parallel ``order``)."""
MOE_DISPATCHERS: tuple[MoEDispatcher, ...] = get_args(MoEDispatcher)
"""Megatron-Core token dispatchers with expert parallelism: ``alltoall``, and ``flex`` with the DeepEP
or HybridEP backend (``--moe-token-dispatcher-type``, ``--moe-flex-dispatcher-backend``)."""
CUDA_GRAPHS: tuple[CudaGraphs, ...] = get_args(CudaGraphs)
"""CUDA graphs autopar costs: none, or Megatron-Core's full-iteration graph (``--cuda-graph-impl
full_iteration``: one graph around the whole forward-backward schedule of a step; megatron-core 0.19
``full_cuda_graph.py``). Per-layer graphs (``local`` / ``transformer_engine`` with a module scope) leave
part of each layer to the host and are not costed."""
MAX_MTP_WITH_EP_OVERLAP = 1
"""``--overlap-moe-expert-parallel-comm`` takes at most one multi-token-prediction layer
(megatron-core 0.19 ``transformer_config.py``, beside the overlap's other rules)."""


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """Parallel degrees and memory policies of one run (torchtitan ``ParallelDims`` style).

    Rank order is :attr:`placement`: by default Megatron's, tp innermost, then cp, then dp, then pp
    outermost.
    """

    dp: int = 1
    """Data-parallel degree. 1 means disabled."""
    tp: int = 1
    """Tensor-parallel degree. 1 means disabled."""
    pp: int = 1
    """Pipeline-parallel stages. 1 means disabled."""
    vp: int = 1
    """Virtual (interleaved) stages per pipeline rank. 1 means the plain 1F1B schedule."""
    cp: int = 1
    """Context-parallel degree (sequence split across ranks for attention). 1 means disabled."""
    sp: bool = False
    """Megatron sequence parallelism (needs tp > 1)."""
    micro_batch: int = 1
    """Sequences per micro-batch per data-parallel rank."""
    zero_stage: int = 0
    """0: none; 1: optimizer states sharded (Megatron distributed optimizer); 2: + gradients;
    3: + parameters (FSDP FULL_SHARD)."""
    offload_optimizer: Offload = "none"
    """ZeRO-Offload / ZeRO-Infinity target of fp32 optimizer states and the optimizer step."""
    offload_param: Offload = "none"
    """ZeRO-Infinity target of the 16-bit parameters (ZeRO-3 only)."""
    recompute: Recompute = "none"
    """Activation recomputation: none, selective (attention core, Korthikanti et al. 2022), full."""
    tp_comm_overlap: bool = False
    """Megatron-Core ``--tp-comm-overlap`` (Transformer Engine userbuffers): tensor-parallel
    all-gathers and reduce-scatters pipelined with the GEMMs they feed. Needs sp."""
    ep: int = 1
    """Expert-parallel degree: the routed experts of each MoE layer are split over ``ep`` ranks.
    Megatron-Core folds it into the attention layers' tp x cp x dp ranks (MoE parallel folding,
    arXiv:2504.14960): it does not add to the world size. 1 means disabled."""
    etp: int = 1
    """Expert tensor-parallel degree: each expert's matrices split over ``etp`` ranks (Megatron
    ``--expert-tensor-parallel-size``; its default, tp, is written out by the emitters)."""
    stage_layers: tuple[int, ...] | None = None
    """Transformer layers on each pipeline rank, first to last (its virtual stages share them);
    the embedding sits on the first rank, the output layer and loss on the last. None means the
    even split, layers / pp each (:mod:`search._pipeline_layout` builds the other forms)."""
    placement: Placement = "tp-cp-ep-dp-pp"
    """Order of the groups on consecutive ranks, innermost first (:data:`PLACEMENTS`): which groups
    sit inside a node or NVLink domain."""
    optimizer_offload_fraction: float = 1.0
    """Share of the optimizer states (and of their update) that ``offload_optimizer='cpu'`` puts on the
    host; the rest stays on the GPU (DeepSpeed ZeRO-3 ``offload_optimizer.ratio``, ZeRO-Offload++;
    Megatron-Core ``--optimizer-offload-fraction``). 1 means all."""
    recompute_layers: int | None = None
    """With ``recompute='full'``: layers recomputed per (virtual) pipeline stage, the first ones of
    each (Megatron ``--recompute-method block --recompute-num-layers N``); the others keep their
    activations. None means every layer (``--recompute-method uniform --recompute-num-layers 1``)."""
    activation_offload_layers: int = 0
    """Transformer layers whose activations go to host memory after the forward and come back for
    the backward (Megatron-Core ``--cpu-offloading-num-layers``; pp = 1 and no recomputation,
    megatron-core transformer_config.py). 0 means off."""
    tiles: int = 1
    """Memory-centric tiling (ZeRO-Infinity, Rajbhandari et al. 2021 Sec. 5.1.3): each linear layer
    split into ``tiles`` sub-linears that ZeRO-3 gathers and releases one at a time
    (``deepspeed.zero.TiledLinear`` with in_splits x out_splits = tiles, in the model code). 1 means off."""

    moe_dispatcher: MoEDispatcher = "alltoall"
    """How an MoE block exchanges tokens over the ep group (:data:`MOE_DISPATCHERS`): NCCL all-to-all of
    one copy per routed expert, or the flex dispatcher's kernels, one copy per destination GPU
    (:mod:`search._moe_dispatch`; DeepEP or HybridEP must be installed)."""
    moe_a2a_overlap: bool = False
    """Megatron-Core ``--overlap-moe-expert-parallel-comm``: one micro-batch's dispatch and combine run
    behind another's compute. Needs ep > 1."""
    cuda_graphs: CudaGraphs = "none"
    """Megatron-Core's full-iteration CUDA graph (:data:`CUDA_GRAPHS`): the device replays each step's
    forward and backward of every micro-batch, so the host launches nothing per micro-batch
    (:func:`search._predict.microbatch_overhead_s`). An MoE model needs ep >= 2 on HybridEP with a
    static per-rank token budget (the support matrix)."""

    def __post_init__(self) -> None:
        owner = "ParallelConfig"
        for name in ("dp", "tp", "pp", "vp", "cp", "micro_batch", "ep", "etp", "tiles"):
            positive_int(owner, name, getattr(self, name))
        self._check_memory_policies(owner)
        for flag in ("sp", "tp_comm_overlap", "moe_a2a_overlap"):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"{owner}.{flag}", f"{getattr(self, flag)!r} is not a boolean", "use true or false")
        if type(self.zero_stage) is not int or self.zero_stage not in (0, 1, 2, 3):
            raise SpecError(f"{owner}.zero_stage", f"{self.zero_stage!r} is not a ZeRO stage", "use 0, 1, 2 or 3")
        one_of(owner, "offload_optimizer", self.offload_optimizer, OFFLOADS)
        one_of(owner, "offload_param", self.offload_param, OFFLOADS)
        one_of(owner, "recompute", self.recompute, RECOMPUTES)
        one_of(owner, "placement", self.placement, PLACEMENTS)
        one_of(owner, "moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        one_of(owner, "cuda_graphs", self.cuda_graphs, CUDA_GRAPHS)
        if self.moe_dispatcher != "alltoall" and (self.ep == 1 or self.etp > 1):
            raise SpecError(f"{owner}.moe_dispatcher", f"{self.moe_dispatcher!r} with ep={self.ep}, etp={self.etp}: "
                            "the flex dispatcher is costed over an expert-parallel group (ep >= 2) without expert "
                            "tensor parallelism", "set ep >= 2 and etp=1, or moe_dispatcher='alltoall'")
        if self.moe_a2a_overlap and self.ep == 1:
            raise SpecError(f"{owner}.moe_a2a_overlap", "overlapping the expert all-to-all needs expert parallelism "
                            "(megatron-core transformer_config.py: expert_model_parallel_size > 1)",
                            "set ep >= 2, or moe_a2a_overlap=false")
        if self.offload_param != "none" and self.zero_stage != 3:
            raise SpecError(
                f"{owner}.offload_param", f"{self.offload_param!r} needs ZeRO-3, got zero_stage={self.zero_stage}",
                "set zero_stage=3 or offload_param='none' (DeepSpeed partitions parameters only in stage 3)",
            )
        if self.offload_optimizer == "nvme" and self.zero_stage != 3:
            raise SpecError(f"{owner}.offload_optimizer", f"'nvme' needs ZeRO-3, got zero_stage={self.zero_stage}",
                            "set zero_stage=3 (ZeRO-Infinity) or offload_optimizer='cpu'")
        if self.offload_optimizer != "none" and self.zero_stage == 0:
            raise SpecError(f"{owner}.offload_optimizer", "optimizer offload needs ZeRO stage 1-3",
                            "set zero_stage to 1, 2 or 3, or offload_optimizer='none'")
        if self.tiles > 1 and self.zero_stage != 3:
            raise SpecError(f"{owner}.tiles", f"memory-centric tiling needs ZeRO-3, got zero_stage={self.zero_stage}",
                            "set zero_stage=3 (tiles are gathered and released one at a time by ZeRO-3) or tiles=1")
        if self.sp and self.tp == 1:
            raise SpecError(f"{owner}.sp", "sequence parallelism needs tp > 1", "set sp=false or tp >= 2")
        if self.tp_comm_overlap and not self.sp:
            raise SpecError(f"{owner}.tp_comm_overlap", "TP communication overlap needs sequence parallelism",
                            "set sp=true (with tp >= 2) or tp_comm_overlap=false")
        if isinstance(self.stage_layers, list):  # JSON gives lists; the spec holds a tuple
            object.__setattr__(self, "stage_layers", tuple(self.stage_layers))
        if self.stage_layers is not None:
            layers = self.stage_layers
            if not isinstance(layers, tuple) or len(layers) != self.pp:
                raise SpecError(f"{owner}.stage_layers", f"{layers!r} is not one layer count per pipeline rank "
                                f"(pp={self.pp})", f"give a list of {self.pp} layer counts, or null for the even split")
            for n in layers:
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise SpecError(f"{owner}.stage_layers", f"{n!r} is not a layer count >= 0",
                                    "give whole numbers of layers per pipeline rank")
            if sum(layers) == 0:
                raise SpecError(f"{owner}.stage_layers", "no layer on any pipeline rank",
                                "give the layer counts of the ranks")
        if (self.tp * self.cp * self.dp) % (self.ep * self.etp):
            raise SpecError(f"{owner}.ep", f"ep*etp = {self.ep}*{self.etp} does not divide tp*cp*dp = "
                            f"{self.tp * self.cp * self.dp}: the expert layers fold onto the same GPUs",
                            "choose ep and etp whose product divides tp*cp*dp (world / pp); "
                            "megatron-core parallel_state.py: world % (etp*ep*pp) == 0")
        if self.vp > 1 and self.pp == 1:
            raise SpecError(f"{owner}.vp", f"{self.vp} virtual stages need pipeline parallelism (pp > 1)",
                            "set vp=1 or pp >= 2")

    def _check_memory_policies(self, owner: str) -> None:
        """The fine-grained memory policies: ranges and the combinations that mean something."""
        f = self.optimizer_offload_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f <= 1.0:
            raise SpecError(f"{owner}.optimizer_offload_fraction", f"{f!r} is not a share in (0, 1]",
                            "give the share of optimizer states on the host, e.g. 0.5, or 1 for all")
        if f < 1.0 and self.offload_optimizer != "cpu":
            raise SpecError(f"{owner}.optimizer_offload_fraction", f"a partial offload ({f:g}) needs "
                            f"offload_optimizer='cpu', got {self.offload_optimizer!r}",
                            "set offload_optimizer='cpu', or optimizer_offload_fraction=1")
        k = self.recompute_layers
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise SpecError(f"{owner}.recompute_layers", f"{k!r} is not a layer count >= 1",
                                "give the layers recomputed per pipeline stage, or null for all")
            if self.recompute != "full":
                raise SpecError(f"{owner}.recompute_layers", f"recomputing {k} layers needs recompute='full', "
                                f"got {self.recompute!r}", "set recompute='full', or recompute_layers=null")
        n = self.activation_offload_layers
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise SpecError(f"{owner}.activation_offload_layers", f"{n!r} is not a layer count >= 0",
                            "give the layers whose activations go to the host, or 0 for off")
        if n and self.pp > 1:
            raise SpecError(f"{owner}.activation_offload_layers", "activation offloading needs pp=1 (megatron-core "
                            "transformer_config.py: 'no support for Pipeline parallelism with CPU offloading')",
                            "set pp=1, or activation_offload_layers=0 (optimizer offload works with pp > 1)")
        if n and self.recompute != "none":
            raise SpecError(f"{owner}.activation_offload_layers", "activation offloading does not work with "
                            "recomputation (megatron-core transformer_config.py)",
                            "set recompute='none', or activation_offload_layers=0")

    @classmethod
    def trusted(cls, dp: int, tp: int, pp: int, vp: int, cp: int, sp: bool, micro_batch: int, zero_stage: int,
                offload_optimizer: Offload, offload_param: Offload, recompute: Recompute, *,
                tp_comm_overlap: bool = False, stage_layers: tuple[int, ...] | None = None, ep: int = 1,
                etp: int = 1, placement: Placement = "tp-cp-ep-dp-pp", tiles: int = 1,
                optimizer_offload_fraction: float = 1.0, recompute_layers: int | None = None,
                activation_offload_layers: int = 0, moe_dispatcher: MoEDispatcher = "alltoall",
                moe_a2a_overlap: bool = False, cuda_graphs: CudaGraphs = "none") -> ParallelConfig:
        """Build without re-validating, for enumerators that generate only valid values
        (:func:`search._space.enumerate_space`, whose tests check every result against
        :func:`check_compatible`). Half the cost of a search's enumeration was validation."""
        self = object.__new__(cls)
        put = object.__setattr__  # unrolled: a search builds some 10^5 of these
        put(self, "dp", dp)
        put(self, "tp", tp)
        put(self, "pp", pp)
        put(self, "vp", vp)
        put(self, "cp", cp)
        put(self, "sp", sp)
        put(self, "micro_batch", micro_batch)
        put(self, "zero_stage", zero_stage)
        put(self, "offload_optimizer", offload_optimizer)
        put(self, "offload_param", offload_param)
        put(self, "recompute", recompute)
        put(self, "tp_comm_overlap", tp_comm_overlap)
        put(self, "stage_layers", stage_layers)
        put(self, "ep", ep)
        put(self, "etp", etp)
        put(self, "placement", placement)
        put(self, "tiles", tiles)
        put(self, "optimizer_offload_fraction", optimizer_offload_fraction)
        put(self, "recompute_layers", recompute_layers)
        put(self, "activation_offload_layers", activation_offload_layers)
        put(self, "moe_dispatcher", moe_dispatcher)
        put(self, "moe_a2a_overlap", moe_a2a_overlap)
        put(self, "cuda_graphs", cuda_graphs)
        return self

    @property
    def model_parallel_size(self) -> int:
        """GPUs holding one model replica: tp * pp * cp."""
        return self.tp * self.pp * self.cp

    @property
    def world_size(self) -> int:
        """dp * tp * pp * cp."""
        return self.dp * self.model_parallel_size

    @property
    def edp(self) -> int:
        """Expert data-parallel degree, world / (etp * ep * pp): the group expert gradients are
        reduced over and expert optimizer states sharded over (megatron-core parallel_state.py)."""
        return self.tp * self.cp * self.dp // (self.ep * self.etp)


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """What one optimizer step trains and in which precision."""

    global_batch: int
    """Sequences per optimizer step, over all data-parallel ranks."""
    precision: Precision = "bf16"
    """Mixed precision of weights/activations: bf16, fp16, or low-precision GEMMs (Transformer Engine)
    with bf16 elsewhere: ``fp8`` with one scale per tensor (delayed or current scaling), ``mxfp8``
    (one scale per 32 elements, Blackwell) or ``nvfp4`` (4-bit, one scale per 16 elements, Blackwell)."""
    optimizer: Literal["adam"] = "adam"
    """Adam(W): fp32 master weights + two fp32 moments (K = 12 bytes/param, Rajbhandari et al. 2020)."""
    framework: Framework = "megatron"
    """Runtime whose memory accounting and overlap behaviour apply."""
    grad_reduce_in_bf16: bool = False
    """Megatron-Core accumulates and reduces the gradients in bf16 (``--grad-reduce-in-bf16``;
    Megatron-Bridge ``ddp.grad_reduce_in_fp32=False``, which its performance recipes set) instead of
    its fp32 ``main_grad`` buffer: 2 bytes of gradient per parameter, half the data-parallel traffic."""
    fp8_attention: bool = False
    """Transformer Engine runs the attention core in FP8 too (Megatron-Core
    ``TransformerConfig.fp8_dot_product_attention``, TE's ``fp8_dpa``; Megatron-Bridge
    ``mixed_precision.fp8_dot_product_attention``, which some of its performance recipes set). Costed at
    cuDNN's measured FP8 speed for the attention shape and GPU (:mod:`search._fp8_attention`), with the
    whole causal triangle in a windowed layer's backward. megatron-core 0.19's ``pretrain_gpt.py``
    has no flag for it (core_v0.19.0 ``arguments.py:2250`` lists it among the config fields without a
    command-line argument; ``service/launch/megatron_flags.txt``, 0.19.2's, has none), so the search never
    proposes it and a Megatron launch file refuses it."""

    def __post_init__(self) -> None:
        positive_int("TrainingSpec", "global_batch", self.global_batch)
        one_of("TrainingSpec", "precision", self.precision, PRECISIONS)
        one_of("TrainingSpec", "optimizer", self.optimizer, ("adam",))
        one_of("TrainingSpec", "framework", self.framework, FRAMEWORKS)
        if not isinstance(self.grad_reduce_in_bf16, bool):
            raise SpecError("TrainingSpec.grad_reduce_in_bf16", f"{self.grad_reduce_in_bf16!r} is not a boolean",
                            "use true or false")
        if self.grad_reduce_in_bf16 and self.framework != "megatron":
            raise SpecError("TrainingSpec.grad_reduce_in_bf16", f"is a Megatron-Core option, not {self.framework}'s "
                            "(DeepSpeed already reduces in the 16-bit type; torchtitan's bf16 reduction is not "
                            "modelled)", "use framework 'megatron', or leave it false")
        field = "TrainingSpec.fp8_attention"
        if not isinstance(self.fp8_attention, bool):
            raise SpecError(field, f"{self.fp8_attention!r} is not a boolean", "use true or false")
        if self.fp8_attention and self.framework != "megatron":
            raise SpecError(field, f"is Transformer Engine's FP8 attention in Megatron-Core, not {self.framework}'s",
                            "use framework 'megatron', or leave it false")
        if self.fp8_attention and self.precision not in FP8_ATTENTION_PRECISIONS:
            raise SpecError(field, f"with precision {self.precision}: FP8 attention is part of Transformer Engine's "
                            "FP8 recipe (megatron-core 0.19 fp8_utils.py:741-749 pass it as fp8_dpa), costed for "
                            "per-tensor FP8 and MXFP8 (NVIDIA's published cuDNN timings); NVFP4's is not",
                            "train in fp8 or mxfp8, or leave it false")
        if self.grad_reduce_in_bf16 and self.precision == "fp16":
            raise SpecError("TrainingSpec.grad_reduce_in_bf16", "fp16 training already reduces its gradients "
                            "in fp16", "leave it false, or train in bf16 / fp8")


def check_runtime(c: ParallelConfig, framework: str) -> None:
    """Raise :class:`SpecError` for what the runtime cannot run: the ``refused`` entries of the
    support matrix (:data:`search._support.SUPPORT_MATRIX`, each with its citation)."""
    check_supported(c, framework)


def _hint(n: int) -> str:
    return ", ".join(str(d) for d in divisors(n)[:12])


PAD_WITH_DEEPEP = ("the flex dispatcher's DeepEP backend does not pad expert inputs to capacity: megatron-core 0.19 "
                   "refuses moe_pad_expert_input_to_capacity with it (transformer_config.py:1600-1607)")
"""Why a model padding its experts' inputs to capacity cannot run DeepEP."""


def _check_experts(model: ModelSpec, c: ParallelConfig) -> None:
    """Expert parallelism fits the model (megatron-core arguments.py:1600-1603: ``num_experts %
    expert_model_parallel_size == 0``; the expert MLP's columns split evenly over etp)."""
    if model.moe is None:
        if c.ep > 1 or c.etp > 1:
            raise SpecError("ParallelConfig.ep" if c.ep > 1 else "ParallelConfig.etp",
                            f"ep={c.ep}, etp={c.etp} on {model.name}, which has no experts",
                            "set ep=1 and etp=1, or describe the model's mixture of experts (ModelSpec.moe)")
        return
    if c.cuda_graphs == "full-iteration" and c.ep == 1:
        raise SpecError("ParallelConfig.cuda_graphs", f"a full-iteration CUDA graph of {model.name} without expert "
                        "parallelism: dropless MoE sizes its token buffers on the host every layer (a host sync), "
                        "and only HybridEP's static per-rank budget avoids it (megatron-core 0.19 "
                        "token_dispatcher.py HybridEP, transformer_config.py moe_expert_rank_capacity_factor)",
                        "set ep >= 2 with moe_dispatcher='flex-hybridep', or cuda_graphs='none'")
    if c.cuda_graphs == "full-iteration" and not model.gated_mlp:
        raise SpecError("ParallelConfig.cuda_graphs", f"a full-iteration CUDA graph of {model.name}, whose experts "
                        f"are a {model.activation} MLP: the graph's per-rank token budget needs Transformer Engine's "
                        "op fuser on the experts (--use-transformer-engine-op-fuser), which megatron-core 0.19 runs "
                        "for a GLU (SwiGLU, quick-GeGLU) only (moe/experts.py _is_fused_impl_supported, asserted in "
                        "TEGroupedMLP.__init__)", "use cuda_graphs='none' for this model")
    if model.moe.pad_to_capacity and c.moe_dispatcher == "flex-deepep":
        raise SpecError("ParallelConfig.moe_dispatcher", PAD_WITH_DEEPEP, "use moe_dispatcher 'alltoall' or "
                        "'flex-hybridep', or a model that does not pad to capacity (moe.pad_to_capacity false)")
    if c.moe_a2a_overlap and model.mtp_layers > MAX_MTP_WITH_EP_OVERLAP:
        raise SpecError("ParallelConfig.moe_a2a_overlap", f"{model.name} has {model.mtp_layers} multi-token-prediction "
                        f"layers: megatron-core overlaps the expert all-to-all with at most "
                        f"{MAX_MTP_WITH_EP_OVERLAP} (transformer_config.py)",
                        "set moe_a2a_overlap=false, or use one MTP layer")
    if model.moe.experts % c.ep:
        raise SpecError("ParallelConfig.ep", f"{c.ep} does not divide experts={model.moe.experts}",
                        f"use an ep that divides {model.moe.experts} ({_hint(model.moe.experts)})")
    if model.moe.expert_ffn % c.etp:
        raise SpecError("ParallelConfig.etp", f"{c.etp} does not divide moe.expert_ffn={model.moe.expert_ffn}",
                        f"use an etp that divides {model.moe.expert_ffn}")
    if model.bias and c.etp > 1:
        raise SpecError("ParallelConfig.etp", "expert tensor parallelism with biased expert layers is refused by "
                        "megatron-core (moe experts: bias only with expert_tensor_parallel_size 1)",
                        "set etp=1, or a model without biases")
    if model.moe.shared_expert_ffn % c.tp:
        raise SpecError("ParallelConfig.tp",
                        f"{c.tp} does not divide moe.shared_expert_ffn={model.moe.shared_expert_ffn}",
                        "use a tp that divides the shared experts' inner size")


def check_compatible(model: ModelSpec, world_size: int, config: ParallelConfig, training: TrainingSpec) -> None:
    """Raise :class:`SpecError` unless model, cluster size, config and batch fit together.

    Rules from Megatron-LM ``validate_args`` and DeepSpeed's batch rule
    (train_batch = micro_batch * grad_accum * dp).
    """
    if not isinstance(model, ModelSpec):
        raise SpecError("model", f"{type(model).__name__} is not a ModelSpec",
                        "pass a ModelSpec (search.model_preset(name) returns one)")
    if not isinstance(config, ParallelConfig):
        raise SpecError("config", f"{type(config).__name__} is not a ParallelConfig", "pass a ParallelConfig")
    if not isinstance(training, TrainingSpec):
        raise SpecError("training", f"{type(training).__name__} is not a TrainingSpec", "pass a TrainingSpec")
    c = config
    if c.world_size != world_size:
        mp = c.model_parallel_size
        hint = (f"set dp={world_size // mp} for tp*pp*cp = {mp}" if world_size % mp == 0
                else f"tp*pp*cp = {mp} does not divide {world_size}: change tp, pp or cp, or the node count")
        raise SpecError(
            "ParallelConfig",
            f"dp*tp*pp*cp = {c.dp}*{c.tp}*{c.pp}*{c.cp} = {c.world_size} but the cluster has {world_size} GPUs",
            f"choose degrees whose product is {world_size} ({hint})",
        )
    if model.heads % c.tp:
        raise SpecError("ParallelConfig.tp", f"{c.tp} does not divide heads={model.heads}",
                        f"use a tp that divides {model.heads} ({_hint(model.heads)})")
    kv = int(model.kv_heads or model.heads)
    if kv % c.tp:
        raise SpecError("ParallelConfig.tp", f"{c.tp} does not divide kv_heads={kv}",
                        f"use a tp that divides {kv} ({_hint(kv)})")
    if model.dense_layers and model.ffn % c.tp:
        raise SpecError("ParallelConfig.tp", f"{c.tp} does not divide ffn={model.ffn}",
                        f"use a tp that divides {model.ffn} (Megatron splits the MLP columns evenly)")
    _check_experts(model, c)
    if c.activation_offload_layers >= model.layers:
        raise SpecError("ParallelConfig.activation_offload_layers", f"{c.activation_offload_layers} layers of "
                        f"{model.layers}: megatron-core offloads fewer layers than the model has",
                        f"give at most {model.layers - 1}")
    if c.stage_layers is not None:
        if sum(c.stage_layers) != model.layers:
            raise SpecError("ParallelConfig.stage_layers", f"the ranks hold {sum(c.stage_layers)} layers "
                            f"({list(c.stage_layers)}), the model has {model.layers}",
                            f"give layer counts that add up to {model.layers}")
    elif model.layers % c.pp:
        raise SpecError("ParallelConfig.pp", f"{c.pp} does not divide layers={model.layers}",
                        f"use a pp that divides {model.layers} ({_hint(model.layers)}), or an uneven layout "
                        "(ParallelConfig.stage_layers; search.pipeline_layout builds the frameworks' forms)")
    elif model.layers % (c.pp * c.vp):
        raise SpecError("ParallelConfig.vp", f"pp*vp = {c.pp * c.vp} does not divide layers={model.layers}",
                        f"use a vp that divides {model.layers // c.pp}, or an uneven layout (stage_layers)")
    if model.seq_len % c.cp or (c.cp > 1 and model.seq_len % (2 * c.cp)):
        raise SpecError("ParallelConfig.cp", f"seq_len={model.seq_len} is not a multiple of 2*cp = {2 * c.cp}",
                        "use a cp with seq_len divisible by 2*cp (load-balanced causal context parallelism)")
    if c.cp > 1 and model.attention != "flash":
        raise SpecError("ParallelConfig.cp", "context parallelism needs a flash/fused attention kernel",
                        "set ModelSpec.attention='flash' or cp=1")
    if c.cp > 1 and (model.attention_window is not None or model.softmax_sinks):
        # Transformer Engine's get_attention_backend (attention/dot_product_attention/utils.py @ 002a3e573f49): with
        # context parallelism a non-vanilla softmax runs only in FusedAttention with cp_comm_type a2a, and TE's CP
        # tests skip sliding windows with p2p ("No support for SWA with cp_comm_type={p2p, a2a+p2p}").
        raise SpecError("ParallelConfig.cp", "context parallelism with a sliding window or softmax sinks: Transformer "
                        "Engine runs them only with its all-to-all exchange (cp_comm_type a2a), not the ring (p2p) "
                        "exchange autopar costs", "set cp=1 for this model")
    check_runtime(c, training.framework)
    check_model_supported(model, training.framework)
    if training.precision in BLACKWELL_PRECISIONS and training.framework != "megatron":
        raise SpecError("TrainingSpec.precision", f"{training.precision} is costed and emitted for Megatron-Core only "
                        f"(Transformer Engine recipes), not {training.framework}",
                        "use framework='megatron', or precision fp8 / bf16")
    if training.global_batch % (c.dp * c.micro_batch):
        raise SpecError(
            "TrainingSpec.global_batch",
            f"{training.global_batch} is not divisible by dp*micro_batch = {c.dp}*{c.micro_batch}",
            f"use a global batch that is a multiple of {c.dp * c.micro_batch}",
        )

"""Megatron-LM / Megatron-Core: the ``pretrain_gpt.py`` arguments of one configuration.

Facts from ``shared/reference/frameworks.md`` §5, the Addendum and §11. Every emitted flag is
checked against ``megatron_flags.txt``: the long options of ``megatron/training/arguments.py``
at the pinned megatron-core release (regenerate with ``scripts/extract_megatron_flags.py``).
There is no ``--virtual-pipeline-model-parallel-size``; the interleaved schedule is set with
``--num-layers-per-virtual-pipeline-stage`` (= layers / pp / vp). ``_megatron_checks.check_megatron_args``
re-implements the value rules of Megatron's ``validate_args`` that a configuration can break.

Mixtures of experts, latent attention and multi-token prediction (:func:`expert_args`; flags and
rules from ``frameworks_2.md`` sec. 3 and megatron-core ``core_v0.19.0``'s ``arguments.py``,
``transformer_config.py``, ``gpt_layer_specs.py`` and ``pipeline_parallel_layer_layout.py``):
experts folded over the attention layers' ranks (ep x etp divides tp x cp x dp), grouped GEMMs,
the all-to-all dispatcher when ep > 1 (or the flex dispatcher with the configuration's DeepEP / HybridEP
backend, and --overlap-moe-expert-parallel-comm when asked), dropless unless a capacity factor is given.
GPT-OSS's sliding window, softmax sinks, clamped quick-GeLU GLU and YaRN RoPE: :mod:`._megatron_variants`.
"""

from __future__ import annotations

from dataclasses import dataclass

from search import ModelSpec, ParallelConfig, SpecError
from search._unfused_paths import runs_op_fuser

from ._base import EntryPoint, LaunchFiles, LaunchRequest
from ._launchers import with_torchrun
from ._megatron_checks import check_megatron_args
from ._megatron_flags import megatron_flags, megatron_release
from ._megatron_recipe import MEGATRON_RECIPE, model_settings, number, recipe_args
from ._megatron_variants import variant_args
from ._pipeline_split import megatron_pipeline_args

_FIELD = "megatron_args"


def _require(flag: str, what: str) -> str:
    if flag not in megatron_flags():
        raise SpecError(_FIELD, f"{what} needs {flag}, which the pinned release ({megatron_release()}) lacks",
                        "choose a configuration without it, or update megatron_flags.txt to a release that has it")
    return flag


@dataclass(frozen=True, slots=True)
class ShapeSpelling:
    """How a Megatron fork spells the model-shape choices that differ between forks."""

    gqa: tuple[str, ...]
    """Flags before the key/value head count."""
    rmsnorm: tuple[str, ...]
    rope: tuple[str, ...]
    flash: tuple[str, ...]
    quick_geglu: tuple[str, ...] | None = None
    """The quick-GeLU GLU (GPT-OSS); None: the fork has none, and such a model is refused."""
    yarn: tuple[str, ...] | None = None
    """YaRN RoPE in place of :attr:`rope`; None: the fork has none, and such a model is refused."""


MEGATRON_SPELLING = ShapeSpelling(gqa=("--group-query-attention", "--num-query-groups"),
                                  rmsnorm=("--normalization", "RMSNorm"), rope=("--position-embedding-type", "rope"),
                                  flash=("--use-flash-attn",), quick_geglu=("--quick-geglu",),
                                  yarn=("--position-embedding-type", "yarn"))


def _spelled(flags: tuple[str, ...] | None, field: str, what: str) -> tuple[str, ...]:
    if flags is None:
        raise SpecError(field, f"{what} has no flag in this fork's pinned parser, so the launch would train another "
                        "model than the one costed", "use framework megatron (Megatron-Core) for this model")
    return flags


def check_request(request: LaunchRequest) -> None:
    """What every Megatron fork refuses alike: degrees that are not the cluster, and ALiBi."""
    c, m = request.config, request.model
    if request.cluster.world_size != c.world_size:
        raise SpecError("ParallelConfig", f"dp*tp*pp*cp = {c.world_size} GPUs, but the cluster has "
                        f"{request.cluster.world_size}", "choose degrees whose product is the cluster's GPU count")
    if m.position_embedding == "alibi":
        raise SpecError("ModelSpec.position_embedding", "ALiBi is not an option of the pinned release's parser "
                        "(no --position-embedding-type alibi); emitting it would silently train another model",
                        "use a model with learned or rope position embeddings, or launch ALiBi models by hand")


def shape_args(m: ModelSpec, spelling: ShapeSpelling) -> list[str]:
    """The model shape in a fork's flags: sizes, GQA, SwiGLU or quick-GeGLU, RMSNorm, RoPE or YaRN, untied head,
    no biases, no dropout, FlashAttention; the order is the same for every fork (the golden files rely on it)."""
    args = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--num-attention-heads", str(m.heads),
            "--ffn-hidden-size", str(m.ffn), "--seq-length", str(m.seq_len),
            "--max-position-embeddings", str(m.seq_len)]
    kv = m.kv_heads if m.kv_heads is not None else m.heads
    if kv < m.heads:
        args += [*spelling.gqa, str(kv)]
    if m.activation == "swiglu":
        args.append("--swiglu")
    elif m.activation == "quick-geglu":
        args += _spelled(spelling.quick_geglu, "ModelSpec.activation", "the quick-GeLU GLU")
    if m.norm == "rmsnorm":
        args += spelling.rmsnorm
    if m.position_embedding == "rope":
        args += spelling.rope if m.rope_yarn is None else _spelled(spelling.yarn, "ModelSpec.rope_yarn", "YaRN RoPE")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not m.bias:
        args.append("--disable-bias-linear")
    if not m.dropout:
        args += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    if m.attention == "flash":
        args += spelling.flash
    return args


def megatron_args(request: LaunchRequest) -> list[str]:
    """The ``pretrain_gpt.py`` arguments for ``request`` (parallelism, batch, memory policy, precision, model,
    then the model's own settings and the training recipe)."""
    return megatron_args_and_notes(request)[0]


def megatron_args_and_notes(request: LaunchRequest) -> tuple[list[str], list[str]]:
    """:func:`megatron_args` and what the user still has to know (placeholders to set, rounding, ...)."""
    if request.training.framework != "megatron":
        raise SpecError("TrainingSpec.framework", f"{request.training.framework!r} is not run by Megatron-LM",
                        "use the emitter of that framework, or framework='megatron'")
    c, m, t = request.config, request.model, request.training
    check_request(request)
    args = ["--tensor-model-parallel-size", str(c.tp), "--pipeline-model-parallel-size", str(c.pp)]
    if c.stage_layers is None and c.vp > 1 and m.layers % (c.pp * c.vp):
        raise SpecError("ParallelConfig.vp", f"layers={m.layers} is not divisible by pp*vp={c.pp * c.vp}",
                        "choose pp and vp whose product divides the layer count, or an uneven layout")
    args += _with_mtp(megatron_pipeline_args(m, c), m.mtp_layers)  # even, first/last, account-for, or a layout
    if c.sp:
        args.append("--sequence-parallel")
    if c.tp_comm_overlap:  # Transformer Engine userbuffers (the default --transformer-impl)
        args.append(_require("--tp-comm-overlap", "TP communication overlap"))
    if c.cp > 1:
        args += ["--context-parallel-size", str(c.cp)]
    if c.placement == "tp-cp-ep-pp-dp":  # initialize.py: order='tp-cp-ep-pp-dp' instead of 'tp-cp-ep-dp-pp'
        args.append(_require("--use-tp-pp-dp-mapping", "the tp-cp-ep-pp-dp placement"))
    args += ["--micro-batch-size", str(c.micro_batch), "--global-batch-size", str(t.global_batch)]
    if c.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif c.recompute == "full" and c.recompute_layers is not None:
        # The first N layers of each (virtual) pipeline stage recompute; the others keep their activations.
        args += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                 str(c.recompute_layers)]
    elif c.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if c.activation_offload_layers:
        # megatron-core TransformerConfig: cpu_offloading with num_layers < layers, pp = 1, no recomputation.
        args += [_require("--cpu-offloading-num-layers", "activation offloading"), str(c.activation_offload_layers)]
    if c.zero_stage >= 1:
        args.append("--use-distributed-optimizer")
    if c.zero_stage >= 2:
        what = f"ZeRO-{c.zero_stage} (Megatron-FSDP)"
        strategy = "optim_grads" if c.zero_stage == 2 else "optim_grads_params"
        # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format." The user guide
        # (docs/discussions/megatron-fsdp-user-guide) also requires --no-gradient-accumulation-fusion
        # (Megatron-Bridge: "Disabled to avoid functional errors").
        args += [_require("--use-megatron-fsdp", what), _require("--data-parallel-sharding-strategy", what), strategy,
                 _require("--ckpt-format", what), "fsdp_dtensor",
                 _require("--no-gradient-accumulation-fusion", what)]
        if c.zero_stage == 3:
            # Persistent buffers for the running and the prefetched block's gathered parameters: what the
            # memory model holds for ZeRO-3 (search._memory.model_state_bytes) and Megatron-Bridge's
            # performance recipes set (cfg.ddp.fsdp_double_buffer = True); the user guide recommends it.
            args.append(_require("--fsdp-double-buffer", what))
    if c.dp > 1:
        args.append("--overlap-grad-reduce")
        if c.zero_stage >= 1:
            args.append("--overlap-param-gather")
    if c.offload_optimizer == "cpu":
        # validate_args: the hybrid device optimizer "must be used in conjunction with
        # `--use-precision-aware-optimizer`".
        args += [_require("--optimizer-cpu-offload", "optimizer CPU offload"),
                 _require("--use-precision-aware-optimizer", "optimizer CPU offload")]
        if c.optimizer_offload_fraction < 1.0:
            args += [_require("--optimizer-offload-fraction", "a partial optimizer offload"),
                     f"{c.optimizer_offload_fraction:g}"]
    elif c.offload_optimizer != "none" or c.offload_param != "none":
        raise SpecError("ParallelConfig.offload_optimizer", "Megatron offloads only the optimizer, and only to CPU",
                        "use offload_optimizer='cpu' or 'none' and offload_param='none'")
    if t.precision == "fp16":
        args.append("--fp16")
    elif t.precision == "fp8":
        args += [_require("--fp8-format", "fp8 training"), "hybrid", "--bf16"]
    elif t.precision == "mxfp8":
        # Transformer Engine's MXFP8BlockScaling: E4M3 with one E8M0 scale per 32 elements (Blackwell).
        args += [_require("--fp8-format", "MXFP8 training"), "e4m3", _require("--fp8-recipe", "MXFP8 training"),
                 "mxfp8", "--bf16"]
    elif t.precision == "nvfp4":
        # NVFP4BlockScaling (TE >= 2.7): --fp4-format excludes --fp8-format (arguments.py validate_args).
        args += [_require("--fp4-format", "NVFP4 training"), "e2m1", _require("--fp4-recipe", "NVFP4 training"),
                 "nvfp4", "--bf16"]
    else:
        args.append("--bf16")
    if t.fp8_attention:
        raise SpecError("TrainingSpec.fp8_attention", "megatron-core 0.19's pretrain_gpt.py has no flag for FP8 "
                        "attention (service/launch/megatron_flags.txt, 0.19.2's flags, has none; core_v0.19.0 "
                        "arguments.py:2250 lists fp8_dot_product_attention among the config fields without a "
                        "command-line argument; Megatron-Bridge sets it in Python)",
                        "leave fp8_attention false for a Megatron-LM launch (BF16 attention, costed as such)")
    if t.grad_reduce_in_bf16:
        # The main-grad buffer and the data-parallel reduction in bf16 (arguments.py: without the flag,
        # bf16 training sets accumulate_allreduce_grads_in_fp32).
        args.append(_require("--grad-reduce-in-bf16", "bf16 gradient reduction"))
    graph, graph_notes = cuda_graph_args(c)
    args += graph
    args += shape_args(m, MEGATRON_SPELLING)
    variant, variant_notes = variant_args(m)  # GPT-OSS: window, sinks, the GLU's offset and clamp, YaRN's settings
    args += variant
    if m.moe is not None and request.cluster.gpu.bf16_flop_per_s is None:  # no bf16: before Ampere (sm_80)
        raise SpecError("ClusterSpec.gpu", f"{request.cluster.gpu.name}: Megatron's grouped expert GEMMs "
                        "(--moe-grouped-gemm) need compute capability 8.0 or newer (validate_args)",
                        "train a mixture of experts on Ampere or newer GPUs")
    model, model_notes = expert_args(m, c)
    settings, notes = model_settings(m, c.tp, MEGATRON_RECIPE)
    recipe, recipe_notes = recipe_args(request, MEGATRON_RECIPE)
    return [*args, *model, *settings, *recipe], [*graph_notes, *variant_notes, *model_notes, *notes, *recipe_notes]


RANK_CAPACITY_FACTOR = 1.5
"""``--moe-expert-rank-capacity-factor`` with a full-iteration CUDA graph: the static per-rank token budget
HybridEP needs to size its buffers without a host sync (megatron-core 0.18 (458c8d0) ``token_dispatcher.py:
1041-1055``), as the 26.06+ Megatron-Bridge MoE recipes set it (``moe_expert_rank_capacity_factor=1.5``
with ``moe_paged_stash=True``)."""


def cuda_graph_args(c: ParallelConfig) -> tuple[list[str], list[str]]:
    """(arguments, notes) of the configuration's CUDA graph: nothing without one; for the full-iteration
    graph ``--cuda-graph-impl full_iteration`` (megatron-core 0.18 (458c8d0) ``transformer_config.py:927-940``;
    ``full_cuda_graph.py:208-232`` captures the forward-backward schedule once) with
    ``--no-check-for-nan-in-loss-and-grad``, which 0.19's validate_args requires with it (the NaN check reads
    the loss on the host; Megatron-Bridge turns it off too, ``training/config.py:1453-1457`` @ v0.3.0).
    The MoE part (the per-rank budget, the paged stash) is :func:`expert_args`'."""
    if c.cuda_graphs == "none":
        return [], []
    what = "the full-iteration CUDA graph"
    args = [_require("--cuda-graph-impl", what), "full_iteration",
            _require("--no-check-for-nan-in-loss-and-grad", what)]
    notes = ["the full-iteration CUDA graph is captured after --cuda-graph-warmup-steps (Megatron's default, 3) "
             "eager steps; the loss is not checked for NaN on the host (--no-check-for-nan-in-loss-and-grad)"]
    if c.zero_stage >= 2:
        notes.append("the full-iteration CUDA graph with Megatron-FSDP passes Megatron's checks, but no published "
                     "run shows the two together (untested)")
    return args, notes


def _graphed_expert_args(c: ParallelConfig) -> tuple[list[str], list[str]]:
    """An MoE model's part of the full-iteration CUDA graph: HybridEP's static per-rank token budget
    (``--moe-expert-rank-capacity-factor``, which needs the hybridep backend and
    ``--use-transformer-engine-op-fuser``: megatron-core 0.18 (458c8d0) ``transformer_config.py:1515-1525``) and
    the paged stash for the experts' activations (``--moe-paged-stash``, which forbids activation offloading:
    ``transformer_config.py:1683-1696``), as the 26.06+ Megatron-Bridge MoE recipes run it."""
    if c.ep == 1 or c.moe_dispatcher != "flex-hybridep":
        raise SpecError("ParallelConfig.cuda_graphs", f"a full-iteration CUDA graph of an MoE model with ep={c.ep} "
                        f"and the {c.moe_dispatcher} dispatcher: only HybridEP's static per-rank budget keeps the "
                        "token exchange off the host (megatron-core 0.18 token_dispatcher.py:1041-1055)",
                        "set ep >= 2 with moe_dispatcher='flex-hybridep', or cuda_graphs='none'")
    if c.activation_offload_layers:
        raise SpecError("ParallelConfig.activation_offload_layers", "the paged stash a graphed MoE model keeps its "
                        "experts' activations in forbids activation offloading (transformer_config.py:1683-1696)",
                        "set activation_offload_layers=0, or cuda_graphs='none'")
    what = "an MoE model's full-iteration CUDA graph"
    args = [_require("--moe-expert-rank-capacity-factor", what), number(RANK_CAPACITY_FACTOR),
            _require("--moe-paged-stash", what), _require("--use-transformer-engine-op-fuser", what)]
    notes = [f"HybridEP's per-rank token budget (--moe-expert-rank-capacity-factor {RANK_CAPACITY_FACTOR:g}) drops "
             "the tokens over it; in the rare step that overflows it, megatron-core's PagedStashRunner re-runs the "
             "forward-backward without the budget, the stash and the graph (paged_stash.py), a slower step the cost "
             "model does not cost (it costs every step dropless, in the graph)",
             "--use-transformer-engine-op-fuser runs the experts as Transformer Engine ops: megatron-core 0.19 "
             "asserts Transformer Engine >= 2.14, for a GLU NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (set in the "
             "environment) and, with expert biases, a TE GroupedLinear op that takes scale_bias (moe/experts.py "
             "_is_fused_impl_supported); TE fuses FC1, the GLU and FC2 into its CuTe DSL "
             "grouped-GEMM kernels only on Blackwell (compute capability 10) with an MXFP8 or NVFP4 recipe and "
             "cuDNN frontend >= 1.23 (transformer_engine/pytorch/ops/fused/grouped_mlp.py), and runs the ops one "
             "by one elsewhere"]
    return args, notes


AUX_LOSS_COEFF = 1e-2
"""``--moe-aux-loss-coeff`` of a learned router: Megatron's recommended starting value
(``transformer_config.py``: "A starting value of 1e-2 is recommended"; its default, 0, turns the
load-balancing loss off). The model spec does not carry a model's own value."""


def _moe_layer_freq(m: ModelSpec, dense: int) -> str:
    """``--moe-layer-freq``: 1 (every layer an MoE layer) or the list form ``([0]*3+[1]*58)`` for dense
    first layers (``arguments.py`` ``moe_freq_type``: a Python list expression of digits, ``[]``, ``()``,
    ``+``, ``*`` and commas; ``gpt_layer_specs.py`` asserts it has num_layers entries)."""
    return f"([0]*{dense}+[1]*{m.layers - dense})" if dense else "1"


def _with_mtp(pipeline: list[str], mtp: int) -> list[str]:
    """A layout string holds the multi-token-prediction layers too (``validate_layer_layout``: as many
    ``m`` as --mtp-num-layers, after every decoder layer): they go before the loss, on the last stage."""
    if not mtp or "--pipeline-model-parallel-layout" not in pipeline:
        return pipeline
    i = pipeline.index("--pipeline-model-parallel-layout") + 1
    return [*pipeline[:i], pipeline[i].removesuffix("L") + "m" * mtp + "L", *pipeline[i + 1:]]


def expert_args(m: ModelSpec, c: ParallelConfig) -> tuple[list[str], list[str]]:
    """(arguments, notes) of what a dense GPT block lacks: the head width when it is not hidden / heads,
    the mixture of experts with its expert-parallel layout, latent attention, multi-token prediction.
    Nothing for a dense model whose heads are hidden / heads wide."""
    args: list[str] = []
    notes: list[str] = []
    if m.hidden % m.heads or (m.mla is None and m.dim_per_head * m.heads != m.hidden):
        args += ["--kv-channels", str(m.dim_per_head)]  # validate_args: hidden / heads when not given
    moe = m.moe
    if moe is None and (c.ep > 1 or c.etp > 1):
        raise SpecError("ParallelConfig.ep" if c.ep > 1 else "ParallelConfig.etp",
                        f"ep={c.ep}, etp={c.etp} on {m.name}, which has no experts",
                        "set ep=1 and etp=1, or describe the model's mixture of experts (ModelSpec.moe)")
    if moe is not None:
        if m.bias and c.etp > 1:
            raise SpecError("ParallelConfig.etp", f"etp={c.etp}: Megatron-Core has biases in MoE layers only with "
                            "etp=1 (transformer_config.py: 'Bias in Moe is only supported when ETP==1')",
                            "set etp=1 for this model with biases")
        args += ["--num-experts", str(moe.experts), "--moe-router-topk", str(moe.topk),
                 "--moe-ffn-hidden-size", str(moe.expert_ffn),
                 "--moe-layer-freq", _moe_layer_freq(m, moe.first_dense_layers)]
        if moe.shared_expert_ffn:
            args += ["--moe-shared-expert-intermediate-size", str(moe.shared_expert_ffn)]
        # Megatron's --expert-tensor-parallel-size default is tp; autopar's etp default is 1: always written.
        dispatcher = "flex" if c.moe_dispatcher != "alltoall" else "alltoall" if c.ep > 1 else "allgather"
        args += ["--expert-model-parallel-size", str(c.ep), "--expert-tensor-parallel-size", str(c.etp),
                 "--moe-grouped-gemm", "--moe-token-dispatcher-type", dispatcher,
                 "--moe-router-dtype", "fp32"]  # the cost model's router is fp32; Megatron warns without it
        if c.moe_dispatcher != "alltoall":  # flex-deepep / flex-hybridep: the backend the cost model costs
            args += ["--moe-flex-dispatcher-backend", c.moe_dispatcher.removeprefix("flex-")]
            notes.append(f"the flex dispatcher's {c.moe_dispatcher.removeprefix('flex-')} backend needs the deep_ep "
                         "package (DeepEP; HybridEP is its hybrid-ep branch) in the training image")
        if c.moe_a2a_overlap:  # costed without --delay-wgrad-compute, which the recipes add: not emitted
            args.append("--overlap-moe-expert-parallel-comm")
        if runs_op_fuser(m, c.cuda_graphs):  # the graph's per-rank budget and the op fuser it needs
            graph, graph_notes = _graphed_expert_args(c)
            args += graph
            notes += graph_notes
        if moe.topk == 1:  # transformer_config.py: softmax over one logit has no gradient
            args.append("--moe-router-pre-softmax")
        if moe.router_load == "force-balanced":  # random logits (a benchmark): no loss to balance them
            args += ["--moe-router-load-balancing-type", "none", "--moe-router-force-load-balancing"]
        else:
            args += ["--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", number(AUX_LOSS_COEFF)]
            notes.append(f"the router's load-balancing loss coefficient is Megatron's recommended start, "
                         f"--moe-aux-loss-coeff {AUX_LOSS_COEFF:g}; edit it to the model's own value")
        if moe.capacity_factor is not None:  # None: dropless, Megatron's default
            args += ["--moe-expert-capacity-factor", number(moe.capacity_factor)]
        if moe.pad_to_capacity:  # costed: every expert computes its capacity, the alltoall split sizes static
            args.append("--moe-pad-expert-input-to-capacity")
    if m.mla is not None:
        args += _mla_args(m)
    if m.mtp_layers:
        args += ["--mtp-num-layers", str(m.mtp_layers)]
    return args, notes


def _mla_args(m: ModelSpec) -> list[str]:
    """Multi-head latent attention. Its RoPE is Megatron's MLA default, YaRN, at scaling factor 1
    (``--rotary-scaling-factor``), which is plain RoPE of base ``--rotary-base`` on the
    ``--qk-pos-emb-head-dim`` part of each head; ``--qk-layernorm`` builds the RMSNorms on the query and
    key/value latents (``gpt_layer_specs.py``: ``linear_q/kv_up_proj`` with a fused layer norm)."""
    mla = m.mla
    if mla is None:
        raise SpecError("ModelSpec.mla", "the latent-attention flags need a model with multi-head latent attention",
                        "give the model an mla part, or emit it without the MLA flags")
    if m.position_embedding != "rope" or m.rope_scaling_factor is not None or m.rotary_percent != 1.0:
        raise SpecError("ModelSpec.position_embedding", "Megatron's latent attention rotates the "
                        "qk_rope_head_dim part of each head with YaRN RoPE; learned positions, Llama 3.1 RoPE "
                        "scaling and rotary_percent are not options of it",
                        "use position_embedding='rope' without rope_scaling_factor and rotary_percent with mla")
    args = ["--multi-latent-attention"]
    if mla.q_lora_rank is not None:
        args += ["--q-lora-rank", str(mla.q_lora_rank)]
    args += ["--kv-lora-rank", str(mla.kv_lora_rank), "--qk-head-dim", str(mla.qk_head_dim),
             "--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim), "--v-head-dim", str(mla.v_head_dim)]
    if not m.qk_norm:  # model_settings writes it for qk_norm
        args.append("--qk-layernorm")
    return args


def megatron_entry(request: LaunchRequest) -> EntryPoint:
    """What the launchers run for Megatron-LM: ``pretrain_gpt.py`` with :func:`megatron_args`."""
    args, notes = megatron_args_and_notes(request)
    return EntryPoint(args=tuple(args), notes=tuple(notes))


def emit_megatron(request: LaunchRequest) -> LaunchFiles:
    """``megatron_args.txt`` (one argument per line, placeholders as the shell sees them) and the torchrun
    command that runs ``pretrain_gpt.py``."""
    entry = megatron_entry(request)
    check_megatron_args(entry.args, request.config.world_size)
    return with_torchrun(request, {"megatron_args.txt": "".join(f"{a}\n" for a in entry.args)}, entry)

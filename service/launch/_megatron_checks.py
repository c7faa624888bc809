"""Megatron-LM's argument rules, re-implemented: :func:`check_megatron_args` refuses a flag the pinned
release lacks (:mod:`service.launch._megatron_flags`) and the values Megatron's ``validate_args`` (and its
micro-batch calculator) would refuse: parallel sizes against the world, the interleaved schedule, the
pipeline split, mixtures of experts, latent attention and multi-token prediction (rules from
``shared/reference/frameworks.md`` §5 and ``frameworks_2.md`` sec. 3, megatron-core ``core_v0.19.0``'s
``arguments.py``, ``transformer_config.py`` and ``pipeline_parallel_layer_layout.py``). The helpers that
read an argument list live in :mod:`service.launch._megatron_args` (re-exported here), GPT-OSS's
architecture rules in :mod:`service.launch._megatron_variant_checks`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from search import SpecError
from search._pipeline_layout import megatron_account_for, megatron_first_last, megatron_layout

from ._megatron_args import FIELD as _FIELD
from ._megatron_args import (
    arg_values,
    check_known_flags,
    float_value,
    int_value,
    is_placeholder,
    layer_pattern,
)
from ._megatron_flags import megatron_flags, megatron_release
from ._megatron_variant_checks import check_architecture_variants

__all__ = ["arg_values", "check_known_flags", "check_megatron_args", "check_recipe_args", "float_value",
           "int_value", "is_placeholder"]


def check_megatron_args(argv: Sequence[str], world_size: int) -> None:
    """Raise SpecError unless every flag exists at the pinned release and the values pass
    the rules of Megatron's ``validate_args`` (and of its micro-batch calculator)."""
    check_known_flags(argv, megatron_flags(), _FIELD, f"Megatron-LM ({megatron_release()})", "release")
    v = arg_values(argv)
    if "--fp4-format" in v and "--fp8-format" in v:  # arguments.py:1065
        raise SpecError(_FIELD, "--fp4-format and --fp8-format cannot be used simultaneously",
                        "choose one low-precision format")
    bad_fp4 = "--fp4-format" in v and v["--fp4-format"] != "e2m1"
    bad_recipe = "--fp8-recipe" in v and v["--fp8-recipe"] not in ("tensorwise", "delayed", "mxfp8", "blockwise")
    if bad_fp4 or bad_recipe:  # transformer_config.py:573, 652 (the Literal values)
        raise SpecError(_FIELD, "an FP4 format other than e2m1 or an unknown --fp8-recipe",
                        "use --fp4-format e2m1, and --fp8-recipe tensorwise, delayed, mxfp8 or blockwise")
    tp = int_value(v, "--tensor-model-parallel-size", 1) or 1
    pp = int_value(v, "--pipeline-model-parallel-size", 1) or 1
    cp = int_value(v, "--context-parallel-size", 1) or 1
    if world_size % (tp * pp * cp):
        raise SpecError(_FIELD, f"world size ({world_size}) is not divisible by tp*pp*cp ({tp * pp * cp})",
                        "choose degrees whose product divides the GPU count")
    dp = world_size // (tp * pp * cp)
    micro = int_value(v, "--micro-batch-size", 1) or 1
    glob = int_value(v, "--global-batch-size", micro * dp) or micro * dp
    if glob % (micro * dp):
        raise SpecError(_FIELD, f"global batch size ({glob}) is not divisible by micro batch size ({micro}) "
                        f"times data parallel size ({dp})", "make the global batch a multiple of micro * dp")
    layers = int_value(v, "--num-layers", None)
    per_stage = int_value(v, "--num-layers-per-virtual-pipeline-stage", None)
    _check_pipeline_split(v, layers, pp, per_stage)
    vp_given = int_value(v, "--num-virtual-stages-per-pipeline-rank", None)
    if vp_given is not None and vp_given > 1 and (glob // (micro * dp)) % pp:
        raise SpecError(_FIELD, f"{glob // (micro * dp)} micro-batches per step is not a multiple of the pipeline "
                        f"size ({pp}), which Megatron-Core's interleaved schedule needs",
                        "choose a global batch or micro-batch size giving a multiple of pp micro-batches")
    if per_stage is not None:
        if layers is None or layers % pp:
            raise SpecError(_FIELD, f"num layers ({layers}) is not divisible by pipeline size ({pp})",
                            "give --num-layers a multiple of --pipeline-model-parallel-size")
        if per_stage <= 0 or (layers // pp) % per_stage:
            raise SpecError(_FIELD, f"layers per pipeline stage ({layers // pp}) is not divisible by "
                            f"--num-layers-per-virtual-pipeline-stage ({per_stage})",
                            "choose a divisor of layers / pp")
        n_micro = glob // (micro * dp)
        if n_micro % pp:
            raise SpecError(_FIELD, f"{n_micro} micro-batches per step is not a multiple of the pipeline size "
                            f"({pp}), which Megatron-Core's interleaved schedule needs (its micro-batch group "
                            "per virtual stage defaults to pp)",
                            "choose a global batch or micro-batch size giving a multiple of pp micro-batches")
    if "--sequence-parallel" in v and tp == 1:
        raise SpecError(_FIELD, "--sequence-parallel needs --tensor-model-parallel-size > 1 "
                        "(Megatron silently turns it off)", "drop --sequence-parallel or use tp > 1")
    if "--tp-comm-overlap" in v and "--sequence-parallel" not in v:
        raise SpecError(_FIELD, "--tp-comm-overlap needs --sequence-parallel (arguments.py:1401)",
                        "add --sequence-parallel or drop --tp-comm-overlap")
    if "--overlap-param-gather" in v and not ({"--use-distributed-optimizer", "--use-megatron-fsdp"} & v.keys()):
        raise SpecError(_FIELD, "--overlap-param-gather is only supported with the distributed optimizer",
                        "add --use-distributed-optimizer or drop --overlap-param-gather")
    if "--overlap-param-gather" in v and "--overlap-grad-reduce" not in v:
        raise SpecError(_FIELD, "--overlap-param-gather needs --overlap-grad-reduce",
                        "add --overlap-grad-reduce or drop --overlap-param-gather")
    seq = int_value(v, "--seq-length", None)
    if cp > 1 and seq is not None and seq % (2 * cp):
        raise SpecError(_FIELD, f"seq length ({seq}) is not a multiple of 2 * context parallel size ({2 * cp})",
                        "choose a cp with seq_len % (2*cp) == 0")
    heads = int_value(v, "--num-attention-heads", None)
    if heads is not None and heads % tp:
        raise SpecError(_FIELD, f"attention heads ({heads}) are not divisible by tp ({tp})",
                        "choose a tp that divides the head count")
    hidden = int_value(v, "--hidden-size", None)
    if heads and hidden is not None and "--kv-channels" not in v and hidden % heads:
        raise SpecError(_FIELD, f"hidden size ({hidden}) is not divisible by the attention heads ({heads}) and "
                        "--kv-channels is not given (validate_args)", "give the head width as --kv-channels")
    _check_experts(v, world_size, tp, pp, layers)
    check_architecture_variants(v, layers, cp)
    _check_cuda_graphs(v)
    _check_latent_attention(v)
    check_recipe_args(v, _FIELD)
    int_value(v, "--rotary-base", None)  # type=int in arguments.py
    if "--mock-data" in v and "--data-path" in v:
        raise SpecError(_FIELD, "A single data source must be provided (--mock-data and --data-path)",
                        "give one of them")


_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none")
_DROPPING_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")


def _check_experts(v: dict[str, str | None], world_size: int, tp: int, pp: int, layers: int | None) -> None:
    """The MoE rules of megatron-core 0.19 (``arguments.py:1593-1603``, ``transformer_config.py``
    ``__post_init__``, ``parallel_state.py:815-905``, ``gpt_layer_specs.py``) and the docs' "you must
    enable Sequence Parallelism" with tp and ep (frameworks_2.md sec. 3.2)."""
    experts = int_value(v, "--num-experts", None) or None  # 0 means none
    ep = int_value(v, "--expert-model-parallel-size", 1) or 1
    etp = int_value(v, "--expert-tensor-parallel-size", tp) or tp  # default: tp
    if experts is None:
        if ep > 1:
            raise SpecError(_FIELD, "num_experts must be non None to use expert model parallelism",
                            "give --num-experts or drop --expert-model-parallel-size")
        if "--moe-ffn-hidden-size" in v and not _mixed_layers(v, layers):
            raise SpecError(_FIELD, "moe_ffn_hidden_size is set but num_experts is None",
                            "give --num-experts or drop --moe-ffn-hidden-size")
        return
    if experts % ep:
        raise SpecError(_FIELD, f"Number of experts ({experts}) should be a multiple of expert model parallel_size "
                        f"({ep})", "choose an ep that divides the experts")
    if etp > 1 and "--disable-bias-linear" not in v:
        raise SpecError(_FIELD, f"Bias in Moe is only supported when ETP==1 (etp is {etp})",
                        "add --disable-bias-linear or give --expert-tensor-parallel-size 1")
    if world_size % (etp * ep * pp):
        raise SpecError(_FIELD, f"world size ({world_size}) is not divisible by etp*ep*pp ({etp * ep * pp}): the "
                        "expert layers fold onto the attention layers' GPUs", "choose ep*etp dividing tp*cp*dp")
    if ep > 1 and tp > 1 and "--sequence-parallel" not in v:
        raise SpecError(_FIELD, "expert parallelism with tensor parallelism needs --sequence-parallel "
                        "(parallelism-guide.md; the code only warns)", "add --sequence-parallel")
    topk = int_value(v, "--moe-router-topk", 2) or 2
    if topk > experts:
        raise SpecError(_FIELD, f"--moe-router-topk {topk} is more than the {experts} experts",
                        "route each token to at most --num-experts experts")
    balancing = v.get("--moe-router-load-balancing-type") or "aux_loss"
    if balancing not in _BALANCING:
        raise SpecError(_FIELD, f"--moe-router-load-balancing-type {balancing!r} is not one of {', '.join(_BALANCING)}",
                        "give one of them")
    if (topk == 1 and (v.get("--moe-router-score-function") or "softmax") == "softmax"
            and "--moe-router-pre-softmax" not in v and balancing != "sinkhorn"):
        raise SpecError(_FIELD, "Please use --moe-router-pre-softmax when topk is 1", "add --moe-router-pre-softmax")
    dispatcher = v.get("--moe-token-dispatcher-type") or "allgather"
    if dispatcher not in ("allgather", "alltoall", "flex"):
        raise SpecError(_FIELD, f"--moe-token-dispatcher-type {dispatcher!r} is not allgather, alltoall or flex",
                        "give one of them")
    backend = v.get("--moe-flex-dispatcher-backend") or "deepep"
    if backend not in ("deepep", "hybridep", "ncclep"):
        raise SpecError(_FIELD, f"--moe-flex-dispatcher-backend {backend!r} is not deepep, hybridep or ncclep",
                        "give one of them")
    if dispatcher == "flex" and backend == "deepep" and "--moe-pad-expert-input-to-capacity" in v:
        raise SpecError(_FIELD, "the flex token dispatcher's DeepEP backend does not support "
                        "moe_pad_expert_input_to_capacity (transformer_config.py:1600-1607)",
                        "drop --moe-pad-expert-input-to-capacity, or use another dispatcher or backend")
    _check_ep_overlap(v, ep, pp, dispatcher, layers)
    capacity = float_value(v, "--moe-expert-capacity-factor", _FIELD)
    if capacity is not None and capacity >= 0 and balancing not in _DROPPING_BALANCING:
        raise SpecError(_FIELD, "moe_expert_capacity_factor only works with aux_loss, seq_aux_loss, "
                        "global_aux_loss or none load balancing", "change the balancing type or drop the factor")
    if "--moe-pad-expert-input-to-capacity" in v and (capacity is None or capacity < 0):
        raise SpecError(_FIELD, "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity",
                        "give --moe-expert-capacity-factor")
    float_value(v, "--moe-aux-loss-coeff", _FIELD)
    for flag, size, what in (("--moe-ffn-hidden-size", etp, "expert tensor-parallel size"),
                             ("--moe-shared-expert-intermediate-size", tp, "tensor-parallel size")):
        width = int_value(v, flag, None)
        if width is not None and (width <= 0 or width % size):
            raise SpecError(_FIELD, f"{flag} {width} is not a positive multiple of the {what} ({size}), "
                            "over which its columns are split", f"choose a {what} that divides it")
    if layers is not None:
        _moe_layer_pattern(v, layers)


def _virtual_stages(v: dict[str, str | None], pp: int, layers: int | None) -> int:
    """The virtual stages per pipeline rank the flags give, as validate_args derives them (1 when no
    flag gives more: Megatron then sets it to None, the non-interleaved schedule)."""
    given = int_value(v, "--num-virtual-stages-per-pipeline-rank", None)
    if given is not None:
        return given
    per_stage = int_value(v, "--num-layers-per-virtual-pipeline-stage", None)
    if per_stage and layers is not None and pp:
        return max(1, layers // pp // per_stage)
    if "--pipeline-model-parallel-layout" in v:
        layout = _without_mtp(str(v["--pipeline-model-parallel-layout"]), pp, int_value(v, "--mtp-num-layers", 0) or 0)
        try:
            return megatron_layout(layout, pp)[1]
        except SpecError:
            return 1  # the split check names what is wrong with it
    return 1


def _check_ep_overlap(v: dict[str, str | None], ep: int, pp: int, dispatcher: str, layers: int | None) -> None:
    """``--overlap-moe-expert-parallel-comm``'s rules (megatron-core 0.19 ``transformer_config.py:2672-2713``,
    frameworks_2.md sec. 3.2): expert parallelism, the alltoall or flex dispatcher, no full
    recomputation (nor ``moe`` among the recomputed modules, nor a recompute method or layer count),
    not with ``--moe-shared-expert-overlap``, at most one MTP layer, and the interleaved schedule (vp > 1)
    when pipelined."""
    if "--overlap-moe-expert-parallel-comm" not in v:
        return
    if ep <= 1:
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm needs expert_model_parallel_size > 1",
                        "give --expert-model-parallel-size >= 2, or drop the overlap")
    if dispatcher not in ("alltoall", "flex"):
        raise SpecError(_FIELD, f"overlap_moe_expert_parallel_comm needs the alltoall or flex dispatcher, not "
                        f"{dispatcher!r}", "give --moe-token-dispatcher-type alltoall or flex")
    if v.get("--recompute-granularity") == "full" or {"--recompute-method", "--recompute-num-layers"} & v.keys():
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm does not work with full recomputation",
                        "use selective recomputation or none, or drop the overlap")
    if "moe" in str(v.get("--recompute-modules") or "").split():
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm does not work with 'moe' in --recompute-modules",
                        "recompute other modules, or drop the overlap")
    if "--moe-shared-expert-overlap" in v:
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm does not work with --moe-shared-expert-overlap",
                        "drop one of them")
    if (int_value(v, "--mtp-num-layers", 0) or 0) > 1:
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm takes at most one MTP layer (--mtp-num-layers)",
                        "give --mtp-num-layers 1, or drop the overlap")
    if pp > 1 and _virtual_stages(v, pp, layers) <= 1:
        raise SpecError(_FIELD, "overlap_moe_expert_parallel_comm with pipeline parallelism needs the interleaved "
                        "schedule (virtual pipeline stages)", "give virtual stages, or drop the overlap")


_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
"""``--cuda-graph-impl``'s choices (megatron-core 0.19 ``transformer_config.py``: a ``Literal``, which
``argument_utils.py`` turns into argparse choices)."""


def _check_cuda_graphs(v: dict[str, str | None]) -> None:
    """The full-iteration CUDA graph's rules: megatron-core 0.19's (``arguments.py:1195-1197``: no NaN check
    of the loss; ``arguments.py:1888-1890``: no ``--cuda-graph-modules``; ``transformer_config.py:1692-1705``:
    the per-rank budget needs the hybridep (or ncclep) backend, with hybridep the Transformer Engine op
    fuser; ``transformer_config.py:1904-1911``: the paged stash needs the budget and forbids activation
    offloading; ``transformer_config.py:2521-2566``: no recomputed module that draws dropout inside the
    graph) and autopar's: with expert parallelism the graph needs HybridEP with its static per-rank budget
    (megatron-core 0.18 (458c8d0) ``token_dispatcher.py:1041-1055``: without it HybridEP sizes its buffers on
    the host every layer; :mod:`search._support` ``megatron-cuda-graphs-ep-needs-hybridep``)."""
    impl = v.get("--cuda-graph-impl") or "none"
    if impl not in _GRAPH_IMPLS:
        raise SpecError(_FIELD, f"--cuda-graph-impl {impl!r} is not one of {', '.join(_GRAPH_IMPLS)}",
                        "give one of them")
    budget = float_value(v, "--moe-expert-rank-capacity-factor", _FIELD)
    backend = v.get("--moe-flex-dispatcher-backend") or "deepep"
    if budget is not None and backend not in ("hybridep", "ncclep"):
        raise SpecError(_FIELD, "moe_expert_rank_capacity_factor requires moe_flex_dispatcher_backend to be "
                        "'hybridep' or 'ncclep'", "give --moe-flex-dispatcher-backend hybridep, or drop the factor")
    if budget is not None and backend == "hybridep" and "--use-transformer-engine-op-fuser" not in v:
        raise SpecError(_FIELD, "moe_expert_rank_capacity_factor with the 'hybridep' backend requires "
                        "use_transformer_engine_op_fuser to be enabled", "add --use-transformer-engine-op-fuser")
    if "--moe-paged-stash" in v:
        if (int_value(v, "--cpu-offloading-num-layers", 0) or 0) > 0:
            raise SpecError(_FIELD, "moe_paged_stash cannot be enabled with cpu_offloading "
                            "(--cpu-offloading-num-layers)", "drop --cpu-offloading-num-layers or --moe-paged-stash")
        if budget is None:
            raise SpecError(_FIELD, "moe_paged_stash requires moe_expert_rank_capacity_factor to be set",
                            "give --moe-expert-rank-capacity-factor, or drop --moe-paged-stash")
    if impl != "full_iteration":
        return
    if "--no-check-for-nan-in-loss-and-grad" not in v:
        raise SpecError(_FIELD, "--no-check-for-nan-in-loss-and-grad should be set with "
                        "--cuda-graph-impl=full_iteration for training", "add --no-check-for-nan-in-loss-and-grad")
    if "--cuda-graph-modules" in v or "--cuda-graph-scope" in v:
        raise SpecError(_FIELD, "--cuda-graph-modules must be empty when --cuda-graph-impl=full_iteration",
                        "drop --cuda-graph-modules (and the deprecated --cuda-graph-scope)")
    ep = int_value(v, "--expert-model-parallel-size", 1) or 1
    if ep > 1 and (v.get("--moe-token-dispatcher-type") != "flex" or backend != "hybridep"):
        raise SpecError(_FIELD, "a full-iteration CUDA graph with expert parallelism needs the flex dispatcher's "
                        "hybridep backend (the alltoall dispatcher and DeepEP read token counts back on the host "
                        "every layer)", "give --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep, "
                        "or drop --cuda-graph-impl full_iteration")
    if ep > 1 and budget is None:
        raise SpecError(_FIELD, "a full-iteration CUDA graph with expert parallelism needs HybridEP's static per-rank "
                        "budget (without it HybridEP sizes its buffers on the host every layer)",
                        "give --moe-expert-rank-capacity-factor (the recipes' 1.5)")
    if v.get("--recompute-granularity") == "selective":
        modules = str(v.get("--recompute-modules") or "core_attn").split()
        drops = {"core_attn": float_value(v, "--attention-dropout", _FIELD),
                 "mlp": float_value(v, "--hidden-dropout", _FIELD), "moe": float_value(v, "--hidden-dropout", _FIELD)}
        for module in modules:
            rate = drops.get(module, 0.0)
            if rate is None or rate != 0.0:  # megatron's dropout defaults to 0.1
                raise SpecError(_FIELD, f"recomputing {module!r} draws dropout inside the full-iteration CUDA graph, "
                                "which megatron-core refuses (graphed recomputation takes no random numbers)",
                                f"give its dropout 0, or recompute without {module!r}")


def _mixed_layers(v: dict[str, str | None], layers: int | None) -> bool:
    """Some layers dense by --moe-layer-freq (a list with a 0, or a frequency > 1)."""
    pattern = _moe_layer_pattern(v, layers)
    return 0 in pattern if isinstance(pattern, list) else pattern > 1


def _moe_layer_pattern(v: dict[str, str | None], layers: int | None) -> int | list[int]:
    """``--moe-layer-freq`` as ``moe_freq_type`` reads it (``_megatron_args.layer_pattern``; 0 dense,
    1 MoE: ``gpt_layer_specs.py``)."""
    return layer_pattern(v, "--moe-layer-freq", layers)


def _check_latent_attention(v: dict[str, str | None]) -> None:
    """Multi-latent attention rules (``arguments.py:1892``, ``transformer_config.py``
    ``MLATransformerConfig.__post_init__``, ``argument_utils.py:335-341``) and MTP's position embeddings
    (``arguments.py:1861-1866``)."""
    position = v.get("--position-embedding-type") or "learned_absolute"
    if "--multi-latent-attention" in v:
        if "--group-query-attention" in v:
            raise SpecError(_FIELD, "Group query attention is mutually exclusive with multi latent attention",
                            "drop --group-query-attention")
        if v.get("--rope-type") == "rope" and position == "rope" and "--no-rope-fusion" not in v:
            raise SpecError(_FIELD, "apply_rope_fusion for MLA only works with YARN RoPE",
                            "add --no-rope-fusion or drop --rope-type rope")
        for flag in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim"):
            if (int_value(v, flag, 1) or 0) <= 0:
                raise SpecError(_FIELD, f"{flag} must be a positive integer", f"give {flag} a positive width")
    elif v.get("--rope-type") not in (None, "rope"):
        raise SpecError(_FIELD, f"Common attention only support rope_type=\"rope\", but got {v['--rope-type']}",
                        "drop --rope-type or use --multi-latent-attention")
    if (int_value(v, "--mtp-num-layers", 0) or 0) and position not in ("learned_absolute", "rope", "mrope", "none"):
        raise SpecError(_FIELD, f"Multi-Token Prediction (MTP) is not supported with {position!r} position "
                        "embedding type", "use rope or learned_absolute position embeddings")


def check_recipe_args(v: dict[str, str | None], field: str) -> None:
    """``validate_args``' rules on the recipe (both forks): iteration- or sample-based training, one
    warmup form, ``--min-lr <= --lr``, ``--save`` with a positive ``--save-interval``."""
    if "--train-iters" in v and "--train-samples" in v:
        raise SpecError(field, "expected iteration-based training (--train-iters with --train-samples)",
                        "give one of them")
    if (int_value(v, "--lr-warmup-iters", 0, field) or 0) and "--lr-warmup-fraction" in v:
        raise SpecError(field, "can only specify one of lr-warmup-fraction and lr-warmup-iters", "give one")
    lr, min_lr = float_value(v, "--lr", field), float_value(v, "--min-lr", field)
    if lr is not None and min_lr is not None and min_lr > lr:
        raise SpecError(field, f"--min-lr {min_lr} is above --lr {lr}", "give --min-lr <= --lr")
    if "--save" in v and (int_value(v, "--save-interval", None, field) or 0) <= 0:
        raise SpecError(field, "--save needs a positive --save-interval", "add --save-interval N")
    for flag in ("--norm-epsilon", "--layernorm-epsilon", "--weight-decay", "--clip-grad", "--adam-beta1",
                 "--adam-beta2", "--adam-eps", "--rope-scaling-factor", "--rotary-percent"):
        float_value(v, flag, field)


_SPLIT_FLAGS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                "--pipeline-model-parallel-layout")


def _check_pipeline_split(v: dict[str, str | None], layers: int | None, pp: int, per_stage: int | None) -> None:
    """validate_args' pipeline-split rules (frameworks_2.md sec. 1.1): at most one VP/layout flag; the
    layout string excludes first/last and account-for; first/last exclude account-for; the uneven
    forms take vp as --num-virtual-stages-per-pipeline-rank; without any of them pp divides the layers."""
    given = [f for f in _SPLIT_FLAGS if f in v]
    vp_flags = [f for f in ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                            "--pipeline-model-parallel-layout") if f in v]
    if len(vp_flags) > 1:
        raise SpecError(_FIELD, f"at most one of {', '.join(vp_flags)} may be given (arguments.py:894-905)",
                        "keep one way of giving the virtual stages")
    if "--pipeline-model-parallel-layout" in v and len(given) > 1:
        raise SpecError(_FIELD, "pipeline_model_parallel_layout cannot be set with other pipeline layout arguments",
                        "use the layout string alone")
    first_last = {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"} & set(given)
    account = {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"} & set(given)
    if first_last and account:
        raise SpecError(_FIELD, "first/last-stage layer counts cannot be combined with account-for-embedding/loss "
                        "(transformer_config.py:1923-1933)", "use one form")
    if (first_last or account) and per_stage is not None:
        raise SpecError(_FIELD, "with an uneven pipeline give vp as --num-virtual-stages-per-pipeline-rank "
                        "(arguments.py:921)", "replace --num-layers-per-virtual-pipeline-stage")
    if layers is None or pp == 1:
        return
    vp = int_value(v, "--num-virtual-stages-per-pipeline-rank", None) or 1
    try:
        if "--pipeline-model-parallel-layout" in v:
            layout = _without_mtp(str(v["--pipeline-model-parallel-layout"]), pp,
                                  int_value(v, "--mtp-num-layers", 0) or 0)
            counts, _vp = megatron_layout(layout, pp)
            if sum(counts) != layers:
                raise SpecError(_FIELD, f"the layout holds {sum(counts)} layers, --num-layers is {layers}",
                                "make the layout's t count equal --num-layers")
        elif first_last:
            megatron_first_last(layers, pp, vp, int_value(v, "--decoder-first-pipeline-num-layers", 0) or 0,
                                int_value(v, "--decoder-last-pipeline-num-layers", 0) or 0)
        elif account:
            megatron_account_for(layers, pp, vp, "--account-for-embedding-in-pipeline-split" in v,
                                 "--account-for-loss-in-pipeline-split" in v)
        elif layers % pp:
            raise SpecError(_FIELD, f"num layers ({layers}) is not divisible by pipeline size ({pp}) "
                            "(arguments.py:951-962)", "give an uneven split or a pp that divides the layers")
    except SpecError as exc:
        raise SpecError(_FIELD, exc.problem, exc.fix) from None


_UNROLL = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))
"""``PipelineParallelLayerLayout.parse_str_to_list``'s unrolling of ``(...)*n`` and ``x*n``."""


def _without_mtp(layout: str, pp: int, mtp: int) -> str:
    """The layout without its multi-token-prediction ``m`` entries, which ``validate_layer_layout`` wants
    as many as --mtp-num-layers, all in one stage that is the last virtual stage of its rank, after every
    decoder layer."""
    text = layout.replace(",", "")
    for pattern in _UNROLL:
        text = pattern.sub(lambda x: x.group(1) * int(x.group(2)), text)
    stages = text.split("|")
    holding = [i for i, stage in enumerate(stages) if "m" in stage]
    if text.count("m") != mtp:
        raise SpecError(_FIELD, f"the layout holds {text.count('m')} MTP layers (m), --mtp-num-layers is {mtp}",
                        "give one m per multi-token-prediction layer")
    if holding and (len(holding) > 1 or holding[0] < len(stages) - pp or "t" in text[text.index("m"):]):
        raise SpecError(_FIELD, "the MTP layers (m) must share one stage, the last virtual stage of its rank, "
                        "after every decoder layer (pipeline_parallel_layer_layout.py)", "put every m before L")
    return text.replace("m", "")

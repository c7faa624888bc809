"""What the calibration loader does with every field of the runs schema, and why it refuses a record.

:data:`RUN_FIELDS` lists each field of both schemas (``benchmarks/data/README.md`` and
``README_2024_2026.md``) as *modelled*, *checked*, *informational* or *refused when set*;
:func:`_refusals` names every field of a record the cost model cannot express (a mixture of
experts, an FP8 recipe other than per-tensor scaling, a GPU without a preset, a field it does not
know ...), each with its category for counting. :mod:`search._runs_file` turns the records that
pass into specs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from search._errors import SpecError
from search._parallel_spec import CUDA_GRAPHS, FRAMEWORKS, MOE_DISPATCHERS, PRECISIONS

NODE_FOR_GPU = {
    "v100-sxm3-32gb": "dgx-2",
    "v100-32gb": "dgx-2",
    "a100-sxm4-40gb": "dgx-a100-40gb",
    "a100-sxm4-80gb": "dgx-a100-80gb",
    "h100-sxm5-80gb": "dgx-h100",
    "h200-sxm-141gb": "dgx-h200",
    "h100-sxm-hbm2e-96gb": "grand-teton-h100-hbm2e",
    "b200-sxm-180gb": "dgx-b200",
    "b300-sxm-270gb": "dgx-b300",
    "gb200-nvl72": "gb200-nvl72",
    "gb300-nvl72": "gb300-nvl72",
}

_POSITION_EMBEDDINGS = {"learned": "learned", "learned_absolute": "learned", "rope": "rope", "alibi": "alibi"}
"""Spellings of the schema (``learned_absolute``: NeMo's GPT-3) -> :class:`ModelSpec` values."""

# What the loader does with every field of the two schemas (the README's runs.json schema and
# README_2024_2026.md's extensions); "" is the record itself. A field not listed here is refused
# when it carries a value, so a new field is never dropped unnoticed.
MODELLED, CHECKED, INFORMATIONAL, REFUSED_WHEN_SET = "modelled", "checked", "informational", "refused when set"
RUN_FIELDS: dict[str, dict[str, str]] = {
    "": {
        # source: read for the per-source statistics.
        "id": MODELLED, "source": MODELLED, "model": MODELLED, "cluster": MODELLED, "config": MODELLED,
        "measured": MODELLED, "source_locator": INFORMATIONAL, "confidence": INFORMATIONAL, "notes": INFORMATIONAL,
        "source_date": INFORMATIONAL, "software": INFORMATIONAL, "repeat_group": INFORMATIONAL,
        "repeat_group_size": INFORMATIONAL,
    },
    "model": {
        # bias, norm, dropout and the fields from qkv_bias on: beyond the published schema, written by
        # ``autopar runs export`` (the shape as it ran).
        **dict.fromkeys(("name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "activation",
                         "attention", "tied_embeddings", "position_embedding", "bias", "norm", "dropout",
                         "qkv_bias", "qk_norm", "parallel_residual", "norm_eps", "rope_theta", "rope_scaling_factor",
                         "rotary_percent"), MODELLED),
        "params": MODELLED,  # read only when layers is null (layers solved from it), else the shape's own count
        # head_dim: the attention width per head (MLA: must be qk_head_dim + qk_rope_head_dim); moe: its
        # dense layers are the first ones (DeepSeek-V3, Kimi K2), router "force..." = force-balanced,
        # token_drop needs a capacity_factor; mtp_layers on the last stage.
        **dict.fromkeys(("head_dim", "moe", "mla", "mtp_layers"), MODELLED),
        "active_params": CHECKED,  # within 1 % of the shape's active count
        # attention_window {size, pattern}: a window of size tokens (the query included; Megatron --window-size
        # (size - 1, 0)) on all layers but every N-th (window_skip_freq_of); another pattern is refused.
        "attention_window": MODELLED,
        # softmax_sinks (costed with the window), glu_clamp and rope_yarn (their eager paths costed),
        # glu_linear_offset (launch-only, recorded so an exported run relaunches as it ran): beyond the published
        # schema, written by ``autopar runs export`` (and for GPT-OSS's rows by benchmarks/data/errata.json).
        **dict.fromkeys(("softmax_sinks", "glu_linear_offset", "glu_clamp", "rope_yarn"), MODELLED),
        # activation_detail: GPT-OSS's gated quick_gelu is a GLU of 3 matrices (gate, up, down), read as
        # quick-geglu (SwiGLU's GEMMs; the clamp, where given, costed); any other detail is refused.
        "activation_detail": CHECKED,
        "params_how": INFORMATIONAL, "shape_source": INFORMATIONAL,
    },
    "cluster": {
        "gpu": MODELLED, "num_gpus": MODELLED, "gpus_per_node": MODELLED,
        "network": MODELLED,  # link rates, NVLink count and host RAM parsed from the text; else the node preset
        "nvlink_domain": CHECKED,  # one node, or the preset's NVLink domain (72: an NVL72 rack of 4-GPU trays)
        "peak_flop_per_s_per_gpu": INFORMATIONAL,  # the source's utilisation convention; the GPU preset is used
    },
    "config": {
        # recompute "selective" is read as the cost model's (the attention core, Korthikanti et al. 2022);
        # torchtitan's rows say in their notes only that theirs is per op or every n-th layer.
        **dict.fromkeys(("tp", "pp", "dp", "cp", "vp", "sp", "micro_batch", "global_batch", "zero_stage",
                         "offload_optimizer", "offload_param", "recompute", "precision", "framework"), MODELLED),
        # An uneven pipeline: first/last-stage counts (Megatron's form) when given, else the split is an
        # open field that benchmarks/_tuned.py fills with each layout the runtime can express.
        **dict.fromkeys(("uneven_pipeline", "first_stage_layers", "last_stage_layers"), MODELLED),
        # Beyond the published schema, written by ``autopar runs export``: the layout and TP overlap as they ran.
        **dict.fromkeys(("stage_layers", "tp_comm_overlap"), MODELLED),
        # Beyond the published schema, written by ``autopar runs export`` or set by an erratum from the run's
        # recipe (Megatron-Core --cpu-offloading-num-layers, which the tables do not print).
        "activation_offload_layers": MODELLED,
        # Megatron-Core --grad-reduce-in-bf16 (TrainingSpec.grad_reduce_in_bf16); null on Megatron-Bridge rows is
        # its performance recipes' setting (search._runs_file.megatron_bridge_defaults), elsewhere false.
        "grad_reduce_in_bf16": MODELLED,
        "grad_accum": CHECKED,  # = global_batch / (micro_batch * dp); gives micro_batch when that is null
        # Expert parallelism as Megatron-Core folds it; a null etp is an open field (1 or tp, as tuned).
        "ep": MODELLED, "etp": MODELLED, "expert_dp": CHECKED,  # = world / (etp * ep * pp)
        # alltoall (or null: the loader's default, which the Megatron-Bridge recipes of most published MoE
        # rows contradict, benchmarks/data/errata.json) or the flex dispatcher (flex-deepep, flex-hybridep);
        # an unknown one and the allgather dispatcher are refused.
        "moe_dispatcher": CHECKED,
        # Beyond the published schema, set by an erratum from the run's recipe: Megatron-Core's
        # --overlap-moe-expert-parallel-comm (with delay_wgrad_compute).
        "moe_a2a_overlap": MODELLED,
        # Beyond the published schema, set by an erratum from the run's recipe: Megatron-Core's full-iteration
        # CUDA graph ("full-iteration"; "none" or null without); per-layer graphs are refused (not costed).
        "cuda_graphs": MODELLED,
        # Beyond the published schema, set by an erratum from the run's recipe: Transformer Engine's FP8
        # attention (Megatron-Bridge mixed_precision.fp8_dot_product_attention; TrainingSpec.fp8_attention).
        "fp8_attention": MODELLED,
        # Megatron-FSDP over the whole dp x cp group is Megatron's ZeRO-2/3 (_check_fsdp).
        **dict.fromkeys(("fsdp", "fsdp_shard_size"), CHECKED),
        **dict.fromkeys(("fp8_recipe",
                         "local_batch", "torch_compile",
                         "async_tp", "pipeline_schedule", "optimizer", "recompute_modules", "framework_detail"),
                        REFUSED_WHEN_SET),
    },
    "measured": {
        "iteration_time_s": MODELLED, "peak_memory_bytes_per_gpu": MODELLED, "oom": MODELLED,
        **dict.fromkeys(("iteration_time_kind", "iteration_time_how", "tokens_per_s", "tokens_per_s_per_gpu",
                         "tokens_per_s_how", "tflops_per_gpu", "flops_convention", "mfu", "hfu",
                         "peak_memory_kind"), INFORMATIONAL),
    },
}
"""Refused when set means: refused unless null or the value the model has (ep 1, fp8_recipe per-tensor
scaling or MXFP8, torch_compile/async_tp false, pipeline_schedule 1F1B, optimizer Adam)."""

# Reasons a record is refused, for counting refusals by category.
GPU, MOE, ATTENTION, ARCHITECTURE, PIPELINE, PRECISION, RUNTIME, TOPOLOGY = (
    "unknown GPU", "mixture of experts", "attention variant", "model architecture", "uneven pipeline",
    "precision or FP8 recipe", "runtime feature", "cluster topology")
INCONSISTENT, MALFORMED, UNKNOWN_FIELD, INVALID = (
    "inconsistent record", "malformed record", "unknown field", "invalid specs")
CATEGORIES = (GPU, MOE, ATTENTION, ARCHITECTURE, PIPELINE, PRECISION, RUNTIME, TOPOLOGY, INCONSISTENT, MALFORMED,
              UNKNOWN_FIELD, INVALID)

MOE_FIELDS = ("experts", "topk", "expert_ffn", "shared_experts", "shared_expert_ffn", "moe_layers", "dense_layers",
              "router", "token_drop", "capacity_factor", "pad_to_capacity")
"""``model.moe`` keys (README_2024_2026.md; ``capacity_factor`` and ``pad_to_capacity`` beyond it, written by
``autopar runs export`` and completed by ``benchmarks/data/errata.json``)."""

GLU_DETAILS: dict[tuple[str, str], str] = {
    # GPT-OSS (Megatron-Bridge gpt_oss_provider.py: quick_gelu, gated_linear_unit, glu_linear_offset 1.0,
    # activation_func_clamp_value 7.0): gate, up and down matrices like SwiGLU, a different elementwise function.
    ("gated quick_gelu (GLU, 3 matrices) - counted as swiglu-shaped", "swiglu"): "quick-geglu",
}
"""(``model.activation_detail``, ``model.activation``) pairs the loader accepts, with the activation it reads:
the schema's ``activation`` names the shape class (a GLU of 3 matrices: swiglu), the detail the function,
which the model's GLU options (``glu_clamp``, ``glu_linear_offset``) need."""

_SKIP_FREQ_PATTERNS = {"every other layer": 2}
"""``model.attention_window.pattern`` phrases -> Megatron ``window_attn_skip_freq``."""


def attention_window_of(value: Any) -> tuple[int, int | None]:
    """``model.attention_window`` as (window in tokens, Megatron ``window_attn_skip_freq``): ``size`` is
    the window including the query (Megatron-Bridge maps HF ``sliding_window`` 128 to window_size
    (127, 0)); ``pattern`` says which layers: "every other layer" or ``window_attn_skip_freq=N`` (every
    N-th layer full), "all layers" (None); any other pattern raises :class:`SpecError` naming the field."""
    field = "model.attention_window"
    if not isinstance(value, dict):
        raise SpecError(field, f"{value!r} is not an object", "give {\"size\": tokens, \"pattern\": ...}")
    size = value.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise SpecError(f"{field}.size", f"{size!r} is not a positive integer", "give the window in tokens")
    unknown = sorted(set(value) - {"size", "pattern"})
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", "is not a field of the window", "give size and pattern only")
    pattern = str(value.get("pattern") or "all layers").lower()
    match = re.search(r"window_attn_skip_freq\s*=\s*(\d+)", pattern)
    freq = int(match.group(1)) if match else next((n for p, n in _SKIP_FREQ_PATTERNS.items() if p in pattern), None)
    if freq is None and pattern != "all layers":
        raise SpecError(f"{field}.pattern", f"{value.get('pattern')!r} is not a pattern the model expresses",
                        "give 'every other layer', 'window_attn_skip_freq=N' (every N-th layer full) or 'all layers'")
    if freq is not None and freq < 2:
        raise SpecError(f"{field}.pattern", f"skip frequency {freq} leaves no windowed layer",
                        "give N >= 2, or drop the window")
    return size, freq


TUNABLE = ("micro_batch", "vp", "sp", "recompute", "stage_layers", "etp", "activation_offload_layers",
           "moe_dispatcher")
"""Configuration fields a source may leave open: :attr:`CalibrationRun.unknown` names them
(``activation_offload_layers`` is in no record: a Megatron-Bridge Megatron-FSDP row leaves it open,
:func:`search._runs_file.megatron_bridge_defaults`; ``moe_dispatcher`` is open where the record says
:data:`UNKNOWN_DISPATCHER`)."""

UNKNOWN_DISPATCHER = "unknown"
"""``config.moe_dispatcher`` of a row whose token dispatcher no recipe of its release pins (an
erratum of ``benchmarks/data/errata.json`` says so): the row ran one of Megatron-Core's dispatchers,
so it is predicted as tuned over them (issue 11 item 7), not read as the alltoall default."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one field keeps a record from being predicted."""

    field: str
    """Dotted path in the record, e.g. ``model.moe``."""
    problem: str
    category: str
    """One of :data:`CATEGORIES`."""


class RecordRefused(SpecError):
    """A record the loader will not turn into specs; every reason is in :attr:`refusals`."""

    def __init__(self, record_id: str, refusals: Sequence[Refusal]) -> None:
        self.record_id = record_id
        self.refusals = tuple(refusals)
        first, *rest = self.refusals
        more = "".join(f"; {r.field}: {r.problem}" for r in rest)
        super().__init__(first.field, f"{first.problem}{more} (record {record_id!r})",
                         "leave the record out until the cost model can express it, or correct it")


def _domain(gpu: str) -> int:
    """GPUs in one NVLink domain of the node preset that runs ``gpu``."""
    from search._cluster_presets import NODES

    return NODES[NODE_FOR_GPU[gpu]].nvlink_domain


def recipe_precision(precision: str | None, recipe: str | None) -> str | None:
    """The :class:`TrainingSpec` precision of a record's precision and FP8 recipe, or None when the
    recipe is not modelled: one scale per tensor (Transformer Engine delayed or current scaling,
    torchao tensorwise) is ``fp8``, MXFP8 is ``mxfp8``, NVFP4 ``nvfp4``; blockwise and rowwise
    scaling (DeepSeek-V3's 1x128 / 128x128, torchao rowwise) are not modelled."""
    if precision != "fp8" or recipe is None:
        return precision
    text = recipe.lower()
    if "mxfp8" in text and not any(k in text for k in ("block", "rowwise", "nvfp4")):
        return "mxfp8"
    if (any(k in text for k in ("per-tensor", "tensorwise", "current-scaling", "current scaling", "delayed"))
            and not any(k in text for k in ("mxfp8", "block", "rowwise", "nvfp4"))):
        return "fp8"
    return None


MEGATRON_FSDP = "megatron-fsdp"
"""The one ``config.fsdp`` the model has: Megatron-FSDP, Megatron's ZeRO-2/3 (``optim_grads`` /
``optim_grads_params``), sharded over the whole data-parallel group."""


def _check_fsdp(cfg: dict[str, Any], cl: dict[str, Any], refuse: Callable[[str, str, str], None]) -> None:
    """``config.fsdp`` and ``config.fsdp_shard_size``: Megatron-FSDP is modelled as Megatron with
    zero_stage 2 or 3, sharded over the full dp x cp group; another FSDP, another stage, or a
    smaller sharding group (hybrid FSDP, replicated across groups) is not."""
    fsdp, shard = cfg.get("fsdp"), cfg.get("fsdp_shard_size")
    if fsdp is not None:
        if fsdp != MEGATRON_FSDP or (cfg.get("framework") or "megatron") != "megatron":
            refuse("config.fsdp", f"{fsdp!r} under {cfg.get('framework') or 'megatron'!r} is not modelled "
                   f"({MEGATRON_FSDP!r} under 'megatron' is: its ZeRO-2/3)", RUNTIME)
        elif cfg.get("zero_stage") not in (2, 3):
            refuse("config.fsdp", f"{MEGATRON_FSDP!r} with zero_stage {cfg.get('zero_stage')!r}: Megatron-FSDP shards "
                   "gradients (optim_grads, 2) or gradients and parameters (optim_grads_params, 3)", INCONSISTENT)
    if shard is None:
        return
    if fsdp is None:
        refuse("config.fsdp_shard_size", f"a sharding group of {shard!r} without config.fsdp", INCONSISTENT)
        return
    try:
        tp, pp, cp = (int(cfg.get(k) or 1) for k in ("tp", "pp", "cp"))
        dp = int(cfg.get("dp") or int(cl["num_gpus"]) // (tp * pp * cp))
    except (KeyError, TypeError, ValueError):
        return  # the missing or malformed degree is refused where it is read
    if shard != dp * cp:
        refuse("config.fsdp_shard_size", f"a hybrid FSDP sharding group ({shard!r} of dp*cp = {dp * cp}) is not "
               "modelled (Megatron-FSDP over the whole data-parallel group is)", RUNTIME)


def _refusals(rec: dict[str, Any]) -> list[Refusal]:
    """Every field of ``rec`` whose value the cost model cannot express (empty: the record is modelled)."""
    out: list[Refusal] = []

    def refuse(field: str, problem: str, category: str) -> None:
        out.append(Refusal(field, problem, category))

    sections: dict[str, dict[str, Any]] = {}
    for name in ("model", "cluster", "config", "measured"):
        value = rec.get(name, {} if name == "measured" else None)
        if not isinstance(value, dict):
            refuse(name, "is missing" if value is None else f"is a {type(value).__name__}, not an object", MALFORMED)
            value = {}
        sections[name] = value
    for section, fields in RUN_FIELDS.items():
        for key, value in (rec if section == "" else sections[section]).items():
            if key not in fields and value is not None:
                refuse(f"{section}.{key}".strip("."), "is not a field of the calibration schema "
                       "(benchmarks/data/README.md, README_2024_2026.md) and the loader does not model it",
                       UNKNOWN_FIELD)
    m, cl, cfg = sections["model"], sections["cluster"], sections["config"]
    required = {"": ("id",), "model": ("hidden", "heads", "vocab", "seq_len"), "cluster": ("gpu", "num_gpus"),
                "config": ("global_batch",)}
    for section, keys in required.items():
        holder = rec if section == "" else sections[section]
        for key in (*keys, "params") if section == "model" and m.get("layers") is None else keys:
            if holder.get(key) is None and (section == "" or section in rec):
                refuse(f"{section}.{key}".strip("."), "is missing", MALFORMED)

    if (gpu := cl.get("gpu")) not in NODE_FOR_GPU:
        refuse("cluster.gpu", f"{gpu!r} is not a GPU the cost model has a preset for "
               f"({', '.join(sorted(NODE_FOR_GPU))})", GPU)
    domain, gpn = cl.get("nvlink_domain"), cl.get("gpus_per_node")
    preset_domain = _domain(gpu) if gpu in NODE_FOR_GPU else None
    if domain is not None and gpn is not None and domain != gpn and domain != preset_domain:
        refuse("cluster.nvlink_domain", f"an NVLink domain of {domain} GPUs across nodes of {gpn} is not the "
               f"{gpu!r} preset's ({preset_domain or 'none'})", TOPOLOGY)

    moe = m.get("moe")
    if moe is not None:
        if not isinstance(moe, dict):
            refuse("model.moe", f"is a {type(moe).__name__}, not an object", MALFORMED)
        else:
            for key in ("experts", "topk", "expert_ffn"):
                if moe.get(key) is None:
                    refuse(f"model.moe.{key}", "is missing", MALFORMED)
            for key in moe:
                if key not in MOE_FIELDS:
                    refuse(f"model.moe.{key}", "is not a field of the MoE schema (README_2024_2026.md)", UNKNOWN_FIELD)
            if moe.get("token_drop") and moe.get("capacity_factor") is None:
                refuse("model.moe.token_drop", "tokens were dropped at a capacity factor the record does not state",
                       MOE)
            layers, n_moe, n_dense = m.get("layers"), moe.get("moe_layers"), moe.get("dense_layers") or 0
            if layers is not None and n_moe is not None and n_moe + n_dense != layers:
                refuse("model.moe.moe_layers", f"{n_moe} MoE + {n_dense} dense layers is not layers = {layers}",
                       INCONSISTENT)
    elif m.get("active_params") is not None and m.get("active_params") != m.get("params"):
        refuse("model.active_params", f"{m['active_params']:.4g} of {m.get('params') or 0:.4g} parameters active "
               "per token without a model.moe part", INCONSISTENT)
    if m.get("attention_window") is not None:
        try:
            attention_window_of(m["attention_window"])
        except SpecError as err:
            refuse(err.field, f"{err.problem}; {err.fix}", ATTENTION)
    if m.get("mtp_layers") and moe is None and m.get("mla") is None:
        refuse("model.mtp_layers", f"{m['mtp_layers']} multi-token-prediction layers are modelled for DeepSeek-style "
               "(MoE/MLA) models only", ARCHITECTURE)
    if m.get("activation") not in (None, "gelu", "swiglu", "quick-geglu"):
        refuse("model.activation", f"{m['activation']!r} is not modelled (gelu, swiglu, quick-geglu)", ARCHITECTURE)
    if m.get("activation_detail") is not None and (m["activation_detail"], m.get("activation")) not in GLU_DETAILS:
        refuse("model.activation_detail", f"{m['activation_detail']!r} with activation {m.get('activation')!r} is "
               "not modelled (plain gelu or swiglu, or a 3-matrix GLU costed as swiglu)", ARCHITECTURE)
    if m.get("position_embedding") not in (None, *_POSITION_EMBEDDINGS):
        refuse("model.position_embedding", f"{m['position_embedding']!r} is not modelled "
               f"({', '.join(_POSITION_EMBEDDINGS)})", ARCHITECTURE)

    if moe is None:
        for key in ("ep", "etp", "expert_dp"):
            if cfg.get(key) not in (None, 1):
                refuse(f"config.{key}", f"expert parallelism ({key}={cfg[key]}) without a model.moe part", INCONSISTENT)
    overlap = cfg.get("moe_a2a_overlap")
    if overlap is not None and not isinstance(overlap, bool):
        refuse("config.moe_a2a_overlap", f"{overlap!r} is not true, false or null", INCONSISTENT)
    fp8_attention = cfg.get("fp8_attention")
    if fp8_attention is not None and not isinstance(fp8_attention, bool):
        refuse("config.fp8_attention", f"{fp8_attention!r} is not true, false or null", INCONSISTENT)
    if cfg.get("cuda_graphs") not in (None, *CUDA_GRAPHS):
        refuse("config.cuda_graphs", f"{cfg['cuda_graphs']!r} is not costed ({', '.join(CUDA_GRAPHS)}: per-layer "
               "CUDA graphs leave part of each layer to the host by an amount the model does not know)", RUNTIME)
    if cfg.get("moe_dispatcher") not in (None, UNKNOWN_DISPATCHER, *MOE_DISPATCHERS):
        refuse("config.moe_dispatcher", f"{cfg['moe_dispatcher']!r} is not modelled ({', '.join(MOE_DISPATCHERS)}, "
               f"or {UNKNOWN_DISPATCHER!r} to predict the row as tuned over them; "
               "the allgather dispatcher is not)", MOE)
    first, last = cfg.get("first_stage_layers"), cfg.get("last_stage_layers")
    if (first is None) != (last is None):
        refuse("config.first_stage_layers", "give both first_stage_layers and last_stage_layers, or neither",
               PIPELINE)
    if cfg.get("precision") not in (None, *PRECISIONS):
        refuse("config.precision", f"{cfg['precision']!r} training is not modelled ({', '.join(PRECISIONS)})",
               PRECISION)
    recipe = cfg.get("fp8_recipe")
    if recipe is not None and recipe_precision("fp8", str(recipe)) is None and str(recipe).lower() != "nvfp4":
        refuse("config.fp8_recipe", f"{recipe!r}: FP8 with one scale per tensor or MXFP8 is modelled, not this "
               "scaling", PRECISION)
    if recipe is not None and cfg.get("precision") == "nvfp4" and "nvfp4" not in str(recipe).lower():
        refuse("config.fp8_recipe", f"{recipe!r} with precision nvfp4", INCONSISTENT)
    if cfg.get("framework") not in (None, *FRAMEWORKS):
        refuse("config.framework", f"{cfg['framework']!r} is not a runtime the cost model knows "
               f"({', '.join(FRAMEWORKS)})", RUNTIME)
    _check_fsdp(cfg, cl, refuse)
    for key, what in (("local_batch", "a local batch besides micro_batch"),
                      ("recompute_modules", "recomputing chosen modules"), ("framework_detail", "a framework variant")):
        if cfg.get(key) is not None:
            refuse(f"config.{key}", f"{what} ({cfg[key]!r}) is not modelled", RUNTIME)
    if cfg.get("torch_compile"):
        refuse("config.torch_compile", "torch.compile's kernel fusion is not modelled", RUNTIME)
    if cfg.get("async_tp"):
        refuse("config.async_tp", "asynchronous tensor parallelism (TP collectives overlapped) is not modelled",
               RUNTIME)
    if (schedule := cfg.get("pipeline_schedule")) is not None:
        name, vp = str(schedule).lower().replace("-", " "), cfg.get("vp")
        if not ((name == "1f1b" and vp in (None, 1)) or (name == "interleaved 1f1b" and (vp or 1) > 1)):
            refuse("config.pipeline_schedule", f"{schedule!r} with vp={vp} is not modelled (1F1B, or interleaved "
                   "1F1B with its virtual stages given)", RUNTIME)
    if cfg.get("optimizer") not in (None, "adam", "adamw"):
        refuse("config.optimizer", f"{cfg['optimizer']!r} is not modelled (Adam)", RUNTIME)
    return out

"""What each runtime makes of a model's features (the model half of the support matrix, :mod:`search._support`):
an architecture a runtime cannot express is refused for every configuration of it; one it runs with a known
limit of its cost is ``supported`` and says the limit on every prediction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search._support_entry import SupportEntry, SupportStatus, refuse, status_of, warnings_of

if TYPE_CHECKING:
    from search._model_spec import ModelSpec


MODEL_SUPPORT: tuple[SupportEntry, ...] = (
    SupportEntry(
        "megatron", "megatron-alibi", "refused", "ModelSpec.position_embedding",
        "ALiBi is not an option of megatron-core 0.19.2's parser (no --position-embedding-type alibi)",
        "use a model with learned or RoPE position embeddings, or another runtime",
        "service/launch/megatron_flags.txt (megatron-core 0.19.2 parser, checked against parse_args)",
        lambda m: m.position_embedding == "alibi",
    ),
    SupportEntry(
        "megatron-deepspeed", "megatron-deepspeed-alibi", "untested", "ModelSpec.position_embedding",
        "ALiBi is not in the pinned deepspeedai Megatron-DeepSpeed parser; the BigScience fork that trained "
        "BLOOM has it (--position-embedding-type alibi)",
        "run the BigScience fork (allow untested combinations to rank it), or a RoPE/learned-position model",
        "service/launch/megatron_deepspeed_flags.txt (deepspeedai 4efb479); bigscience-workshop/Megatron-DeepSpeed "
        "tr11-176B-ml.slurm",
        lambda m: m.position_embedding == "alibi",
    ),
    # --- Mixtures of experts and latent attention ------------------------------------------------
    SupportEntry(
        "deepspeed", "deepspeed-moe", "refused", "ModelSpec.moe",
        "autopar does not cost DeepSpeed-MoE (deepspeed.moe.layer.MoE: its own expert groups, capacity "
        "handling and PR-MoE), and DeepSpeed alone has no MoE model to launch",
        "use framework='megatron' (Megatron-Core MoE, costed and emitted) for a mixture of experts",
        "frameworks_2.md sec. 3.5 (DeepSpeed-MoE layer API)",
        lambda m: m.moe is not None,
    ),
    SupportEntry(
        "megatron-deepspeed", "megatron-deepspeed-moe", "refused", "ModelSpec.moe",
        "autopar does not cost Megatron-DeepSpeed's DeepSpeed-MoE layers (--num-experts with --ep-world-size "
        "expert groups, capacity factors, PR-MoE), which differ from Megatron-Core's folding",
        "use framework='megatron' (Megatron-Core MoE) for a mixture of experts",
        "frameworks_2.md sec. 3.5; Megatron-DeepSpeed megatron/model/transformer.py (deepspeed.moe.layer.MoE)",
        lambda m: m.moe is not None,
    ),
    SupportEntry(
        "fsdp", "torchtitan-moe", "refused", "ModelSpec.moe",
        "autopar emits and costs torchtitan's llama3 model only; its MoE models (expert parallelism over "
        "FSDP2's mesh) are not costed yet",
        "use framework='megatron' for a mixture of experts",
        "service/launch/_torchtitan.py (llama3 model args); frameworks_2.md sec. 3.2 ('Torch FSDP2 rejects EP' "
        "in Megatron)",
        lambda m: m.moe is not None,
    ),
    *(SupportEntry(
        runtime, f"{runtime}-mla", "refused", "ModelSpec.mla",
        f"{runtime} has no multi-head latent attention (Megatron-Core's MultiLatentAttention only)",
        "use framework='megatron', or a model with grouped-query attention",
        "megatron-core 0.19 megatron/core/transformer/multi_latent_attention.py; Megatron-DeepSpeed and "
        "torchtitan's llama3 model have no latent attention",
        lambda m: m.mla is not None,
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    # --- Sliding-window attention and softmax sinks (GPT-OSS) ------------------------------------
    # Megatron-Core costs and launches them (with GPT-OSS's YaRN and clamped quick-GeLU GLU:
    # service/launch/_megatron_variants.py) as Megatron-Bridge's GPT-OSS provider does for the published runs:
    # supported, and every prediction says how far off those runs are predicted.
    SupportEntry(
        "megatron", "megatron-sliding-window-launch", "supported", "ModelSpec.attention_window",
        "a sliding window (--window-size, --window-attn-skip-freq) or softmax sinks (--softmax-type learnable) "
        "run as Megatron-Bridge's GPT-OSS provider runs them on Megatron-Core, but the published GPT-OSS runs "
        "are predicted about 22 % fast (15-17 % on GB200/GB300 in BF16, 26 % in MXFP8; docs/cost-model.md, "
        "Known limits): treat such a prediction's time as a lower bound",
        "nothing to change; compare the time with a measured run of the model",
        "Megatron-Bridge src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py @ v0.3.0 (GPTOSSProvider); "
        "benchmarks/data/runs_2024_2026.json, the 11 'GPT-OSS 120B' rows of the Megatron-Bridge performance "
        "summary (containers 25.11-26.08)",
        lambda m: m.attention_window is not None or m.softmax_sinks,
    ),
    *(SupportEntry(
        runtime, f"{runtime}-sliding-window", "refused", "ModelSpec.attention_window",
        f"{runtime}'s emitted model attends over the whole causal prefix and has no softmax sinks: a "
        "sliding window or sinks would be costed but not run",
        "use framework='megatron' to cost it, or a model without attention_window and softmax_sinks",
        "Megatron-DeepSpeed's and DeepSpeed's GPT/Llama attention and torchtitan's llama3 model have no "
        "window or sink option (flag lists service/launch/*_flags.txt; _torchtitan.py model args)",
        lambda m: m.attention_window is not None or m.softmax_sinks,
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    *(SupportEntry(
        runtime, f"{runtime}-quick-geglu-yarn", "refused", "ModelSpec.activation",
        f"{runtime}'s emitted model has no quick-GeLU GLU (GPT-OSS's, with its offset and clamp) and no YaRN "
        "RoPE: the launch would train another model than the one costed",
        "use framework='megatron' (--quick-geglu, --position-embedding-type yarn), or a SwiGLU/GeLU model "
        "without rope_yarn",
        "service/launch/megatron_deepspeed_flags.txt (deepspeedai 4efb479: --swiglu only, no YaRN); torchtitan "
        "0.3.0's llama3 model (SwiGLU FeedForward, Llama 3 RoPE scaling only)",
        lambda m: m.activation == "quick-geglu" or m.rope_yarn is not None,
    ) for runtime in ("deepspeed", "megatron-deepspeed", "fsdp")),
    SupportEntry(
        "megatron", "megatron-dense-quick-geglu", "refused", "ModelSpec.activation",
        "a quick-GeLU GLU in a dense MLP (a dense model, dense-first layers or shared experts): Megatron-Core fuses "
        "it only in the experts; --quick-geglu takes --bias-gelu-fusion as bias_activation_fusion, so with biases "
        "the dense MLP's forward raises 'Only support fusion of gelu and swiglu', and without them it runs an "
        "eager GLU autopar does not cost",
        "train the dense layers with activation='swiglu', or use a mixture of experts with no dense layer and no "
        "shared expert (GPT-OSS's shape)",
        "megatron-core 0.19 (Megatron-LM cd4afffa, Megatron-Bridge v0.6.0's) transformer/mlp.py:276-318 "
        "(MLP.forward) and training/argument_utils.py:314-326; transformer/moe/shared_experts.py builds on MLP",
        lambda m: m.activation == "quick-geglu" and (
            m.moe is None or m.moe.first_dense_layers > 0 or m.moe.shared_expert_ffn > 0),
    ),
)
"""Model features per runtime: refused ones make every configuration invalid for that runtime."""


def model_entries_for(runtime: str, model: ModelSpec) -> tuple[SupportEntry, ...]:
    """The :data:`MODEL_SUPPORT` entries that apply to ``model`` on ``runtime``."""
    return tuple(e for e in MODEL_SUPPORT if e.runtime == runtime and e.applies(model))


def model_status(runtime: str, model: ModelSpec) -> SupportStatus:
    """``refused``, ``untested`` or ``supported``: what ``runtime`` makes of ``model``'s features."""
    return status_of(model_entries_for(runtime, model))


def check_model_supported(model: ModelSpec, runtime: str) -> None:
    """Raise :class:`SpecError` when ``runtime`` refuses a feature of ``model``."""
    refuse(model_entries_for(runtime, model), runtime)


def model_support_warnings(runtime: str, model: ModelSpec) -> tuple[str, ...]:
    """One warning per ``untested`` or ``supported`` (a known limit) model entry that applies."""
    return warnings_of(model_entries_for(runtime, model), runtime)


__all__ = ["MODEL_SUPPORT", "check_model_supported", "model_entries_for", "model_status", "model_support_warnings"]

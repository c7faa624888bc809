"""GPT-OSS 120B's Megatron-LM arguments: the sliding window, softmax sinks, clamped quick-GeLU GLU and YaRN RoPE as
Megatron-Bridge's GPTOSSProvider sets them, on the published runs' layouts, each passing the pinned flag list and
autopar's copy of megatron-core 0.19's rules; bad values refused naming the field or the rule; the other runtimes
refuse the model."""

from __future__ import annotations

import dataclasses

import pytest

import search
from search import ModelSpec, ParallelConfig, SpecError, TrainingSpec
from search._rope_spec import YarnSpec
from search._support import model_status
from service.launch._base import LaunchRequest
from service.launch._megatron import emit_megatron, megatron_args, megatron_args_and_notes, shape_args
from service.launch._megatron_checks import arg_values, check_megatron_args
from service.launch._megatron_deepspeed import SPELLING as MEGATRON_DEEPSPEED_SPELLING
from service.launch._megatron_flags import megatron_flags
from service.launch._megatron_variants import SINKS_NOTE

GPT_OSS = search.model_preset("gpt-oss-120b")

PROVIDER = {  # Megatron-Bridge gpt_oss_provider.py @ v0.3.0, GPTOSSProvider / GPTOSSProvider120B (lines 39-99)
    "--num-layers": "36", "--hidden-size": "2880", "--num-attention-heads": "64", "--num-query-groups": "8",
    "--ffn-hidden-size": "2880", "--kv-channels": "64", "--normalization": "RMSNorm", "--padded-vocab-size": "201088",
    "--attention-dropout": "0", "--hidden-dropout": "0",
    "--position-embedding-type": "yarn", "--rotary-base": "150000", "--rotary-scaling-factor": "32.0",
    "--yarn-original-max-position-embeddings": "4096", "--yarn-beta-fast": "32.0", "--yarn-beta-slow": "1.0",
    "--no-yarn-correction-range-round-to-int": None,  # yarn_correction_range_round_to_int = False
    "--num-experts": "128", "--moe-router-topk": "4", "--moe-ffn-hidden-size": "2880", "--moe-grouped-gemm": None,
    "--softmax-type": "learnable", "--window-attn-skip-freq": "2",
    "--window-size": "127,0",  # (127, 0) since Megatron-Bridge 5fcab34f8 (v0.4.0); v0.3.0 had (128, 0)
    "--quick-geglu": None, "--glu-linear-offset": "1.0", "--activation-func-clamp-value": "7.0",  # quick_gelu GLU
    "--untie-embeddings-and-output-weights": None,  # share_embeddings_and_output_weights = False
}
"""The provider's model fields as megatron-core 0.19.2's parser spells them (argument_utils.py:323-326 and
384-413 read them back into the same TransformerConfig fields)."""

# The layouts of the published GPT-OSS rows (benchmarks/data/runs_2024_2026.json): H100 25.11, GB300 26.04.
PUBLISHED = [
    ("dgx-h100", 8, 512, ParallelConfig(dp=16, tp=1, pp=4, ep=8, micro_batch=4, zero_stage=1)),
    ("gb300-nvl72", 16, 1280, ParallelConfig(dp=64, tp=1, pp=1, ep=64, micro_batch=4, zero_stage=1)),
]


def _request(model: ModelSpec = GPT_OSS, cluster: str = "dgx-h100", nodes: int = 8, batch: int = 512,
             config: ParallelConfig | None = None, framework: str = "megatron") -> LaunchRequest:
    config = config or ParallelConfig(dp=64, tp=1, pp=1, ep=8, micro_batch=1, zero_stage=1)
    return LaunchRequest(model=model, cluster=search.cluster_preset(cluster, nodes), config=config,
                         training=TrainingSpec(batch, framework=framework))  # type: ignore[arg-type]


def _emit(req: LaunchRequest) -> list[str]:
    argv = emit_megatron(req).files["megatron_args.txt"].splitlines()  # runs check_megatron_args
    assert argv == megatron_args(req)
    assert all(a in megatron_flags() for a in argv if a.startswith("--"))
    assert len({a for a in argv if a.startswith("--")}) == sum(a.startswith("--") for a in argv)  # no repeats
    return argv


@pytest.mark.parametrize(("cluster", "nodes", "batch", "config"), PUBLISHED, ids=["h100-pp4-ep8", "gb300-ep64"])
def test_gpt_oss_launches_as_megatron_bridges_provider_sets_it(cluster: str, nodes: int, batch: int,
                                                               config: ParallelConfig) -> None:
    req = _request(cluster=cluster, nodes=nodes, batch=batch, config=config)
    v = arg_values(_emit(req))
    assert {flag: v.get(flag, "absent") for flag in PROVIDER} == PROVIDER
    # Biases are megatron-core's default (add_bias_linear): on QKV, projection, experts and router.
    assert "--disable-bias-linear" not in v and "--swiglu" not in v
    assert v["--expert-tensor-parallel-size"] == "1"  # "Bias in Moe is only supported when ETP==1"
    assert SINKS_NOTE in megatron_args_and_notes(req)[1]


def test_every_flag_gpt_oss_needs_is_in_the_pinned_release() -> None:
    assert set(PROVIDER) <= megatron_flags()


def test_gpt_oss_is_supported_on_megatron_core_with_its_known_limit_said() -> None:
    assert model_status("megatron", GPT_OSS) == "supported"
    req = _request()
    warnings = search.predict(GPT_OSS, req.cluster, req.config, req.training).warnings
    assert any("22 % fast" in w and "gpt_oss_provider.py" in w and not w.startswith("not shown") for w in warnings)
    from search._space import why_no_valid

    assert not any("29 %" in r for r in why_no_valid(GPT_OSS, 64, 7, "megatron"))  # a known limit is no reason


def test_a_dense_model_with_yarn_emits_it_alone_and_a_dense_quick_geglu_is_refused() -> None:
    llama = dataclasses.replace(search.model_preset("llama3-8b"),
                                rope_yarn=YarnSpec(factor=4.0, original_max_positions=8192))
    config = ParallelConfig(dp=8, micro_batch=1, zero_stage=1)
    v = arg_values(_emit(_request(llama, nodes=1, batch=64, config=config)))
    assert v["--position-embedding-type"] == "yarn" and "--yarn-correction-range-round-to-int" in v
    assert "--swiglu" in v and not {"--window-size", "--softmax-type", "--quick-geglu", "--use-rope-scaling",
                                     "--activation-func-clamp-value", "--glu-linear-offset"} & v.keys()
    # megatron-core 0.19 mlp.py:276-318: a dense quick-GeGLU MLP has no fused kernel (the experts' has one).
    glu = dataclasses.replace(llama, activation="quick-geglu", glu_clamp=7.0)
    with pytest.raises(SpecError, match="Only support fusion of gelu and swiglu"):
        _emit(_request(glu, nodes=1, batch=64, config=config))


def test_models_without_them_get_none_of_the_new_flags() -> None:
    llama = search.model_preset("llama3-8b")
    v = arg_values(_emit(_request(llama, nodes=1, batch=64, config=ParallelConfig(dp=8, micro_batch=1))))
    assert v["--position-embedding-type"] == "rope" and "--swiglu" in v
    new = {f for f in PROVIDER if f.startswith(("--yarn", "--no-yarn", "--window", "--softmax", "--glu"))}
    assert not new & v.keys()


def test_context_parallelism_is_refused_for_gpt_oss_by_the_rules() -> None:
    # search.check_compatible refuses it too; the launch's own check names TE's rule.
    req = _request(config=ParallelConfig(dp=32, cp=2, ep=8, micro_batch=1, zero_stage=1))
    with pytest.raises(SpecError, match="cp-comm-type a2a"):
        emit_megatron(req)


BASE = megatron_args(_request())


def _with(*changes: str, drop: tuple[str, ...] = ()) -> list[str]:
    """BASE without the flags in ``drop`` (and their values), then ``changes`` appended."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(BASE):
        if skip:
            skip = False
            continue
        if word in drop:
            skip = i + 1 < len(BASE) and not BASE[i + 1].startswith("--")
            continue
        out.append(word)
    return [*out, *changes]


def test_the_emitted_arguments_pass_the_rules() -> None:
    check_megatron_args(BASE, 64)


@pytest.mark.parametrize(("argv", "says"), [
    (_with("--activation-func-clamp-value", "-7.0", drop=("--activation-func-clamp-value",)), "needs --quick-geglu"),
    (_with("--swiglu", "--glu-linear-offset", "1.0",
           drop=("--quick-geglu", "--glu-linear-offset", "--activation-func-clamp-value")), "must be quick_gelu"),
    (_with(drop=("--quick-geglu",)), "must be quick_gelu"),  # the offset left without its GLU
    (_with(drop=("--quick-geglu", "--glu-linear-offset")), "needs --quick-geglu"),  # and the clamp
    (_with("--swiglu"), "one MLP activation"),
    (_with("--rotary-scaling-factor", "0.5", drop=("--rotary-scaling-factor",)), "below 1"),
    (_with("--yarn-beta-fast", "0.5", drop=("--yarn-beta-fast",)), "not above --yarn-beta-slow"),
    (_with("--position-embedding-type", "rope", drop=("--position-embedding-type",)), "without --position-embedding"),
    (_with("--yarn-correction-range-round-to-int"), "its --no- form"),
    (_with("--window-size", "127", drop=("--window-size",)), "(left, right) pair"),
    (_with("--window-size", "12a,0", drop=("--window-size",)), "tuple_type"),
    (_with(drop=("--window-size",)), "no layer is windowed"),
    (_with("--window-attn-skip-freq", "[1,0]*3", drop=("--window-attn-skip-freq",)), "6 entries, --num-layers is 36"),
    (_with("--window-attn-skip-freq", "0", drop=("--window-attn-skip-freq",)), "positive integer"),
    (_with(drop=("--attention-dropout",)), "without dropout"),  # megatron's default attention dropout, 0.1
    (_with("--window-size", "127,127", drop=("--window-size",)), "(left, 0)"),
    (_with("--softmax-type", "sink", drop=("--softmax-type",)), "vanilla, off-by-one or learnable"),
    (_with("--context-parallel-size", "2"), "cp-comm-type a2a"),
    (_with("--context-parallel-size", "2", drop=("--softmax-type",)), "a2a or all_gather CP only"),  # p2p
    (_with("--mtp-num-layers", "1"), "Multi-Token Prediction"),  # arguments.py:1861-1866: MTP needs rope
])
def test_bad_gpt_oss_arguments_are_refused_with_megatrons_rule(argv: list[str], says: str) -> None:
    with pytest.raises(SpecError) as err:
        check_megatron_args(argv, 64)
    assert says in str(err.value)


def test_window_pattern_lists_pass_when_they_have_one_entry_per_layer() -> None:
    check_megatron_args(_with("--window-attn-skip-freq", "[1,0]*18", drop=("--window-attn-skip-freq",)), 64)
    check_megatron_args(_with("--context-parallel-size", "2", "--cp-comm-type", "a2a"), 64)  # TE's a2a CP: runs


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed", "fsdp"])
@pytest.mark.parametrize(("changes", "field"), [
    ({"moe": None, "ffn": 2880}, "ModelSpec.attention_window"),  # GPT-OSS without experts: the window refuses
    ({"moe": None, "ffn": 2880, "attention_window": None, "window_skip_freq": None, "softmax_sinks": False},
     "ModelSpec.activation"),  # then the GLU and YaRN
])
def test_the_other_runtimes_refuse_gpt_oss_naming_what_they_cannot_express(framework: str, changes: dict[str, object],
                                                                           field: str) -> None:
    model = dataclasses.replace(GPT_OSS, **changes)
    config = ParallelConfig(dp=8, micro_batch=1, zero_stage=2 if framework == "fsdp" else 1)
    with pytest.raises(SpecError) as err:
        _request(model, nodes=1, batch=64, config=config, framework=framework)
    assert err.value.field == field and framework in err.value.problem
    assert model_status(framework, model) == "refused"
    assert model_status(framework, GPT_OSS) == "refused"  # and GPT-OSS itself (experts first)


def test_megatron_deepspeeds_spelling_has_no_glu_or_yarn() -> None:
    llama = dataclasses.replace(search.model_preset("llama3-8b"), activation="quick-geglu")
    with pytest.raises(SpecError) as err:
        shape_args(llama, MEGATRON_DEEPSPEED_SPELLING)
    assert err.value.field == "ModelSpec.activation"
    with pytest.raises(SpecError) as err:
        shape_args(dataclasses.replace(llama, activation="swiglu", rope_yarn=YarnSpec(4.0, 8192)),
                   MEGATRON_DEEPSPEED_SPELLING)
    assert err.value.field == "ModelSpec.rope_yarn"

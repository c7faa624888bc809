"""Megatron-LM arguments of the full-iteration CUDA graph (``ParallelConfig.cuda_graphs``): what a dense and a
graphed MoE configuration emit, each passing the pinned flag list and autopar's copy of megatron-core 0.19's
rules; the rules refuse what Megatron (or the support matrix) refuses; other runtimes refuse the graph."""

from __future__ import annotations

import dataclasses

import pytest

import search
from search import ParallelConfig, SpecError, TrainingSpec
from service.launch import LaunchRequest
from service.launch._launchers import framework_env
from service.launch._megatron import RANK_CAPACITY_FACTOR, emit_megatron, megatron_args, megatron_args_and_notes
from service.launch._megatron_checks import arg_values, check_megatron_args
from service.launch._megatron_flags import megatron_flags
from service.launch._targets import emit_target

GRAPH_FLAGS = ("--cuda-graph-impl", "--no-check-for-nan-in-loss-and-grad", "--moe-expert-rank-capacity-factor",
               "--moe-paged-stash", "--use-transformer-engine-op-fuser")
QWEN3_30B = search.model_preset("qwen3-30b-a3b")
LLAMA3_8B = search.model_preset("llama3-8b")


def _request(model: search.ModelSpec, config: ParallelConfig, framework: str = "megatron",
             precision: str = "bf16") -> LaunchRequest:
    return LaunchRequest(model=model, cluster=search.cluster_preset("dgx-h100", 2), config=config,
                         training=TrainingSpec(256, precision, framework=framework))  # type: ignore[arg-type]


def _emit(req: LaunchRequest) -> dict[str, str | None]:
    argv = emit_megatron(req).files["megatron_args.txt"].splitlines()
    check_megatron_args(argv, req.config.world_size)
    assert len({a for a in argv if a.startswith("--")}) == sum(a.startswith("--") for a in argv)  # no repeats
    return arg_values(argv)


def test_the_flags_are_in_the_pinned_release() -> None:
    assert set(GRAPH_FLAGS) <= megatron_flags()


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_a_dense_graphed_config_writes_the_graph_and_no_nan_check(recompute: str) -> None:
    config = ParallelConfig(dp=8, tp=2, sp=True, zero_stage=1, recompute=recompute,  # type: ignore[arg-type]
                            cuda_graphs="full-iteration")
    req = _request(LLAMA3_8B, config)
    v = _emit(req)
    assert v["--cuda-graph-impl"] == "full_iteration" and "--no-check-for-nan-in-loss-and-grad" in v
    assert not set(GRAPH_FLAGS[2:]) & v.keys()
    notes = megatron_args_and_notes(req)[1]
    assert any("--cuda-graph-warmup-steps" in n for n in notes)
    ungraphed = megatron_args(_request(LLAMA3_8B, ParallelConfig(dp=8, tp=2, sp=True, zero_stage=1,
                                                                 recompute=recompute)))  # type: ignore[arg-type]
    assert not set(GRAPH_FLAGS) & set(ungraphed)


def test_an_moe_graphed_config_writes_hybridep_budget_paged_stash_and_op_fuser() -> None:
    """As the 26.06+ Megatron-Bridge MoE recipes run it: HybridEP with a per-rank budget of 1.5, the paged
    stash, the Transformer Engine op fuser; the note says the budget's overflow re-runs a step."""
    config = ParallelConfig(dp=8, pp=2, vp=2, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-hybridep",
                            moe_a2a_overlap=True, cuda_graphs="full-iteration")
    req = _request(QWEN3_30B, config, precision="fp8")
    v = _emit(req)
    assert v["--cuda-graph-impl"] == "full_iteration" and "--no-check-for-nan-in-loss-and-grad" in v
    assert v["--moe-token-dispatcher-type"] == "flex" and v["--moe-flex-dispatcher-backend"] == "hybridep"
    assert v["--moe-expert-rank-capacity-factor"] == f"{RANK_CAPACITY_FACTOR:g}" == "1.5"
    assert "--moe-paged-stash" in v and "--use-transformer-engine-op-fuser" in v
    assert "--moe-expert-capacity-factor" not in v  # still dropless in the cost model's terms
    notes = megatron_args_and_notes(req)[1]
    assert any("PagedStashRunner" in n and "dropless" in n for n in notes)
    # megatron-core 0.19.0 asserts _is_fused_impl_supported() with the op fuser, false for a GLU without the
    # variable (moe/experts.py:398): every launcher carries it to the ranks, beside what else the run needs.
    assert any("NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in n and "2.14" in n for n in notes)
    assert framework_env(req) == {"NVTE_CUTEDSL_FUSED_GROUPED_MLP": "1"}
    tp = _request(QWEN3_30B, dataclasses.replace(config, tp=2, dp=4, sp=True), precision="fp8")
    assert framework_env(tp) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_CUTEDSL_FUSED_GROUPED_MLP": "1"}
    for target in ("torchrun", "slurm"):
        launch = emit_target(req, target)
        assert launch.env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
        assert any("export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in text for text in launch.files.values()), target
    # Ungraphed, or a dense graph: no op fuser, no variable.
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in framework_env(_request(QWEN3_30B, dataclasses.replace(
        config, cuda_graphs="none"), precision="fp8"))
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in framework_env(_request(LLAMA3_8B, ParallelConfig(
        dp=16, zero_stage=1, cuda_graphs="full-iteration")))


def test_a_graphed_moe_whose_experts_are_no_glu_is_refused() -> None:
    """The op fuser the graph's per-rank budget needs runs GLU experts only (megatron-core 0.19
    _is_fused_impl_supported): a GeLU mixture of experts cannot be graphed."""
    gelu = dataclasses.replace(QWEN3_30B, activation="gelu")
    config = ParallelConfig(dp=16, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-hybridep",
                            cuda_graphs="full-iteration")
    with pytest.raises(SpecError) as err:
        search.check_compatible(gelu, 16, config, TrainingSpec(256))
    assert err.value.field == "ParallelConfig.cuda_graphs" and "GLU" in err.value.problem
    search.check_compatible(gelu, 16, dataclasses.replace(config, cuda_graphs="none"), TrainingSpec(256))


@pytest.mark.parametrize(("config", "field"), [
    (ParallelConfig(dp=8, pp=2, vp=2, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-deepep",
                    cuda_graphs="full-iteration"), "ParallelConfig.cuda_graphs"),
    (ParallelConfig(dp=8, pp=2, vp=2, ep=8, micro_batch=1, zero_stage=1, cuda_graphs="full-iteration"),
     "ParallelConfig.cuda_graphs"),
    (ParallelConfig(dp=16, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher="flex-hybridep",
                    activation_offload_layers=4, cuda_graphs="full-iteration"),
     "ParallelConfig.activation_offload_layers"),
], ids=["deepep", "alltoall", "activation-offload"])
def test_the_emitter_refuses_a_graphed_moe_config_megatron_cannot_capture(config: ParallelConfig, field: str) -> None:
    with pytest.raises(SpecError) as err:
        megatron_args(_request(QWEN3_30B, config))
    assert err.value.field == field and err.value.fix


GRAPHED_MOE = ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1", "--num-layers", "8",
               "--micro-batch-size", "1", "--global-batch-size", "8", "--num-attention-heads", "8",
               "--num-experts", "8", "--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "flex",
               "--moe-flex-dispatcher-backend", "hybridep", "--cuda-graph-impl", "full_iteration",
               "--no-check-for-nan-in-loss-and-grad", "--moe-expert-rank-capacity-factor", "1.5",
               "--moe-paged-stash", "--use-transformer-engine-op-fuser"]


def _edited(argv: list[str], replace: dict[str, str | None]) -> list[str]:
    """``argv`` with each flag's value replaced (None: the flag removed; "": a switch added)."""
    out = list(argv)
    for flag, value in replace.items():
        if flag in out:
            i = out.index(flag)
            has_value = i + 1 < len(out) and not out[i + 1].startswith("--")
            out[i:i + 1 + has_value] = [] if value is None else [flag] + ([value] if value else [])
        elif value is not None:
            out += [flag] + ([value] if value else [])
    return out


@pytest.mark.parametrize(("replace", "needle"), [
    ({"--no-check-for-nan-in-loss-and-grad": None}, "--no-check-for-nan-in-loss-and-grad should be set"),
    ({"--cuda-graph-impl": "full-iteration"}, "is not one of"),
    ({"--cuda-graph-modules": "attn"}, "--cuda-graph-modules must be empty"),
    ({"--moe-flex-dispatcher-backend": "deepep"}, "requires moe_flex_dispatcher_backend"),
    ({"--moe-flex-dispatcher-backend": "deepep", "--moe-expert-rank-capacity-factor": None,
      "--moe-paged-stash": None}, "hybridep backend"),
    ({"--moe-token-dispatcher-type": "alltoall", "--moe-flex-dispatcher-backend": None,
      "--moe-expert-rank-capacity-factor": None, "--moe-paged-stash": None}, "hybridep backend"),
    ({"--moe-expert-rank-capacity-factor": None, "--moe-paged-stash": None}, "static per-rank budget"),
    ({"--moe-expert-rank-capacity-factor": None}, "moe_paged_stash requires"),
    ({"--use-transformer-engine-op-fuser": None}, "use_transformer_engine_op_fuser"),
    ({"--cpu-offloading-num-layers": "2"}, "cpu_offloading"),
    ({"--recompute-granularity": "selective"}, "draws dropout"),  # Megatron's attention dropout: 0.1
    ({"--recompute-granularity": "selective", "--attention-dropout": "0", "--recompute-modules": "moe"},
     "'moe' draws dropout"),
])
def test_the_graph_rules_refuse(replace: dict[str, str | None], needle: str) -> None:
    check_megatron_args(GRAPHED_MOE, 4)
    check_megatron_args(_edited(GRAPHED_MOE, {"--recompute-granularity": "selective", "--attention-dropout": "0"}), 4)
    with pytest.raises(SpecError, match="megatron_args") as err:
        check_megatron_args(_edited(GRAPHED_MOE, replace), 4)
    assert needle in str(err.value)


def test_dense_graph_rules_need_no_experts() -> None:
    dense = ["--tensor-model-parallel-size", "2", "--num-layers", "8", "--num-attention-heads", "8",
             "--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]
    check_megatron_args(dense, 8)
    check_megatron_args([*dense, "--cpu-offloading-num-layers", "2"], 8)  # no paged stash: offload is Megatron's
    check_megatron_args(["--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "attn"], 8)


@pytest.mark.parametrize(("framework", "target", "config"), [
    ("deepspeed", "deepspeed", ParallelConfig(dp=16, zero_stage=1, cuda_graphs="full-iteration")),
    ("megatron-deepspeed", "megatron-deepspeed", ParallelConfig(dp=8, tp=2, zero_stage=1,
                                                                cuda_graphs="full-iteration")),
    ("fsdp", "torchtitan", ParallelConfig(dp=16, zero_stage=3, cuda_graphs="full-iteration")),
    ("deepspeed", "torchrun", ParallelConfig(dp=16, zero_stage=1, cuda_graphs="full-iteration")),
])
def test_other_runtimes_refuse_the_graph(framework: str, target: str, config: ParallelConfig) -> None:
    with pytest.raises(SpecError) as err:
        emit_target(_request(LLAMA3_8B, config, framework), target)
    assert err.value.field == "ParallelConfig.cuda_graphs" and "megatron" in err.value.fix

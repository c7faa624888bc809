"""The eager Megatron-Core paths GPT-OSS takes (search._unfused_paths): YaRN's RoPE, the GLU clamp and the
per-expert bias, each charged exactly its op-by-op bytes at the GPU's HBM rate, only where the model has
the feature, and the clamp's extra saved tensor in activation memory."""

from __future__ import annotations

import dataclasses

import pytest

from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict
from search._calibration import default_calibration
from search._moe_terms import expert_load_factor, moe_layer_activation_bytes, moe_layer_times, routed_copies_per_gpu
from search._predict import _kernels, predict_memory
from search._rope_spec import YarnSpec
from search._unfused_paths import (
    CLAMP_BYTES_PER_ELEMENT,
    EXPERT_BIAS_BYTES_PER_ELEMENT,
    FUSED_ROPE_BYTES_PER_ELEMENT,
    UNFUSED_ROPE_BYTES_PER_ELEMENT,
    clamp_saved_bytes_per_copy,
    clamp_total_bytes_per_copy,
    expert_bias_total_bytes_per_copy,
    expert_path,
    unfused_rope,
    unfused_rope_total_bytes_per_token,
)

GPT_OSS = model_preset("gpt-oss-120b")  # hidden 2880, 64 heads of 64, 8 kv heads, 128 experts top-4, ffn 2880
PLAIN = dataclasses.replace(GPT_OSS, glu_clamp=None, rope_yarn=None, bias=False)
LLAMA = model_preset("llama3-8b")


def test_the_op_walks_add_up() -> None:
    # RoPE: forward t*cos 4, rotate_half 2 + 4, *sin 4, sum 6, cat 4; backward 4 + 4 + 2 + 4 + 6.
    assert UNFUSED_ROPE_BYTES_PER_ELEMENT == (4 + 2 + 4 + 4 + 6 + 4) + (4 + 4 + 2 + 4 + 6) == 44
    assert FUSED_ROPE_BYTES_PER_ELEMENT == 4 * (1 + 2)  # what attention_elementwise_bytes charges, fwd + 2x bwd
    assert CLAMP_BYTES_PER_ELEMENT == (2 + 2 + 4) + (6 + 4) == 18
    assert EXPERT_BIAS_BYTES_PER_ELEMENT == (2 + 6 + 4) + (6 + 6 + 4) == 28


def test_each_term_needs_its_feature() -> None:
    assert unfused_rope(GPT_OSS) and not unfused_rope(PLAIN) and not unfused_rope(LLAMA)
    # YaRN of factor 1 keeps the attention factor at 1: TE's fused RoPE runs.
    assert not unfused_rope(dataclasses.replace(LLAMA, rope_yarn=YarnSpec(1.0, 8192)))
    assert unfused_rope(dataclasses.replace(LLAMA, rope_yarn=YarnSpec(8.0, 8192)))
    assert unfused_rope_total_bytes_per_token(PLAIN, 1) == 0.0
    assert clamp_total_bytes_per_copy(PLAIN, 2880) == clamp_saved_bytes_per_copy(PLAIN, 2880) == 0.0
    assert expert_bias_total_bytes_per_copy(PLAIN) == 0.0
    assert expert_bias_total_bytes_per_copy(model_preset("gpt3-175b")) == 0.0  # biases, but no experts


def test_the_terms_scale_with_what_they_touch() -> None:
    # Queries and keys only (64 x 64 + 8 x 64 per token), split by tp; the GLU's 2f-wide output; h per copy.
    assert unfused_rope_total_bytes_per_token(GPT_OSS, 1) == pytest.approx((44 - 12) * (4096 + 512))
    assert unfused_rope_total_bytes_per_token(GPT_OSS, 2) == pytest.approx((44 - 12) * (4096 + 512) / 2)
    assert clamp_total_bytes_per_copy(GPT_OSS, 2880) == pytest.approx(18 * 2 * 2880)
    assert clamp_saved_bytes_per_copy(GPT_OSS, 1440) == pytest.approx(2 * 2 * 1440)
    assert expert_bias_total_bytes_per_copy(GPT_OSS) == pytest.approx(28 * 2880)


def test_an_moe_block_pays_exactly_the_three_terms_at_the_hbm_rate() -> None:
    cluster = cluster_preset("gb300-nvl72", 16)
    cal = default_calibration()
    kernels, _ = _kernels(cluster.gpu, "bf16", cal, "megatron")  # the prediction's own kernels
    mb, tp, cp, ep, etp = 4, 1, 1, 16, 1
    ours, plain = (moe_layer_times(m, mb, tp, cp, False, ep, etp, kernels, cluster, cal) for m in (GPT_OSS, PLAIN))
    # The busiest expert's load: the preset's learned router (force-balanced benchmarks pay 1.0).
    copies = routed_copies_per_gpu(GPT_OSS, mb, tp, cp, etp) * expert_load_factor(GPT_OSS)
    tokens = mb * GPT_OSS.seq_len
    total = (tokens * unfused_rope_total_bytes_per_token(GPT_OSS, tp)
             + copies * (clamp_total_bytes_per_copy(GPT_OSS, 2880) + expert_bias_total_bytes_per_copy(GPT_OSS)))
    # Charged as the forward share of the block's elementwise term (backward is twice the forward).
    assert ours.elementwise_s - plain.elementwise_s == pytest.approx(total / 3 / kernels.hbm_bytes_per_s)
    assert (ours.gemm_s, ours.attention_s, ours.dispatch_s) == (plain.gemm_s, plain.attention_s, plain.dispatch_s)
    # Memory: one more 16-bit copy of the first expert GEMM's output per routed copy; none under full recompute.
    kept = [moe_layer_activation_bytes(m, mb, tp, cp, False, etp, "none") for m in (GPT_OSS, PLAIN)]
    assert kept[0] - kept[1] == pytest.approx(copies * 2 * 2 * 2880)
    assert (moe_layer_activation_bytes(GPT_OSS, mb, tp, cp, False, etp, "full")
            == moe_layer_activation_bytes(PLAIN, mb, tp, cp, False, etp, "full"))


def test_gpt_oss_predicts_slower_and_heavier_than_without_its_eager_paths() -> None:
    cluster = cluster_preset("gb300-nvl72", 16)
    config = ParallelConfig(dp=64, ep=64, micro_batch=4, zero_stage=1)
    training = TrainingSpec(global_batch=1280)
    ours, plain = (predict(m, cluster, config, training) for m in (GPT_OSS, PLAIN))
    assert ours.iteration_time_s > plain.iteration_time_s * 1.1
    assert (predict_memory(GPT_OSS, cluster, config, training).peak_bytes
            > predict_memory(PLAIN, cluster, config, training).peak_bytes)


@pytest.mark.parametrize(("gpu", "precision", "graphs", "framework", "path"), [
    ("gb300-nvl72", "mxfp8", "full-iteration", "megatron", "fused"),  # the 26.06+ recipes: CuTe DSL grouped GEMMs
    ("gb200-nvl72", "nvfp4", "full-iteration", "megatron", "fused"),
    ("gb300-nvl72", "bf16", "full-iteration", "megatron", "te-ops"),  # TE fuses only block-scaled recipes
    ("dgx-h100", "fp8", "full-iteration", "megatron", "te-ops"),  # and only on compute capability 10
    ("gb300-nvl72", "mxfp8", "none", "megatron", "eager"),  # no graph, no op fuser in autopar's launch
])
def test_the_expert_path_follows_the_op_fuser_and_where_te_fuses(gpu: str, precision: str, graphs: str,
                                                                  framework: str, path: str) -> None:
    assert expert_path(GPT_OSS, cluster_preset(gpu, 1).gpu, precision, graphs, framework) == path
    assert expert_path(LLAMA, cluster_preset(gpu, 1).gpu, precision, graphs, framework) == "eager"  # no experts


def test_each_path_charges_what_its_kernels_leave_to_hbm() -> None:
    cluster = cluster_preset("gb300-nvl72", 16)
    cal = default_calibration()
    kernels, _ = _kernels(cluster.gpu, "mxfp8", cal, "megatron")
    times = {p: moe_layer_times(GPT_OSS, 4, 1, 1, False, 16, 1, kernels, cluster, cal, "flex-hybridep", p)
             for p in ("eager", "te-ops", "fused")}
    copies = routed_copies_per_gpu(GPT_OSS, 4, 1, 1, 1) * expert_load_factor(GPT_OSS)
    rate = 3 * kernels.hbm_bytes_per_s  # the forward share of a total
    # te-ops: the clamp inside TE's GLU kernel; the per-expert bias still added one expert at a time.
    assert times["eager"].elementwise_s - times["te-ops"].elementwise_s == pytest.approx(
        copies * clamp_total_bytes_per_copy(GPT_OSS, 2880) / rate)
    # fused: the GLU (6f forward) and FC2's scaled bias in the grouped GEMMs' epilogues.
    assert times["te-ops"].elementwise_s - times["fused"].elementwise_s == pytest.approx(
        copies * (expert_bias_total_bytes_per_copy(GPT_OSS) / 3 + 6 * 2880) / kernels.hbm_bytes_per_s)
    assert len({t.gemm_s for t in times.values()}) == 1 and len({t.dispatch_s for t in times.values()}) == 1


def test_a_graphed_gpt_oss_on_blackwell_in_mxfp8_predicts_faster_than_ungraphed_by_more_than_the_host() -> None:
    cluster = cluster_preset("gb300-nvl72", 16)
    training = TrainingSpec(global_batch=1280, precision="mxfp8")
    base = ParallelConfig(dp=64, ep=16, micro_batch=4, zero_stage=1, moe_dispatcher="flex-hybridep")
    graphed = dataclasses.replace(base, cuda_graphs="full-iteration")
    plain, fused = (predict(GPT_OSS, cluster, c, training) for c in (base, graphed))
    assert fused.time_breakdown_s.host_overhead_s == 0.0 < plain.time_breakdown_s.host_overhead_s
    assert fused.time_breakdown_s.compute_s < plain.time_breakdown_s.compute_s  # the experts' fused epilogues
    assert fused.iteration_time_s < plain.iteration_time_s - plain.time_breakdown_s.host_overhead_s
    # Each prediction says how its experts were costed.
    assert any("fused grouped MLP" in w and "NVTE_CUTEDSL_FUSED_GROUPED_MLP" in w for w in fused.warnings)
    assert not any("fused grouped MLP" in w for w in plain.warnings)
    hopper = predict(GPT_OSS, cluster_preset("dgx-h100", 8), dataclasses.replace(graphed, dp=64, ep=8),
                     TrainingSpec(global_batch=1280, precision="fp8"))
    assert any("ops one by one" in w for w in hopper.warnings)


def test_a_graphed_moe_search_on_blackwell_stays_exact_with_the_fused_experts() -> None:
    """The fused grouped MLP makes an MoE layer's time depend on the CUDA graph: the bounds key the layer by
    it, so the branch and bound's answer is still the brute force's over the same space."""
    from search import enumerate_space, search

    qwen, cluster = model_preset("qwen3-30b-a3b"), cluster_preset("gb200-nvl72", 2)
    training = TrainingSpec(global_batch=256, precision="mxfp8")
    result = search(qwen, cluster, 256, framework="megatron", precision="mxfp8", top_k=3,
                    moe_dispatcher="flex-hybridep", cuda_graphs="full-iteration")
    assert result.exhaustive
    space = enumerate_space(qwen, 8, 256, "megatron", moe_exchange=("flex-hybridep", False),
                            cuda_graphs="full-iteration")
    graphed = [cand.config for cand in space.candidates if cand.config.cuda_graphs == "full-iteration"]
    assert graphed
    best = max(p.tokens_per_s for p in (predict(qwen, cluster, c, training) for c in
                                        (cand.config for cand in space.candidates)) if p.feasible)
    # The ranking puts the simpler of equivalent answers first: the fastest is somewhere in the top, at least as
    # fast as every enumerated configuration (a derived fine-grained policy may beat them all).
    fastest = max(r.prediction.tokens_per_s for r in result.top)
    assert fastest >= best * (1 - 1e-12)
    assert any(r.config.cuda_graphs == "full-iteration" and r.config.ep > 1 for r in result.top)


def test_a_graphed_search_of_non_glu_experts_is_refused_naming_the_field() -> None:
    from search import SpecError, search

    gelu = dataclasses.replace(model_preset("qwen3-30b-a3b"), activation="gelu")
    with pytest.raises(SpecError) as err:
        search(gelu, cluster_preset("gb200-nvl72", 2), 256, framework="megatron", precision="mxfp8", top_k=3,
               moe_dispatcher="flex-hybridep", cuda_graphs="full-iteration")
    assert err.value.field == "ParallelConfig.cuda_graphs" and "cuda_graphs='none'" in err.value.fix

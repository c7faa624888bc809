"""Megatron-LM arguments of mixture-of-experts and latent-attention models: the flags and values of
DeepSeek-V3-, Qwen3-30B-A3B- and Mixtral-like specs on expert-parallel layouts, each passing the pinned
flag list and autopar's copy of megatron-core 0.19's validate_args rules; dense models get none of them."""

from __future__ import annotations

import dataclasses

import pytest

import search
from search import ModelSpec, ParallelConfig, SpecError, TrainingSpec
from search._moe_spec import MoESpec
from service.launch._base import LaunchRequest
from service.launch._megatron import emit_megatron, megatron_args, megatron_args_and_notes
from service.launch._megatron_checks import arg_values, check_megatron_args
from service.launch._megatron_flags import megatron_flags
from tests.service.launch.enumerated import DEEPSEEK_V3, MIXTRAL, QWEN3_30B_A3B, expert_samples

MOE_FLAGS = ("--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq",
             "--moe-shared-expert-intermediate-size", "--expert-model-parallel-size",
             "--expert-tensor-parallel-size", "--moe-grouped-gemm", "--moe-token-dispatcher-type", "--moe-router-dtype",
             "--moe-router-load-balancing-type", "--moe-router-force-load-balancing", "--moe-aux-loss-coeff",
             "--moe-expert-capacity-factor", "--moe-router-pre-softmax", "--kv-channels", "--multi-latent-attention",
             "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
             "--mtp-num-layers", "--moe-flex-dispatcher-backend", "--overlap-moe-expert-parallel-comm")


def _request(model: ModelSpec, nodes: int, config: ParallelConfig, batch: int = 1024) -> LaunchRequest:
    return LaunchRequest(model=model, cluster=search.cluster_preset("dgx-h100", nodes), config=config,
                         training=TrainingSpec(batch))


def _emit(req: LaunchRequest) -> dict[str, str | None]:
    """The emitted arguments as flag -> value, after the offline check every emission runs."""
    argv = emit_megatron(req).files["megatron_args.txt"].splitlines()
    assert argv == megatron_args(req)
    check_megatron_args(argv, req.config.world_size)
    assert all(a in megatron_flags() for a in argv if a.startswith("--"))
    assert len({a for a in argv if a.startswith("--")}) == sum(a.startswith("--") for a in argv)  # no repeats
    return arg_values(argv)


def test_the_flags_are_in_the_pinned_release() -> None:
    assert set(MOE_FLAGS) <= megatron_flags()


def test_deepseek_v3_on_megatrons_published_layout() -> None:
    """DeepSeek-V3 at TP2 PP16 EP64 on 1024 GPUs (Megatron's parallelism guide), 61 layers as 3 + 14 x 4 + 2."""
    config = ParallelConfig(dp=32, tp=2, pp=16, sp=True, ep=64, etp=1, micro_batch=1, zero_stage=1,
                            recompute="full", stage_layers=(3,) + (4,) * 14 + (2,))
    v = _emit(_request(DEEPSEEK_V3, 128, config, 4096))
    assert v["--num-experts"] == "256" and v["--moe-router-topk"] == "8" and v["--moe-ffn-hidden-size"] == "2048"
    assert v["--moe-shared-expert-intermediate-size"] == "2048"
    assert v["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert eval(v["--moe-layer-freq"]) == [0] * 3 + [1] * 58  # what megatron's moe_freq_type does with it
    assert v["--expert-model-parallel-size"] == "64" and v["--expert-tensor-parallel-size"] == "1"
    assert v["--moe-token-dispatcher-type"] == "alltoall" and "--moe-grouped-gemm" in v
    assert v["--moe-router-dtype"] == "fp32"
    assert v["--moe-router-load-balancing-type"] == "aux_loss" and v["--moe-aux-loss-coeff"] == "0.01"
    assert "--moe-expert-capacity-factor" not in v  # dropless
    assert "--moe-router-force-load-balancing" not in v and "--moe-router-pre-softmax" not in v
    assert "--multi-latent-attention" in v and "--qk-layernorm" in v  # the latents' RMSNorms
    assert (v["--q-lora-rank"], v["--kv-lora-rank"], v["--qk-head-dim"], v["--qk-pos-emb-head-dim"],
            v["--v-head-dim"]) == ("1536", "512", "128", "64", "128")
    assert "--kv-channels" not in v and "--group-query-attention" not in v  # 7168 / 128 divides; MLA sets widths
    assert v["--mtp-num-layers"] == "1"
    assert v["--decoder-first-pipeline-num-layers"] == "3" and v["--decoder-last-pipeline-num-layers"] == "2"
    assert "--sequence-parallel" in v and v["--ffn-hidden-size"] == "18432"


def test_deepseek_v3_layout_string_holds_the_mtp_layer() -> None:
    """A split the first/last flags cannot give is a layout string; its MTP layer sits before the loss."""
    config = ParallelConfig(dp=128, tp=1, pp=16, ep=64, micro_batch=1, zero_stage=1,
                            stage_layers=(3,) + (4,) * 7 + (5,) + (4,) * 6 + (1,))
    v = _emit(_request(DEEPSEEK_V3, 256, config, 4096))
    layout = v["--pipeline-model-parallel-layout"]
    assert layout is not None and layout.startswith("Et*3|") and layout.endswith("|tmL")
    assert v["--expert-tensor-parallel-size"] == "1" and "--sequence-parallel" not in v  # tp 1: not needed
    argv = megatron_args(_request(DEEPSEEK_V3, 256, config, 4096))
    wrong = [layout.replace("tmL", "tL") if a == layout else a for a in argv]
    with pytest.raises(SpecError, match="MTP layers"):
        check_megatron_args(wrong, 2048)
    with pytest.raises(SpecError, match=r"before L|after every decoder"):
        check_megatron_args([layout.replace("Et*3|", "Emt*2|").replace("tmL", "ttL") if a == layout else a
                             for a in argv], 2048)


@pytest.mark.parametrize(("ep", "etp"), [(8, 1), (16, 2), (1, 2), (32, 1)])
def test_qwen3_30b_a3b_expert_layouts(ep: int, etp: int) -> None:
    config = ParallelConfig(dp=16, tp=2, pp=2, sp=True, ep=ep, etp=etp, micro_batch=1, zero_stage=1)
    v = _emit(_request(QWEN3_30B_A3B, 8, config))
    assert (v["--num-experts"], v["--moe-router-topk"], v["--moe-ffn-hidden-size"]) == ("128", "8", "768")
    assert v["--moe-layer-freq"] == "1" and "--moe-shared-expert-intermediate-size" not in v
    assert v["--expert-model-parallel-size"] == str(ep) and v["--expert-tensor-parallel-size"] == str(etp)
    assert v["--moe-token-dispatcher-type"] == ("alltoall" if ep > 1 else "allgather")
    assert v["--kv-channels"] == "128"  # 32 heads of 128 on a width of 2048
    assert v["--num-query-groups"] == "4" and "--group-query-attention" in v
    assert "--qk-layernorm" in v and "--multi-latent-attention" not in v and "--mtp-num-layers" not in v


@pytest.mark.parametrize(("tp", "pp", "ep", "etp"), [(2, 4, 8, 1), (2, 4, 8, 2), (4, 2, 1, 4), (1, 8, 8, 1)])
def test_mixtral_expert_layouts(tp: int, pp: int, ep: int, etp: int) -> None:
    dp = 64 // (tp * pp)
    config = ParallelConfig(dp=dp, tp=tp, pp=pp, sp=tp > 1, ep=ep, etp=etp, micro_batch=1, zero_stage=1)
    v = _emit(_request(MIXTRAL, 8, config))
    assert (v["--num-experts"], v["--moe-router-topk"], v["--moe-ffn-hidden-size"]) == ("8", "2", "14336")
    assert v["--expert-model-parallel-size"] == str(ep) and v["--expert-tensor-parallel-size"] == str(etp)
    assert "--kv-channels" not in v and "--qk-layernorm" not in v


def test_capacity_factor_force_balance_and_top1() -> None:
    model = ModelSpec("switch-like", layers=12, hidden=768, heads=12, ffn=3072, vocab=32128, seq_len=1024,
                      moe=MoESpec(experts=64, topk=1, expert_ffn=3072, capacity_factor=1.25,
                                  router_load="force-balanced"))
    v = _emit(_request(model, 1, ParallelConfig(dp=8, ep=8, micro_batch=2)))
    assert v["--moe-expert-capacity-factor"] == "1.25"
    assert "--moe-router-force-load-balancing" in v and v["--moe-router-load-balancing-type"] == "none"
    assert "--moe-router-pre-softmax" in v  # softmax over one selected logit has no gradient
    assert "--moe-aux-loss-coeff" not in v


def test_learned_router_says_its_loss_coefficient() -> None:
    config = ParallelConfig(dp=8, tp=2, pp=4, sp=True, ep=8, micro_batch=1, zero_stage=1)
    notes = emit_megatron(_request(MIXTRAL, 8, config)).notes
    assert any("--moe-aux-loss-coeff 0.01" in n for n in notes)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b", "llama3-70b"])
def test_dense_models_get_no_expert_flags(name: str) -> None:
    model = search.model_preset(name)
    config = ParallelConfig(dp=8, tp=8, pp=2, sp=True, micro_batch=1, zero_stage=1)
    argv = megatron_args(_request(model, 16, config))
    assert not set(MOE_FLAGS) & set(argv)
    assert not any(a.startswith(("--moe", "--expert")) for a in argv)


def test_expert_tensor_parallel_with_biases_is_refused() -> None:
    """transformer_config.py: "Bias in Moe is only supported when ETP==1"."""
    model = ModelSpec("biased-moe", layers=12, hidden=768, heads=12, ffn=3072, vocab=32128, seq_len=1024,
                      moe=MoESpec(experts=8, topk=2, expert_ffn=3072))
    assert _emit(_request(model, 1, ParallelConfig(dp=4, tp=2, sp=True, ep=4, etp=1), 64))
    with pytest.raises(SpecError, match="etp=1") as err:
        megatron_args(_request(model, 1, ParallelConfig(dp=4, tp=2, sp=True, ep=4, etp=2), 64))
    assert err.value.field == "ParallelConfig.etp"


def test_experts_before_ampere_are_refused() -> None:
    """validate_args asserts compute capability >= 8 for --moe-grouped-gemm."""
    req = LaunchRequest(model=MIXTRAL, cluster=search.cluster_preset("dgx-2", 4), training=TrainingSpec(1024),
                        config=ParallelConfig(dp=8, tp=2, pp=4, sp=True, ep=8, micro_batch=1, zero_stage=1))
    with pytest.raises(SpecError, match="compute capability") as err:
        megatron_args(req)
    assert err.value.field == "ClusterSpec.gpu"


def test_expert_parallel_on_a_dense_model_is_refused() -> None:
    model = search.model_preset("llama3-8b")
    with pytest.raises(SpecError, match="no experts"):
        megatron_args(_request(model, 8, ParallelConfig(dp=32, tp=2, sp=True, ep=4)))


@pytest.mark.parametrize("model", [dataclasses.replace(DEEPSEEK_V3, rope_scaling_factor=8.0),
                                   dataclasses.replace(DEEPSEEK_V3, rotary_percent=0.5)], ids=["scaling", "percent"])
def test_latent_attention_refuses_what_its_rope_cannot_do(model: ModelSpec) -> None:
    config = ParallelConfig(dp=128, tp=1, pp=16, ep=64, micro_batch=1, zero_stage=1,
                            stage_layers=(3,) + (4,) * 14 + (2,))
    with pytest.raises(SpecError, match="YaRN"):
        megatron_args(_request(model, 256, config, 4096))


BASE = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--num-layers", "8",
        "--hidden-size", "512", "--num-attention-heads", "8", "--disable-bias-linear", "--micro-batch-size", "1",
        "--global-batch-size", "8",
        "--sequence-parallel", "--num-experts", "8", "--expert-model-parallel-size", "4",
        "--expert-tensor-parallel-size", "1", "--moe-ffn-hidden-size", "1024"]


def _without(argv: list[str], *flags: str) -> list[str]:
    """``argv`` less ``flags`` and their values."""
    out: list[str] = []
    skipping = False
    for word in argv:
        skipping = word in flags or (skipping and not word.startswith("--"))
        if not skipping:
            out.append(word)
    return out


@pytest.mark.parametrize(("argv", "needle"), [
    (["--num-experts", "6"], "multiple of expert model parallel"),
    (["--expert-tensor-parallel-size", "2", "--expert-model-parallel-size", "8"], "etp*ep*pp"),
    ([*_without(BASE, "--disable-bias-linear"), "--expert-tensor-parallel-size", "2"], "Bias in Moe"),
    (_without(BASE, "--disable-bias-linear", "--expert-tensor-parallel-size"), "etp is 2"),  # default etp: tp
    (_without(BASE, "--sequence-parallel"), "--sequence-parallel"),
    (["--num-experts", "0"], "num_experts must be non None"),
    (["--moe-router-topk", "9"], "more than the 8 experts"),
    (["--moe-router-topk", "1"], "pre-softmax"),
    (["--moe-router-load-balancing-type", "sinkhorn", "--moe-expert-capacity-factor", "1.0"], "capacity_factor"),
    (["--moe-router-load-balancing-type", "balanced"], "not one of"),
    (["--moe-pad-expert-input-to-capacity"], "capacity_factor must be set"),
    (["--moe-token-dispatcher-type", "deepep"], "allgather, alltoall or flex"),
    (["--moe-ffn-hidden-size", "1001", "--expert-tensor-parallel-size", "2"], "expert tensor-parallel"),
    (["--moe-shared-expert-intermediate-size", "1001"], "tensor-parallel size"),
    (["--moe-layer-freq", "([0]*3+[1]*4)"], "7 entries"),
    (["--moe-layer-freq", "([0]*3+[2]*5)"], "list of 0 and 1"),
    (["--moe-layer-freq", "[0]*9**9**9"], "not a list expression"),
    (["--moe-layer-freq", "[0]*8+__import__('os')"], "not a list expression"),
    (["--moe-layer-freq", "0"], "positive integer"),
    (["--hidden-size", "500"], "--kv-channels"),
    (["--multi-latent-attention", "--group-query-attention"], "mutually exclusive"),
    (["--multi-latent-attention", "--position-embedding-type", "rope", "--rope-type", "rope"], "YARN"),
    (["--rope-type", "yarn"], "Common attention"),
    (["--mtp-num-layers", "1", "--position-embedding-type", "alibi"], "Multi-Token Prediction"),
    (["--pipeline-model-parallel-layout", "Et*4|t*4mL"], "MTP layers"),
])
def test_moe_rules_refuse(argv: list[str], needle: str) -> None:
    check_megatron_args(BASE, 16)
    check_megatron_args([*BASE, "--moe-layer-freq", "([0]*3+[1]*5)", "--mtp-num-layers", "1",
                         "--pipeline-model-parallel-layout", "Et*4|t*4mL"], 16)
    full = argv if argv[0] == BASE[0] else [*BASE, *argv]
    with pytest.raises(SpecError, match="megatron_args") as err:
        check_megatron_args(full, 16)
    assert needle in str(err.value)


@pytest.mark.parametrize("req", expert_samples(), ids=lambda r: f"{r.model.name}-{r.config}")
def test_enumerated_expert_configs_emit_valid_args(req: LaunchRequest) -> None:
    v = _emit(req)
    assert v["--expert-model-parallel-size"] == str(req.config.ep)
    assert v["--expert-tensor-parallel-size"] == str(req.config.etp)


@pytest.mark.parametrize(("dispatcher", "backend"), [("flex-deepep", "deepep"), ("flex-hybridep", "hybridep")])
def test_the_flex_dispatcher_and_the_ep_overlap_are_written_as_megatron_spells_them(dispatcher: str,
                                                                                     backend: str) -> None:
    """The costed dispatcher is the launched one: --moe-token-dispatcher-type flex with its backend, and
    --overlap-moe-expert-parallel-comm; both pass the 0.19 rules, with a note that the backend needs
    the deep_ep package."""
    config = search.ParallelConfig(dp=8, pp=2, vp=2, ep=8, micro_batch=1, zero_stage=1, moe_dispatcher=dispatcher,
                                   moe_a2a_overlap=True)
    req = LaunchRequest(model=search.model_preset("qwen3-30b-a3b"), cluster=search.cluster_preset("dgx-h100", 2),
                        config=config, training=search.TrainingSpec(256, "fp8"))
    argv, notes = megatron_args_and_notes(req)
    check_megatron_args(argv, 16)
    joined = " ".join(argv)
    assert f"--moe-token-dispatcher-type flex --moe-router-dtype fp32 --moe-flex-dispatcher-backend {backend}" \
        in joined and "--overlap-moe-expert-parallel-comm" in argv
    assert any("deep_ep" in n for n in notes)
    alltoall = megatron_args(LaunchRequest(model=req.model, cluster=req.cluster, training=req.training,
                                           config=search.ParallelConfig(dp=8, pp=2, ep=8, micro_batch=1, zero_stage=1)))
    assert "--moe-token-dispatcher-type alltoall" in " ".join(alltoall)
    assert "--moe-flex-dispatcher-backend" not in alltoall and "--overlap-moe-expert-parallel-comm" not in alltoall


MOE = ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2", "--num-layers", "8",
       "--micro-batch-size", "1", "--global-batch-size", "8", "--num-attention-heads", "8", "--num-experts", "8",
       "--expert-model-parallel-size", "4", "--moe-token-dispatcher-type", "flex",
       "--num-layers-per-virtual-pipeline-stage", "2"]


@pytest.mark.parametrize(("replace", "needle"), [
    ({"--expert-model-parallel-size": "1"}, "expert_model_parallel_size > 1"),
    ({"--moe-token-dispatcher-type": "allgather"}, "alltoall or flex dispatcher"),
    ({"--num-layers-per-virtual-pipeline-stage": None}, "interleaved"),
    ({"--recompute-granularity": "full"}, "full recomputation"),
    ({"--moe-flex-dispatcher-backend": "nvshmem"}, "deepep, hybridep or ncclep"),
    ({"--num-layers-per-virtual-pipeline-stage": None, "--pipeline-model-parallel-layout": "Et*4|t*4L"},
     "interleaved"),  # a layout of one stage per rank: vp 1
    ({"--num-layers-per-virtual-pipeline-stage": "4"}, "interleaved"),  # 8 layers / pp 2 / 4: vp 1
    ({"--recompute-modules": "moe"}, "'moe' in --recompute-modules"),
    ({"--moe-shared-expert-overlap": ""}, "--moe-shared-expert-overlap"),
    ({"--mtp-num-layers": "2"}, "at most one MTP layer"),
])
def test_the_ep_overlap_rules_refuse(replace: dict[str, str | None], needle: str) -> None:
    argv = [*MOE, "--overlap-moe-expert-parallel-comm"]
    check_megatron_args(argv, 8)
    for flag, value in replace.items():
        if flag in argv:
            i = argv.index(flag)
            argv[i:i + 2] = [] if value is None else [flag, value]
        elif value == "":  # a switch
            argv.append(flag)
        else:
            argv += [flag, value] if value is not None else []
    with pytest.raises(SpecError, match="megatron_args") as err:
        check_megatron_args(argv, 8)
    assert needle in str(err.value)


def test_padding_to_capacity_is_refused_with_deepep_only() -> None:
    """megatron-core 0.19 refuses moe_pad_expert_input_to_capacity for the flex dispatcher's DeepEP backend,
    not for HybridEP (transformer_config.py:1600-1607)."""
    pad = [*MOE, "--moe-expert-capacity-factor", "1.0", "--moe-pad-expert-input-to-capacity"]
    check_megatron_args([*pad, "--moe-flex-dispatcher-backend", "hybridep"], 8)
    with pytest.raises(SpecError, match="DeepEP backend"):
        check_megatron_args([*pad, "--moe-flex-dispatcher-backend", "deepep"], 8)

"""Known answers: the cost model's formulas against the sources they cite.

(a) DeepSpeed's own memory estimators (deepspeed 0.19.8, run here, not transcribed);
(b) Korthikanti et al. 2022 (arXiv:2205.05198) Sec. 4 activation memory;
(c) Narayanan et al. 2021 (arXiv:2104.04473) Sec. 5.1 and Megatron-LM
    ``num_floating_point_operations`` FLOP counts;
(d) ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054) Table 1, in DeepSpeed's accounting.

See shared/calibration/formulas.md Sec. 1, 3, 4 and shared/reference/frameworks.md Sec. 2.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from search import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    gpu_preset,
    model_preset,
    node_preset,
    predict,
)
from search._flops import hardware_flop_per_iteration, layer_gemm_flop, model_flop_per_iteration
from search._memory import layer_activation_bytes, model_state_bytes

# --------------------------------------------------------------------------------------------
# (a) DeepSpeed memory estimators
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zero2_estimator() -> Callable[..., tuple[int, int]]:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    return estimate_zero2_model_states_mem_needs


@pytest.fixture(scope="module")
def zero3_estimator() -> Callable[..., tuple[int, int, int]]:
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    return estimate_zero3_model_states_mem_needs


# (total params, largest layer params): the largest layer is the embedding V*h of a model of
# that size (GPT-1.7B-ish, Llama-2-7B, Llama-3-70B, GPT-3 175B).
PARAM_GRID = [
    (1_000_000_000, 51200 * 2304),
    (7_000_000_000, 32000 * 4096),
    (70_000_000_000, 128256 * 8192),
    (175_000_000_000, 51200 * 12288),
]
GPUS_PER_NODE = (1, 8, 16)
NODES = (1, 2, 4)
# DeepSpeed truncates with int(); search keeps floats. A few bytes cover the truncation and
# float rounding of figures around 1e12 bytes.
BYTES_ABS = 4.0

GRID = list(itertools.product(PARAM_GRID, GPUS_PER_NODE, NODES))
GRID_IDS = [f"P={p / 1e9:g}B-gpn{g}-nodes{n}" for (p, _), g, n in GRID]


def _gpu_model_states(zero_stage: int, dp: int, params: float, largest: float, offload_optimizer: str,
                      offload_param: str) -> float:
    states = model_state_bytes(framework="deepspeed", zero_stage=zero_stage, shard_degree=dp, params=params,
                               largest_layer_params=largest, layer_params=params / 100,
                               offload_optimizer=offload_optimizer, offload_param=offload_param)
    return states.weights_bytes + states.gradients_bytes + states.optimizer_bytes + states.gathered_params_bytes


@pytest.mark.parametrize(("pl", "gpn", "nodes"), GRID, ids=GRID_IDS)
@pytest.mark.parametrize("cpu_offload", [False, True])
def test_zero2_gpu_bytes_equal_deepspeed_estimator(zero2_estimator: Callable[..., tuple[int, int]],
                                                  pl: tuple[int, int], gpn: int, nodes: int,
                                                  cpu_offload: bool) -> None:
    params, largest = pl
    dp = gpn * nodes
    _, ds_gpu = zero2_estimator(params, gpn, nodes, cpu_offload=cpu_offload)
    ours = _gpu_model_states(2, dp, params, largest, "cpu" if cpu_offload else "none", "none")
    assert ours == pytest.approx(ds_gpu, abs=BYTES_ABS)


ZERO3_OFFLOADS = [("none", "none"), ("cpu", "none"), ("cpu", "cpu")]


@pytest.mark.parametrize(("pl", "gpn", "nodes"), GRID, ids=GRID_IDS)
@pytest.mark.parametrize(("offload_optimizer", "offload_param"), ZERO3_OFFLOADS,
                         ids=["no-offload", "optimizer-offload", "optimizer+param-offload"])
def test_zero3_gpu_bytes_equal_deepspeed_estimator(zero3_estimator: Callable[..., tuple[int, int, int]],
                                                  pl: tuple[int, int], gpn: int, nodes: int,
                                                  offload_optimizer: str, offload_param: str) -> None:
    params, largest = pl
    dp = gpn * nodes
    _, ds_gpu, ds_largest = zero3_estimator(params, largest, gpn, nodes, cpu_offload=offload_optimizer != "none",
                                            cpu_offload_params=offload_param != "none", zero_init=True)
    states = model_state_bytes(framework="deepspeed", zero_stage=3, shard_degree=dp, params=params,
                               largest_layer_params=largest, layer_params=params / 100,
                               offload_optimizer=offload_optimizer, offload_param=offload_param)
    assert states.gathered_params_bytes == ds_largest  # 4 bytes x largest layer
    ours = _gpu_model_states(3, dp, params, largest, offload_optimizer, offload_param)
    assert ours == pytest.approx(ds_gpu, abs=BYTES_ABS)


def _cluster(gpus_per_node: int, nodes: int) -> ClusterSpec:
    """A100-80GB nodes with ``gpus_per_node`` GPUs (the link figures do not matter here)."""
    node = dataclasses.replace(node_preset("dgx-a100-80gb"), gpus_per_node=gpus_per_node)
    return ClusterSpec(gpu=gpu_preset("a100-sxm4-80gb"), node=node, num_nodes=nodes)


@pytest.mark.parametrize("preset", ["gpt-7.5b", "llama2-70b", "gpt3-175b"])
@pytest.mark.parametrize(("gpn", "nodes"), list(itertools.product(GPUS_PER_NODE, NODES)))
@pytest.mark.parametrize(("offload_optimizer", "offload_param"), ZERO3_OFFLOADS[1:],
                         ids=["optimizer-offload", "optimizer+param-offload"])
def test_zero3_offload_cpu_bytes_per_node_equal_deepspeed_estimator(
        zero3_estimator: Callable[..., tuple[int, int, int]], preset: str, gpn: int, nodes: int,
        offload_optimizer: str, offload_param: str) -> None:
    """Host memory per node of ZeRO-3 offload: the states, P * (16 | 18) / nodes, plus the estimator's
    safety margin (x 1.5, zero_init=True), which autopar reports apart from what the run allocates."""
    model = model_preset(preset)
    dp = gpn * nodes
    config = ParallelConfig(dp=dp, zero_stage=3, offload_optimizer=offload_optimizer, offload_param=offload_param)
    prediction = predict(model, _cluster(gpn, nodes), config,
                         TrainingSpec(global_batch=4 * dp, framework="deepspeed"))
    ds_cpu, ds_gpu, _ = zero3_estimator(model.params, model.largest_layer_params, gpn, nodes,
                                        cpu_offload=True, cpu_offload_params=offload_param != "none", zero_init=True)
    host = prediction.cpu_memory_breakdown_bytes
    states = host["optimizer_states"] + host["parameters"]
    assert states + prediction.host_estimator_margin_bytes == pytest.approx(ds_cpu, abs=BYTES_ABS)
    assert states == pytest.approx(ds_cpu / 1.5, abs=BYTES_ABS)
    assert "safety_margin" not in host, "the estimator's margin is not part of the requirement by default"
    strict = predict(model, _cluster(gpn, nodes), config, TrainingSpec(global_batch=4 * dp, framework="deepspeed"),
                     host_safety_factor=1.5)
    assert strict.cpu_memory_bytes_per_node - prediction.cpu_memory_bytes_per_node == pytest.approx(
        prediction.host_estimator_margin_bytes, abs=BYTES_ABS)
    mem = prediction.memory_breakdown_bytes
    gpu_states = mem["weights"] + mem["gradients"] + mem["optimizer_states"] + mem["gathered_params"]
    assert gpu_states == pytest.approx(ds_gpu, abs=BYTES_ABS)


# --------------------------------------------------------------------------------------------
# (b) Korthikanti et al. 2022, Sec. 4: activation bytes per layer
# --------------------------------------------------------------------------------------------


def korthikanti_gpt(name: str, hidden: int, heads: int, seq_len: int, **overrides: Any) -> ModelSpec:
    """The block the paper analyses: 4h GeLU MLP, multi-head attention, dropout, explicit scores."""
    fields: dict[str, Any] = dict(name=name, layers=24, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=51200,
                                  seq_len=seq_len, activation="gelu", attention="standard", dropout=True)
    fields.update(overrides)
    return ModelSpec(**fields)


SHAPES = [
    korthikanti_gpt("small", hidden=1024, heads=16, seq_len=1024),
    korthikanti_gpt("gpt3-175b", hidden=12288, heads=96, seq_len=2048),  # Table 3
    korthikanti_gpt("mt-nlg-530b", hidden=20480, heads=128, seq_len=2048),  # Table 3
    korthikanti_gpt("odd-head-ratio", hidden=3072, heads=24, seq_len=4096),  # a*s/h = 32
]
MICRO_BATCHES = (1, 4)
TPS = (1, 2, 4, 8)


def _sbh(model: ModelSpec, b: int) -> Fraction:
    return Fraction(model.seq_len * b * model.hidden)


def _as_over_h(model: ModelSpec) -> Fraction:
    return Fraction(model.heads * model.seq_len, model.hidden)


ACT_CASES = list(itertools.product(SHAPES, MICRO_BATCHES))
ACT_IDS = [f"{m.name}-b{b}" for m, b in ACT_CASES]


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
def test_no_parallelism_eq1(model: ModelSpec, b: int) -> None:
    """Eq. 1: ``sbh(34 + 5as/h)``."""
    expected = _sbh(model, b) * (34 + 5 * _as_over_h(model))
    assert layer_activation_bytes(model, b, 1, 1, False, "none") == float(expected)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS)
def test_tensor_parallel_eq2(model: ModelSpec, b: int, t: int) -> None:
    """Eq. 2: ``sbh(10 + 24/t + 5as/(ht))``."""
    expected = _sbh(model, b) * (10 + Fraction(24, t) + 5 * _as_over_h(model) / t)
    assert layer_activation_bytes(model, b, t, 1, False, "none") == float(expected)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS[1:])
def test_tensor_and_sequence_parallel_eq4(model: ModelSpec, b: int, t: int) -> None:
    """Eq. 4: ``sbh/t (34 + 5as/h)``."""
    expected = _sbh(model, b) / t * (34 + 5 * _as_over_h(model))
    assert layer_activation_bytes(model, b, t, 1, True, "none") == float(expected)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS)
def test_tensor_parallel_selective_recompute_eq5(model: ModelSpec, b: int, t: int) -> None:
    """Eq. 5 (TP only): ``sbh(10 + 24/t)``."""
    expected = _sbh(model, b) * (10 + Fraction(24, t))
    assert layer_activation_bytes(model, b, t, 1, False, "selective") == float(expected)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS[1:])
def test_tensor_sequence_parallel_selective_recompute_eq6(model: ModelSpec, b: int, t: int) -> None:
    """Eq. 6: ``34 sbh / t``."""
    expected = 34 * _sbh(model, b) / t
    assert layer_activation_bytes(model, b, t, 1, True, "selective") == float(expected)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS)
def test_full_recompute_keeps_the_layer_input(model: ModelSpec, b: int, t: int) -> None:
    """Sec. 4.2: ``2sbh`` per layer (``2sbh/t`` when the input is sequence-parallel)."""
    assert layer_activation_bytes(model, b, t, 1, False, "full") == float(2 * _sbh(model, b))
    if t > 1:
        assert layer_activation_bytes(model, b, t, 1, True, "full") == float(2 * _sbh(model, b) / t)


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS)
def test_flash_attention_equals_selective_recompute(model: ModelSpec, b: int, t: int) -> None:
    """FlashAttention stores no s x s matrices: the ``5as/h`` term goes, as with selective recompute."""
    flash = dataclasses.replace(model, attention="flash")
    for sp in (False, True) if t > 1 else (False,):
        assert layer_activation_bytes(flash, b, t, 1, sp, "none") == layer_activation_bytes(
            model, b, t, 1, sp, "selective")
        assert layer_activation_bytes(flash, b, t, 1, sp, "selective") == layer_activation_bytes(
            model, b, t, 1, sp, "selective")


@pytest.mark.parametrize(("model", "b"), ACT_CASES, ids=ACT_IDS)
@pytest.mark.parametrize("t", TPS)
def test_no_dropout_drops_the_masks(model: ModelSpec, b: int, t: int) -> None:
    """Without dropout the two 1-byte hidden masks (2sbh, replicated) and the 1-byte score mask
    (as^2b, split by t) are not stored."""
    plain = dataclasses.replace(model, dropout=False)
    sbh = _sbh(model, b)
    score_mask = Fraction(model.heads * model.seq_len * model.seq_len * b)
    gap = (layer_activation_bytes(model, b, t, 1, False, "none")
           - layer_activation_bytes(plain, b, t, 1, False, "none"))
    assert gap == float(2 * sbh + score_mask / t)
    gap_sel = (layer_activation_bytes(model, b, t, 1, False, "selective")
               - layer_activation_bytes(plain, b, t, 1, False, "selective"))
    assert gap_sel == float(2 * sbh)
    if t > 1:
        gap_sp = (layer_activation_bytes(model, b, t, 1, True, "none")
                  - layer_activation_bytes(plain, b, t, 1, True, "none"))
        assert gap_sp == float((2 * sbh + score_mask) / t)
    full = layer_activation_bytes(model, b, t, 1, False, "full")
    assert layer_activation_bytes(plain, b, t, 1, False, "full") == full


def test_gpt3_175b_activation_figures() -> None:
    """GPT-3 175B, b = 1, t = 8 (Korthikanti Table 3 setting): spot values in bytes."""
    model = SHAPES[1]
    sbh = 2048 * 12288
    assert layer_activation_bytes(model, 1, 8, 1, False, "none") == sbh * (10 + 3 + 5 * 16 / 8)  # 23 sbh
    assert layer_activation_bytes(model, 1, 8, 1, True, "none") == sbh * (34 + 80) / 8
    assert layer_activation_bytes(model, 1, 8, 1, True, "selective") == sbh * 34 / 8
    # Sec. 4.2.3: selective recompute + SP saves ~70 % over SP alone for GPT-3 (114 -> 34).
    saving = 1 - 34 / (34 + 80)
    assert saving == pytest.approx(0.70, abs=0.005)


# --------------------------------------------------------------------------------------------
# (c) FLOPs
# --------------------------------------------------------------------------------------------

GPT_PRESETS = ("gpt-1.7b", "gpt-7.5b", "gpt-145b", "gpt-1t", "gpt3-175b")
FLOP_BATCHES = (1, 512, 1536)


def narayanan_hardware_flop(B: int, s: int, L: int, h: int, V: int) -> float:
    """Narayanan et al. 2021 Sec. 5.1 (full recomputation): ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``."""
    return 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))


def megatron_model_flop(B: int, s: int, L: int, h: int, V: int, f: int, a: int, kv: int, swiglu: bool,
                        head_dim: int) -> float:
    """Megatron-LM ``training.py::num_floating_point_operations`` (dense, no MoE), term by term.

    ``12 B s l h^2 ((1 + g_q/a + s/h) * (a*head_dim)/h + (f/h) * gated + V/(2 l h))``; the 12 is
    3 (forward, wgrad, dgrad) x 2 (two GEMMs of each size) x 2 (FLOP per multiply-add).
    """
    query_projection_ratio = a * head_dim / h
    gated = 3 / 2 if swiglu else 1
    return (12 * B * s * L * h * h
            * ((1 + kv / a + s / h) * query_projection_ratio + (f / h) * gated + V / (2 * L * h)))


@pytest.mark.parametrize("preset", GPT_PRESETS)
@pytest.mark.parametrize("B", FLOP_BATCHES)
def test_hardware_flop_full_recompute_is_narayanan_eq(preset: str, B: int) -> None:
    m = model_preset(preset)
    expected = narayanan_hardware_flop(B, m.seq_len, m.layers, m.hidden, m.vocab)
    assert hardware_flop_per_iteration(m, B, "full") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", GPT_PRESETS)
@pytest.mark.parametrize("B", FLOP_BATCHES)
def test_model_flop_is_megatron_72_form(preset: str, B: int) -> None:
    """``72 B s l h^2 (1 + s/(6h) + V/(12 l h))`` for f = 4h, MHA, GeLU."""
    m = model_preset(preset)
    s, L, h, V = m.seq_len, m.layers, m.hidden, m.vocab
    expected = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flop_per_iteration(m, B) == pytest.approx(expected, rel=1e-12)
    # ... which is Megatron's general formula specialised.
    general = megatron_model_flop(B, s, L, h, V, m.ffn, m.heads, m.kv_heads, False, m.head_dim)
    assert expected == pytest.approx(general, rel=1e-12)


SWIGLU_GQA = ("llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b")


@pytest.mark.parametrize("preset", [*SWIGLU_GQA, "llama2-7b", "mpt-30b", "bloom-176b"])
@pytest.mark.parametrize("B", FLOP_BATCHES)
def test_model_flop_is_megatron_num_floating_point_operations(preset: str, B: int) -> None:
    """formulas.md Sec. 1 row 2, with g = 3/2 for SwiGLU and kv/a for GQA."""
    m = model_preset(preset)
    assert (m.kv_heads < m.heads) == (preset in SWIGLU_GQA)
    expected = megatron_model_flop(B, m.seq_len, m.layers, m.hidden, m.vocab, m.ffn, m.heads, m.kv_heads,
                                   m.activation == "swiglu", m.head_dim)
    assert model_flop_per_iteration(m, B) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("preset", SWIGLU_GQA)
def test_layer_gemm_flop_term_by_term(preset: str) -> None:
    """Forward weight GEMMs per token: Q and output 2*2h^2, K and V 2*2*h*kv_dim, MLP 2*3*h*f.

    Megatron's 12 B s l h^2 (1 + kv/a + (f/h) 3/2) divided by 3 (fwd only) and by B s l.
    """
    m = model_preset(preset)
    h, kv, f = m.hidden, m.kv_dim, m.ffn
    assert layer_gemm_flop(m, 1) == 4 * h * h + 4 * h * kv + 6 * h * f
    assert layer_gemm_flop(m, 1) == pytest.approx(4 * h * h * (1 + kv / h + (f / h) * 3 / 2),
                                                  rel=1e-15)


@pytest.mark.parametrize("preset", ["gpt3-175b", "llama3-70b"])
def test_recompute_conventions(preset: str) -> None:
    """No recompute: hardware = model FLOPs; full: each layer's forward runs twice (4x, logits 3x);
    selective: one extra forward of the attention core (4 B s^2 h per layer) with materialised
    scores, nothing extra with FlashAttention (its backward recomputes the core anyway)."""
    m = model_preset(preset)
    B = 64
    tokens = B * m.seq_len
    model = model_flop_per_iteration(m, B)
    assert hardware_flop_per_iteration(m, B, "none") == model
    core = 4.0 * tokens * m.seq_len * m.hidden
    extra = m.layers * core if m.attention == "standard" else 0.0
    assert hardware_flop_per_iteration(m, B, "selective") == pytest.approx(model + extra, rel=1e-12)
    layer_fwd = layer_gemm_flop(m, tokens) + core
    assert hardware_flop_per_iteration(m, B, "full") == pytest.approx(model + m.layers * layer_fwd, rel=1e-12)


def test_gpt3_175b_model_flop_per_token() -> None:
    """6N + attention: per token 6 * 174.6e9 plus 12 l s h (Narayanan Table 2 counts 174.6B)."""
    m = model_preset("gpt3-175b")
    per_token = model_flop_per_iteration(m, 1) / m.seq_len
    assert per_token == pytest.approx(6 * m.params + 12 * m.layers * m.seq_len * m.hidden, rel=2e-3)


# --------------------------------------------------------------------------------------------
# (d) ZeRO Table 1 (formulas.md Sec. 3) in DeepSpeed's accounting
# --------------------------------------------------------------------------------------------
#
# The paper counts K = 12 bytes of optimizer state and 16-bit gradients: (2 + 2 + 12) Psi = 16 Psi.
# search follows each runtime's own accounting instead, and has no "paper" mode. DeepSpeed's
# ZeRO-3 keeps the gradient partition in fp32 (estimate_zero3_model_states_mem_needs: 18 P / N_d),
# i.e. 2 (16-bit params) + 4 (fp32 grads) + 12 (fp32 master, m, v) = 18 bytes per parameter,
# plus 4 x the largest layer for the gathered working set. So the DeepSpeed figure is the
# paper's ZeRO-3 column times 18/16 (plus the largest-layer buffer).

ZERO_TABLE_1_7_5B_POS_G_P = {  # N_d: GB (1e9 bytes) as printed, P_os+g+p column, Psi = 7.5B
    1: "120",
    4: "30",
    16: "7.5",
    64: "1.88",
    256: "0.47",
    1024: "0.12",
}
PSI_7_5B = 7.5e9


def _printed_tolerance(printed: str) -> float:
    """Half a unit of the last printed digit."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return 0.5 * 10.0**-decimals


@pytest.mark.parametrize(("n_d", "printed"), sorted(ZERO_TABLE_1_7_5B_POS_G_P.items()))
@pytest.mark.parametrize("largest", [0.0, 51200 * 4096.0])
def test_zero3_deepspeed_accounting_is_18_psi_over_nd(n_d: int, printed: str, largest: float) -> None:
    states = model_state_bytes(framework="deepspeed", zero_stage=3, shard_degree=n_d, params=PSI_7_5B,
                               largest_layer_params=largest, layer_params=PSI_7_5B / 36,
                               offload_optimizer="none", offload_param="none")
    total = states.weights_bytes + states.gradients_bytes + states.optimizer_bytes + states.gathered_params_bytes
    assert total == pytest.approx(18 * PSI_7_5B / n_d + 4 * largest, rel=1e-12)
    # Back in the paper's accounting (16 bytes/param) the numbers are Table 1's.
    paper_gb = (total - 4 * largest) * 16 / 18 / 1e9
    assert paper_gb == pytest.approx(float(printed), abs=_printed_tolerance(printed))


@pytest.mark.parametrize("n_d", sorted(ZERO_TABLE_1_7_5B_POS_G_P))
def test_zero_stages_deepspeed_per_param_bytes(n_d: int) -> None:
    """DeepSpeed accounting per parameter: stage 1 = 2 + (2 + 4/N_d) + 12/N_d, stage 2 = 2 + 18/N_d
    (estimate_zero2_model_states_mem_needs), stage 3 = 18/N_d (+ largest layer)."""
    p = PSI_7_5B

    def total(stage: int) -> float:
        s = model_state_bytes(framework="deepspeed", zero_stage=stage, shard_degree=n_d, params=p,
                              largest_layer_params=0.0, layer_params=p / 36, offload_optimizer="none",
                              offload_param="none")
        return s.weights_bytes + s.gradients_bytes + s.optimizer_bytes + s.gathered_params_bytes

    assert total(0) == pytest.approx(20 * p, rel=1e-12)
    assert total(1) == pytest.approx(4 * p + 16 * p / n_d, rel=1e-12)
    assert total(2) == pytest.approx(2 * p + 18 * p / n_d, rel=1e-12)
    assert total(3) == pytest.approx(18 * p / n_d, rel=1e-12)
    assert total(0) >= total(1) >= total(2) >= total(3)


@pytest.mark.parametrize("n_d", [1, 8, 64])
def test_megatron_accounting_is_theoretical_memory_usage(n_d: int) -> None:
    """Megatron-LM ``theoretical_memory_usage.py``: 18 bytes/param, 6 + 12/d with the distributed optimizer."""
    p = 1e9
    plain = model_state_bytes(framework="megatron", zero_stage=0, shard_degree=n_d, params=p, largest_layer_params=0.0,
                              layer_params=p / 36, offload_optimizer="none", offload_param="none")
    dist = model_state_bytes(framework="megatron", zero_stage=1, shard_degree=n_d, params=p, largest_layer_params=0.0,
                             layer_params=p / 36, offload_optimizer="none", offload_param="none")
    assert plain.weights_bytes + plain.gradients_bytes + plain.optimizer_bytes == pytest.approx(18 * p, rel=1e-12)
    assert dist.weights_bytes + dist.gradients_bytes + dist.optimizer_bytes == pytest.approx(
        (6 + 12 / n_d) * p, rel=1e-12)
    assert plain.gathered_params_bytes == dist.gathered_params_bytes == 0.0

"""search._runs_file: every field of the calibration schemas is modelled, checked, informational
or refused per record with a reason naming it; nothing is dropped silently."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from search import SpecError
from search._cluster_presets import NETWORK_EFFICIENCY, OMNI_PATH_NCCL_EFFICIENCY
from search._collectives import Link, all_reduce_time_s
from search._runs_file import (
    CATEGORIES,
    CHECKED,
    INFORMATIONAL,
    REFUSED_WHEN_SET,
    RUN_FIELDS,
    RecordRefused,
    load_feasibility,
    load_runs,
    megatron_bridge_defaults,
    network_bytes_per_s,
    network_efficiency,
    read_runs,
    run_from_record,
)

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
RUNS, RUNS_2024_2026 = DATA / "runs.json", DATA / "runs_2024_2026.json"
BASE = json.loads(RUNS.read_text())[0]
"""Narayanan et al. 2021 Table 1, GPT 1.7B on 32 A100 (every field known)."""


def _with(path: str, value: Any, rec: dict[str, Any] | None = None) -> dict[str, Any]:
    rec = copy.deepcopy(rec or BASE)
    section, _, key = path.rpartition(".")
    (rec[section] if section else rec)[key] = value
    return rec


def _refusal(rec: Any) -> tuple[str, str]:
    with pytest.raises(RecordRefused) as info:
        run_from_record(rec)
    return info.value.refusals[0].field, info.value.refusals[0].category


def test_every_field_of_both_data_files_is_accounted_for() -> None:
    for path in (RUNS, RUNS_2024_2026):
        for rec in json.loads(path.read_text()):
            assert set(rec) <= set(RUN_FIELDS[""]), rec["id"]
            for section in ("model", "cluster", "config", "measured"):
                assert set(rec[section]) <= set(RUN_FIELDS[section]), (rec["id"], section)


# A value the model cannot express for every field it refuses when set or checks.
NOT_MODELLED = {
    "model.active_params": (4e8, "inconsistent record"),  # a dense model
    "model.activation_detail": ("gated quick_gelu", "model architecture"),
    "cluster.nvlink_domain": (72, "cluster topology"),
    "config.expert_dp": (4, "inconsistent record"),  # a dense model
    "config.moe_dispatcher": ("flex", "mixture of experts"),
    "config.fsdp": ("torch-fsdp2", "runtime feature"),
    "config.fsdp_shard_size": (8, "inconsistent record"),  # without config.fsdp
    "config.fp8_recipe": ("blockwise (1x128 activations, 128x128 weights)", "precision or FP8 recipe"),
    "config.local_batch": (2, "runtime feature"),
    "config.torch_compile": (True, "runtime feature"),
    "config.async_tp": (True, "runtime feature"),
    "config.pipeline_schedule": ("ZBV", "runtime feature"),
    "config.optimizer": ("muon", "runtime feature"),
    "config.recompute_modules": (["core_attn"], "runtime feature"),
    "config.framework_detail": ("NeMo AutoModel", "runtime feature"),
    "config.grad_accum": (3, "inconsistent record"),
}


def test_every_refused_or_checked_field_has_a_case() -> None:
    listed = {f"{s}.{k}" for s, fields in RUN_FIELDS.items() for k, role in fields.items()
              if role in (REFUSED_WHEN_SET, CHECKED)}
    assert listed == set(NOT_MODELLED)
    assert {category for _, category in NOT_MODELLED.values()} <= set(CATEGORIES)


@pytest.mark.parametrize("field", sorted(NOT_MODELLED))
def test_a_field_the_model_cannot_express_refuses_the_record_naming_it(field: str) -> None:
    value, category = NOT_MODELLED[field]
    assert _refusal(_with(field, value)) == (field, category)


@pytest.mark.parametrize(("field", "value"), [
    ("model.head_dim", 96), ("model.active_params", None), ("model.mtp_layers", 0), ("cluster.nvlink_domain", 8),
    ("config.ep", 1), ("config.moe_dispatcher", "alltoall"), ("config.moe_a2a_overlap", False),
    ("config.fp8_recipe", "current-scaling (per-tensor)"), ("config.uneven_pipeline", False),
    ("config.first_stage_layers", None),
    ("config.torch_compile", False), ("config.async_tp", False), ("config.pipeline_schedule", "1F1B"),
    ("config.optimizer", "adamw"), ("config.grad_accum", 1), ("config.fsdp", None),
])
def test_the_value_the_model_has_is_accepted(field: str, value: Any) -> None:
    assert run_from_record(_with(field, value)) == run_from_record(BASE)


@pytest.mark.parametrize("field", sorted(f"{s}.{k}".strip(".") for s, fields in RUN_FIELDS.items()
                                         for k, role in fields.items() if role == INFORMATIONAL))
def test_an_informational_field_changes_no_spec(field: str) -> None:
    assert run_from_record(_with(field, "something else")) == run_from_record(BASE)


def test_a_field_the_schema_does_not_have_is_refused_unless_null() -> None:
    assert _refusal(_with("config.zero_bubble", True)) == ("config.zero_bubble", "unknown field")
    assert _refusal(_with("flavour", "x")) == ("flavour", "unknown field")
    assert run_from_record(_with("config.zero_bubble", None)) == run_from_record(BASE)


def test_a_record_is_refused_with_every_reason() -> None:
    rec = _with("model.moe", {"experts": 8, "topk": 2, "expert_ffn": 96, "token_drop": True},
                _with("cluster.gpu", "mi300x-192gb", _with("config.moe_dispatcher", "flex")))
    with pytest.raises(RecordRefused) as info:
        run_from_record(rec)
    assert [r.field for r in info.value.refusals] == ["cluster.gpu", "model.moe.token_drop", "config.moe_dispatcher"]
    assert isinstance(info.value, SpecError) and "model.moe.token_drop" in str(info.value)


def _moe_record(run_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(r for r in json.loads(RUNS_2024_2026.read_text()) if r["id"] == run_id))


QWEN3_H100 = "mbridge-26.02.01-h100-qwen3-30b-a3b-fp8-16g-gbs1024-mbs1-tp1pp2cp1vp12ep8"
GPT_OSS_H100 = "mbridge-25.11-h100-gpt-oss-120b-bf16-64g-gbs512-mbs4-tp1pp4cp1vp1ep8"


def test_a_gpt_oss_run_is_read_with_its_window_and_its_glu_as_the_function_its_detail_names() -> None:
    # The schema's activation is the shape class (3 matrices: swiglu); the detail names the quick-GeLU GLU.
    run = run_from_record(_moe_record(GPT_OSS_H100))
    m = run.model
    assert (m.attention_window, m.window_skip_freq, m.windowed_layers, m.activation) == (128, 2, 18, "quick-geglu")
    assert (m.head_dim, m.kv_heads, m.moe and m.moe.topk) == (64, 8, 4)
    # As printed the row states no clamp, biases or YaRN (benchmarks/data/errata.json completes them).
    assert (m.glu_clamp, m.rope_yarn, m.bias) == (None, None, False)


@pytest.mark.parametrize(("window", "field"), [
    ({"size": 128, "pattern": "first 10 layers"}, "model.attention_window.pattern"),
    ({"size": 128, "pattern": "window_attn_skip_freq=1"}, "model.attention_window.pattern"),
    ({"size": 0, "pattern": "every other layer"}, "model.attention_window.size"),
    ({"size": 128, "every": 2}, "model.attention_window.every"),
    (128, "model.attention_window"),
])
def test_a_window_pattern_the_model_cannot_express_is_refused_naming_it(window: Any, field: str) -> None:
    assert _refusal(_with("model.attention_window", window, _moe_record(GPT_OSS_H100))) == (field, "attention variant")


def test_window_patterns_give_megatrons_skip_frequency() -> None:
    rec = _moe_record(GPT_OSS_H100)
    for pattern, freq in (("window_attn_skip_freq=3", 3), ("all layers", None), (None, None)):
        run = run_from_record(_with("model.attention_window", {"size": 64, "pattern": pattern}, rec))
        assert (run.model.attention_window, run.model.window_skip_freq) == (64, freq)


def test_another_activation_detail_is_refused() -> None:
    rec = _with("model.activation", "gelu", _moe_record(GPT_OSS_H100))  # the GLU detail with a 2-matrix MLP
    assert _refusal(rec) == ("model.activation_detail", "model architecture")


def test_a_published_moe_run_is_read_with_its_experts_and_expert_parallelism() -> None:
    run = run_from_record(_moe_record(QWEN3_H100))
    moe = run.model.moe
    assert moe is not None and (moe.experts, moe.topk, moe.expert_ffn, moe.first_dense_layers) == (128, 8, 768, 0)
    assert moe.router_load == "force-balanced" and moe.capacity_factor is None
    assert run.model.head_dim == 128 and run.model.hidden // run.model.heads == 64
    assert (run.config.ep, run.config.etp, run.config.edp) == (8, 1, 1)  # 16 GPUs / (pp 2 x ep 8)
    assert run.model.params == 30532110336 and run.model.active_params == 3353020416


@pytest.mark.parametrize(("change", "field", "category"), [
    (lambda r: r["model"]["moe"].update(flavour="x"), "model.moe.flavour", "unknown field"),
    (lambda r: r["model"]["moe"].update(moe_layers=40), "model.moe.moe_layers", "inconsistent record"),
    (lambda r: r["model"].update(active_params=4e9), "model.active_params", "inconsistent record"),
    (lambda r: r["config"].update(ep=3), "ParallelConfig.ep", "invalid specs"),
    (lambda r: r["config"].update(expert_dp=4), "config.expert_dp", "inconsistent record"),
])
def test_a_moe_record_the_model_cannot_express_is_refused(change: Any, field: str, category: str) -> None:
    rec = _moe_record(QWEN3_H100)
    change(rec)
    assert _refusal(rec) == (field, category)


@pytest.mark.parametrize(("change", "field", "category"), [
    (lambda r: r.pop("config"), "config", "malformed record"),
    (lambda r: r["model"].pop("hidden"), "model.hidden", "malformed record"),
    (lambda r: r.pop("id"), "id", "malformed record"),
    (lambda r: r["model"].update(hidden="wide"), "record", "malformed record"),
    (lambda r: r["model"].update(layers=None, params=None), "model.params", "malformed record"),
    (lambda r: r["config"].update(dp=8), "config.dp", "inconsistent record"),
    (lambda r: r["config"].update(tp=5), "config.dp", "inconsistent record"),
    (lambda r: r["model"].update(activation="relu2"), "model.activation", "model architecture"),
    (lambda r: r["model"].update(position_embedding="xpos"), "model.position_embedding", "model architecture"),
    (lambda r: r["config"].update(precision="int8"), "config.precision", "precision or FP8 recipe"),
    (lambda r: r["config"].update(precision="fp32"), "config.precision", "precision or FP8 recipe"),
    (lambda r: r["config"].update(framework="other"), "config.framework", "runtime feature"),
    (lambda r: r["model"].update(heads=25), "ModelSpec.heads", "invalid specs"),
])
def test_malformed_inconsistent_or_invalid_records_are_refused(change: Any, field: str, category: str) -> None:
    rec = copy.deepcopy(BASE)
    change(rec)
    assert _refusal(rec) == (field, category)


def test_a_non_object_record_is_refused() -> None:
    assert _refusal(["not", "a", "record"]) == ("record", "malformed record")


def test_nulls_take_framework_defaults_and_open_fields_are_named() -> None:
    rec = _with("config", {**BASE["config"], "tp": 2, "dp": None, "cp": None, "sp": None, "micro_batch": None,
                           "grad_accum": 2, "recompute": None, "precision": None, "vp": None})
    run = run_from_record(rec)
    c = run.config
    # dp from num_gpus/(tp*pp*cp); micro_batch = 512 / (16 * 2) from grad_accum; cp 1; bf16.
    assert (c.dp, c.cp, c.micro_batch, c.sp, c.recompute, c.vp) == (16, 1, 16, False, "none", 1)
    assert run.training.precision == "bf16"
    assert run.unknown == ("sp", "recompute")  # micro_batch came from grad_accum; vp is 1 with pp 1
    no_ga = run_from_record(_with("config", {**rec["config"], "grad_accum": None}))
    assert no_ga.unknown == ("micro_batch", "sp", "recompute") and no_ga.config.micro_batch == 1


def test_cp_is_what_the_degrees_leave_when_dp_is_given() -> None:
    rec = _with("config", {**BASE["config"], "dp": 16, "cp": None, "grad_accum": 2}, _with("model.attention", "flash"))
    assert run_from_record(rec).config.cp == 2


def test_sp_is_open_only_under_megatron_lm() -> None:
    rec = _with("config", {**BASE["config"], "tp": 2, "dp": 16, "sp": None, "grad_accum": 2})
    assert run_from_record(rec).unknown == ("sp",)
    mds = _with("config", {**rec["config"], "framework": "megatron-deepspeed", "zero_stage": 1})
    assert run_from_record(mds).unknown == () and run_from_record(mds).config.sp is False


def test_the_dense_2024_2026_rows_on_known_gpus_load() -> None:
    records = {r["id"]: r for r in json.loads(RUNS_2024_2026.read_text())}
    run = run_from_record(records["nemo-24.07-h100-gpt3-5b-fp8-64g-gbs2048-mbs4-tp1pp1cp1vp1"])
    assert run.model.position_embedding == "learned"  # learned_absolute
    assert (run.training.precision, run.config.micro_batch, run.unknown) == ("fp8", 4, ("recompute",))


def test_read_runs_collects_refusals_and_load_runs_stops_at_the_first(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([BASE, _with("model.moe", {"experts": 8}), _with("id", "second")]))
    got = read_runs(path)
    assert [r.id for r in got.runs] == [BASE["id"], "second"]
    assert [(row.id, row.refusals[0].field) for row in got.refused] == [(BASE["id"], "model.moe.topk")]
    with pytest.raises(RecordRefused, match=r"model\.moe\.topk"):
        load_runs(path)
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(ValueError, match="not a JSON list"):
        read_runs(path)


def test_the_published_files_load_as_before() -> None:
    assert len(load_runs(RUNS)) == 260
    got = read_runs(RUNS_2024_2026)
    assert len(got.runs) + len(got.refused) == 133


def test_a_claim_configuration_field_the_claims_loader_does_not_read_is_an_error(tmp_path: Path) -> None:
    claims = json.loads((DATA / "feasibility.json").read_text())
    assert len(load_feasibility(DATA / "feasibility.json")) == 4
    claims[0]["expect"][0]["config"]["tp"] = 2
    path = tmp_path / "feasibility.json"
    path.write_text(json.dumps(claims))
    with pytest.raises(SpecError, match=r"tp not read by the claims loader"):
        load_feasibility(path)


def test_an_uneven_pipeline_is_expressed() -> None:
    """Issue 13: a record with an uneven pipeline loads, with its layout open (no source publishes the
    split) or from its first/last-stage counts."""
    rec = _with("config.uneven_pipeline", True)
    rec["config"].update(tp=1, pp=2, dp=rec["cluster"]["num_gpus"] // 2, vp=1, grad_accum=None)
    rec["model"]["layers"] = 25
    run = run_from_record(rec)
    assert "stage_layers" in run.unknown and sum(run.config.stage_layers or ()) == 25
    rec["config"].update(first_stage_layers=12, last_stage_layers=13)
    given = run_from_record(rec)
    assert given.config.stage_layers == (12, 13) and "stage_layers" not in given.unknown


# --- Megatron-FSDP rows (Megatron's ZeRO-2/3 over the whole data-parallel group) ------------------


def _fsdp(zero_stage: Any = 3, shard: Any = "dp", **config: Any) -> dict[str, Any]:
    rec = copy.deepcopy(BASE)
    rec["config"].update(zero_stage=zero_stage, fsdp="megatron-fsdp", **config)
    rec["config"]["fsdp_shard_size"] = rec["config"]["dp"] * (rec["config"].get("cp") or 1) if shard == "dp" else shard
    return rec


def test_a_megatron_fsdp_row_over_its_whole_data_parallel_group_is_megatron_zero_3() -> None:
    plain = copy.deepcopy(BASE)
    plain["config"]["zero_stage"] = 3
    assert run_from_record(_fsdp()) == run_from_record(plain)
    assert run_from_record(_fsdp(shard=None)) == run_from_record(plain)
    assert run_from_record(_fsdp()).config.zero_stage == 3


@pytest.mark.parametrize(("rec", "field", "category"), [
    (_fsdp(shard=4), "config.fsdp_shard_size", "runtime feature"),  # hybrid: replicated across groups
    (_fsdp(zero_stage=1), "config.fsdp", "inconsistent record"),
    (_fsdp(framework="megatron-deepspeed"), "config.fsdp", "runtime feature"),
])
def test_another_fsdp_is_refused_naming_the_field(rec: dict[str, Any], field: str, category: str) -> None:
    assert _refusal(rec) == (field, category)


def test_a_megatron_bridge_megatron_fsdp_row_leaves_its_activation_offload_open() -> None:
    """The recipes offload 20-40 layers' activations (cpu_offloading_num_layers) the tables do not
    print; a Megatron-FSDP row elsewhere, or one that states recomputation, keeps none."""
    rows = {r["id"]: r for r in json.loads(RUNS_2024_2026.read_text())}
    row = rows["mbridge-26.04-gb300-llama3-70b-fp8-64g-gbs256-mbs2-tp1pp1cp1vp1-fsdp64"]
    run = run_from_record(row)
    assert run.config.zero_stage == 3 and run.training.framework == "megatron"
    assert "activation_offload_layers" in run.unknown and run.config.activation_offload_layers == 0
    stated = copy.deepcopy(row)
    stated["config"]["recompute"] = "full"
    assert "activation_offload_layers" not in run_from_record(stated).unknown
    assert "activation_offload_layers" not in run_from_record(_fsdp()).unknown


def test_megatron_bridge_llama_and_qwen3_rows_take_their_providers_dropout() -> None:
    """Megatron-Bridge's Llama and Qwen3 providers set dropout 0 (Megatron-Core's default is 0.1): no
    dropout masks in the activations. A Megatron-LM row of the same shape keeps the default."""
    rows = {r["id"]: r for r in json.loads(RUNS_2024_2026.read_text())}
    bridge = rows["mbridge-26.04-gb300-llama3-70b-fp8-64g-gbs256-mbs2-tp1pp1cp1vp1-fsdp64"]
    assert run_from_record(bridge).model.dropout is False
    plain = copy.deepcopy(bridge)
    plain["software"] = "Megatron-LM"
    assert run_from_record(plain).model.dropout is True
    qwen = next(r for r in rows.values()
                if r["model"]["name"].startswith("Qwen3") and "Megatron-Bridge" in r["software"])
    assert run_from_record(qwen).model.dropout is False
    stated = copy.deepcopy(bridge)
    stated["model"]["dropout"] = True  # a record that states its dropout keeps it
    assert run_from_record(stated).model.dropout is True
    assert "dropout" not in megatron_bridge_defaults(stated, 1, "fp8")
    deepseek = next(r for r in rows.values()
                    if r["model"]["name"].startswith("DeepSeek-V3") and "Megatron-Bridge" in r["software"])
    assert "dropout" not in megatron_bridge_defaults(deepseek, 1, "fp8")  # its provider sets none


# --- The fabric a record names ------------------------------------------------------------------

BLOOM_NETWORK = ("Jean Zay (IDRIS): 8x A100 80GB per node with NVLink (4 inter-GPU links), 4x Omni-Path 100 Gb/s "
                 "per node (enhanced hypercube 8D), 2x AMD EPYC 7543 32-core, 512 GB RAM per node")


@pytest.mark.parametrize(("network", "efficiency"), [
    (BLOOM_NETWORK, OMNI_PATH_NCCL_EFFICIENCY),
    ("4x OPA 100 Gb/s per node", OMNI_PATH_NCCL_EFFICIENCY),
    ("8x 200 Gb/s HDR InfiniBand", NETWORK_EFFICIENCY),
    (None, NETWORK_EFFICIENCY),
])
def test_the_inter_node_bandwidth_is_the_line_rate_at_the_named_fabrics_nccl_efficiency(
        network: str | None, efficiency: float) -> None:
    assert network_efficiency(network) == efficiency
    if network is None:
        return
    line_rate = network_bytes_per_s(network)
    assert line_rate is not None
    node = run_from_record(_with("cluster.network", network)).cluster.node
    assert node.inter_node_bytes_per_s == pytest.approx(line_rate * efficiency)


def test_omni_paths_efficiency_reproduces_the_measured_all_reduce_it_comes_from() -> None:
    """bigscience experiments/bandwidth/all_reduce_bench-a100-n4.txt: 32 ranks on 4 Jean Zay A100 nodes,
    a 4 GB fp32 all-reduce in 1.53 s, each node's ring leaving through one 100 Gb/s NIC."""
    node_line_rate = network_bytes_per_s(BLOOM_NETWORK)
    assert node_line_rate == 50e9  # 4x 100 Gb/s
    one_nic = Link(node_line_rate / 4 * OMNI_PATH_NCCL_EFFICIENCY, 0.0, True)
    assert all_reduce_time_s(500000 * 2000 * 4, 32, one_nic) == pytest.approx(1.53, rel=0.01)


def test_a_bloom_runs_data_parallel_reduction_is_costed_at_omni_paths_rate() -> None:
    """The dp=24 pp=2 BLOOM row: its gradients cross 24 nodes, one GPU of each data-parallel ring per node
    (two per NIC), so the data-parallel time scales with the fabric's efficiency."""
    from search import predict

    rec = next(r for r in json.loads(RUNS.read_text()) if "dp24tp8pp2-mbs1" in r["id"])
    on_opa = run_from_record(rec)
    on_ib = run_from_record(_with("cluster.network", "4x 100 Gb/s HDR InfiniBand", rec))
    dp_opa, dp_ib = (predict(r.model, r.cluster, r.config, r.training).time_breakdown_s["dp_comm"]
                     for r in (on_opa, on_ib))
    assert dp_opa / dp_ib == pytest.approx(NETWORK_EFFICIENCY / OMNI_PATH_NCCL_EFFICIENCY, rel=0.01)

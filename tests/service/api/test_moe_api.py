"""Mixture-of-experts and latent-attention models through the REST service: a custom shape with
``moe``, ``mla``, ``head_dim`` and ``mtp_layers``, expert-parallel configurations (``ep``, ``etp``),
the presets with their active parameters, 422s that name the field, and stored searches and runs
that give back what was posted (SQLite and PostgreSQL, a fresh database per test)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from search import (
    MODEL_PRESETS,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    cluster_preset,
    model_preset,
    predict,
)
from service._search_request import from_stored
from service.api._resource_models import ModelPresetList, RunOut
from service.api._search_models import ConfigsOut, SearchOut
from service.request import ModelShape
from service.store import Database, Search, SearchConfig

MOE = {"experts": 8, "topk": 2, "expert_ffn": 512, "shared_experts": 1, "shared_expert_ffn": 512,
       "first_dense_layers": 1, "capacity_factor": 1.25, "router_load": "force-balanced"}
MLA = {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
SHAPE: dict[str, Any] = {
    "name": "tiny-moe", "layers": 4, "hidden": 512, "heads": 8, "ffn": 1024, "vocab": 32000, "seq_len": 1024,
    "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope", "bias": False, "moe": MOE}
LATENT: dict[str, Any] = {**SHAPE, "name": "tiny-latent", "mla": MLA, "mtp_layers": 1}
CLUSTER = {"preset": "dgx-h100"}
CONFIG = {"ep": 4, "etp": 2, "zero_stage": 1}
EP_CONFIG = ParallelConfig(dp=8, ep=4, etp=2, zero_stage=1)


def predict_body(shape: dict[str, Any] = SHAPE, **config: Any) -> dict[str, Any]:
    return {"model": {"shape": shape}, "cluster": CLUSTER, "training": {"global_batch": 64},
            "config": config or CONFIG}


def fields(r: Any) -> list[str]:
    return [d["field"] for d in r.json()["detail"]]


def served_shape(posted: dict[str, Any]) -> dict[str, Any]:
    """What the service gives back for a posted shape: the schema's defaults filled in."""
    return ModelShape.model_validate(posted).model_dump(mode="json")


# --- presets ------------------------------------------------------------------------------------

def test_presets_carry_moe_mla_and_the_active_parameters(client: TestClient) -> None:
    data = ModelPresetList.model_validate(client.get("/v1/presets/models").json()).data
    assert [m.name for m in data] == list(MODEL_PRESETS)
    moe_presets = [m for m in data if m.shape.moe is not None]
    assert moe_presets, "the presets include mixture-of-experts models"
    for m in data:
        spec = MODEL_PRESETS[m.name]
        assert m.active_params == spec.active_params
        assert (m.active_params < m.params) == (spec.moe is not None)
        assert m.shape.head_dim == spec.head_dim and m.shape.mtp_layers == spec.mtp_layers
        assert ModelSpec(**m.shape.model_dump()) == spec  # valid as model.shape, the same model
    deepseek = next(m for m in data if m.name == "deepseek-v3")
    assert deepseek.shape.moe is not None and deepseek.shape.mla is not None
    assert (deepseek.shape.moe.experts, deepseek.shape.moe.topk, deepseek.shape.moe.first_dense_layers) == (256, 8, 3)
    assert deepseek.shape.mla.kv_lora_rank == 512 and deepseek.shape.head_dim == 192
    assert deepseek.shape.mtp_layers == 1
    assert round(deepseek.params / 1e9, 1) == 671.0 and round(deepseek.active_params / 1e9, 1) == 37.6


def test_a_moe_preset_posted_back_as_a_custom_shape_predicts_the_same(client: TestClient) -> None:
    presets = {m["name"]: m for m in client.get("/v1/presets/models").json()["data"]}
    for name, config in (("mixtral-8x7b", {"tp": 2, "sp": True, "ep": 4}), ("deepseek-v3", {"tp": 1, "ep": 8})):
        common = {"cluster": {"preset": "dgx-h100", "nodes": 4}, "training": {"global_batch": 256},
                  "config": {**config, "zero_stage": 1, "recompute": "full"}}
        by_name = client.post("/v1/predict", json={"model": {"preset": name}, **common})
        custom = client.post("/v1/predict", json={"model": {"shape": presets[name]["shape"]}, **common})
        assert by_name.status_code == custom.status_code == 200, custom.text
        assert custom.json()["prediction"] == by_name.json()["prediction"]
        assert custom.json()["config"]["ep"] == config["ep"] and custom.json()["config"]["etp"] == 1


# --- predict and refusals -----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [SHAPE, LATENT], ids=["moe", "moe+mla+mtp"])
def test_a_custom_moe_model_predicts_what_search_predicts(client: TestClient, shape: dict[str, Any]) -> None:
    r = client.post("/v1/predict", json=predict_body(shape))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["config"] == dataclasses.asdict(EP_CONFIG)
    expected = predict(ModelSpec(**shape), cluster_preset("dgx-h100"), EP_CONFIG, TrainingSpec(64))
    assert out["prediction"] == expected.to_dict()


BAD: list[tuple[dict[str, Any], dict[str, Any], str, str]] = [  # (shape, config, the field named, a word of msg/fix)
    ({**SHAPE, "moe": {**MOE, "topk": 9}}, CONFIG, "model.shape.moe.topk", "experts"),
    ({**SHAPE, "moe": {**MOE, "experts": 0}}, CONFIG, "model.shape.moe.experts", "greater than or equal to 1"),
    ({**SHAPE, "moe": {**MOE, "routed": 2}}, CONFIG, "model.shape.moe.routed", "Extra inputs"),
    ({**SHAPE, "moe": {**MOE, "capacity_factor": 0.5}}, CONFIG, "model.shape.moe.capacity_factor",
     "greater than or equal to 1"),
    ({**SHAPE, "moe": {**MOE, "router_load": "random"}}, CONFIG, "model.shape.moe.router_load", "learned"),
    ({**SHAPE, "moe": {**MOE, "capacity_factor": None, "pad_to_capacity": True}}, CONFIG,
     "model.shape.moe.pad_to_capacity", "capacity_factor"),
    ({**SHAPE, "moe": {**MOE, "capacity_factor": 1.0, "pad_to_capacity": 1}}, CONFIG, "model.shape.moe.pad_to_capacity",
     "boolean"),
    ({**SHAPE, "moe": {**MOE, "shared_expert_ffn": 0}}, CONFIG, "model.shape.moe.shared_expert_ffn", "neither"),
    ({**SHAPE, "moe": {**MOE, "first_dense_layers": 4}}, CONFIG, "model.shape.moe.first_dense_layers", "fewer"),
    ({**SHAPE, "moe": {k: v for k, v in MOE.items() if k != "expert_ffn"}}, CONFIG, "model.shape.moe.expert_ffn",
     "required"),
    ({**LATENT, "kv_heads": 2}, CONFIG, "model.shape.kv_heads", "kv_heads"),
    ({**LATENT, "head_dim": 64}, CONFIG, "model.shape.head_dim", "48"),
    ({**LATENT, "mla": {**MLA, "q_rank": 1}}, CONFIG, "model.shape.mla.q_rank", "Extra inputs"),
    ({**SHAPE, "moe": None, "mtp_layers": 1}, {}, "model.shape.mtp_layers", "moe"),
    ({**SHAPE, "moe": None}, {"ep": 2}, "config.ep", "no experts"),
    (SHAPE, {"ep": 8, "etp": 2}, "config.ep", "divide"),  # ep*etp = 16 > tp*cp*dp = 8
    ({**SHAPE, "moe": {**MOE, "experts": 6, "topk": 2}}, {"ep": 4}, "config.ep", "divide"),
    (SHAPE, {"ep": 1, "etp": 0}, "config.etp", "greater than or equal to 1"),
]


def test_bad_moe_input_is_422_naming_the_field(client: TestClient, auth: dict[str, str]) -> None:
    for shape, config, field, word in BAD:  # one database for all cases
        r = client.post("/v1/predict", json={**predict_body(shape), "config": config})
        assert (r.status_code, fields(r)) == (422, [field]), (field, r.text)
        detail = r.json()["detail"][0]
        assert word in detail["msg"] + detail["fix"], (field, detail)
        assert detail["fix"], detail
    searched = client.post("/v1/searches", headers=auth, json={
        "model": {"shape": {**SHAPE, "moe": {**MOE, "topk": 9}}}, "cluster": CLUSTER, "training": {"global_batch": 64}})
    assert (searched.status_code, fields(searched)) == (422, ["model.shape.moe.topk"])
    assert client.get("/v1/searches").json()["count"] == 0


GLU: dict[str, Any] = {  # a small GPT-OSS-style model: the clamped quick-GeLU GLU and YaRN RoPE, experts only
    **SHAPE, "name": "tiny-glu", "moe": {**MOE, "shared_experts": 0, "shared_expert_ffn": 0, "first_dense_layers": 0},
    "activation": "quick-geglu", "glu_linear_offset": 1.0, "glu_clamp": 7.0,
    "rope_yarn": {"factor": 32.0, "original_max_positions": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                  "correction_range_round_to_int": False}}
YARN = GLU["rope_yarn"]
BAD_GLU: list[tuple[dict[str, Any], str, str]] = [  # (shape, the field named, a word of msg/fix)
    ({**GLU, "glu_clamp": -7.0}, "model.shape.glu_clamp", "greater than 0"),
    ({**GLU, "activation": "swiglu", "glu_linear_offset": 0.0}, "model.shape.glu_clamp", "quick-GeLU"),
    ({**GLU, "activation": "gelu"}, "model.shape.glu_linear_offset", "quick-GeLU"),
    ({**GLU, "activation": "quick-gelu"}, "model.shape.activation", "quick-geglu"),
    ({**GLU, "rope_yarn": {**YARN, "factor": 0.5}}, "model.shape.rope_yarn.factor", "greater than or equal to 1"),
    ({**GLU, "rope_yarn": {**YARN, "beta_fast": 1.0, "beta_slow": 32.0}}, "model.shape.rope_yarn.beta_fast",
     "beta_slow"),
    ({**GLU, "rope_yarn": {**YARN, "mscale": 1.0}}, "model.shape.rope_yarn.mscale", "Extra inputs"),
    ({**GLU, "position_embedding": "learned"}, "model.shape.rope_yarn", "YaRN scales RoPE"),
    ({**GLU, "rope_scaling_factor": 8.0}, "model.shape.rope_yarn", "one scaling"),
]


def test_the_glu_fields_predict_like_swiglu_yarn_costs_its_eager_rope_and_bad_values_are_422_naming_the_field(
        client: TestClient) -> None:
    swiglu = {**GLU, "activation": "swiglu", "glu_linear_offset": 0.0, "glu_clamp": None, "rope_yarn": None}
    plain = {**GLU, "rope_yarn": None, "glu_clamp": None}
    ours, theirs, eager = (client.post("/v1/predict", json=predict_body(shape, zero_stage=1))
                           for shape in (plain, swiglu, GLU))
    assert ours.status_code == theirs.status_code == eager.status_code == 200, ours.text
    assert ours.json()["prediction"] == theirs.json()["prediction"]  # the GLU's function and offset: SwiGLU's cost
    # YaRN's attention factor keeps Megatron-Core off the fused RoPE, and the clamp runs eagerly
    # (search._unfused_paths): slower.
    assert eager.json()["prediction"]["iteration_time_s"] > ours.json()["prediction"]["iteration_time_s"]
    # A dense quick-GeGLU MLP has no fused kernel in Megatron-Core (mlp.py:318): refused, naming the field.
    dense = client.post("/v1/predict", json=predict_body({**GLU, "moe": None}, zero_stage=1))
    assert (dense.status_code, fields(dense)) == (422, ["model.shape.activation"]), dense.text
    assert "Only support fusion of gelu and swiglu" in dense.text
    gpt_oss = next(m for m in client.get("/v1/presets/models").json()["data"] if m["name"] == "gpt-oss-120b")
    assert (gpt_oss["shape"]["activation"], gpt_oss["shape"]["glu_clamp"]) == ("quick-geglu", 7.0)
    assert gpt_oss["shape"]["rope_yarn"] == {"factor": 32.0, "original_max_positions": 4096, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "correction_range_round_to_int": False}
    for shape, field, word in BAD_GLU:
        r = client.post("/v1/predict", json=predict_body(shape, zero_stage=1))
        assert (r.status_code, fields(r)) == (422, [field]), (field, r.text)
        detail = r.json()["detail"][0]
        assert word in detail["msg"] + detail["fix"] and detail["fix"], (field, detail)


# --- stored searches and runs -------------------------------------------------------------------

def test_a_moe_search_and_its_ep_configurations_round_trip_through_the_database(
        client: TestClient, auth: dict[str, str], app_db: Database) -> None:
    posted = {"model": {"shape": LATENT}, "cluster": CLUSTER, "training": {"global_batch": 64}, "top": 2}
    r = client.post("/v1/searches", headers=auth, json=posted)
    assert r.status_code == 202, r.text
    search_id = r.json()["id"]
    got = SearchOut.model_validate(client.get(f"/v1/searches/{search_id}").json())
    assert got.request.model.shape is not None
    assert got.request.model.shape.model_dump(mode="json") == served_shape(LATENT)
    with app_db.session() as s:
        row = s.execute(select(Search).where(Search.id == search_id)).scalar_one()
        rebuilt = from_stored(row.request, app_db)
    assert rebuilt.model == ModelSpec(**LATENT)  # the worker searches the model that was posted
    assert rebuilt.model.moe is not None and rebuilt.model.moe.capacity_factor == 1.25

    # The worker's result, written as a worker writes it: two expert-parallel configurations.
    spec = ModelSpec(**LATENT)
    ranked = (EP_CONFIG, dataclasses.replace(EP_CONFIG, ep=8, etp=1))
    with app_db.session() as s:
        s.execute(update(Search).where(Search.id == search_id).values(status="done", progress=1.0))
        for rank, config in enumerate(ranked, 1):
            p = predict(spec, cluster_preset("dgx-h100"), config, TrainingSpec(64))
            s.add(SearchConfig(search_id=search_id, rank=rank, framework="megatron",
                               config=dataclasses.asdict(config), prediction=p.to_dict(), score=p.tokens_per_s,
                               explanation="test"))
    served = ConfigsOut.model_validate_json(client.get(f"/v1/searches/{search_id}/configs").content)
    assert [(c.config.ep, c.config.etp) for c in served.configs] == [(4, 2), (8, 1)]
    assert [c.config.model_dump() for c in served.configs] == [dataclasses.asdict(c) for c in ranked]

    # A measured run of rank 2 keeps the model and the expert-parallel configuration.
    run = client.post("/v1/runs", headers=auth, json={"search_id": search_id, "rank": 2, "iteration_time_s": 1.0})
    assert run.status_code == 201, run.text
    stored = RunOut.model_validate(client.get(f"/v1/runs/{run.json()['id']}").json())
    assert stored.config.model_dump() == dataclasses.asdict(ranked[1])
    assert stored.model.shape is not None and stored.model.shape.model_dump(mode="json") == served_shape(LATENT)
    expected = predict(spec, cluster_preset("dgx-h100"), ranked[1], TrainingSpec(64))
    assert stored.predicted_iteration_time_s == expected.iteration_time_s


def test_a_posted_moe_run_round_trips(client: TestClient, auth: dict[str, str]) -> None:
    r = client.post("/v1/runs", headers=auth, json={**predict_body(LATENT), "iteration_time_s": 0.5,
                                                    "peak_memory_bytes": 2e10})
    assert r.status_code == 201, r.text
    got = client.get(f"/v1/runs/{r.json()['id']}").json()
    assert got == r.json()
    assert got["model"]["shape"]["moe"] == {**MOE, "pad_to_capacity": False}  # the schema's default filled in
    assert got["model"]["shape"]["mla"] == MLA
    assert got["model"]["shape"]["mtp_layers"] == 1
    assert got["config"] == dataclasses.asdict(EP_CONFIG)
    assert got["predicted_iteration_time_s"] == predict(ModelSpec(**LATENT), cluster_preset("dgx-h100"), EP_CONFIG,
                                                        TrainingSpec(64)).iteration_time_s
    listed = client.get("/v1/runs", params={"model": "tiny-latent"}).json()
    assert [run["id"] for run in listed["data"]] == [got["id"]]


def test_a_dense_preset_still_has_all_its_parameters_active(client: TestClient) -> None:
    data = {m["name"]: m for m in client.get("/v1/presets/models").json()["data"]}
    llama = model_preset("llama3-70b")
    assert data["llama3-70b"]["active_params"] == data["llama3-70b"]["params"] == llama.params
    assert data["llama3-70b"]["shape"]["moe"] is None and data["llama3-70b"]["shape"]["head_dim"] == 128


def test_a_search_asks_for_the_flex_dispatcher_and_the_ep_overlap_and_its_worker_runs_them(
        client: TestClient, auth: dict[str, str], app_db: Database) -> None:
    """moe_dispatcher and moe_a2a_overlap reach the worker's search; they make another search (another
    request hash) than the plain one; on a dense model or another runtime they are a 422 naming the field."""
    posted = {"model": {"shape": SHAPE}, "cluster": CLUSTER, "training": {"global_batch": 64}, "top": 2,
              "framework": "megatron", "moe_dispatcher": "flex-hybridep", "moe_a2a_overlap": True}
    r = client.post("/v1/searches", headers=auth, json=posted)
    plain = client.post("/v1/searches", headers=auth, json={k: v for k, v in posted.items()
                                                             if not k.startswith("moe_")})
    assert r.status_code == plain.status_code == 202, r.text
    assert r.json()["id"] != plain.json()["id"]
    with app_db.session() as s:
        row = s.execute(select(Search).where(Search.id == r.json()["id"])).scalar_one()
        kwargs = from_stored(row.request, app_db).search_kwargs()
    assert (kwargs["moe_dispatcher"], kwargs["moe_a2a_overlap"]) == ("flex-hybridep", True)
    dense = {**posted, "model": {"preset": "llama3-8b"}}
    for body, field in ((dense, "moe_dispatcher"), ({**posted, "framework": "deepspeed"}, "moe_dispatcher"),
                        ({**posted, "moe_dispatcher": "flex"}, "moe_dispatcher")):
        bad = client.post("/v1/searches", headers=auth, json=body)
        assert (bad.status_code, fields(bad)) == (422, [field]), bad.text

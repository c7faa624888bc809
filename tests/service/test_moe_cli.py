"""Mixture-of-experts and latent-attention models on the command line: ``autopar presets`` shows the
active parameters, ``--json`` the moe/mla parts (each entry still a valid ``--model`` file), and
``autopar runs export`` writes MoE runs in the calibration schema's extensions
(benchmarks/data/README_2024_2026.md), which the calibration loader reads back into the specs that
ran (a fresh SQLite or PostgreSQL database per test)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

import service.cli as cli
from search import MODEL_PRESETS, TrainingSpec
from service._spec_files import load_model
from service.api import Settings, create_app
from service.api._auth import create_token
from service.request import ClusterIn, ConfigIn, ModelIn, cluster_spec, model_spec, parallel_config
from service.store import Database

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO / "benchmarks" / "data" / "runs_2024_2026.json"
SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_DATA_DIR", "AUTOPAR_WORKERS", "AUTOPAR_OPEN_READS")

MOE = {"experts": 8, "topk": 2, "expert_ffn": 512, "shared_experts": 1, "shared_expert_ffn": 512,
       "first_dense_layers": 1, "capacity_factor": 1.25, "router_load": "learned"}
MLA = {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
BASE = {"layers": 4, "hidden": 512, "heads": 8, "ffn": 1024, "vocab": 32000, "seq_len": 1024, "activation": "swiglu",
        "norm": "rmsnorm", "position_embedding": "rope", "bias": False}
H100 = {"preset": "dgx-h100"}
RUNS: dict[str, dict[str, Any]] = {  # name -> POST /v1/runs body
    "latent": {"model": {"shape": {**BASE, "name": "tiny-latent", "moe": {**MOE, "capacity_factor": None,
                                                                           "router_load": "force-balanced"},
                                   "mla": MLA, "mtp_layers": 1}},
               "cluster": H100, "training": {"global_batch": 64}, "config": {"ep": 4, "etp": 2, "zero_stage": 1},
               "iteration_time_s": 0.5, "peak_memory_bytes": 2e10},
    "capacity": {"model": {"shape": {**BASE, "name": "tiny-moe", "moe": MOE}}, "cluster": H100,
                 "training": {"global_batch": 64}, "config": {"ep": 8}, "iteration_time_s": 0.4},
    "qwen3": {"model": {"preset": "qwen3-30b-a3b"}, "cluster": {**H100, "nodes": 2}, "training": {"global_batch": 128},
              "config": {"ep": 8, "zero_stage": 1, "recompute": "full"}, "iteration_time_s": 5.0},
    "flex": {"model": {"preset": "qwen3-30b-a3b"}, "cluster": {**H100, "nodes": 2}, "training": {"global_batch": 128},
             "config": {"ep": 16, "zero_stage": 1, "moe_dispatcher": "flex-hybridep", "moe_a2a_overlap": True},
             "iteration_time_s": 4.0},
    "graphed": {"model": {"preset": "qwen3-30b-a3b"}, "cluster": {**H100, "nodes": 2},
                "training": {"global_batch": 128},
                "config": {"ep": 16, "zero_stage": 1, "moe_dispatcher": "flex-hybridep",
                           "cuda_graphs": "full-iteration"},
                "iteration_time_s": 3.5},
    "wide-heads": {"model": {"shape": {**BASE, "name": "wide-heads", "head_dim": 128}}, "cluster": H100,
                   "training": {"global_batch": 64}, "config": {"tp": 2}, "iteration_time_s": 0.3},
    # GPT-OSS's window, sinks, clamped quick-GeGLU and YaRN: written beyond the schema and read back.
    "gpt-oss": {"model": {"preset": "gpt-oss-120b"}, "cluster": {**H100, "nodes": 8},
                "training": {"global_batch": 512}, "config": {"pp": 4, "ep": 8, "zero_stage": 1, "recompute": "full"},
                "iteration_time_s": 5.8},
}


def _load_fidelity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_moe_cli_test_fidelity", REPO / "benchmarks" / "fidelity.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


Autopar = Callable[..., tuple[int, str, str]]


@pytest.fixture
def autopar(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Autopar:
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)

    def run(*argv: str, database: str | None = None) -> tuple[int, str, str]:
        if database is not None:
            monkeypatch.setenv("AUTOPAR_DATABASE_URL", database)
        capsys.readouterr()
        code = cli.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


# --- presets ------------------------------------------------------------------------------------

def test_the_presets_table_shows_the_active_parameters_of_moe_models(autopar: Autopar) -> None:
    code, out, _ = autopar("presets", "--wide")
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    assert "671.0B (37.6B active)" in rows["deepseek-v3"]
    assert "46.7B (12.9B active)" in rows["mixtral-8x7b"]
    assert "70.6B" in rows["llama3-70b"] and "active" not in rows["llama3-70b"]
    for name, spec in MODEL_PRESETS.items():
        assert ("active" in rows[name]) == (spec.moe is not None), name


def test_presets_json_has_moe_and_mla_and_each_entry_is_a_model_file(autopar: Autopar, tmp_path: Path) -> None:
    code, out, _ = autopar("presets", "--json")
    assert code == 0
    models = json.loads(out)["models"]
    deepseek = models["deepseek-v3"]
    assert deepseek["moe"] == dataclasses.asdict(MODEL_PRESETS["deepseek-v3"].moe)
    assert deepseek["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_rope_head_dim": 64,
                               "v_head_dim": 128}
    assert (deepseek["head_dim"], deepseek["mtp_layers"]) == (192, 1)
    assert models["llama3-8b"]["moe"] is None and models["llama3-8b"]["mla"] is None
    for name, entry in models.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(entry))
        assert load_model(str(path)) == dataclasses.replace(MODEL_PRESETS[name], name=name), name


# --- runs export --------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'autopar.db'}"
    return cast(str, request.getfixturevalue("pg_url"))


def _post_runs(url: str) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """RUNS posted to a fresh service database: run name -> id, and run id -> GET /v1/runs/{id}."""
    db = Database(url)
    db.upgrade()
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    ids: dict[str, str] = {}
    try:
        with TestClient(create_app(Settings(database_url=url, workers=0), db=db, migrate=False)) as client:
            for name, body in RUNS.items():
                r = client.post("/v1/runs", json=body, headers=auth)
                assert r.status_code == 201, (name, r.text)
                ids[name] = r.json()["id"]
            out = {run["id"]: run for run in client.get("/v1/runs", params={"limit": 100}).json()["data"]}
    finally:
        db.dispose()
    return ids, out


def _specs(run: dict[str, Any]) -> tuple[Any, ...]:
    cluster, _ = cluster_spec(ClusterIn.model_validate(run["cluster"]), cast(Database, None))  # no profile: no db
    config = parallel_config(ConfigIn.model_validate(run["config"]), cluster.world_size)
    training = TrainingSpec(run["training"]["global_batch"], run["training"].get("precision", "bf16"),
                            framework=run["framework"])
    return model_spec(ModelIn.model_validate(run["model"])), cluster, config, training


def test_runs_export_writes_moe_runs_that_load_into_the_specs_that_ran(database: str, autopar: Autopar,
                                                                       tmp_path: Path) -> None:
    ids, stored = _post_runs(database)
    out = tmp_path / "runs.json"
    code, stdout, err = autopar("runs", "export", "--out", str(out), database=database)
    assert (code, stdout) == (0, ""), err
    assert err.splitlines()[0] == f"exported {len(RUNS)} runs to {out} (0 skipped)", err
    records = {r["id"]: r for r in json.loads(out.read_text())}

    # The schema's own field names (the published MoE rows), plus the capacity factor that ran and
    # whether the experts' inputs were padded to it.
    published = [r for r in json.loads(PUBLISHED.read_text()) if r["model"].get("moe")]
    moe_keys = {k for r in published for k in r["model"]["moe"]}
    mla_keys = {k for r in published if r["model"].get("mla") for k in r["model"]["mla"]}
    latent = records[ids["latent"]]
    assert set(latent["model"]["moe"]) == moe_keys | {"capacity_factor", "pad_to_capacity"}
    assert set(latent["model"]["mla"]) == mla_keys
    assert latent["model"]["moe"] == {"experts": 8, "topk": 2, "expert_ffn": 512, "shared_experts": 1,
                                      "shared_expert_ffn": 512, "moe_layers": 3, "dense_layers": 1,
                                      "router": "force-balanced", "token_drop": False, "capacity_factor": None,
                                      "pad_to_capacity": False}
    assert latent["model"]["mla"] == MLA
    assert (latent["model"]["head_dim"], latent["model"]["mtp_layers"]) == (48, 1)
    model = _specs(stored[ids["latent"]])[0]
    assert latent["model"]["active_params"] == model.active_params < latent["model"]["params"] == model.params
    assert (latent["config"]["ep"], latent["config"]["etp"]) == (4, 2)
    capacity = records[ids["capacity"]]["model"]["moe"]
    assert (capacity["router"], capacity["token_drop"], capacity["capacity_factor"], capacity["pad_to_capacity"]) == (
        "learned", True, 1.25, False)
    assert "mla" not in records[ids["capacity"]]["model"] and "mtp_layers" not in records[ids["capacity"]]["model"]
    assert records[ids["qwen3"]]["model"]["head_dim"] == 128 and records[ids["qwen3"]]["config"]["ep"] == 8
    assert records[ids["graphed"]]["config"]["cuda_graphs"] == "full-iteration"
    assert records[ids["flex"]]["config"]["moe_a2a_overlap"] is True
    assert not any("cuda_graphs" in r["config"] for i, r in records.items() if i != ids["graphed"])
    wide = records[ids["wide-heads"]]
    assert wide["model"]["head_dim"] == 128 and "moe" not in wide["model"] and "ep" not in wide["config"]
    assert not {"attention_window", "softmax_sinks", "rope_yarn", "glu_clamp"} & set(wide["model"])
    oss = records[ids["gpt-oss"]]["model"]
    assert oss["attention_window"] == {"size": 128, "pattern": "window_attn_skip_freq=2"}
    assert (oss["activation"], oss["softmax_sinks"], oss["glu_linear_offset"], oss["glu_clamp"]) == (
        "quick-geglu", True, 1.0, 7.0)
    assert (oss["rope_yarn"]["factor"], oss["rope_yarn"]["original_max_positions"]) == (32.0, 4096)

    # The calibration loader reads each record back into what ran, and predicts what was stored.
    fidelity = _load_fidelity()
    loaded = fidelity.load_runs(out)
    assert {run.id for run in loaded} == set(ids.values())
    for run in loaded:
        model, cluster, config, training = _specs(stored[run.id])
        assert run.model == model
        assert (run.cluster.num_nodes, run.config, run.training) == (cluster.num_nodes, config, training)
    for result in fidelity.evaluate(loaded):
        assert result.error is None
        assert result.time_s == stored[result.run.id]["predicted_iteration_time_s"]


# --- GPT-OSS: ranked and launched on Megatron-Core ----------------------------------------------

def test_search_ranks_gpt_oss_on_megatron_without_allow_untested_and_its_top_emits(autopar: Autopar,
                                                                                   tmp_path: Path) -> None:
    from service.launch import check_megatron_args
    from service.launch._megatron_checks import arg_values

    out = tmp_path / "launch"
    code, stdout, err = autopar("search", "--model", "gpt-oss-120b", "--cluster", "dgx-h100", "--nodes", "8",
                                "--global-batch", "512", "--framework", "megatron", "--top", "3",
                                "--emit", "megatron", "--out", str(out))
    assert code == 0, err
    assert "rank" in stdout and "allow-untested" not in stdout + err
    argv = (out / "megatron_args.txt").read_text().splitlines()
    check_megatron_args(argv, world_size=64)
    v = arg_values(argv)
    assert (v["--position-embedding-type"], v["--window-size"], v["--softmax-type"]) == ("yarn", "127,0", "learnable")
    assert "--quick-geglu" in v and v["--activation-func-clamp-value"] == "7.0"
    assert v.get("--context-parallel-size", "1") == "1" and "TE >= 2.8" in err
    # pp 2: on one stage its activations (the clamp's second copy of the experts' FC1 output included) need 86 GiB.
    code, stdout, err = autopar("predict", "--model", "gpt-oss-120b", "--cluster", "dgx-h100", "--nodes", "8",
                                "--ep", "32", "--pp", "2", "--global-batch", "512", "--zero-stage", "1")
    assert code == 0 and "22 % fast" in stdout + err

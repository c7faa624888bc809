"""``autopar runs export``: the runs stored through POST /v1/runs, written in the calibration schema,
load through benchmarks/fidelity.py's loader into the specs that ran and give the errors the
service stored; runs the schema cannot describe are skipped with the reason."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

import service.cli as cli
from search import ParallelConfig, TrainingSpec, cluster_preset, default_calibration, model_preset, predict
from service._runs_cli import CALIBRATION_GPU_IDS, add_runs_parser
from service._search_request import resolve
from service.api import Settings, create_app
from service.api._auth import create_token
from service.request import ClusterIn, ConfigIn, ModelIn, SearchIn, cluster_spec, model_spec, parallel_config
from service.store import Database, Search, SearchConfig

REPO = Path(__file__).resolve().parents[2]
HARDWARE = REPO / "benchmarks" / "data" / "hardware.json"
SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_DATA_DIR", "AUTOPAR_WORKERS", "AUTOPAR_OPEN_READS")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_runs_cli_test_{name}", REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fidelity = _load("fidelity")

H100 = {"preset": "dgx-h100"}
SHAPE = {"name": "my-1b", "layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 8, "ffn": 5632, "vocab": 32000,
         "seq_len": 4096, "activation": "swiglu", "position_embedding": "rope", "bias": False, "norm": "rmsnorm"}
ACCEL = {"name": "my-accel", "memory_bytes": 96 * 2**30, "hbm_bytes_per_s": 4e12, "fp16_flop_per_s": 1.2e15,
         "bf16_flop_per_s": 1.2e15, "fp32_flop_per_s": 8e13}
RUNS: dict[str, dict[str, Any]] = {  # name -> POST /v1/runs body
    "preset": {"model": {"preset": "llama3-8b"}, "cluster": {**H100, "nodes": 2}, "training": {"global_batch": 64},
               "framework": "fsdp", "config": {"zero_stage": 3}, "iteration_time_s": 6.0,
               "peak_memory_bytes": 5e10, "notes": "nightly, NCCL 2.21"},
    "shape": {"model": {"shape": SHAPE}, "cluster": H100, "training": {"global_batch": 32, "precision": "fp16"},
              "framework": "deepspeed", "config": {"zero_stage": 1, "micro_batch": 2},
              "iteration_time_s": 1.5},
    "oom": {"model": {"preset": "gpt-1.7b"}, "cluster": {"preset": "dgx-a100-80gb"},
            "training": {"global_batch": 64}, "config": {"tp": 2, "recompute": "full"}, "oom": True},
    "custom-gpu": {"model": {"preset": "llama3-8b"}, "cluster": "a custom GPU, see below",
                   "training": {"global_batch": 8}, "framework": "fsdp", "config": {"zero_stage": 3},
                   "iteration_time_s": 2.0},
    "h100-copy": {"model": {"preset": "llama3-8b"}, "cluster": "the dgx-h100 preset renamed, see below",
                  "training": {"global_batch": 16}, "framework": "fsdp", "config": {"zero_stage": 2},
                  "iteration_time_s": 3.0, "peak_memory_bytes": 6e10},
    # Llama on megatron ran without dropout; the loader's framework default would add it, so the
    # record states it (and the other shape choices) and the loader honours them.
    "llama-megatron": {"model": {"preset": "llama3-8b"}, "cluster": H100, "training": {"global_batch": 64},
                       "config": {"tp": 2, "zero_stage": 1, "recompute": "full"}, "iteration_time_s": 9.0},
}
EXPORTED = ("preset", "shape", "oom", "h100-copy", "searched", "llama-megatron")
SKIPPED = ("custom-gpu",)


@dataclasses.dataclass(frozen=True)
class Stored:
    url: str
    ids: dict[str, str]
    """run name -> run id"""
    out: dict[str, dict[str, Any]]
    """run id -> GET /v1/runs/{id}"""
    search_id: str


def _store_search(db: Database, settings: Settings) -> str:
    """A done search of llama3-8b on one DGX H100 with one ranked FSDP configuration (as a worker writes it)."""
    body = SearchIn.model_validate({"model": {"preset": "llama3-8b"}, "cluster": H100,
                                    "training": {"global_batch": 64}, "framework": "fsdp"})
    resolved = resolve(body, db, settings)
    search_id = uuid.uuid4().hex
    config = ParallelConfig(dp=8, zero_stage=3, recompute="selective")
    p = predict(model_preset("llama3-8b"), cluster_preset("dgx-h100"), config, TrainingSpec(64, framework="fsdp"))
    with db.session() as s:
        s.add(Search(id=search_id, request_hash=resolved.request_hash(search_id), request=resolved.stored("test"),
                     model_name="llama3-8b", cluster_name="dgx-h100", num_nodes=1, framework="fsdp",
                     objective="throughput", autopar_version="test", status="done"))
        s.flush()
        s.add(SearchConfig(search_id=search_id, rank=1, framework="fsdp", config=dataclasses.asdict(config),
                           prediction=p.to_dict(), score=p.tokens_per_s, explanation="test"))
    return search_id


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    """A service database holding the runs of RUNS and one of a search's rank, posted through the API."""
    url = f"sqlite:///{tmp_path_factory.mktemp('runs') / 'autopar.db'}"
    db = Database(url)
    db.upgrade()
    settings = Settings(database_url=url, workers=0)
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    ids: dict[str, str] = {}
    with TestClient(create_app(settings, db=db, migrate=False)) as client:
        h100 = next(c for c in client.get("/v1/presets/clusters").json()["data"] if c["name"] == "dgx-h100")
        clusters = {"custom-gpu": {"gpu": ACCEL, "node": {**h100["node"], "name": "my-node"}},
                    "h100-copy": {"gpu": {**h100["gpu"], "name": "our-h100"}, "node": {**h100["node"], "name": "rack"}}}
        search_id = _store_search(db, settings)
        bodies = {name: {**body, "cluster": clusters.get(name, body["cluster"])} for name, body in RUNS.items()}
        bodies["searched"] = {"search_id": search_id, "rank": 1, "iteration_time_s": 4.0, "peak_memory_bytes": 3e10}
        for name, body in bodies.items():
            r = client.post("/v1/runs", json=body, headers=auth)
            assert r.status_code == 201, (name, r.text)
            ids[name] = r.json()["id"]
        out = {run["id"]: run for run in client.get("/v1/runs", params={"limit": 100}).json()["data"]}
    db.dispose()
    yield Stored(url, ids, out, search_id)


Autopar = Callable[..., tuple[int, str, str]]


@pytest.fixture
def autopar(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Autopar:
    """``service.cli.main`` with ``runs`` registered: by cli.py once it imports add_runs_parser, until then
    for this test only (add_admin_parsers, which build_parser calls with the subparsers, also adds it)."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    if not hasattr(cli, "add_runs_parser"):
        admin = cli.add_admin_parsers

        def admin_and_runs(sub: Any) -> None:
            admin(sub)
            add_runs_parser(sub)

        monkeypatch.setattr(cli, "add_admin_parsers", admin_and_runs)

    def run(*argv: str, database: str | None = None) -> tuple[int, str, str]:
        if database is not None:
            monkeypatch.setenv("AUTOPAR_DATABASE_URL", database)
        capsys.readouterr()
        code = cli.main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def exported(stored: Stored, autopar: Autopar, tmp_path: Path) -> tuple[Path, str]:
    """Every stored run exported to a file, and the summary printed."""
    out = tmp_path / "mine.json"
    code, stdout, err = autopar("runs", "export", "--out", str(out), database=stored.url)
    assert (code, stdout) == (0, ""), err
    return out, err


def _spec_of(run: dict[str, Any]) -> tuple[Any, ...]:
    """The specs the service predicts a GET /v1/runs body with (no profile in these runs)."""
    cluster, _ = cluster_spec(ClusterIn.model_validate(run["cluster"]), cast(Database, None))  # no profile: no db
    config = parallel_config(ConfigIn.model_validate(run["config"]), cluster.world_size)
    training = TrainingSpec(run["training"]["global_batch"], run["training"].get("precision", "bf16"),
                            framework=run["framework"])
    return model_spec(ModelIn.model_validate(run["model"])), cluster, config, training


def test_the_gpu_ids_are_those_of_hardware_json_and_of_every_cluster_preset() -> None:
    ids = [gpu["id"] for path in (HARDWARE, HARDWARE.with_name("hardware_2024_2026.json"))
           for gpu in json.loads(path.read_text())["gpus"]]
    assert set(CALIBRATION_GPU_IDS) == set(ids)
    from search._cluster_presets import NODE_GPU

    assert set(NODE_GPU.values()) <= set(CALIBRATION_GPU_IDS)


def test_the_file_holds_each_run_in_the_calibration_schema(stored: Stored, exported: tuple[Path, str]) -> None:
    out, err = exported
    records = {r["id"]: r for r in json.loads(out.read_text())}
    assert set(records) == {stored.ids[name] for name in EXPORTED}
    first = records[stored.ids["preset"]]
    llama = model_preset("llama3-8b")
    assert first["source"] == "autopar service" and first["confidence"] == "measured"
    assert first["source_locator"] == f"autopar run {first['id']}"
    assert first["model"] == {
        "name": "llama3-8b", "params": llama.params, "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
        "ffn": 14336, "vocab": llama.vocab, "seq_len": llama.seq_len, "activation": "swiglu", "attention": "flash",
        "tied_embeddings": False, "position_embedding": "rope", "bias": False, "norm": "rmsnorm", "dropout": False,
        "qkv_bias": False, "qk_norm": False, "parallel_residual": False, "norm_eps": llama.norm_eps,
        "rope_theta": llama.rope_theta, "rope_scaling_factor": llama.rope_scaling_factor,
        "rotary_percent": llama.rotary_percent}
    assert first["cluster"] == {"gpu": "h100-sxm5-80gb", "num_gpus": 16, "gpus_per_node": 8, "network": None,
                                "peak_flop_per_s_per_gpu": 989.4e12}
    assert first["config"] == {"tp": 1, "pp": 1, "dp": 16, "cp": 1, "vp": 1, "sp": False, "micro_batch": 1,
                               "global_batch": 64, "grad_accum": 4, "zero_stage": 3, "offload_optimizer": "none",
                               "offload_param": "none", "recompute": "none", "precision": "bf16", "framework": "fsdp"}
    measured = first["measured"]
    assert (measured["iteration_time_s"], measured["iteration_time_kind"], measured["oom"]) == (6.0, "measured", False)
    assert measured["tokens_per_s"] == pytest.approx(64 * llama.seq_len / 6.0)
    assert measured["peak_memory_bytes_per_gpu"] == 5e10
    run = stored.out[first["id"]]
    assert first["notes"].startswith("nightly, NCCL 2.21; measured run posted to autopar " + run["autopar_version"])

    shape = records[stored.ids["shape"]]
    assert shape["model"]["name"] == "my-1b" and shape["model"]["kv_heads"] == 8
    assert shape["config"]["precision"] == "fp16" and shape["config"]["grad_accum"] == 2  # 32 / (2 * 8)
    oom = records[stored.ids["oom"]]
    assert oom["cluster"]["gpu"] == "a100-sxm4-80gb"
    assert oom["measured"]["oom"] is True and oom["measured"]["iteration_time_s"] is None
    assert oom["measured"]["tokens_per_s"] is None and oom["model"]["dropout"] is True
    copy = records[stored.ids["h100-copy"]]
    assert copy["cluster"]["gpu"] == "h100-sxm5-80gb" and "with the figures of the dgx-h100 preset" in copy["notes"]
    searched = records[stored.ids["searched"]]
    assert searched["source_locator"] == f"autopar run {searched['id']}, search {stored.search_id} rank 1"
    assert searched["config"]["recompute"] == "selective"

    assert err.splitlines()[0] == f"exported 6 runs to {out} (1 skipped)"
    assert (f"skipped {stored.ids['custom-gpu']}: custom GPU 'my-accel' has the figures of no GPU of the "
            "calibration set (hardware.json ids: ") in err
    assert records[stored.ids["llama-megatron"]]["model"]["dropout"] is False


def test_the_file_loads_into_the_specs_that_ran(stored: Stored, exported: tuple[Path, str]) -> None:
    loaded = fidelity.load_runs(exported[0])
    assert len(loaded) == len(EXPORTED)
    for run in loaded:
        model, cluster, config, training = _spec_of(stored.out[run.id])
        assert run.model == model
        assert dataclasses.replace(run.cluster.gpu, name="") == dataclasses.replace(cluster.gpu, name="")
        assert dataclasses.replace(run.cluster.node, name="") == dataclasses.replace(cluster.node, name="")
        assert (run.cluster.num_nodes, run.config, run.training) == (cluster.num_nodes, config, training)
        assert run.source == "autopar service"


def test_fidelity_gives_the_errors_the_service_stored(stored: Stored, exported: tuple[Path, str]) -> None:
    results = fidelity.evaluate(fidelity.load_runs(exported[0]))
    assert all(r.error is None for r in results)
    for r in results:
        run = stored.out[r.run.id]
        assert run["autopar_version"]  # the same autopar posted and exports them: the errors must agree
        assert r.time_s == run["predicted_iteration_time_s"]
        assert r.memory_bytes == run["predicted_peak_memory_bytes"]
        if run["time_error"] is None:
            assert r.time_ape is None
        else:
            assert r.time_ape == pytest.approx(abs(run["time_error"]) * 100, rel=1e-12)
        if run["memory_error"] is not None:
            assert r.memory_ape == pytest.approx(abs(run["memory_error"]) * 100, rel=1e-12)
        assert r.oom_correct == run["oom_agrees"]
    summary = fidelity.summarize(results)
    assert summary["n_time"] == 5 and list(summary["per_source"]) == ["autopar service"]


def test_fit_constants_reads_the_file(exported: tuple[Path, str]) -> None:
    fit = _load("fit_constants")
    runs = fit.load_runs(exported[0])
    assert math.isfinite(fit.time_objective(default_calibration(), runs))
    assert math.isfinite(fit.memory_objective(default_calibration(), runs))


def test_json_prints_the_list_and_the_filters_select_runs(stored: Stored, autopar: Autopar,
                                                          exported: tuple[Path, str]) -> None:
    code, out, err = autopar("runs", "export", "--json", database=stored.url)
    assert code == 0 and json.loads(out) == json.loads(exported[0].read_text())
    assert err.startswith("exported 6 runs to stdout (1 skipped)")
    code, out, err = autopar("runs", "export", "--json", "--search-id", stored.search_id)
    assert code == 0 and [r["id"] for r in json.loads(out)] == [stored.ids["searched"]]
    code, out, err = autopar("runs", "export", "--json", "--model", "my-1b")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [stored.ids["shape"]]


def test_an_unknown_search_exports_nothing_and_says_so(stored: Stored, autopar: Autopar, tmp_path: Path) -> None:
    out = tmp_path / "none.json"
    code, stdout, err = autopar("runs", "export", "--out", str(out), "--search-id", "nope", database=stored.url)
    assert (code, stdout) == (0, "") and json.loads(out.read_text()) == []
    assert err == f"exported 0 runs to {out} (0 skipped)\nno stored run matches --search-id nope\n"


def test_bad_input_is_exit_2_with_the_fix(stored: Stored, autopar: Autopar, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path / "empty"))
    code, stdout, err = autopar("runs", "export", "--out", str(tmp_path / "x.json"))
    assert (code, stdout) == (2, "") and not (tmp_path / "x.json").exists()
    assert err.startswith("autopar: error: AUTOPAR_DATABASE_URL: there is no database at sqlite:///")
    assert "run `autopar db upgrade` first" in err
    code, _, err = autopar("runs", "export", "--json", "--out", "x.json", database=stored.url)
    assert code == 2 and err == ("autopar: error: --out: --json prints the runs to stdout and writes no file; "
                                 "drop --out or --json\n")
    code, _, err = autopar("runs", "export", "--out", str(tmp_path / "no" / "x.json"))
    assert code == 2 and "--out: the folder" in err and "does not exist" in err


def test_only_a_fabric_the_schema_can_state_exports_exactly() -> None:
    """The calibration schema has no fabric: a preset's non-blocking fabric (a DGX H100 SuperPOD's 1:1
    tiers) exports as the one network figure; an oversubscribed one does not."""
    from search import cluster_preset
    from search._fabric import Fabric, FabricTier
    from service._runs_cli import costs_as_non_blocking

    assert costs_as_non_blocking(cluster_preset("dgx-h100", 4).fabric)
    assert not costs_as_non_blocking(Fabric((FabricTier("leaf", nodes=4), FabricTier("spine", oversubscription=2.0))))
    assert not costs_as_non_blocking(Fabric(sharp=True))

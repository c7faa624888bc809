"""Measured runs with Megatron-Core's ``--grad-reduce-in-bf16``: a Megatron log that prints it imports as a
run predicted with it, and ``autopar runs export`` writes it into the record's config, where the
calibration loader reads it back into the TrainingSpec that ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import service.cli as cli
from search import ParallelConfig, TrainingSpec, cluster_preset, model_preset, predict
from search._runs_file import run_from_record
from service._calibrations import measured_run
from service.api import Settings, create_app
from service.api._auth import create_token
from service.logs import parse_log, run_request
from service.store import Database, Run

LOG = Path(__file__).parent / "logs" / "data" / "megatron_llama3-8b_tp2_pp2_dp4.log"
RUN = {"model": {"preset": "llama3-8b"}, "cluster": {"preset": "dgx-h100"}, "framework": "megatron",
       "config": {"tp": 2, "zero_stage": 1, "recompute": "full"}, "iteration_time_s": 9.0}


def _with_bf16_reduction(text: str) -> str:
    """The log as Megatron prints it with --grad-reduce-in-bf16: the argument in the sorted dump, and
    accumulate_allreduce_grads_in_fp32 off."""
    lines = text.splitlines()
    dump = [i for i, line in enumerate(lines) if line.startswith("  ") and " ..." in line]
    at = next(i for i in dump if lines[i].split()[0] > "grad_reduce_in_bf16")
    lines.insert(at, "  grad_reduce_in_bf16 ............................. True")
    return "\n".join(lines).replace("accumulate_allreduce_grads_in_fp32 .............. True",
                                    "accumulate_allreduce_grads_in_fp32 .............. False")


def test_a_megatron_log_with_the_flag_imports_as_a_run_predicted_with_it(tmp_path: Path) -> None:
    text = LOG.read_text()
    plain = run_request(parse_log(text, name=LOG.name), cluster={"preset": "dgx-h100"})
    flagged_log = parse_log(_with_bf16_reduction(text), name=LOG.name)
    assert flagged_log.grad_reduce_in_bf16 is True
    flagged = run_request(flagged_log, cluster={"preset": "dgx-h100"})
    assert "grad_reduce_in_bf16" not in plain["training"]
    assert flagged["training"] == {**plain["training"], "grad_reduce_in_bf16": True}

    url = f"sqlite:///{tmp_path / 'autopar.db'}"
    db = Database(url)
    db.upgrade()
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    with TestClient(create_app(Settings(database_url=url, workers=0), db=db, migrate=False)) as client:
        with_flag = client.post("/v1/runs", json=flagged, headers=auth)
        without = client.post("/v1/runs", json=plain, headers=auth)
    db.dispose()
    assert with_flag.status_code == without.status_code == 201, with_flag.text + without.text
    assert with_flag.json()["predicted_peak_memory_bytes"] < without.json()["predicted_peak_memory_bytes"]


def _export(url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[list, str]:
    """``autopar runs export --json`` on the database at ``url``: the records, and what it said on stderr."""
    for name in ("AUTOPAR_DATA_DIR", "AUTOPAR_WORKERS", "AUTOPAR_OPEN_READS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUTOPAR_DATABASE_URL", url)
    capsys.readouterr()
    assert cli.main(["runs", "export", "--json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_export_writes_the_flag_and_the_loader_reads_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'autopar.db'}"
    db = Database(url)
    db.upgrade()
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    ids = {}
    with TestClient(create_app(Settings(database_url=url, workers=0), db=db, migrate=False)) as client:
        for name, flag in (("flagged", True), ("plain", False)):
            body = {**RUN, "training": {"global_batch": 64, "grad_reduce_in_bf16": flag}}
            r = client.post("/v1/runs", json=body, headers=auth)
            assert r.status_code == 201, r.text
            ids[name] = r.json()["id"]
    # What a cluster calibration fits on (autopar calibrate, POST /v1/calibrations): the run as it was predicted.
    with db.session() as s:
        fitted = {name: measured_run(s.get(Run, run_id), db) for name, run_id in ids.items()}
    assert fitted["flagged"].training == TrainingSpec(64, framework="megatron", grad_reduce_in_bf16=True)
    assert fitted["plain"].training == TrainingSpec(64, framework="megatron")
    db.dispose()
    exported, err = _export(url, monkeypatch, capsys)
    assert err.startswith("exported 2 runs to stdout (0 skipped)"), err
    records = {r["id"]: r for r in exported}
    assert records[ids["flagged"]]["config"]["grad_reduce_in_bf16"] is True
    assert "grad_reduce_in_bf16" not in records[ids["plain"]]["config"]
    loaded = run_from_record(records[ids["flagged"]])
    assert loaded.training == TrainingSpec(64, framework="megatron", grad_reduce_in_bf16=True)
    assert not run_from_record(records[ids["plain"]]).training.grad_reduce_in_bf16
    config = ParallelConfig(dp=4, tp=2, zero_stage=1, recompute="full")
    assert loaded.config == config
    expected = predict(model_preset("llama3-8b"), cluster_preset("dgx-h100"), config, loaded.training)
    assert expected.memory_breakdown_bytes.gradients_bytes == predict(
        model_preset("llama3-8b"), cluster_preset("dgx-h100"), config,
        TrainingSpec(64)).memory_breakdown_bytes.gradients_bytes / 2


def test_export_writes_the_activation_offload_and_the_loader_reads_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A run with Megatron-Core's activation offload (--cpu-offloading-num-layers) exports with it,
    instead of being skipped as a run the calibration schema cannot describe."""
    url = f"sqlite:///{tmp_path / 'autopar.db'}"
    db = Database(url)
    db.upgrade()
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    body = {**RUN, "config": {"tp": 2, "zero_stage": 1, "recompute": "none", "activation_offload_layers": 8},
            "training": {"global_batch": 64}}
    with TestClient(create_app(Settings(database_url=url, workers=0), db=db, migrate=False)) as client:
        r = client.post("/v1/runs", json=body, headers=auth)
    db.dispose()
    assert r.status_code == 201, r.text
    exported, err = _export(url, monkeypatch, capsys)
    assert err.startswith("exported 1 run to stdout (0 skipped)"), err
    (record,) = exported
    assert record["config"]["activation_offload_layers"] == 8
    assert run_from_record(record).config == ParallelConfig(dp=4, tp=2, zero_stage=1, activation_offload_layers=8)

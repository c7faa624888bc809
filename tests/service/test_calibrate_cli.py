"""``autopar calibrate`` fits and stores a calibration of the runs in the service's database;
``autopar predict`` then uses the cluster's latest and says so (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import service.cli as cli
from service.api import Settings, create_app
from service.api._auth import create_token
from service.store import Database

SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_DATA_DIR", "AUTOPAR_WORKERS", "AUTOPAR_OPEN_READS")
MODEL = {"preset": "gpt-1.7b"}
CLUSTER = {"preset": "dgx-a100-80gb"}
SHAPES = [({"tp": 1}, 64), ({"tp": 2, "micro_batch": 2}, 64), ({"tp": 1, "pp": 2}, 128), ({"tp": 4}, 128),
          ({"tp": 2, "pp": 2, "micro_batch": 2}, 256)]
PREDICT = ["predict", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--tp", "2", "--global-batch", "64"]


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_runs: int) -> None:
    """A service database in AUTOPAR_DATA_DIR holding ``n_runs`` runs 25 % slower than predicted."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'autopar.db'}"
    db = Database(url)
    db.upgrade()
    auth = {"Authorization": f"Bearer {create_token(db, 'writer', ['write'])[1]}"}
    with TestClient(create_app(Settings(database_url=url, workers=0), db=db, migrate=False)) as client:
        for config, batch in SHAPES[:n_runs]:
            spec = {"model": MODEL, "cluster": CLUSTER, "training": {"global_batch": batch}, "config": config}
            t = client.post("/v1/predict", json=spec).json()["prediction"]["iteration_time_s"]
            assert client.post("/v1/runs", json={**spec, "iteration_time_s": 1.25 * t}, headers=auth).status_code == 201
    db.dispose()


def test_calibrate_then_predict_uses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _home(tmp_path, monkeypatch, 5)
    assert cli.main([*PREDICT, "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["calibration"]["id"] == "published"

    assert cli.main(["calibrate", "--cluster", "dgx-a100-80gb", "--folds", "3", "--json"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["n_runs"] == 5 and cal["k"] == 3 and cal["cv_mape_after"] < cal["cv_mape_before"]

    assert cli.main([*PREDICT, "--json"]) == 0
    used = json.loads(capsys.readouterr().out)
    assert used["calibration"] == {"id": cal["id"], "cv_mape": cal["cv_mape_after"], "cluster": "dgx-a100-80gb",
                                   "n_runs": 5, "defaulted": True, "gpu_rate_scale": cal["gpu_rate_scale"]}
    assert used["iteration_time_s"] > published["iteration_time_s"]
    assert cli.main(PREDICT) == 0
    assert f"calibration: {cal['id']} (the latest of this cluster" in capsys.readouterr().out
    assert cli.main([*PREDICT, "--calibration", "published", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == published["iteration_time_s"]

    search = ["search", "--model", "gpt-1.7b", "--cluster", "dgx-a100-80gb", "--global-batch", "64",
              "--framework", "megatron", "--top", "2"]
    assert cli.main([*search, "--json"]) == 0
    searched = json.loads(capsys.readouterr().out)
    assert searched["calibration"]["id"] == cal["id"]
    assert cli.main([*search, "--calibration", "published", "--json"]) == 0
    unsearched = json.loads(capsys.readouterr().out)
    assert unsearched["calibration"]["id"] == "published"
    assert searched["top"][0]["prediction"]["iteration_time_s"] > unsearched["top"][0]["prediction"]["iteration_time_s"]
    assert cli.main(search) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"cross-validated time MAPE {100 * cal['cv_mape_after']:.1f} %)")

    assert cli.main(["calibrate", "--cluster", "dgx-a100-80gb", "--folds", "3"]) == 0  # the table for people
    out = capsys.readouterr().out
    assert "hbm_efficiency" in out and "cross-validated time MAPE (3-fold)" in out


def test_refusals_exit_2_and_say_what_is_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _home(tmp_path, monkeypatch, 2)
    assert cli.main(["calibrate", "--cluster", "dgx-a100-80gb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autopar: error: --from-runs: 2 timed runs of cluster 'dgx-a100-80gb' match; "
                          "a calibration needs at least 5")
    assert cli.main(["calibrate", "--cluster", "dgx-a100-80gb", "--from-runs", "last=two"]) == 2
    assert "autopar: error: --from-runs: last=two" in capsys.readouterr().err
    assert cli.main([*PREDICT, "--calibration", "nope"]) == 2
    assert "autopar: error: --calibration: no calibration 'nope'" in capsys.readouterr().err
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path / "nowhere"))
    assert cli.main([*PREDICT, "--json"]) == 0  # no database: the published constants
    assert json.loads(capsys.readouterr().out)["calibration"]["id"] == "published"
    assert cli.main([*PREDICT, "--calibration", "abc"]) == 2
    assert "no database holds calibration 'abc'" in capsys.readouterr().err

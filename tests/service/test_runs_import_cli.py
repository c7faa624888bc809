"""``autopar runs import``: logs stored as measured runs in the service's database (SQLite and
PostgreSQL) through the API's storing path; a file that cannot be read stores nothing, is named with
its line, and makes the exit status 2 after the others are imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

import service.cli as cli
from service.store import Database, Run

DATA = Path(__file__).parent / "logs" / "data"
LLAMA = str(DATA / "megatron_llama3-8b_tp2_pp2_dp4.log")
TITAN = str(DATA / "torchtitan_llama3-8b_fsdp8_2025.log")
DEEPSPEED = str(DATA / "deepspeed_zero2_bf16_16gpu.log")
SETTINGS_ENV = ("AUTOPAR_DATABASE_URL", "AUTOPAR_DATA_DIR", "AUTOPAR_WORKERS", "AUTOPAR_OPEN_READS")

Autopar = Callable[..., tuple[int, str, str]]


@pytest.fixture
def autopar(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Autopar:
    """``autopar ARGV`` with the environment's database at ``database`` (none: an empty data directory)."""
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path / "no-database-here"))

    def run(*argv: str, database: str | None = None) -> tuple[int, str, str]:
        if database is not None:
            monkeypatch.setenv("AUTOPAR_DATABASE_URL", database)
        capsys.readouterr()
        code = cli.main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'autopar.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    db = Database(url)
    db.upgrade()
    db.dispose()
    return url


def _runs(url: str) -> list[Run]:
    db = Database(url)
    try:
        with db.session() as s:
            return list(s.execute(select(Run).order_by(Run.created_at)).scalars())
    finally:
        db.dispose()


def test_logs_are_stored_with_their_predictions(autopar: Autopar, database: str) -> None:
    code, out, err = autopar("runs", "import", LLAMA, TITAN, DEEPSPEED, "--model", "llama3-8b", "--cluster",
                             "dgx-h100", "--json", database=database)
    assert code == 0, err
    records = json.loads(out)
    assert [(r["file"], r["format"]) for r in records] == [(LLAMA, "megatron"), (TITAN, "torchtitan"),
                                                          (DEEPSPEED, "deepspeed")]
    rows = {row.id: row for row in _runs(database)}
    assert set(rows) == {r["run"]["id"] for r in records}
    for record in records:
        row = rows[record["run"]["id"]]
        assert row.iteration_time_s == pytest.approx(record["run"]["iteration_time_s"])
        assert row.predicted_iteration_time_s == pytest.approx(record["run"]["predicted_iteration_time_s"])
        assert row.request["cluster"] == {"preset": "dgx-h100", "nodes": record["run"]["cluster"]["nodes"]}
    assert rows[records[2]["run"]["id"]].request["config"]["zero_stage"] == 2


def test_a_bad_file_is_named_with_its_line_stores_nothing_and_exits_2(autopar: Autopar, database: str,
                                                                      tmp_path: Path) -> None:
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(Path(LLAMA).read_text().splitlines()[:30]) + "\n")
    code, out, err = autopar("runs", "import", str(cut), TITAN, str(tmp_path / "missing.log"), "--cluster", "dgx-h100",
                             database=database)
    assert code == 2
    assert f"autopar: error: {cut}:30: the log ends inside the argument dump that starts at line 4" in err
    assert f"autopar: error: {tmp_path / 'missing.log'}: cannot read the log" in err
    assert "2 of 3 log(s) not imported (nothing stored from them)" in err
    assert "runs imported" in out and "torchtitan" in out
    [row] = _runs(database)
    assert row.request["model"] == {"preset": "llama3-8b", "seq_len": 8192}


def test_a_dry_run_predicts_and_stores_nothing_without_a_database(autopar: Autopar) -> None:
    code, out, err = autopar("runs", "import", LLAMA, "--cluster", "dgx-h100", "--dry-run", "--json")
    assert code == 0, err
    [record] = json.loads(out)
    assert record["run"]["id"] is None and record["run"]["iteration_time_s"] == pytest.approx(7.9024)
    assert record["run"]["predicted_iteration_time_s"] > 0 and record["steady_iterations"] == 9
    code, _, err = autopar("runs", "import", DEEPSPEED, "--cluster", "dgx-h100", "--dry-run")
    assert code == 2 and "give the model: --model PRESET|FILE.json" in err


def test_the_help_documents_the_formats(autopar: Autopar) -> None:
    code, out, _ = autopar("runs", "import", "--help")
    assert code == 0
    text = " ".join(out.split())
    for words in ("megatron-deepspeed", "torchtitan", "elapsed time per iteration (ms)", "CurrSamplesPerSec",
                  "max(2, 10%)", "CUDA out of memory", "--dry-run"):
        assert words in text, words


def test_the_cluster_and_model_may_be_json_files(autopar: Autopar, tmp_path: Path) -> None:
    from search import cluster_preset, model_preset
    from service._spec_files import spec_dict

    h100 = cluster_preset("dgx-h100", 1)
    cluster = tmp_path / "our-h100.json"
    cluster.write_text(json.dumps({"gpu": spec_dict(h100.gpu), "node": spec_dict(h100.node)}))
    model = tmp_path / "our-8b.json"
    model.write_text(json.dumps({**spec_dict(model_preset("llama3-8b")), "name": "our-8b"}))
    code, out, err = autopar("runs", "import", TITAN, "--cluster", str(cluster), "--model", str(model), "--dry-run",
                             "--json")
    assert code == 0, err
    [record] = json.loads(out)
    assert record["run"]["cluster"]["nodes"] == 1 and record["run"]["cluster"]["gpu"]["name"] == h100.gpu.name
    assert record["run"]["model"]["shape"]["name"] == "our-8b" and record["run"]["model"]["shape"]["seq_len"] == 8192
    code, _, err = autopar("runs", "import", TITAN, "--cluster", str(cluster), "--nodes", "2", "--dry-run")
    assert code == 2 and "the run used 8 GPUs, the cluster has 2 node(s) of 8 GPUs" in err


def test_an_unknown_profile_is_one_error_line_and_stores_nothing(autopar: Autopar, database: str) -> None:
    """A profile the database does not hold is refused by the storing path the API shares
    (``service.runs``), printed as one ``autopar: error:`` line naming the file."""
    code, out, err = autopar("runs", "import", LLAMA, "--cluster", "dgx-h100", "--profile-id", "nosuch",
                             database=database)
    assert code == 2 and out == ""
    assert f"autopar: error: {LLAMA}: cluster.profile_id: no stored" in err and "'nosuch'" in err
    assert "Traceback" not in err and not _runs(database)

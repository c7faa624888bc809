"""The service's settings: read from AUTOPAR_* through pydantic-settings, arguments over the
environment, bad values named, and each setting documented in `autopar serve --help` and the README."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from search import SpecError
from service._settings import Settings, settings_table
from service.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_environment_sets_each_field_and_arguments_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AUTOPAR_DATABASE_URL", raising=False)
    monkeypatch.setenv("AUTOPAR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("AUTOPAR_MAX_QUEUED", "7")
    monkeypatch.setenv("AUTOPAR_LOG_FORMAT", "json")
    monkeypatch.setenv("AUTOPAR_POLL_S", "")  # empty: unset
    s = Settings.from_env()
    assert (s.max_queued, s.log_format, s.poll_s) == (7, "json", 0.5)
    assert s.database_url == f"sqlite:///{tmp_path / 'autopar.db'}"
    assert Settings.from_env(max_queued=3).max_queued == 3
    assert Settings(database_url="sqlite://", max_queued=9).max_queued == 9
    assert pickle.loads(pickle.dumps(s)) == s  # what `autopar serve` hands its spawned workers
    with pytest.raises(ValueError):
        s.max_queued = 1  # type: ignore[misc]  # frozen


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("AUTOPAR_MAX_QUEUED", "0", "0 is outside [1, 10000000]"),
    ("AUTOPAR_WORKERS", "1.5", "'1.5' is not a whole number"),
    ("AUTOPAR_LOG_LEVEL", "loud", "'loud' is not a choice; use one of debug, info, warning, error, critical"),
])
def test_a_bad_value_names_the_variable_and_the_range(name: str, value: str, problem: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SpecError) as err:
        Settings.from_env()
    assert err.value.field == name and problem in str(err.value)


def test_every_setting_is_in_serve_help_and_the_readme(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    readme = README.read_text()
    for name, default, what in settings_table():
        assert f"{name} {' '.join(what.split())}" in help_text, name
        assert f"| `{name}` | {default} | {what} |" in readme, f"README's settings table: {name}"


def test_bad_log_flags_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--log-format", "xml"]) == 2
    err = capsys.readouterr().err
    assert err == "autopar: error: --log-format: 'xml' is not one of text, json; use one of text, json\n"

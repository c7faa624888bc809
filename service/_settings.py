"""Service settings: one typed object read from the environment (``AUTOPAR_*``) by pydantic-settings.

Each field's default, range and meaning are written once, here; ``autopar serve --help`` and the
README's settings table are built from / checked against :func:`settings_table`. The object is
built by a function (:meth:`Settings.from_env`) when a command starts, never at import time, so a
test or an embedding program passes its own (``Settings(database_url=..., workers=0)``).
The API, the worker, the CLI and ``autopar serve`` all take it from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from search import SpecError

ENV_PREFIX = "AUTOPAR_"
LogFormat = Literal["text", "json"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)


class Settings(BaseSettings):
    """What ``autopar serve`` and ``autopar worker`` run with (``AUTOPAR_<FIELD>`` sets each field).

    Keyword arguments win over the environment; an empty variable counts as unset."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, extra="ignore",
                                      case_sensitive=False, str_strip_whitespace=True)

    database_url: str = Field(default="", description="the database: postgresql+psycopg://USER@HOST:5432/DB or "
                              "sqlite:///PATH (default: the SQLite file autopar.db in AUTOPAR_DATA_DIR)")
    data_dir: Path | None = Field(default=None, description="directory of the embedded SQLite database (default: "
                                  "$XDG_DATA_HOME/autopar, else ~/.local/share/autopar)")
    open_reads: bool = Field(default=True, description="GET endpoints answer without a token (writes always need "
                             "a token with the write scope)")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, le=1 << 30,
                                description="larger request bodies are answered 413")
    body_timeout_s: float = Field(default=30.0, ge=0.1, le=3600.0, description="a request body not complete this "
                                  "long after the request started is answered 408")
    workers: int = Field(default=1, ge=0, le=64, description="worker processes `autopar serve` starts beside the "
                         "API (0: searches wait for `autopar worker`)")
    lease_s: float = Field(default=30.0, ge=1.0, le=3600.0, description="a running search whose heartbeat is "
                           "older than this is claimed again by another worker")
    poll_s: float = Field(default=0.5, ge=0.01, le=60.0, description="how often an idle worker looks for a queued "
                          "search")
    max_trials: int = Field(default=5000, ge=1, le=1_000_000, description="the most budget.n_trials a search may ask")
    max_timeout_s: float = Field(default=600.0, ge=1.0, le=86_400.0, description="the most budget.timeout_s a "
                                 "search may ask, and the most one search may run on a worker")
    max_top: int = Field(default=100, ge=1, le=10_000, description="the most ranked configurations a search keeps")
    max_queued: int = Field(default=1000, ge=1, le=10_000_000, description="POST /v1/searches answers 429 while "
                            "this many searches wait in the queue")
    log_level: LogLevel = Field(default="info", description="the least severe log lines written: "
                                + ", ".join(LOG_LEVELS))
    log_format: LogFormat = Field(default="text", description="text (one line per record, for people) or json "
                                  "(one JSON object per line, with the request id)")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then the process environment: no .env file or secrets directory is read."""
        return init_settings, env_settings

    @model_validator(mode="before")
    @classmethod
    def _default_database(cls, values: Any) -> Any:
        """No URL: the SQLite file in the data directory (where service.store puts it)."""
        if isinstance(values, dict) and not str(values.get("database_url") or "").strip():
            from service.store import database_url  # SQLAlchemy: not for `autopar predict --help`

            env = {"AUTOPAR_DATA_DIR": str(values.get("data_dir") or ""),
                   "XDG_DATA_HOME": os.environ.get("XDG_DATA_HOME", "")}
            values = {**values, "database_url": database_url(env)}
        return values

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, /, **overrides: Any) -> Settings:
        """The settings of the process environment; ``env`` (``AUTOPAR_*`` names) and ``overrides``
        (field names) take precedence over it. A bad value raises SpecError naming the variable,
        what is wrong and the range to give."""
        given = {name: env[variable(name)] for name in cls.model_fields
                 if env is not None and env.get(variable(name), "") != ""}
        try:
            return cls(**{**given, **overrides})
        except ValidationError as exc:
            raise _spec_error(exc) from None


def variable(field: str) -> str:
    """The environment variable of a settings field."""
    return ENV_PREFIX + field.upper()


def _range(field: str) -> str:
    info = Settings.model_fields[field]
    low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
    if low is not None and high is not None:
        return f"give a number in [{_number(low)}, {_number(high)}]"
    if info.annotation is bool:
        return "use 1/0, true/false, yes/no or on/off"
    choices = get_args(info.annotation)
    if choices and all(isinstance(c, str) for c in choices):
        return "use one of " + ", ".join(choices)
    return "see `autopar serve --help`"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _is_float(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


_PROBLEMS = {"int_parsing": "is not a number", "int_from_float": "is not a whole number",
             "float_parsing": "is not a number", "bool_parsing": "is not a boolean",
             "literal_error": "is not a choice"}


def _spec_error(exc: ValidationError) -> SpecError:
    """The first problem, worded as the rest of autopar words bad input: the variable, the value, the range."""
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "database_url"
    value = first["input"]
    if first["type"] in ("greater_than_equal", "less_than_equal"):
        problem = f"{_number(float(value))} is outside {_range(field).removeprefix('give a number in ')}"
    elif first["type"] == "int_parsing" and _is_float(value):
        problem = f"{value!r} is not a whole number"
    else:
        problem = f"{value!r} {_PROBLEMS.get(first['type'], first['msg'])}"
    return SpecError(variable(field), problem, _range(field))


def _default_text(field: str) -> str:
    default = Settings.model_fields[field].default
    if default in (None, ""):  # computed (database_url, data_dir): the description says how
        return ""
    if isinstance(default, bool):
        return "1" if default else "0"
    return _number(default) if isinstance(default, int | float) else str(default)


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, what) of every setting, in declaration order: for ``--help`` and the README."""
    return [(variable(name), _default_text(name), info.description or "")
            for name, info in Settings.model_fields.items()]


def settings_help() -> str:
    """The settings as a ``--help`` epilog."""
    lines = ["settings (environment variables; an empty one counts as unset):"]
    for name, default, what in settings_table():
        lines.append(f"  {name:<24} {what}" + (f" (default: {default})" if default else ""))
    return "\n".join(lines)

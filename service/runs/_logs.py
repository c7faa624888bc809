"""A training log read into the ``POST /v1/runs`` body of the run it describes: what
``POST /v1/runs:import`` and ``autopar runs import`` store, one run per log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from search import SpecError
from service.logs import ParsedLog, decode_log, parse_log, run_request
from service.request import RunIn


@dataclass(frozen=True, slots=True)
class LogRun:
    """A training log and the POST /v1/runs body of the run it describes."""

    log: ParsedLog
    body: RunIn


def log_run(data: bytes, name: str, *, format: str, cluster: dict[str, Any], model: dict[str, Any] | None,
            notes: str | None = None, profile_id: str | None = None) -> LogRun:
    """A log file's bytes as the run it describes; LogParseError (file and line) or SpecError (naming the
    file) when it is not a complete log, or lacks what a run needs."""
    log = parse_log(decode_log(data, name), name=name, format=format)
    if profile_id is not None:
        cluster = {**cluster, "profile_id": profile_id}
    try:
        body = RunIn.model_validate(run_request(log, cluster=cluster, model=model, notes=notes))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise SpecError(f"{name}: {where}", err["msg"], "give the model and cluster as POST /v1/runs takes them "
                        "(GET /v1/presets lists the presets)") from None
    return LogRun(log, body)

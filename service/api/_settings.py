"""Service settings, read from the environment once at start (``AUTOPAR_*``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from search import SpecError
from service.store import database_url


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    text = env.get(name)
    if text is None or text == "":
        return default
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise SpecError(name, f"{text!r} is not a boolean", "use 1/0, true/false, yes/no or on/off")


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    text = env.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise SpecError(name, f"{text!r} is not a number", f"give a number in [{low:g}, {high:g}]") from None
    if not low <= value <= high:
        raise SpecError(name, f"{value:g} is outside [{low:g}, {high:g}]", f"give a number in [{low:g}, {high:g}]")
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """What ``autopar serve`` and ``autopar worker`` run with."""

    database_url: str
    open_reads: bool = True
    """GET endpoints answer without a token (writes always need a token with the write scope)."""
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0
    """A request body not complete this long after the request started is answered 408."""
    workers: int = 1
    """Worker processes ``autopar serve`` starts beside the API (0: searches wait for ``autopar worker``)."""
    lease_s: float = 30.0
    """A running search whose heartbeat is older than this is claimed again by another worker."""
    poll_s: float = 0.5
    max_trials: int = 5000
    max_timeout_s: float = 600.0
    max_top: int = 100
    max_queued: int = 1000
    """POST /v1/searches answers 429 while this many searches wait in the queue (a CI loop gone
    wrong must not bury the workers)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        return cls(
            database_url=database_url(env),
            open_reads=_bool(env, "AUTOPAR_OPEN_READS", True),
            max_body_bytes=int(_number(env, "AUTOPAR_MAX_BODY_BYTES", 1 << 20, 1024, 1 << 30)),
            body_timeout_s=_number(env, "AUTOPAR_BODY_TIMEOUT_S", 30.0, 0.1, 3600.0),
            workers=int(_number(env, "AUTOPAR_WORKERS", 1, 0, 64)),
            lease_s=_number(env, "AUTOPAR_LEASE_S", 30.0, 1.0, 3600.0),
            poll_s=_number(env, "AUTOPAR_POLL_S", 0.5, 0.01, 60.0),
            max_trials=int(_number(env, "AUTOPAR_MAX_TRIALS", 5000, 1, 1_000_000)),
            max_timeout_s=_number(env, "AUTOPAR_MAX_TIMEOUT_S", 600.0, 1.0, 86_400.0),
            max_top=int(_number(env, "AUTOPAR_MAX_TOP", 100, 1, 10_000)),
            max_queued=int(_number(env, "AUTOPAR_MAX_QUEUED", 1000, 1, 10_000_000)),
        )

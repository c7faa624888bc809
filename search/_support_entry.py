"""One entry of the support matrix and how a set of entries reads (:mod:`search._support` holds the
parallel configurations' entries, :mod:`search._model_support` the model features')."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from search._errors import SpecError

SupportStatus = Literal["supported", "untested", "refused"]
SUPPORT_STATUSES: tuple[SupportStatus, ...] = ("supported", "untested", "refused")


@dataclass(frozen=True, slots=True)
class SupportEntry:
    """One combination a runtime refuses or has never been shown to run."""

    runtime: str
    """``megatron``, ``deepspeed``, ``megatron-deepspeed`` or ``fsdp``."""
    name: str
    """Short identifier, stable across versions (for tests, docs and the API)."""
    status: SupportStatus
    field: str
    """The spec field an error names."""
    what: str
    """The combination and why it is refused or unproven."""
    fix: str
    """What to change."""
    citation: str
    """Where the fact comes from."""
    applies: Callable[[Any], bool]
    """Whether it applies: to a ParallelConfig (:data:`SUPPORT_MATRIX`) or a ModelSpec (:data:`MODEL_SUPPORT`)."""


def status_of(entries: tuple[SupportEntry, ...]) -> SupportStatus:
    statuses = {e.status for e in entries}
    if "refused" in statuses:
        return "refused"
    return "untested" if "untested" in statuses else "supported"


def refuse(entries: tuple[SupportEntry, ...], runtime: str) -> None:
    for e in entries:
        if e.status == "refused":
            raise SpecError(e.field, f"{runtime}: {e.what}", e.fix)


def warnings_of(entries: tuple[SupportEntry, ...], runtime: str) -> tuple[str, ...]:
    """An ``untested`` entry's warning; a ``supported`` model entry names a known limit of its cost."""
    return tuple(f"not shown to run on {runtime}: {e.what} ({e.citation})" if e.status == "untested"
                 else f"{runtime}: {e.what} ({e.citation})" for e in entries if e.status != "refused")


__all__ = ["SUPPORT_STATUSES", "SupportEntry", "SupportStatus", "refuse", "status_of", "warnings_of"]

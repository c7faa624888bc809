"""The exceptions autopar raises, each with a message that says what to do."""

from __future__ import annotations


class AutoparError(Exception):
    """Base of every error autopar raises on purpose."""


class SpecError(AutoparError, ValueError):
    """A specification field is invalid.

    The message names the field, what is wrong with its value and how to fix it,
    e.g. ``ParallelConfig.tp: 3 does not divide ModelSpec.heads=32; use a tp that
    divides 32 (1, 2, 4, 8, 16, 32)``.
    """

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}; {fix}")


class UnknownPresetError(AutoparError, KeyError):
    """A preset name that autopar does not know."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.known = known
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown {self.kind} preset {self.name!r}; choose one of: {', '.join(self.known)}"

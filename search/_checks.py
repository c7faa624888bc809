"""Small validators shared by the spec classes; each raises :class:`SpecError`."""

from __future__ import annotations

from collections.abc import Collection

from search._errors import SpecError


def positive_int(owner: str, name: str, value: object) -> int:
    """Return ``value`` if it is an int > 0, else raise naming ``owner.name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{owner}.{name}", f"{value!r} is not a positive integer", "give an integer >= 1")
    return value


def positive_number(owner: str, name: str, value: object) -> float:
    """Return ``value`` as float if it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value == float("inf"):
        raise SpecError(f"{owner}.{name}", f"{value!r} is not a positive finite number", "give a number > 0")
    return float(value)


def non_negative_number(owner: str, name: str, value: object) -> float:
    """Return ``value`` as float if it is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 or value == float("inf"):
        raise SpecError(f"{owner}.{name}", f"{value!r} is not a finite number >= 0", "give a number >= 0")
    return float(value)


def one_of(owner: str, name: str, value: object, allowed: Collection[str]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise SpecError(f"{owner}.{name}", f"{value!r} is not allowed", f"use one of: {', '.join(sorted(allowed))}")
    return str(value)


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order, in O(sqrt n) (fix hints, and the search
    space's degrees on up to 10^5 GPUs)."""
    small: list[int] = []
    large: list[int] = []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]

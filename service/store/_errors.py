"""What the store raises, under :class:`search.AutoparError` (the base of every error autopar raises
on purpose): each says which setting is involved, what is wrong and what to do. Database driver
exceptions become these in the store, at one place (``service.store._translate``); the API maps each
kind to its HTTP status in one place (``service.api._errors``), and the command line prints one
``autopar: error:`` line and exits 2.
"""

from __future__ import annotations

from search import AutoparError


class StoreError(AutoparError):
    """A database problem: ``field`` (the setting or request part involved), ``problem``, ``fix``."""

    cause: str = ""
    """The class name of the database exception this was translated from ('' when the store raised it
    itself): what an answer that must not show the driver's text may say (``service.store._translate``)."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}; {fix}")


class StorageUnavailable(StoreError):
    """The database does not answer now (down, restarting, unreachable): retrying later may work."""


class DatabaseDamaged(StoreError):
    """The database file is damaged or is not a database: retrying will not help; restore it."""


class SchemaMismatch(StoreError):
    """The database's schema is not the one this autopar expects (migrate it, or use another autopar)."""


class Conflict(StoreError):
    """The request conflicts with rows stored meanwhile (a unique or foreign key refused a write)."""


class NotFound(StoreError):
    """The request names a row the database does not hold (a search, one of its ranks, a profile)."""


class InvalidValue(StoreError):
    """A value the database cannot store or compare (a NUL character in text), refused on every backend."""


def nul_refused() -> InvalidValue:
    """The one answer to a NUL character in stored text, whichever database refused it."""
    return InvalidValue("request", "a value the database cannot store or compare (such as a NUL character)",
                        "remove NUL and other control characters from the path, query and body")

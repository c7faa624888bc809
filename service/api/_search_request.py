"""Moved to :mod:`service._search_request` (the worker rebuilds stored searches too); kept so
``service.api._search_request`` imports of other modules and tests keep working."""

from service._search_request import ResolvedSearch, check_usable, from_stored, init_fields, request_field, resolve

__all__ = ["ResolvedSearch", "check_usable", "from_stored", "init_fields", "request_field", "resolve"]

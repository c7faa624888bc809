"""The service's persistence: tables, database/migrations, and the search queue."""

from service.store._db import DATA_DIR_ENV, URL_ENV, Database, data_dir, database_url, head_revision
from service.store._errors import (
    Conflict,
    DatabaseDamaged,
    InvalidValue,
    SchemaMismatch,
    StorageUnavailable,
    StoreError,
)
from service.store._tables import ApiToken, Base, IdempotencyKey, Profile, Run, Search, SearchConfig, utc_now

__all__ = [
    "DATA_DIR_ENV",
    "URL_ENV",
    "ApiToken",
    "Base",
    "Conflict",
    "Database",
    "DatabaseDamaged",
    "IdempotencyKey",
    "InvalidValue",
    "Profile",
    "Run",
    "SchemaMismatch",
    "Search",
    "SearchConfig",
    "StorageUnavailable",
    "StoreError",
    "data_dir",
    "database_url",
    "head_revision",
    "utc_now",
]

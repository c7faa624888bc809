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
from service.store._tables import (
    DEFAULT_TENANT,
    ApiToken,
    Base,
    ClusterCalibration,
    IdempotencyKey,
    Profile,
    Run,
    Search,
    SearchConfig,
    SearchTenant,
    utc_now,
)

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_TENANT",
    "URL_ENV",
    "ApiToken",
    "Base",
    "ClusterCalibration",
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
    "SearchTenant",
    "StorageUnavailable",
    "StoreError",
    "data_dir",
    "database_url",
    "head_revision",
    "utc_now",
]

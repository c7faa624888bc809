"""Database exceptions leave the store as its own error kinds, on both backends (issue 17): the layers
above catch ``StoreError`` kinds, never SQLAlchemy's or a driver's exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.exc import DatabaseError, DataError, IntegrityError, OperationalError, ProgrammingError

from search import AutoparError
from service.store import (
    ApiToken,
    Conflict,
    Database,
    DatabaseDamaged,
    InvalidValue,
    StorageUnavailable,
    StoreError,
    add_token,
    get_token,
    list_tokens,
)
from service.store._translate import translate


def _token(token_id: str) -> ApiToken:
    return ApiToken(id=token_id, name="t", token_hash=token_id * 8, scopes="read", tenant="default")


def test_a_refused_write_is_a_conflict_and_stores_nothing(app_db: Database) -> None:
    with app_db.session() as s:
        add_token(s, row=_token("a"))
    with pytest.raises(Conflict) as err, app_db.session() as s:
        add_token(s, row=_token("b"))
        add_token(s, row=_token("a"))  # the same primary key
    assert err.value.cause == "IntegrityError" and isinstance(err.value.__cause__, IntegrityError)
    with app_db.session() as s:
        assert [t.id for t in list_tokens(s)] == ["a"]  # "b" was rolled back with it


def test_a_nul_character_is_an_invalid_value_on_both_backends(app_db: Database) -> None:
    with pytest.raises(InvalidValue), app_db.session() as s:
        get_token(s, token_id="a\x00b")


def test_a_dropped_table_is_storage_unavailable(app_db: Database) -> None:
    app_db.downgrade("base")
    with pytest.raises(StorageUnavailable) as err, app_db.session() as s:
        list_tokens(s)
    assert err.value.cause in ("OperationalError", "ProgrammingError")  # SQLite's "no such table", PostgreSQL's
    problem = err.value.problem
    assert err.value.field == "AUTOPAR_DATABASE_URL" and ("refused a request" in problem or "cannot use" in problem)


def test_a_database_that_does_not_answer_names_its_url_and_the_fix(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}", "postgresql+psycopg://autopar:secret@127.0.0.1:1/none"):
        db = Database(url)
        try:
            with pytest.raises(StorageUnavailable) as err, db.session() as s:
                list_tokens(s)
        finally:
            db.dispose()
        assert isinstance(err.value, AutoparError)
        assert "secret" not in str(err.value) and "check AUTOPAR_DATABASE_URL" in err.value.fix


@pytest.mark.parametrize(("exc", "kind"), [
    (IntegrityError("INSERT", {}, Exception("duplicate key")), Conflict),
    (DataError("SELECT", {}, Exception("invalid byte sequence: 0x00")), InvalidValue),
    (DatabaseError("SELECT", {}, Exception("database disk image is malformed")), DatabaseDamaged),
    (DatabaseError("SELECT", {}, Exception("file is not a database")), DatabaseDamaged),
    (OperationalError("SELECT", {}, Exception("database is locked")), StorageUnavailable),
    (ProgrammingError("SELECT", {}, Exception('relation "searches" does not exist')), StorageUnavailable),
])
def test_each_database_exception_has_one_kind(exc: DatabaseError, kind: type[StoreError]) -> None:
    error = translate(exc, "sqlite:////srv/autopar/autopar.db")
    assert type(error) is kind and error.cause == type(exc).__name__
    assert "SELECT" not in str(error) and "INSERT" not in str(error)  # the statement stays in the log

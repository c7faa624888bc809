"""When the database fails under a running service (schema dropped, server gone), answers are a
503 in the usual error shape with Retry-After, never a plain-text 500 (found by review)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.store import Database


def test_a_dropped_schema_is_a_503_saying_when_to_retry(client: TestClient, app_db: Database,
                                                        auth: dict[str, str]) -> None:
    assert client.get("/v1/searches").status_code == 200
    token_check = client.post("/v1/predict", json={}, headers=auth)  # caches the token first
    assert token_check.status_code == 422
    app_db.downgrade("base")
    for method, path in (("GET", "/v1/searches"), ("GET", "/v1/searches/abc"), ("GET", "/v1/profiles"),
                         ("GET", "/v1/runs")):
        r = client.request(method, path, headers=auth)
        assert r.status_code == 503, (path, r.text)
        assert r.headers["retry-after"] == "5"
        [item] = r.json()["detail"]
        assert item["field"] == "database" and "/readyz" in item["fix"]
        assert "sqlite" not in item["msg"].lower() and "select" not in item["msg"].lower()  # no internals
    assert client.get("/readyz").status_code == 503
    app_db.upgrade()
    assert client.get("/v1/searches").status_code == 200


def test_a_chunked_body_over_the_limit_is_413_not_a_parse_error(settings: object, app_db: Database) -> None:
    """Found by review: without Content-Length (chunked), the limit tripped inside FastAPI's body
    parsing and came back as a 422 'could not be read'."""
    from service._tokens import create_token
    from service.api import Settings, create_app

    small = settings.model_copy(update={"max_body_bytes": 4096}) if isinstance(settings, Settings) else None
    assert small is not None
    token = create_token(app_db, "t", ["write"])[1]
    with TestClient(create_app(small, db=app_db, migrate=False)) as c:
        def chunks():  # a generator body is sent chunked, without Content-Length
            for _ in range(10):
                yield b" " * 1000
        for path in ("/v1/predict", "/v1/searches", "/v1/profiles"):
            r = c.post(path, content=chunks(), headers={"Authorization": f"Bearer {token}",
                                                      "Content-Type": "application/json"})
            assert r.status_code == 413, (path, r.text)
            assert r.json()["detail"][0]["field"] == "body"


def test_a_nul_character_in_the_url_is_422_on_every_backend(client: TestClient) -> None:
    """Found by schemathesis on PostgreSQL: NUL in a query filter reached the database, which refused
    it (DataError) and the service answered 503. Now the URL is refused first, on both backends."""
    for url in ("/v1/runs/accuracy?search_id=ab%00cd", "/v1/searches?model=x%00", "/v1/searches/ab%00"):
        r = client.get(url)
        assert r.status_code == 422, (url, r.text)
        assert r.json()["detail"][0]["field"] == "request" and "NUL" in r.json()["detail"][0]["msg"]

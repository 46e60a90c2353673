"""API.md's error contract, for every kind of failure (framework-level ones included)."""

from __future__ import annotations

import httpx2
import pytest

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.conftest import bearer, make_key

ERROR_FIELDS = {"code", "category", "message", "retryable", "request_id"}


def assert_error(
    response: httpx2.Response, status: int, code: str, category: str
) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) >= ERROR_FIELDS
    assert (error["code"], error["category"]) == (code, category)
    assert error["request_id"] == response.headers["x-request-id"]
    return dict(error)


async def test_unknown_route_is_404_in_the_error_format(http: httpx2.AsyncClient) -> None:
    assert_error(await http.get("/v1/nothing-here"), 404, "not_found", "protocol")


async def test_wrong_method_is_405_with_allow(http: httpx2.AsyncClient) -> None:
    response = await http.delete("/healthz")
    assert_error(response, 405, "method_not_allowed", "protocol")
    assert "GET" in response.headers["allow"]


async def test_malformed_json_is_400_invalid_request(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    response = await http.post(
        "/v1/keys",
        content=b'{"roles": ["worker"',
        headers={**bearer(key), "content-type": "application/json"},
    )
    error = assert_error(response, 400, "invalid_request", "protocol")
    assert "JSON" in str(error["message"])


async def test_schema_violations_name_the_field(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    response = await http.post("/v1/keys", json={"roles": "admin"}, headers=bearer(key))
    error = assert_error(response, 400, "invalid_request", "protocol")
    assert "roles" in str(error["message"])
    unknown = await http.post(
        "/v1/keys", json={"roles": ["admin"], "rolez": 1}, headers=bearer(key)
    )
    assert "rolez" in str(assert_error(unknown, 400, "invalid_request", "protocol")["message"])


async def test_oversized_body_is_413_before_parsing(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    huge = b'{"roles": ["' + b"x" * (node.settings.max_body_bytes + 1) + b'"]}'
    response = await http.post(
        "/v1/keys", content=huge, headers={**bearer(key), "content-type": "application/json"}
    )
    assert_error(response, 413, "payload_too_large", "protocol")


async def test_streamed_oversized_body_is_cut_off(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    chunk = b"x" * 8192

    async def stream():  # type: ignore[no-untyped-def]
        for _ in range(node.settings.max_body_bytes // len(chunk) + 2):
            yield chunk

    response = await http.post(
        "/v1/keys", content=stream(), headers={**bearer(key), "content-type": "application/json"}
    )
    assert_error(response, 413, "payload_too_large", "protocol")


async def test_wrong_media_type_is_415(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    response = await http.post(
        "/v1/keys", content=b"roles=admin", headers={**bearer(key), "content-type": "text/plain"}
    )
    assert_error(response, 415, "unsupported_media_type", "protocol")


async def test_request_id_is_echoed_or_minted(http: httpx2.AsyncClient) -> None:
    mine = await http.get("/nope", headers={"x-request-id": "trace-123"})
    assert mine.headers["x-request-id"] == "trace-123"
    assert mine.json()["error"]["request_id"] == "trace-123"
    hostile = await http.get("/nope", headers={"x-request-id": "<script>" * 20})
    assert hostile.headers["x-request-id"].startswith("req_")


async def test_bad_cursor_and_limit_are_invalid_requests(
    http: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node)
    assert_error(
        await http.get("/v1/keys", params={"cursor": "%%%"}, headers=bearer(key)),
        400,
        "invalid_request",
        "protocol",
    )
    assert_error(
        await http.get("/v1/keys", params={"limit": 501}, headers=bearer(key)),
        400,
        "invalid_request",
        "protocol",
    )


@pytest.mark.parametrize("path", ["/v1/whoami", "/v1/keys", "/v1/audit"])
async def test_no_key_is_401(http: httpx2.AsyncClient, path: str) -> None:
    assert_error(await http.get(path), 401, "unauthenticated", "permission")


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer ok_abc_" + "x" * 43],
)
async def test_bad_credentials_are_401(http: httpx2.AsyncClient, header: str) -> None:
    assert_error(
        await http.get("/v1/whoami", headers={"Authorization": header}),
        401,
        "unauthenticated",
        "permission",
    )


async def test_a_wrong_secret_for_a_real_key_id_is_401(
    http: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node)
    forged = key[: key.rindex("_") + 1] + "A" * 43 if key.count("_") == 2 else key[:-4] + "AAAA"
    assert_error(
        await http.get("/v1/whoami", headers=bearer(forged)), 401, "unauthenticated", "permission"
    )


async def test_wrong_role_is_403(http: httpx2.AsyncClient, node: Node) -> None:
    worker = await make_key(node, node_scope(), Role.WORKER)
    assert_error(await http.get("/v1/keys", headers=bearer(worker)), 403, "forbidden", "permission")
    submitter = await make_key(node, node_scope(), Role.SUBMITTER)
    assert_error(
        await http.get("/v1/audit", headers=bearer(submitter)), 403, "forbidden", "permission"
    )


def node_scope():  # type: ignore[no-untyped-def]
    from tests.conftest import SCOPE

    return SCOPE


async def test_head_answers_health_probes(http: httpx2.AsyncClient) -> None:
    assert (await http.head("/healthz")).status_code == 200
    assert (await http.head("/readyz")).status_code == 200


async def test_values_too_long_are_refused_alike_on_every_dialect(
    http: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node)
    too_long = await http.post(
        "/v1/keys", json={"roles": ["worker"], "name": "n" * 201}, headers=bearer(key)
    )
    assert "name" in str(assert_error(too_long, 400, "invalid_request", "protocol")["message"])
    long_queue = await http.post(
        "/v1/keys", json={"roles": ["worker"], "queues": ["q" * 201]}, headers=bearer(key)
    )
    assert_error(long_queue, 400, "invalid_request", "protocol")


async def test_a_missing_body_says_so(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node)
    response = await http.post("/v1/keys", headers=bearer(key))
    assert "JSON body" in str(assert_error(response, 400, "invalid_request", "protocol")["message"])


async def test_failures_outside_the_router_still_get_the_envelope() -> None:
    from orbit_server.api.middleware import OrbitHTTPMiddleware
    from orbit_server.observability.metrics import Metrics

    async def broken_app(scope: object, receive: object, send: object) -> None:
        raise RuntimeError("SELECT secret FROM somewhere")

    app = OrbitHTTPMiddleware(broken_app, metrics=Metrics(), max_body_bytes=1024)
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://orbit.test"
    ) as client:
        response = await client.get("/anything")
    error = assert_error(response, 500, "internal", "transient")
    assert error["retryable"] is False
    assert "SELECT" not in response.text and "secret" not in response.text


def test_unknown_outcomes_do_not_invite_a_blind_retry() -> None:
    from orbit_server.api.errors import error_headers
    from orbit_server.errors import CommitOutcomeUnknown, DatabaseUnavailable

    assert CommitOutcomeUnknown().retryable is False
    assert "Retry-After" not in error_headers(CommitOutcomeUnknown())
    assert error_headers(DatabaseUnavailable())["Retry-After"] == "2"

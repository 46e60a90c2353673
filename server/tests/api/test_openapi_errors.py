"""The OpenAPI document describes Orbit's error envelope and optional bodies as served."""

from __future__ import annotations

from typing import Any

import httpx2
import msgspec
import pytest
from litestar.handlers import HTTPRouteHandler

from orbit_server.api.app import API_ROUTES, openapi_document
from orbit_server.api.auth import ROLES
from orbit_server.api.wire import Error, ErrorEnvelope
from orbit_server.errors import ERROR_TYPES, DefinitionInvalid, error_body
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, bearer, make_key

ENVELOPE = "#/components/schemas/ErrorEnvelope"
# Path parameters that name something the route creates rather than finds.
NO_404 = {("PUT", "/v1/queues/{name}")}
# Error answers that are not the envelope: readiness reports its checks beside the error.
OWN_BODIES = {("GET", "/readyz", "503"), ("HEAD", "/readyz", "503")}

DOCUMENT = openapi_document()


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in DOCUMENT["paths"].items()
        for method, operation in item.items()
    ]


def handler_operation(handler: HTTPRouteHandler) -> tuple[str, str, dict[str, Any]]:
    path = next(iter(handler.paths)).replace(":str}", "}")
    (method,) = handler.http_methods
    return method, path, DOCUMENT["paths"][path][method.lower()]


def references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if "$ref" in node else set()
        for value in node.values():
            found |= references(value)
        return found
    if isinstance(node, list):
        return set().union(*(references(value) for value in node))
    return set()


def litestar_error_schemas(node: Any) -> list[Any]:
    """Schemas shaped like Litestar's own ``{detail, status_code}`` error."""
    if isinstance(node, dict):
        own = [node] if {"detail", "status_code"} <= set(node.get("properties", {})) else []
        return own + [s for value in node.values() for s in litestar_error_schemas(value)]
    if isinstance(node, list):
        return [s for value in node for s in litestar_error_schemas(value)]
    return []


def test_no_schema_is_litestars_error() -> None:
    assert litestar_error_schemas(DOCUMENT) == []


@pytest.mark.parametrize(("method", "path", "operation"), operations())
def test_every_error_answer_is_the_envelope(
    method: str, path: str, operation: dict[str, Any]
) -> None:
    errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
    for status, answer in errors.items():
        if (method, path, status) in OWN_BODIES:
            continue
        schemas = {m["schema"].get("$ref") for m in answer["content"].values()}
        assert schemas == {ENVELOPE}, f"{method} {path} {status}"
        assert answer["description"].startswith("Error `"), f"{method} {path} {status}"
    for status in ("429", "503"):
        if status in errors and (method, path, status) not in OWN_BODIES:
            assert "Retry-After" in errors[status]["headers"], f"{method} {path} {status}"


def test_the_envelope_is_what_the_server_sends() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    assert schemas["ErrorEnvelope"]["properties"] == {
        "error": {"$ref": "#/components/schemas/Error"}
    }
    described = schemas["Error"]
    for kind in ERROR_TYPES:
        body = error_body(kind(details={"reasons": ["x"]}), "req_1")
        assert set(body["error"]) == set(described["properties"]), kind
        assert set(described["required"]) == set(body["error"]) - {"details"}
        assert body["error"]["category"] in described["properties"]["category"]["enum"]
        msgspec.convert(body, ErrorEnvelope, strict=True)
    assert "details" not in error_body(DefinitionInvalid(), "req_1")["error"]
    assert set(Error.__struct_fields__) == set(described["properties"])


@pytest.mark.parametrize("handler", API_ROUTES, ids=lambda h: h.handler_name)
def test_each_route_describes_the_errors_it_can_answer(handler: HTTPRouteHandler) -> None:
    method, path, operation = handler_operation(handler)
    statuses = set(operation["responses"])
    parameters = handler.parsed_fn_signature.parameters
    data = parameters.get("data")
    has_query = any(p.get("in") == "query" for p in operation.get("parameters", []))
    expected = {"401", "503"}  # every /v1 route reads the key from the database
    if handler.opt.get(ROLES):
        expected.add("403")
    if data is not None:
        expected |= {"400", "413", "415"}
    if has_query:
        expected.add("400")
    if "{" in path and (method, path) not in NO_404:
        expected.add("404")
    assert expected <= statuses, f"{method} {path} lacks {sorted(expected - statuses)}"
    if data is None and not has_query:
        assert "400" not in statuses, f"{method} {path}"


@pytest.mark.parametrize("handler", API_ROUTES, ids=lambda h: h.handler_name)
def test_a_body_is_required_unless_the_route_takes_none(handler: HTTPRouteHandler) -> None:
    method, path, operation = handler_operation(handler)
    data = handler.parsed_fn_signature.parameters.get("data")
    if data is None:
        assert "requestBody" not in operation, f"{method} {path}"
        return
    assert operation["requestBody"]["required"] is not data.is_optional, f"{method} {path}"


OPTIONAL_BODIES = [
    (method, path)
    for method, path, operation in operations()
    if operation.get("requestBody", {}).get("required") is False
]


def test_the_optional_bodies_are_those_the_reference_calls_optional() -> None:
    assert sorted(OPTIONAL_BODIES) == [
        ("POST", "/v1/schedules/{name}/pause"),
        ("POST", "/v1/tasks/{task_id}/cancel"),
        ("POST", "/v1/workflows/{workflow_id}/cancel"),
        ("POST", "/v1/workflows/{workflow_id}/pause"),
        ("POST", "/v1/workflows/{workflow_id}/resume"),
        ("POST", "/v1/workflows/{workflow_id}/steps/{key}/retry"),
        ("POST", "/v1/workflows/{workflow_id}/steps/{key}/skip"),
    ]


def concrete(path: str) -> str:
    return (
        path.replace("{name}", "nothing")
        .replace("{task_id}", "tsk_nothing")
        .replace("{workflow_id}", "wf_nothing")
        .replace("{key}", "s")
    )


@pytest.mark.parametrize(
    "request_body",
    [
        {},  # no body, no Content-Type
        {"headers": {"content-type": "application/json"}, "content": b""},
        {"json": {}},
        {"headers": {"content-type": "application/json"}, "content": b"null"},
    ],
    ids=["absent", "empty", "object", "null"],
)
@pytest.mark.parametrize(("method", "path"), OPTIONAL_BODIES)
async def test_an_optional_body_may_be_left_out(
    http: httpx2.AsyncClient,
    node: Node,
    method: str,
    path: str,
    request_body: dict[str, Any],
) -> None:
    key = await make_key(node, SCOPE, Role.SUBMITTER, Role.OPERATOR)
    headers = {**bearer(key), **request_body.get("headers", {})}
    extra = {k: v for k, v in request_body.items() if k != "headers"}
    response = await http.request(method, concrete(path), headers=headers, **extra)
    # The body was accepted: the answer is about the missing object, not about the request.
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [(m, p) for m, p, o in operations() if o.get("requestBody", {}).get("required") is True],
)
async def test_a_required_body_may_not_be_left_out(
    http: httpx2.AsyncClient, node: Node, method: str, path: str
) -> None:
    key = await make_key(node, SCOPE, Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)
    response = await http.request(method, concrete(path), headers=bearer(key))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"

"""The OpenAPI document names the key every route needs, and each operation after its handler."""

from __future__ import annotations

import re

import httpx2
import pytest
from litestar.handlers import HTTPRouteHandler

from orbit_server.api.app import API_ROUTES, HEALTH_ROUTES
from orbit_server.api.auth import takes_key
from tests.api.test_openapi_errors import DOCUMENT, handler_operation, operations

BEARER = [{"bearer": []}]
ROUTES = HEALTH_ROUTES + API_ROUTES


def test_the_document_declares_the_bearer_scheme() -> None:
    scheme = DOCUMENT["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "security" not in DOCUMENT  # per operation: health and metrics need no key


@pytest.mark.parametrize("handler", ROUTES, ids=lambda h: h.handler_name)
def test_an_operation_asks_for_a_key_when_its_route_takes_one(handler: HTTPRouteHandler) -> None:
    method, path, operation = handler_operation(handler)
    assert operation.get("security") == (BEARER if takes_key(handler) else None), (method, path)


def test_every_v1_operation_asks_for_a_key_and_no_other_does() -> None:
    for method, path, operation in operations():
        expected = BEARER if path.startswith("/v1/") else None
        assert operation.get("security") == expected, f"{method} {path}"


@pytest.mark.parametrize(("method", "path", "operation"), operations())
async def test_an_operation_without_a_key_is_refused_when_it_asks_for_one(
    http: httpx2.AsyncClient, method: str, path: str, operation: dict[str, object]
) -> None:
    response = await http.request(method, re.sub(r"\{[^}]+\}", "x", path))
    assert (response.status_code == 401) is ("security" in operation), response.text


def test_operation_ids_are_unique_and_camel_case() -> None:
    ids = [operation["operationId"] for _, _, operation in operations()]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", i)] == []
    assert {"submitTask", "listTasks", "getQueue", "bulkTasks", "healthz"} <= set(ids)


@pytest.mark.parametrize("handler", ROUTES, ids=lambda h: h.handler_name)
def test_an_operation_id_is_its_handler_name(handler: HTTPRouteHandler) -> None:
    _, _, operation = handler_operation(handler)
    snake = re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), operation["operationId"])
    assert snake == handler.handler_name

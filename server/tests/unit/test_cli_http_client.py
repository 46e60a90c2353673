"""The operator commands' HTTP client and argument handling, without a server (httpx's
MockTransport stands in for one)."""

from __future__ import annotations

import json

import httpx
import pytest

from orbit_server.cli.http_client import ApiError, OrbitHttp, Unreachable
from orbit_server.cli.operator import with_watch_default


def client(handler: httpx.MockTransport) -> OrbitHttp:
    return OrbitHttp("http://orbit.test/", "ok_secret", transport=handler)


def test_requests_carry_the_key_and_drop_empty_filters() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    with client(httpx.MockTransport(answer)) as api:
        assert api.get("/v1/tasks", {"queue": "mail", "state": None}) == {
            "items": [], "next_cursor": None,
        }  # fmt: skip
    [request] = seen
    assert request.headers["Authorization"] == "Bearer ok_secret"
    assert str(request.url) == "http://orbit.test/v1/tasks?queue=mail"


def test_pages_follow_next_cursor_to_the_last_page() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        if cursor is None:
            return httpx.Response(200, json={"items": [1, 2], "next_cursor": "c2"})
        return httpx.Response(200, json={"items": [3], "next_cursor": None})

    with client(httpx.MockTransport(answer)) as api:
        assert [page.items for page in api.pages("/v1/queues")] == [[1, 2], [3]]


def test_an_error_body_becomes_an_api_error_with_its_code() -> None:
    body = {"error": {"code": "not_found", "category": "protocol", "message": "no such task",
                      "retryable": False, "request_id": "req_1"}}  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, content=json.dumps(body))

    with client(httpx.MockTransport(answer)) as api, pytest.raises(ApiError) as raised:
        api.get("/v1/tasks/nope")
    assert (raised.value.status, raised.value.code, str(raised.value)) == (
        404, "not_found", "no such task (not_found)",
    )  # fmt: skip


def test_an_answer_without_an_error_body_still_says_its_status() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>")

    with client(httpx.MockTransport(answer)) as api, pytest.raises(ApiError) as raised:
        api.post("/v1/tasks/x/retry")
    assert raised.value.code == "http_502"


def test_no_answer_is_unreachable_without_the_key() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with client(httpx.MockTransport(answer)) as api, pytest.raises(Unreachable) as raised:
        api.get("/v1/queues")
    assert str(raised.value) == "cannot reach http://orbit.test: [Errno 111] Connection refused"
    assert "ok_secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (["queues", "show", "q", "--watch"], ["queues", "show", "q", "--watch=2"]),
        (["queues", "show", "--watch", "q"], ["queues", "show", "--watch=2", "q"]),
        (["queues", "show", "q", "--watch", "5"], ["queues", "show", "q", "--watch", "5"]),
        (["queues", "show", "q", "--watch", "0.5", "--json"],
         ["queues", "show", "q", "--watch", "0.5", "--json"]),
        (["queues", "show", "--", "--watch"], ["queues", "show", "--", "--watch"]),
    ],
)  # fmt: skip
def test_a_bare_watch_gets_the_default_interval(given: list[str], parsed: list[str]) -> None:
    assert with_watch_default(given) == parsed

"""Error mapping: every stable code of API.md, fallbacks, Retry-After, both clients."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest

from orbit_sdk import (
    AsyncClient,
    AuthenticationError,
    Client,
    ClientConfig,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
    PermissionDeniedError,
    ProtocolError,
    QueueFullError,
    RateLimitedError,
    StateConflictError,
    TransientError,
    UnavailableError,
)
from orbit_sdk._errors import error_from_http, parse_retry_after

CONFIG = ClientConfig(url="http://orbit.test", api_key="test-key")

# (status, code, category, class) for each stable code in API.md's error table.
API_ERRORS: list[tuple[int, str, str, type[OrbitError]]] = [
    (400, "invalid_request", "protocol", ProtocolError),
    (404, "not_found", "protocol", NotFoundError),
    (405, "method_not_allowed", "protocol", ProtocolError),
    (413, "payload_too_large", "protocol", ProtocolError),
    (415, "unsupported_media_type", "protocol", ProtocolError),
    (422, "definition_invalid", "protocol", ProtocolError),
    (400, "unsupported_version", "protocol", ProtocolError),
    (401, "unauthenticated", "permission", AuthenticationError),
    (403, "forbidden", "permission", PermissionDeniedError),
    (409, "idempotency_conflict", "conflict", IdempotencyConflictError),
    (409, "state_conflict", "conflict", StateConflictError),
    (409, "version_exists", "conflict", ConflictError),
    (409, "already_exists", "conflict", ConflictError),
    (429, "rate_limited", "transient", RateLimitedError),
    (429, "queue_full", "transient", QueueFullError),
    (503, "unavailable", "transient", UnavailableError),
]
API_ERROR_IDS = [code for _, code, _, _ in API_ERRORS]


def envelope(code: str, category: str | None, *, retryable: bool = False) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": code,
        "message": f"message for {code}",
        "retryable": retryable,
        "request_id": f"req-{code}",
    }
    if category is not None:
        error["category"] = category
    return {"error": error}


def error_response(status: int, code: str, category: str, **headers: str) -> httpx2.Response:
    body = envelope(code, category, retryable=category == "transient")
    return httpx2.Response(status, json=body, headers=headers)


def assert_mapped(
    error: OrbitError, status: int, code: str, category: str, cls: type[OrbitError]
) -> None:
    assert type(error) is cls
    assert (error.status, error.code, error.category) == (status, code, category)
    assert error.message == f"message for {code}"
    assert error.request_id == f"req-{code}"
    assert error.retryable is (category == "transient")


@pytest.mark.parametrize(("status", "code", "category", "cls"), API_ERRORS, ids=API_ERROR_IDS)
def test_sync_client_maps_each_api_error(
    status: int, code: str, category: str, cls: type[OrbitError]
) -> None:
    transport = httpx2.MockTransport(lambda _: error_response(status, code, category))

    with Client.from_config(CONFIG, transport=transport) as client, pytest.raises(cls) as info:
        client.request("GET", "/v1/tasks/t-1")

    assert_mapped(info.value, status, code, category, cls)


@pytest.mark.parametrize(("status", "code", "category", "cls"), API_ERRORS, ids=API_ERROR_IDS)
async def test_async_client_maps_each_api_error(
    status: int, code: str, category: str, cls: type[OrbitError]
) -> None:
    async def handler(_: httpx2.Request) -> httpx2.Response:
        return error_response(status, code, category)

    transport = httpx2.MockTransport(handler)
    async with AsyncClient.from_config(CONFIG, transport=transport) as client:
        with pytest.raises(cls) as info:
            await client.request("POST", "/v1/tasks", json={"queue": "q", "type": "t"})

    assert_mapped(info.value, status, code, category, cls)


def test_hierarchy_groups_codes_by_category() -> None:
    assert issubclass(NotFoundError, ProtocolError)
    assert issubclass(IdempotencyConflictError, ConflictError)
    assert issubclass(StateConflictError, ConflictError)
    for transient in (RateLimitedError, QueueFullError, UnavailableError):
        assert issubclass(transient, TransientError)
    for final in (ProtocolError, AuthenticationError, PermissionDeniedError, ConflictError):
        assert issubclass(final, OrbitError)
        assert not issubclass(final, TransientError)


@pytest.mark.parametrize(
    ("status", "code", "category", "cls"),
    [
        (500, "new_transient_code", "transient", TransientError),
        (409, "new_conflict_code", "conflict", ConflictError),
        (404, "gone_elsewhere", "protocol", ProtocolError),
        (403, "new_permission_code", "permission", PermissionDeniedError),
        (401, "new_permission_code", "permission", AuthenticationError),
        (429, "new_code", None, TransientError),
        (422, "new_code", None, ProtocolError),
        (500, "internal", None, OrbitError),
        (418, "teapot", "kitchen", OrbitError),
    ],
)
def test_unknown_codes_fall_back_to_category_then_status(
    status: int, code: str, category: str | None, cls: type[OrbitError]
) -> None:
    body = httpx2.Response(status, json=envelope(code, category)).content

    error = error_from_http(status, httpx2.Headers(), body)

    assert type(error) is cls
    assert error.code == code
    assert error.status == status


def test_known_code_wins_over_a_disagreeing_status() -> None:
    body = httpx2.Response(400, json=envelope("not_found", "protocol")).content

    assert type(error_from_http(400, httpx2.Headers(), body)) is NotFoundError


def test_server_retryable_verdict_is_kept() -> None:
    body = httpx2.Response(503, json=envelope("unavailable", "transient", retryable=False)).content

    error = error_from_http(503, httpx2.Headers(), body)

    assert isinstance(error, UnavailableError)
    assert error.retryable is False


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (502, TransientError, True),
        (503, TransientError, True),
        (400, ProtocolError, False),
        (500, OrbitError, False),
        (401, AuthenticationError, False),
    ],
)
def test_non_json_error_body_is_unexpected_response(
    status: int, cls: type[OrbitError], retryable: bool
) -> None:
    headers = httpx2.Headers({"content-type": "text/html"})

    error = error_from_http(status, headers, b"<html><h1>Bad Gateway</h1></html>")

    assert type(error) is cls
    assert error.code == "unexpected_response"
    assert error.retryable is retryable
    assert error.status == status
    assert "text/html" in error.message
    assert "Bad Gateway" in error.message


@pytest.mark.parametrize(
    "body",
    [b'{"detail": "not orbit"}', b'{"error": {"message": "no code"}}', b'{"error": "x"}', b"[]"],
)
def test_json_that_is_not_an_error_envelope_is_unexpected_response(body: bytes) -> None:
    error = error_from_http(400, httpx2.Headers(), body)

    assert type(error) is ProtocolError
    assert error.code == "unexpected_response"


def test_unexpected_body_is_truncated_in_the_message() -> None:
    error = error_from_http(500, httpx2.Headers(), b"x" * 10_000)

    assert len(error.message) < 400
    assert error.message.endswith("...")


def test_retry_after_header_reaches_the_error() -> None:
    transport = httpx2.MockTransport(
        lambda _: error_response(429, "rate_limited", "transient", **{"Retry-After": "7"})
    )

    with (
        Client.from_config(CONFIG, transport=transport) as client,
        pytest.raises(RateLimitedError) as info,
    ):
        client.request("GET", "/v1/queues")

    assert info.value.retry_after == 7.0


def test_transient_error_without_retry_after_has_none() -> None:
    body = httpx2.Response(503, json=envelope("unavailable", "transient")).content

    error = error_from_http(503, httpx2.Headers(), body)

    assert isinstance(error, TransientError)
    assert error.retry_after is None


def test_retry_after_http_date_is_relative_to_now() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    headers = httpx2.Headers({"Retry-After": "Wed, 01 Jan 2025 12:00:30 GMT"})
    body = httpx2.Response(503, json=envelope("unavailable", "transient")).content

    error = error_from_http(503, headers, body, now=now)

    assert isinstance(error, TransientError)
    assert error.retry_after == 30.0


NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("Wed, 01 Jan 2025 12:01:00 GMT", 60.0),
        ("Wed, 01 Jan 2025 12:01:00 -0000", 60.0),
        ("Wed, 01 Jan 2025 11:00:00 GMT", 0.0),
        ("-5", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_errors_survive_pickling() -> None:
    error = RateLimitedError(
        "slow down", code="rate_limited", request_id="r-1", status=429, retry_after=2.5
    )

    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own object

    assert type(copy) is RateLimitedError
    assert (copy.message, copy.code, copy.category) == ("slow down", "rate_limited", "transient")
    assert (copy.request_id, copy.status, copy.retry_after, copy.retryable) == (
        "r-1",
        429,
        2.5,
        True,
    )
    assert copy.args == ("slow down",)


def test_details_come_from_the_envelope_and_default_to_empty() -> None:
    body = (
        b'{"error": {"code": "method_not_allowed", "category": "protocol", "message": "m",'
        b' "details": {"allow": ["GET", "OPTIONS"]}}}'
    )
    error = error_from_http(405, httpx2.Headers(), body)
    transient = body.replace(b'"method_not_allowed", "category": "protocol"', b'"unavailable"')
    unavailable = error_from_http(503, httpx2.Headers(), transient)

    assert error.details == {"allow": ["GET", "OPTIONS"]}
    assert isinstance(unavailable, UnavailableError)
    assert unavailable.details == {"allow": ["GET", "OPTIONS"]}  # transient errors too
    assert pickle.loads(pickle.dumps(error)).details == error.details  # noqa: S301
    assert OrbitError("made by hand").details == {}
    plain = b'{"error": {"code": "not_found", "category": "protocol", "message": "m"}}'
    assert error_from_http(404, httpx2.Headers(), plain).details == {}


def test_str_carries_code_status_and_request_id() -> None:
    error = NotFoundError("task t-9 not found", request_id="req-42", status=404)

    assert str(error) == "not_found: task t-9 not found (status=404, request_id=req-42)"
    assert "NotFoundError" in repr(error)


@pytest.mark.parametrize(
    ("cls", "code", "category", "retryable"),
    [
        (NotFoundError, "not_found", "protocol", False),
        (AuthenticationError, "unauthenticated", "permission", False),
        (IdempotencyConflictError, "idempotency_conflict", "conflict", False),
        (QueueFullError, "queue_full", "transient", True),
        (OrbitError, "error", "unknown", False),
    ],
)
def test_classes_have_defaults_when_built_by_hand(
    cls: type[OrbitError], code: str, category: str, retryable: bool
) -> None:
    error = cls("made by a test double")

    assert (error.code, error.category, error.retryable) == (code, category, retryable)
    assert error.status is None

"""The synchronous Client against httpx2.MockTransport: what it sends and how it reads answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import msgspec
import pytest

import orbit_sdk
from orbit_sdk import (
    AuthenticationError,
    Client,
    ClientConfig,
    ConfigurationError,
    OrbitError,
    ProtocolError,
    Readiness,
    TransportError,
    UnavailableError,
)

CONFIG = ClientConfig(url="http://orbit.test:7070", api_key="test-key")
Responder = Callable[[httpx2.Request], httpx2.Response]


class Recorder:
    """A MockTransport handler that keeps every request it was given."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.responder(request)

    @property
    def last(self) -> httpx2.Request:
        return self.requests[-1]


def answer(status: int = 200, json: Any = None, **kwargs: Any) -> Recorder:
    return Recorder(lambda _: httpx2.Response(status, json=json, **kwargs))


def client_for(recorder: Recorder, config: ClientConfig = CONFIG, **kwargs: Any) -> Client:
    return Client.from_config(config, transport=httpx2.MockTransport(recorder), **kwargs)


def test_sends_bearer_key_user_agent_and_accept() -> None:
    recorder = answer(json={"items": [], "next_cursor": None})

    with client_for(recorder) as client:
        client.request("GET", "/v1/tasks")

    headers = recorder.last.headers
    assert headers["Authorization"] == "Bearer test-key"
    assert headers["User-Agent"] == f"orbit-sdk/{orbit_sdk.__version__}"
    assert headers["User-Agent"] == "orbit-sdk/0.2.0"
    assert headers["Accept"] == "application/json"
    assert "Content-Type" not in headers


def test_without_a_key_no_authorization_header_is_sent() -> None:
    recorder = answer(json={})

    with client_for(recorder, ClientConfig(url="http://orbit.test")) as client:
        client.request("GET", "/v1/queues")

    assert "Authorization" not in recorder.last.headers


def test_extra_headers_are_sent_but_cannot_replace_the_key() -> None:
    recorder = answer(json={})
    extra = {"X-Team": "growth", "authorization": "Bearer someone-else"}

    with client_for(recorder, headers=extra) as client:
        client.request("GET", "/v1/queues")

    assert recorder.last.headers["X-Team"] == "growth"
    assert recorder.last.headers.get_list("Authorization") == ["Bearer test-key"]


def test_json_body_is_encoded_with_content_type() -> None:
    recorder = answer(201, json={"id": "t-1", "state": "pending"})
    body = {"queue": "emails", "type": "send-welcome", "params": {"user": 42}}

    with client_for(recorder) as client:
        result = client.request("post", "/v1/tasks", json=body)

    assert result == {"id": "t-1", "state": "pending"}
    assert recorder.last.method == "POST"
    assert recorder.last.url == "http://orbit.test:7070/v1/tasks"
    assert recorder.last.headers["Content-Type"] == "application/json"
    assert msgspec.json.decode(recorder.last.content) == body


def test_msgspec_structs_are_encoded_as_json() -> None:
    class Cancel(msgspec.Struct):
        reason: str

    recorder = answer(json={"cancel_requested": True})

    with client_for(recorder) as client:
        client.request("POST", "/v1/tasks/t-1/cancel", json=Cancel(reason="typo"))

    assert msgspec.json.decode(recorder.last.content) == {"reason": "typo"}


def test_query_params_drop_none_render_bools_and_repeat_sequences() -> None:
    recorder = answer(json={"items": [], "next_cursor": None})
    params = {
        "queue": "emails",
        "cursor": None,
        "limit": 10,
        "paused": False,
        "label": ["team:growth", "tier:gold"],
    }

    with client_for(recorder) as client:
        client.request("GET", "/v1/tasks", params=params)

    query = recorder.last.url.params
    assert query["queue"] == "emails"
    assert "cursor" not in query
    assert query["limit"] == "10"
    assert query["paused"] == "false"
    assert query.get_list("label") == ["team:growth", "tier:gold"]


def test_base_url_path_prefix_is_kept() -> None:
    recorder = answer(json={})
    config = ClientConfig(url="https://gateway.test/orbit/", api_key="k")

    with client_for(recorder, config) as client:
        client.request("GET", "/v1/queues")

    assert recorder.last.url == "https://gateway.test/orbit/v1/queues"


@pytest.mark.parametrize("path", ["https://elsewhere.test/v1/tasks", "//elsewhere.test/x", "v1"])
def test_paths_outside_the_server_are_refused_before_sending(path: str) -> None:
    recorder = answer(json={})

    with client_for(recorder) as client, pytest.raises(ValueError, match="path"):
        client.request("GET", path)

    assert recorder.requests == []


def test_empty_body_returns_none() -> None:
    recorder = answer(202)

    with client_for(recorder) as client:
        assert client.request("POST", "/v1/workflows/w-1/signals", json={"name": "go"}) is None


def test_success_with_non_json_body_is_unexpected_response() -> None:
    recorder = answer(200, content=b"<html>hi</html>", headers={"Content-Type": "text/html"})

    with client_for(recorder) as client, pytest.raises(OrbitError) as info:
        client.request("GET", "/v1/queues")

    assert info.value.code == "unexpected_response"
    assert info.value.status == 200
    assert isinstance(info.value.__cause__, msgspec.DecodeError)


def test_timeout_defaults_to_config_and_can_be_overridden_per_call() -> None:
    recorder = answer(json={})
    config = ClientConfig(url="http://orbit.test", api_key="k", timeout=12.0)

    with client_for(recorder, config) as client:
        client.request("GET", "/v1/tasks/t-1")
        client.request("GET", "/v1/tasks/t-1", params={"wait_ms": 60_000}, timeout=75.0)

    default, long_poll = (request.extensions["timeout"] for request in recorder.requests)
    assert default["read"] == 12.0
    assert long_poll["read"] == 75.0


def test_error_is_raised_once_without_retrying() -> None:
    recorder = answer(
        503,
        json={
            "error": {
                "code": "unavailable",
                "category": "transient",
                "message": "draining",
                "retryable": True,
                "request_id": "r-1",
            }
        },
        headers={"Retry-After": "2"},
    )

    with client_for(recorder) as client, pytest.raises(UnavailableError) as info:
        client.request("POST", "/v1/tasks", json={"queue": "q", "type": "t"})

    assert len(recorder.requests) == 1
    assert info.value.retryable is True
    assert info.value.retry_after == 2.0


@pytest.mark.parametrize(
    "failure", [httpx2.ConnectError("connection refused"), httpx2.ReadTimeout("timed out")]
)
def test_connection_failures_become_transport_errors(failure: httpx2.TransportError) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise failure

    with client_for(Recorder(refuse)) as client, pytest.raises(TransportError) as info:
        client.request("GET", "/v1/tasks/t-1")

    error = info.value
    assert error.code == "transport_error"
    assert error.retryable is True
    assert error.status is None
    assert error.__cause__ is failure
    assert "GET http://orbit.test:7070/v1/tasks/t-1" in error.message
    assert "test-key" not in error.message


def test_health_true_on_200() -> None:
    recorder = answer(200, json={"status": "ok"})

    with client_for(recorder) as client:
        assert client.health() is True

    assert recorder.last.url.path == "/healthz"
    assert recorder.last.method == "GET"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_health_false_on_server_errors(status: int) -> None:
    with client_for(answer(status, content=b"down")) as client:
        assert client.health() is False


def test_health_raises_on_client_errors_such_as_a_wrong_base_url() -> None:
    with client_for(answer(404, content=b"no such page")) as client, pytest.raises(ProtocolError):
        client.health()


def test_health_raises_when_the_server_cannot_be_reached() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused")

    with client_for(Recorder(refuse)) as client, pytest.raises(TransportError):
        client.health()


def test_ready_on_200() -> None:
    recorder = answer(200, json={"checks": {"database": "ok", "schema": "current"}})

    with client_for(recorder) as client:
        readiness = client.ready()

    assert readiness == Readiness(ready=True, checks={"database": "ok", "schema": "current"})
    assert recorder.last.url.path == "/readyz"


def test_ready_false_on_503_with_the_body_details() -> None:
    body = {"ready": False, "checks": {"database": "unreachable", "schema": "current"}}

    with client_for(answer(503, json=body)) as client:
        readiness = client.ready()

    assert readiness.ready is False
    assert readiness.checks == {"database": "unreachable", "schema": "current"}


def test_ready_renders_non_string_check_values_as_json() -> None:
    body = {"checks": {"database": {"ok": False, "latency_ms": 12}, "pending": 3}}

    with client_for(answer(503, json=body)) as client:
        readiness = client.ready()

    assert readiness.checks == {"database": '{"ok":false,"latency_ms":12}', "pending": "3"}


def test_ready_false_on_503_error_envelope() -> None:
    body = {
        "error": {
            "code": "unavailable",
            "category": "transient",
            "message": "database down",
            "retryable": True,
            "request_id": "r",
        }
    }

    with client_for(answer(503, json=body)) as client:
        readiness = client.ready()

    assert readiness == Readiness(ready=False, checks={"error": "unavailable: database down"})


def test_ready_false_on_503_non_json_body() -> None:
    recorder = answer(503, content=b"Service Unavailable", headers={"Content-Type": "text/plain"})

    with client_for(recorder) as client:
        readiness = client.ready()

    assert readiness.ready is False
    assert readiness.checks["error"].startswith("unexpected_response: ")
    assert "Service Unavailable" in readiness.checks["error"]


def test_ready_raises_on_other_statuses() -> None:
    body = {
        "error": {
            "code": "unauthenticated",
            "category": "permission",
            "message": "no key",
            "retryable": False,
            "request_id": "r",
        }
    }

    with client_for(answer(401, json=body)) as client, pytest.raises(AuthenticationError):
        client.ready()


def test_readiness_is_frozen() -> None:
    readiness = Readiness(ready=True)

    assert readiness.checks == {}
    with pytest.raises(AttributeError):
        readiness.ready = False  # type: ignore[misc]


def test_context_manager_closes_the_client() -> None:
    with client_for(answer(json={})) as client:
        closed_inside = client.is_closed
    closed_after = client.is_closed
    client.close()  # idempotent

    assert closed_inside is False
    assert closed_after is True
    assert client.is_closed


def test_close_without_context_manager() -> None:
    client = client_for(answer(json={}))

    client.close()

    assert client.is_closed is True


def test_repr_shows_url_but_never_the_key() -> None:
    with client_for(answer(json={})) as client:
        text = repr(client)

    assert text == "Client(url='http://orbit.test:7070')"


def test_constructor_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_URL", "http://from-env.test:7070")
    monkeypatch.setenv("ORBIT_API_KEY", "env-key")
    recorder = answer(json={})

    with Client(transport=httpx2.MockTransport(recorder), timeout=3.0) as client:
        client.request("GET", "/v1/queues")

    assert recorder.last.url == "http://from-env.test:7070/v1/queues"
    assert recorder.last.headers["Authorization"] == "Bearer env-key"
    assert client.config.timeout == 3.0


def test_constructor_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_URL", "http://from-env.test:7070")
    monkeypatch.setenv("ORBIT_API_KEY", "env-key")
    recorder = answer(json={})

    with Client(
        "http://explicit.test", "explicit-key", transport=httpx2.MockTransport(recorder)
    ) as client:
        client.request("GET", "/v1/queues")

    assert recorder.last.url == "http://explicit.test/v1/queues"
    assert recorder.last.headers["Authorization"] == "Bearer explicit-key"


def test_constructor_without_url_anywhere_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBIT_URL", raising=False)

    with pytest.raises(ConfigurationError, match="ORBIT_URL"):
        Client()

"""AsyncClient: the same contract as Client, over MockTransport and a real ASGI app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx2
import msgspec
import pytest

import orbit_sdk
from orbit_sdk import (
    AsyncClient,
    ClientConfig,
    ConfigurationError,
    NotFoundError,
    QueueFullError,
    Readiness,
    TransportError,
)

CONFIG = ClientConfig(url="http://orbit.test:7070", api_key="test-key")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class AsyncRecorder:
    """An async MockTransport handler that keeps every request and answers with a fixed reply."""

    def __init__(self, status: int = 200, json: Any = None, **kwargs: Any) -> None:
        self.reply = (status, json, kwargs)
        self.requests: list[httpx2.Request] = []

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        status, json, kwargs = self.reply
        return httpx2.Response(status, json=json, **kwargs)

    @property
    def last(self) -> httpx2.Request:
        return self.requests[-1]


def client_for(recorder: AsyncRecorder, config: ClientConfig = CONFIG) -> AsyncClient:
    return AsyncClient.from_config(config, transport=httpx2.MockTransport(recorder))


async def test_sends_headers_and_json_body() -> None:
    recorder = AsyncRecorder(201, json={"id": "t-1"})

    async with client_for(recorder) as client:
        result = await client.request("POST", "/v1/tasks", json={"queue": "q", "type": "t"})

    assert result == {"id": "t-1"}
    request = recorder.last
    assert request.headers["Authorization"] == "Bearer test-key"
    assert request.headers["User-Agent"] == f"orbit-sdk/{orbit_sdk.__version__}"
    assert request.headers["Content-Type"] == "application/json"
    assert msgspec.json.decode(request.content) == {"queue": "q", "type": "t"}


async def test_maps_errors_with_retry_after() -> None:
    body = {
        "error": {
            "code": "queue_full",
            "category": "transient",
            "message": "full",
            "retryable": True,
            "request_id": "r-7",
        }
    }
    recorder = AsyncRecorder(429, json=body, headers={"Retry-After": "15"})

    async with client_for(recorder) as client:
        with pytest.raises(QueueFullError) as info:
            await client.request("POST", "/v1/tasks", json={"queue": "q", "type": "t"})

    assert info.value.retry_after == 15.0
    assert info.value.request_id == "r-7"
    assert len(recorder.requests) == 1


async def test_connection_failure_becomes_transport_error() -> None:
    failure = httpx2.ConnectError("connection refused")

    async def refuse(request: httpx2.Request) -> httpx2.Response:
        raise failure

    async with AsyncClient.from_config(CONFIG, transport=httpx2.MockTransport(refuse)) as client:
        with pytest.raises(TransportError) as info:
            await client.health()

    assert info.value.__cause__ is failure
    assert info.value.retryable is True


async def test_health_and_ready() -> None:
    healthy = AsyncRecorder(200, json={"status": "ok"})
    not_ready = AsyncRecorder(503, json={"checks": {"database": "unreachable"}})

    async with client_for(healthy) as client:
        assert await client.health() is True
    async with client_for(not_ready) as client:
        readiness = await client.ready()

    assert healthy.last.url.path == "/healthz"
    assert not_ready.last.url.path == "/readyz"
    assert readiness == Readiness(ready=False, checks={"database": "unreachable"})


async def test_per_call_timeout() -> None:
    recorder = AsyncRecorder(json={})

    async with client_for(recorder) as client:
        await client.request("GET", "/v1/tasks/t-1", params={"wait_ms": 60_000}, timeout=70.0)

    assert recorder.last.extensions["timeout"]["read"] == 70.0
    assert recorder.last.url.params["wait_ms"] == "60000"


async def test_context_manager_and_aclose() -> None:
    async with client_for(AsyncRecorder(json={})) as client:
        closed_inside = client.is_closed
    assert closed_inside is False
    assert client.is_closed is True

    other = client_for(AsyncRecorder(json={}))
    await other.aclose()
    assert other.is_closed is True


async def test_constructor_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_URL", "http://from-env.test")
    monkeypatch.setenv("ORBIT_API_KEY", "env-key")
    recorder = AsyncRecorder(json={})

    async with AsyncClient(api_key="explicit", transport=httpx2.MockTransport(recorder)) as client:
        await client.request("GET", "/v1/queues")

    assert recorder.last.url == "http://from-env.test/v1/queues"
    assert recorder.last.headers["Authorization"] == "Bearer explicit"


async def test_constructor_without_url_anywhere_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORBIT_URL", raising=False)

    with pytest.raises(ConfigurationError):
        AsyncClient()


async def test_through_asgi_transport_against_a_real_app() -> None:
    """Real HTTP semantics (status, headers, body) through httpx2.ASGITransport, no mocks."""
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await receive()
        if scope["path"] == "/healthz":
            status, body = 200, b'{"status":"ok"}'
        else:
            status = 404
            body = (
                b'{"error":{"code":"not_found","category":"protocol",'
                b'"message":"task not found","retryable":false,"request_id":"asgi-1"}}'
            )
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    transport = httpx2.ASGITransport(app=app)
    async with AsyncClient.from_config(CONFIG, transport=transport) as client:
        assert await client.health() is True
        with pytest.raises(NotFoundError) as info:
            await client.request("GET", "/v1/tasks/missing")

    assert info.value.request_id == "asgi-1"
    assert info.value.message == "task not found"
    headers = dict(seen[-1]["headers"])
    assert headers[b"authorization"] == b"Bearer test-key"

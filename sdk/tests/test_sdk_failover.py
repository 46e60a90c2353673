"""Clients with several URLs: what moves to the next node, what never is sent twice, and the
URL that worked being kept. The network is httpx2.MockTransport, one host per node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import msgspec
import pytest
import test_sdk_tasks

from orbit_sdk import (
    AsyncClient,
    Client,
    ClientConfig,
    ConfigurationError,
    OutcomeUnknownError,
    QueueFullError,
    TransportError,
    UnavailableError,
)
from orbit_sdk._failover import replay_safe

URLS = ("http://a.test", "http://b.test")
TASK = test_sdk_tasks.task_json(id="tsk_1")
Node = Callable[[httpx2.Request], httpx2.Response]


def unavailable(code: str = "unavailable") -> httpx2.Response:
    body = {"error": {"code": code, "category": "transient", "message": "draining"}}
    return httpx2.Response(503, json=body, headers={"Retry-After": "1"})


def ok(request: httpx2.Request) -> httpx2.Response:
    if request.url.path == "/v1/tasks:batch":
        count = len(msgspec.json.decode(request.content)["tasks"])
        return httpx2.Response(201, json={"tasks": [TASK] * count})
    return httpx2.Response(200 if request.method == "GET" else 201, json=TASK)


def refuse(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused")


def reset(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ReadError("connection reset by peer")


def proxy(status: int) -> Node:
    return lambda request: httpx2.Response(status, text="<html>Bad Gateway</html>")


class Cluster:
    """Two nodes; records which node got each request."""

    def __init__(self, a: Node, b: Node = ok) -> None:
        self.nodes = {"a.test": a, "b.test": b}
        self.sent: list[tuple[str, str, bytes]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append((request.url.host, request.method, request.content))
        return self.nodes[request.url.host](request)

    @property
    def hosts(self) -> list[str]:
        return [host for host, _, _ in self.sent]

    def client(self) -> Client:
        config = ClientConfig(urls=URLS, api_key="test-key")
        return Client.from_config(config, transport=httpx2.MockTransport(self))


@pytest.mark.parametrize("down", [refuse, reset, proxy(502), proxy(503), proxy(504)])
def test_reads_move_to_the_next_url_and_stay_there(down: Node) -> None:
    cluster = Cluster(down)
    with cluster.client() as client:
        assert client.get_task("tsk_1").id == "tsk_1"
        assert client.get_task("tsk_1").id == "tsk_1"
    assert cluster.hosts == ["a.test", "b.test", "b.test"]  # sticky: a is not asked again


def test_an_unavailable_node_is_left_for_the_next() -> None:
    cluster = Cluster(lambda _: unavailable())
    with cluster.client() as client:
        client.get_task("tsk_1")
    assert cluster.hosts == ["a.test", "b.test"]


@pytest.mark.parametrize("down", [reset, proxy(502), proxy(504), lambda _: unavailable()])
def test_keyed_submits_are_sent_again_to_the_next_url(down: Node) -> None:
    cluster = Cluster(down)
    with cluster.client() as client:
        client.submit("q", "t", {"n": 1}, idempotency_key="order-7")
        client.submit_many(
            [{"queue": "q", "type": "t", "idempotency_key": f"k{i}"} for i in range(3)]
        )
    assert cluster.hosts == ["a.test", "b.test", "b.test"]
    first, again = cluster.sent[0][2], cluster.sent[1][2]
    assert first == again  # the same body, key included


@pytest.mark.parametrize("down", [reset, proxy(502), proxy(503), proxy(504)])
def test_an_unkeyed_submit_whose_outcome_is_unknown_is_never_sent_again(down: Node) -> None:
    cluster = Cluster(down)
    with cluster.client() as client, pytest.raises(OutcomeUnknownError) as info:
        client.submit("q", "t", {"n": 1})
    assert cluster.hosts == ["a.test"]
    error = info.value
    assert isinstance(error, TransportError)  # callers catching TransportError still do
    assert (error.code, error.retryable) == ("outcome_unknown", False)
    assert "may or may not have been applied" in error.message
    assert "POST http://a.test/v1/tasks" in error.message


def test_a_batch_with_one_unkeyed_task_is_not_sent_again() -> None:
    cluster = Cluster(reset)
    tasks = [{"queue": "q", "type": "t", "idempotency_key": "k1"}, {"queue": "q", "type": "t"}]
    with cluster.client() as client, pytest.raises(OutcomeUnknownError):
        client.submit_many(tasks)
    assert cluster.hosts == ["a.test"]


def test_an_unkeyed_write_the_node_refused_to_connect_goes_to_the_next() -> None:
    # Nothing was sent to a: b gets the request for the first time.
    cluster = Cluster(refuse)
    with cluster.client() as client:
        client.submit("q", "t", {"n": 1})
    assert cluster.hosts == ["a.test", "b.test"]


def test_orbit_unavailable_to_an_unkeyed_write_is_its_own_answer() -> None:
    cluster = Cluster(lambda _: unavailable())
    with cluster.client() as client, pytest.raises(UnavailableError) as info:
        client.cancel_task("tsk_1")
    assert cluster.hosts == ["a.test"]
    assert info.value.retry_after == 1.0


def test_a_full_queue_is_not_a_node_failure() -> None:
    cluster = Cluster(lambda _: unavailable("queue_full"))
    with cluster.client() as client, pytest.raises(QueueFullError):
        client.submit("q", "t", idempotency_key="k")
    assert cluster.hosts == ["a.test"]


def test_when_every_url_fails_each_is_tried_once() -> None:
    cluster = Cluster(refuse, refuse)
    with cluster.client() as client, pytest.raises(TransportError) as info:
        client.get_task("tsk_1")
    assert cluster.hosts == ["a.test", "b.test"]
    assert "http://a.test, http://b.test" in info.value.message
    assert type(info.value) is TransportError


def test_every_url_unavailable_gives_orbits_error() -> None:
    cluster = Cluster(lambda _: unavailable(), lambda _: unavailable())
    with cluster.client() as client, pytest.raises(UnavailableError):
        client.get_task("tsk_1")
    assert cluster.hosts == ["a.test", "b.test"]


def test_one_url_reports_an_unknown_outcome_too() -> None:
    def reset_one(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out")

    client = Client.from_config(
        ClientConfig(url="http://a.test"), transport=httpx2.MockTransport(reset_one)
    )
    with client, pytest.raises(OutcomeUnknownError):
        client.request("POST", "/v1/tasks/tsk_1/cancel", json={})


async def test_the_async_client_fails_over_the_same_way() -> None:
    cluster = Cluster(reset)
    config = ClientConfig(urls=URLS)
    async with AsyncClient.from_config(config, transport=httpx2.MockTransport(cluster)) as client:
        await client.get_task("tsk_1")
        await client.submit("q", "t", idempotency_key="k")
        assert cluster.hosts == ["a.test", "b.test", "b.test"]
        cluster.nodes["b.test"] = reset
        with pytest.raises(OutcomeUnknownError):
            await client.submit("q", "t")
    assert cluster.hosts == ["a.test", "b.test", "b.test", "b.test"]


@pytest.mark.parametrize(
    ("method", "body", "safe"),
    [
        ("GET", None, True),
        ("HEAD", None, True),
        ("POST", None, False),
        ("POST", {"queue": "q", "type": "t"}, False),
        ("POST", {"queue": "q", "type": "t", "idempotency_key": "k"}, True),
        ("POST", {"queue": "q", "type": "t", "idempotency_key": ""}, False),
        ("POST", {"tasks": [{"idempotency_key": "a"}, {"idempotency_key": "b"}]}, True),
        ("POST", {"tasks": [{"idempotency_key": "a"}, {}]}, False),
        ("POST", {"tasks": []}, False),
        ("POST", [1, 2], False),
        ("PUT", {"paused": True}, False),
        ("DELETE", None, False),
    ],
)
def test_what_is_safe_to_send_twice(method: str, body: Any, safe: bool) -> None:
    content = None if body is None else msgspec.json.encode(body)
    assert replay_safe(method, content) is safe


def test_orbit_url_may_list_several_nodes() -> None:
    config = ClientConfig.from_env({"ORBIT_URL": " http://a.test/ , http://b.test,,"})
    assert config.urls == URLS
    assert config.url == "http://a.test"
    with Client(urls=["http://a.test", "http://b.test"]) as client:
        assert client.config.urls == URLS
        assert repr(client) == "Client(urls=['http://a.test', 'http://b.test'])"
    with Client("http://a.test") as client:
        assert repr(client) == "Client(url='http://a.test')"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"urls": []}, "no Orbit URL"),
        ({"urls": ["http://a.test", "ftp://b.test"]}, "absolute http"),
        ({"url": "http://a.test", "urls": ["http://b.test"]}, "pass url or urls"),
    ],
)
def test_bad_url_lists_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ClientConfig.from_env({}, **kwargs)


def test_a_config_built_directly_keeps_url_and_urls_in_step() -> None:
    assert ClientConfig(urls=URLS).url == "http://a.test"
    assert ClientConfig(url="http://a.test,http://b.test").urls == URLS
    with pytest.raises(ConfigurationError, match="first of urls"):
        ClientConfig(url="http://b.test", urls=URLS)

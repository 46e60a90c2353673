"""``Client(urls=[...])`` against a real ``orbit dev`` server behind two kinds of broken node: a
dead port (nothing listens: no request is ever sent) and a proxy that passes the request on to
the server but drops the connection before the answer comes back (the request was applied,
the client cannot know it). Reads and keyed submits go on to the live URL; an unkeyed submit
is sent once and reported as of unknown outcome. Last, two ``orbit server`` processes on one
MariaDB, one of them killed: the client carries on with the other."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

import orbit_sdk
from orbit_sdk import OutcomeUnknownError
from orbit_server.governance.keys import Role
from tests.conftest import SCOPE, make_key_at
from tests.support.processes import OrbitProcess


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    data = tmp_path_factory.mktemp("failover") / "data"
    server = OrbitProcess(["dev", "--data-dir", str(data), "--port", "0"])
    try:
        announced = server.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield announced["ORBIT_URL"], announced["ORBIT_API_KEY"]
    finally:
        server.stop()


@pytest.fixture
def dead_url() -> str:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class SwallowingProxy:
    """Forwards each connection's bytes to the server and closes the connection as soon as
    the server starts answering: the request is applied, its answer lost."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.swallowed = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._pipe, args=(conn,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as server:
            while True:
                readable, _, _ = select.select([client, server], [], [], 30)
                if server in readable:
                    if server.recv(65536):
                        self.swallowed += 1
                    # Reset rather than close politely: the client sees the connection die.
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    return
                if client in readable:
                    data = client.recv(65536)
                    if not data:
                        return
                    server.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def swallowing(dev: tuple[str, str]) -> Iterator[SwallowingProxy]:
    proxy = SwallowingProxy(dev[0])
    try:
        yield proxy
    finally:
        proxy.close()


def tasks_in(client: orbit_sdk.Client, queue: str) -> list[orbit_sdk.Task]:
    return list(client.iter_tasks(queue=queue))


def test_a_dead_node_is_skipped_for_everything_and_the_live_one_kept(
    dev: tuple[str, str], dead_url: str
) -> None:
    url, key = dev
    with orbit_sdk.Client(urls=[dead_url, url], api_key=key) as client:
        keyed = client.submit("dead-port", "t", {"n": 1}, idempotency_key="dead-1")
        # Nothing reached the dead port, so even an unkeyed submit is sent (once) to the next.
        unkeyed = client.submit("dead-port", "t", {"n": 2})
        assert client.get_task(keyed.id).id == keyed.id
        assert client._failover.current == 1  # sticky: the dead port is not tried again
    with orbit_sdk.Client(url, key) as direct:
        found = tasks_in(direct, "dead-port")
    assert sorted(t.id for t in found) == sorted([keyed.id, unkeyed.id])


def test_reads_and_keyed_submits_go_on_after_a_lost_answer(
    dev: tuple[str, str], swallowing: SwallowingProxy
) -> None:
    url, key = dev
    with orbit_sdk.Client(urls=[swallowing.url, url], api_key=key) as client:
        task = client.submit("lost-keyed", "t", {"n": 1}, idempotency_key="lost-1")
    assert swallowing.swallowed == 1  # the first try reached the server; its answer was lost
    with orbit_sdk.Client(urls=[swallowing.url, url], api_key=key) as client:
        assert client.get_task(task.id).idempotency_key == "lost-1"
    with orbit_sdk.Client(urls=[swallowing.url, url], api_key=key) as client:
        batch = client.submit_many(
            [{"queue": "lost-keyed", "type": "t", "idempotency_key": f"lost-b{i}"} for i in (1, 2)]
        )
    assert swallowing.swallowed == 3
    with orbit_sdk.Client(url, key) as direct:
        found = tasks_in(direct, "lost-keyed")
    # Sent twice each, applied once each: the server kept the first and answered it again.
    assert sorted(t.id for t in found) == sorted([task.id, *(t.id for t in batch)])


def test_an_unkeyed_submit_whose_answer_is_lost_is_not_sent_again(
    dev: tuple[str, str], swallowing: SwallowingProxy
) -> None:
    url, key = dev
    with (
        orbit_sdk.Client(urls=[swallowing.url, url], api_key=key) as client,
        pytest.raises(OutcomeUnknownError) as info,
    ):
        client.submit("lost-unkeyed", "t", {"n": 1})
    assert swallowing.swallowed == 1
    assert "may or may not have been applied" in info.value.message
    with orbit_sdk.Client(url, key) as direct:
        found = tasks_in(direct, "lost-unkeyed")
    assert len(found) == 1  # applied by the first try, never sent to the second URL


def test_comma_separated_orbit_url(
    dev: tuple[str, str], dead_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = dev
    monkeypatch.setenv("ORBIT_URL", f"{dead_url},{url}")
    monkeypatch.setenv("ORBIT_API_KEY", key)
    with orbit_sdk.Client() as client:
        assert client.health() is True
        assert client.ready().ready is True


async def test_two_servers_on_one_database_one_killed(migrated_mariadb_url: str) -> None:
    key = await make_key_at(migrated_mariadb_url, SCOPE, Role.SUBMITTER, Role.OPERATOR)
    env = {"ORBIT_DATABASE_URL": migrated_mariadb_url}
    servers = [
        OrbitProcess(["server", "--port", "0", "--host", "127.0.0.1", "--node-id", name], env=env)
        for name in ("fa", "fb")
    ]
    try:
        url_a, url_b = (s.wait_for("ORBIT_URL")["ORBIT_URL"] for s in servers)
        with orbit_sdk.Client(urls=[url_a, url_b], api_key=key) as client:
            first = client.submit("two-nodes", "t", idempotency_key="two-1")
            assert client._failover.current == 0
            servers[0].proc.kill()
            servers[0].proc.wait()
            assert client.get_task(first.id).id == first.id  # a refused: b answers
            again = client.submit("two-nodes", "t", idempotency_key="two-1")
            second = client.submit("two-nodes", "t", idempotency_key="two-2")
            assert client._failover.current == 1
            found = list(client.iter_tasks(queue="two-nodes"))
        assert again.id == first.id
        assert sorted(t.id for t in found) == sorted([first.id, second.id])
    finally:
        for server in servers:
            server.stop()

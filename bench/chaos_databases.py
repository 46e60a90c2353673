"""The database of a chaos run: one MariaDB, a 3-node Galera cluster or a primary with a
semi-synchronous replica (the test harness's nodes, each its own ``mariadbd``).

Each topology gives the servers' ``ORBIT_DATABASE_URL`` (every node, in order), a one-host URL
the runner reads the tables through (a node that takes writes now), and the fault injector's
database targets. On a replicated topology the target is *the node Orbit writes through*,
found at each fault from the servers' ``/readyz`` (``database_node``):

- **Galera**: ``kill -9`` of that node, then started again (it rejoins by IST, or SST), or
  ``SIGSTOP`` past the lease, then ``SIGCONT`` (the cluster evicted it; it rejoins). The
  injector waits until all three nodes are Synced before the next fault. The two others keep
  a primary component, so some node can always take a write.
- **Semi-sync**: the first ``kill -9`` of the primary is followed, after the fault's held time
  (the operator's reaction), by the promotion of the replica (``ReplicatedPair.promote()``,
  the procedure of docs/operations/database-ha.md). The old primary is not started again:
  it may hold transactions the new primary never received, and rebuilding it as a replica is
  an operator's later work. From then on the promoted node is the only one, and its faults are
  those of a single database (restarted in place). A ``SIGSTOP`` of the primary before the
  promotion leaves no writable node (the replica is read-only) until ``SIGCONT``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx2

from tests.harness.galera import GaleraCluster
from tests.harness.mariadb import MariaDBServer
from tests.harness.nodes import ClusterNode
from tests.harness.replication import ReplicatedPair

TOPOLOGIES = ("single", "galera", "semisync")


def _signal(pid: int | None, sig: signal.Signals) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def writer_of(server_urls: Sequence[str]) -> str | None:
    """The database node most servers write through now (``/readyz``'s ``database_node``)."""
    seen: Counter[str] = Counter()
    with httpx2.Client(timeout=2.0) as http:
        for url in server_urls:
            with contextlib.suppress(httpx2.TransportError, ValueError):
                node = http.get(f"{url}/readyz").json().get("checks", {}).get("database_node")
                if node:
                    seen[node] += 1
    return seen.most_common(1)[0][0] if seen else None


class Database(Protocol):
    name: str
    nodes: int

    def start(self, database: str) -> None: ...

    def server_url(self) -> str:
        """``ORBIT_DATABASE_URL``: every node, in the order Orbit tries them."""

    def read_url(self) -> str:
        """One node that takes writes now, for the runner's own reads."""

    def any_server(self) -> MariaDBServer: ...

    def targets(self, server_urls: Sequence[str]) -> list[Any]: ...

    def cleanup(self) -> None: ...


class Single:
    """One MariaDB with the benchmarks' durable settings (the suite's default)."""

    name = "single"
    nodes = 1

    def __init__(self, base_dir: Path, options: Sequence[str]) -> None:
        self.server = MariaDBServer(base_dir, options)
        self.url = ""

    def start(self, database: str) -> None:
        self.server.start()
        self.url = self.server.create_database(database)

    def server_url(self) -> str:
        return self.url

    def read_url(self) -> str:
        return self.url

    def any_server(self) -> MariaDBServer:
        return self.server

    def targets(self, server_urls: Sequence[str]) -> list[Any]:
        from bench.chaos_faults import DatabaseTarget

        return [DatabaseTarget("db1", self.server)]

    def cleanup(self) -> None:
        self.server.cleanup()


class Galera:
    name = "galera"
    nodes = 3

    def __init__(self, base_dir: Path) -> None:
        self.cluster = GaleraCluster(3, base_dir)
        self.database = ""

    def start(self, database: str) -> None:
        self.cluster.start()
        self.database = database
        self.cluster.nodes[0].sql(f"CREATE DATABASE IF NOT EXISTS `{database}`;")

    def server_url(self) -> str:
        return self.cluster.url(self.database)

    def read_url(self) -> str:
        for node in self.cluster.nodes:
            if GaleraCluster.state(node).get("wsrep_local_state") == "4":
                return node.url(self.database)
        return self.cluster.nodes[0].url(self.database)

    def any_server(self) -> MariaDBServer:
        return self.cluster.nodes[0]

    def targets(self, server_urls: Sequence[str]) -> list[Any]:
        return [GaleraWriter(self.cluster, server_urls)]

    def cleanup(self) -> None:
        self.cluster.cleanup()


class SemiSync:
    name = "semisync"
    nodes = 2

    def __init__(self, base_dir: Path) -> None:
        self.pair = ReplicatedPair(semi_sync=True, base_dir=base_dir)
        self.database = ""

    def start(self, database: str) -> None:
        self.pair.start()
        self.database = database
        self.pair.primary.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`;")
        self.pair.wait_caught_up()

    def server_url(self) -> str:
        return self.pair.url(self.database)

    def read_url(self) -> str:
        node = self.pair.replica if self.pair.promoted else self.pair.primary
        return node.url(self.database)

    def any_server(self) -> MariaDBServer:
        return self.pair.primary

    def targets(self, server_urls: Sequence[str]) -> list[Any]:
        return [SemiSyncWriter(self.pair)]

    def cleanup(self) -> None:
        self.pair.cleanup()


def database_nodes(topology: str) -> int:
    return {"galera": Galera.nodes, "semisync": SemiSync.nodes}.get(topology, Single.nodes)


def open_database(topology: str, base_dir: Path, options: Sequence[str]) -> Database:
    if topology == "galera":
        return Galera(base_dir)
    if topology == "semisync":
        return SemiSync(base_dir)
    return Single(base_dir, options)


class GaleraWriter:
    """The Galera node the servers write through, aimed at again before each fault."""

    kind = "database"

    def __init__(self, cluster: GaleraCluster, server_urls: Sequence[str]) -> None:
        self.cluster = cluster
        self.server_urls = list(server_urls)
        self.node = cluster.nodes[0]
        self.survivors_primary = True

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def address(self) -> str:
        return self.node.endpoint()

    def aim(self) -> None:
        address = writer_of(self.server_urls)
        found = [n for n in self.cluster.nodes if n.endpoint() == address]
        self.node = found[0] if found else self.cluster.nodes[0]

    def replicated(self, action: str) -> bool:
        """Whether Orbit can move to another node during this fault."""
        return True

    def pid(self) -> int:
        assert self.node.pid is not None
        return self.node.pid

    def _note_survivors(self) -> None:
        """Whether the other nodes still formed a primary component just before the node came
        back: if not, no node could take a write, and the fault counts as an outage."""
        others = [n for n in self.cluster.nodes if n is not self.node]
        self.survivors_primary = any(
            GaleraCluster.state(n).get("wsrep_cluster_status") == "Primary" for n in others
        )

    def kill(self) -> None:
        self.node.kill()

    def restart(self) -> None:
        self._note_survivors()
        self.cluster.start(self.node)  # rejoins; waits until every node is Synced

    def resume(self) -> None:
        self._note_survivors()
        _signal(self.node.pid, signal.SIGCONT)
        self.cluster.wait_synced(self.cluster.nodes)

    def close(self) -> None:
        for node in self.cluster.nodes:
            _signal(node.pid, signal.SIGCONT)


class SemiSyncWriter:
    """The primary; after its first kill, the promoted replica (then the only node)."""

    kind = "database"

    def __init__(self, pair: ReplicatedPair) -> None:
        self.pair = pair
        self.promotion_s: float | None = None
        self.survivors_primary = False  # the replica is read-only until promoted

    @property
    def node(self) -> ClusterNode:
        return self.pair.replica if self.pair.promoted else self.pair.primary

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def address(self) -> str:
        return self.node.endpoint()

    def aim(self) -> None:
        pass  # the primary is the only writable node

    def replicated(self, action: str) -> bool:
        return action == "kill" and not self.pair.promoted

    def pid(self) -> int:
        assert self.node.pid is not None
        return self.node.pid

    def kill(self) -> None:
        self.node.kill()

    def restart(self) -> None:
        if self.pair.promoted:
            self.node.start()  # the only node: restarted in place, as a single database
        else:
            self.promotion_s = self.pair.promote()  # the old primary stays down

    def resume(self) -> None:
        _signal(self.node.pid, signal.SIGCONT)

    def close(self) -> None:
        _signal(self.node.pid, signal.SIGCONT)


def ready_elsewhere(
    server_urls: Sequence[str], away_from: str, within_s: float = 60.0
) -> dict[str, float]:
    """Poll every server's ``/readyz`` until each answers 200 naming a node other than
    ``away_from``; the clock time each did (the servers missing did not within ``within_s``)."""
    ready_at: dict[str, float] = {}
    deadline = time.monotonic() + within_s
    with httpx2.Client(timeout=1.0) as http:
        while set(server_urls) - ready_at.keys() and time.monotonic() < deadline:
            for url in set(server_urls) - ready_at.keys():
                with contextlib.suppress(httpx2.TransportError, ValueError):
                    answer = http.get(f"{url}/readyz")
                    node = answer.json().get("checks", {}).get("database_node")
                    if answer.status_code == 200 and node not in (None, away_from):
                        ready_at[url] = time.time()
            time.sleep(0.05)  # polling the servers: their state changes on their own
    return ready_at

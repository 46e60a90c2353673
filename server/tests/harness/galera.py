"""A three-node MariaDB Galera cluster on 127.0.0.1 from Debian's packages (``mariadb-server``,
``galera-4``, ``rsync``), each node its own ``mariadbd`` with its own data directory and ports:
SQL, group communication (gcomm), incremental state transfer (IST) and snapshot state
transfer (rsync SST)::

    with GaleraCluster() as cluster:
        url = cluster.url()  # mysql://root@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/orbit_test
        cluster.nodes[0].kill()  # kill -9
        cluster.wait_synced(cluster.nodes[1:])
        cluster.start(cluster.nodes[0])  # rejoins by IST (or SST)

The first node to start bootstraps the cluster (``--wsrep-new-cluster``); a node started while
another runs joins it. Failure detection is shortened (a dead member is evicted after about
two seconds instead of the default fifteen): the membership timeouts are what a failover
waits for, and the figures in docs/operations/database-ha.md are measured with these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

from .mariadb import DEFAULT_DATABASE, _ensure_binaries, _find_binary, free_port
from .nodes import ClusterNode, install_packages, query

__all__ = ["GALERA_PROVIDER", "GaleraCluster"]

GALERA_PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
_SYNC_TIMEOUT_S = 120.0
# keepalive <= inactive check <= suspect <= inactive timeout (Galera's own rule).
EVS_TIMEOUTS = (
    "evs.keepalive_period=PT0.3S;evs.inactive_check_period=PT0.3S;"
    "evs.suspect_timeout=PT1.5S;evs.inactive_timeout=PT2S;evs.install_timeout=PT2S;"
    "evs.join_retrans_period=PT0.3S"
)


def ensure_galera() -> None:
    """Install galera-4 and rsync with the MariaDB packages when they are missing (as root)."""
    _ensure_binaries()
    if not GALERA_PROVIDER.exists() or _find_binary("rsync") is None:
        install_packages(("galera-4", "rsync"))
    if not GALERA_PROVIDER.exists():
        raise RuntimeError(f"galera-4 is installed, but {GALERA_PROVIDER} is missing")


class GaleraCluster:
    def __init__(self, size: int = 3, base_dir: Path | None = None) -> None:
        self.size = size
        self._gcomm = [free_port() for _ in range(size)]
        self._ist = [free_port() for _ in range(size)]
        self._sst = [free_port() for _ in range(size)]
        self._donors: dict[int, str] = {}
        self.nodes = [
            ClusterNode(f"node{i + 1}", self._options_of(i), base_dir) for i in range(size)
        ]

    def _options_of(self, index: int) -> Callable[[], Sequence[str]]:
        def options() -> Sequence[str]:
            peers = ",".join(f"127.0.0.1:{p}" for p in self._gcomm)
            provider = (
                f"gmcast.listen_addr=tcp://127.0.0.1:{self._gcomm[index]};"
                f"ist.recv_addr=127.0.0.1:{self._ist[index]};gcache.size=64M;"
                f"{EVS_TIMEOUTS}"
            )
            found = [
                "--wsrep-on=ON",
                f"--wsrep-provider={GALERA_PROVIDER}",
                "--wsrep-cluster-name=orbit_test",
                f"--wsrep-node-name={self.nodes[index].name}",
                f"--wsrep-node-address=127.0.0.1:{self._gcomm[index]}",
                f"--wsrep-cluster-address=gcomm://{peers}",
                f"--wsrep-provider-options={provider}",
                "--wsrep-sst-method=rsync",
                f"--wsrep-sst-receive-address=127.0.0.1:{self._sst[index]}",
                "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2",
                "--innodb-log-file-size=16M",
                "--innodb-flush-log-at-trx-commit=1",
            ]
            if not any(n.running for n in self.nodes if n is not self.nodes[index]):
                found.append("--wsrep-new-cluster")
            elif self._donors.get(index):
                found.append(f"--wsrep-sst-donor={self._donors[index]}")
            return found

        return options

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, node: ClusterNode | None = None, donor: ClusterNode | None = None) -> None:
        """Start one node (it joins the others, with a state transfer from ``donor`` when
        given), or every node that is not running."""
        ensure_galera()
        if node is not None and donor is not None:
            self._donors[self.nodes.index(node)] = donor.name
        for candidate in [node] if node is not None else self.nodes:
            if not candidate.running:
                self._mark_safe_to_bootstrap(candidate)
                candidate.start()
        self.wait_synced([n for n in self.nodes if n.running])

    def _mark_safe_to_bootstrap(self, node: ClusterNode) -> None:
        """A node killed while last in the cluster refuses to bootstrap a new one unless told
        its state is the latest (it is: the others are gone too, in these tests)."""
        if any(n.running for n in self.nodes):
            return
        try:
            state = node.data_dir / "grastate.dat"
        except RuntimeError:
            return  # never started
        if state.exists():
            state.write_text(
                state.read_text().replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1")
            )

    def wait_synced(self, nodes: Sequence[ClusterNode], within_s: float = _SYNC_TIMEOUT_S) -> None:
        """Until every one of ``nodes`` is Synced in a primary component of that many nodes."""
        deadline = time.monotonic() + within_s
        while True:
            states = [self.state(n) for n in nodes]
            if all(
                s.get("wsrep_local_state") == "4"
                and s.get("wsrep_cluster_status") == "Primary"
                and s.get("wsrep_cluster_size") == str(len(nodes))
                for s in states
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Galera nodes not synced within {within_s:.0f} s: {states}")
            time.sleep(0.1)

    @staticmethod
    def state(node: ClusterNode) -> dict[str, str]:
        if not node.running:
            return {}
        try:
            rows = query(
                node,
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state',"
                " 'wsrep_cluster_status', 'wsrep_cluster_size', 'wsrep_ready')",
            )
        except RuntimeError:
            return {}
        return {row[0]: row[1] for row in rows if len(row) == 2}

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def url(self, database: str = DEFAULT_DATABASE, nodes: Sequence[ClusterNode] = ()) -> str:
        """A multi-host URL naming ``nodes`` (default: all) in order."""
        hosts = ",".join(n.endpoint() for n in nodes or self.nodes)
        return f"mysql://root@{hosts}/{quote(database, safe='')}"

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

"""The chaos scenario's topology and fault injector.

A topology is a set of *targets*, each one process the injector may ``kill -9`` (then start
again) or ``SIGSTOP`` (then ``SIGCONT``): the ``orbit server`` processes, the SDK worker
processes and the database. On a replicated database (``bench.chaos_databases``) the
database target is the node Orbit writes through, aimed at again before each fault. Every
fault is recorded with its times, on the run's clock (``time.time()``, the clock the
workers' records and Orbit's own timestamps use on this host).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.harness.mariadb import MariaDBServer
from tests.support.processes import OrbitProcess

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("server", "worker", "database")


class Target(Protocol):
    name: str
    kind: str  # one of KINDS

    def pid(self) -> int: ...

    def kill(self) -> None:
        """``kill -9``, and wait until the process is gone."""

    def restart(self) -> None:
        """Start the killed process again, and wait until it serves."""

    def resume(self) -> None:
        """``SIGCONT`` the stopped process (and wait until it is back, where that matters)."""

    def close(self) -> None:
        """Stop for good at the end of the run (SIGCONT first, if stopped)."""


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


class ServerTarget:
    """One ``orbit server`` on a fixed port (a restart binds the same one, so the workers'
    and clients' URL lists stay true); each start gets a node id of its own
    (``<name>-<generation>``), so that the tasks a dead instance held can be told apart."""

    kind = "server"

    def __init__(self, name: str, port: int, env: dict[str, str]) -> None:
        self.name = name
        self.port = port
        self.env = env
        self.generation = 0
        self.process: OrbitProcess | None = None
        self.node = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.generation += 1
        self.node = f"{self.name}-{self.generation}"
        args = ["server", "--host", "127.0.0.1", "--port", str(self.port), "--node-id", self.node]
        self.process = OrbitProcess(args, env=self.env)
        self.process.wait_for("ORBIT_URL", timeout=60)

    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def kill(self) -> None:
        assert self.process is not None
        self.process.proc.kill()
        self.process.proc.wait()

    def restart(self) -> None:
        self.start()

    def resume(self) -> None:
        _signal(self.pid(), signal.SIGCONT)

    def close(self) -> None:
        if self.process is not None:
            _signal(self.pid(), signal.SIGCONT)
            with contextlib.suppress(Exception):
                self.process.stop(timeout=30)


class WorkerTarget:
    """One ``orbit-worker bench.chaos_worker:worker`` process; its ``ORBIT_URL`` lists every
    server, its own first."""

    kind = "worker"

    def __init__(self, name: str, urls: list[str], env: dict[str, str], concurrency: int) -> None:
        self.name = name
        self.env = {**env, "ORBIT_URL": ",".join(urls)}
        self.concurrency = concurrency
        self.process: OrbitProcess | None = None

    def start(self) -> None:
        command = str(Path(sys.executable).parent / "orbit-worker")
        args = [command, "bench.chaos_worker:worker", "--concurrency", str(self.concurrency)]
        self.process = OrbitProcess.command([*args, "--log-level", "warning"], env=self.env)

    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def kill(self) -> None:
        assert self.process is not None
        self.process.proc.kill()
        self.process.proc.wait()

    def restart(self) -> None:
        self.start()

    def resume(self) -> None:
        _signal(self.pid(), signal.SIGCONT)

    def close(self) -> None:
        if self.process is not None:
            _signal(self.pid(), signal.SIGCONT)
            with contextlib.suppress(Exception):
                self.process.stop(timeout=30)


class DatabaseTarget:
    """One MariaDB node the runner started (the test harness's server): a restart runs
    ``mariadbd`` again on the same data directory and port, through crash recovery."""

    kind = "database"

    def __init__(self, name: str, server: MariaDBServer) -> None:
        self.name = name
        self.server = server

    def pid(self) -> int:
        return int(self.server.pid_file.read_text().strip())

    def kill(self) -> None:
        _signal(self.pid(), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.server.running and time.monotonic() < deadline:
            time.sleep(0.01)  # the harness reaps its child; no event to wait on

    def restart(self) -> None:
        self.server.start()

    def resume(self) -> None:
        _signal(self.pid(), signal.SIGCONT)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            _signal(self.pid(), signal.SIGCONT)


@dataclass
class Topology:
    servers: list[ServerTarget]
    workers: list[WorkerTarget]
    databases: list[Any]  # DatabaseTarget, or a replicated topology's writer (chaos_databases)

    def of(self, kind: str) -> list[Any]:
        found: dict[str, list[Any]] = {
            "server": self.servers, "worker": self.workers, "database": self.databases
        }  # fmt: skip
        return found[kind]

    def close(self) -> None:
        processes: list[WorkerTarget | ServerTarget] = [*self.workers, *self.servers]
        for target in processes:
            target.close()
        for db in self.databases:
            db.close()


@dataclass
class Fault:
    """One fault injected: ``kill`` (then a restart ``held_s`` later) or ``stop`` (SIGSTOP,
    SIGCONT ``held_s`` later). Times are ``time.time()``; ``began`` is read just before the
    signal and ``ended`` just before the restart or SIGCONT, so [began, ended] is inside the
    time the target was really down."""

    action: str
    kind: str
    target: str
    held_s: float
    began: float = 0.0
    ended: float = 0.0
    restarted: float = 0.0  # when the restart or SIGCONT returned
    past_lease: bool = False
    node: str = ""  # a server's node id, or a database node's address, at the fault
    recovery: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """The seeded schedule: ``(offset_s, action, kind, held_s)``, one fault at a time."""

    steps: list[tuple[float, str, str, float]]


def plan(rng: random.Random, *, seconds: float, faults: int, lease_s: float) -> Plan:
    """``faults`` faults over ``seconds``: every (action, kind) pair at least once when there
    is room, the rest drawn at random; stops of workers and of the database last past the
    lease, half of those of servers do."""
    pairs = [(a, k) for a in ("kill", "stop") for k in KINDS]
    chosen = rng.sample(pairs, len(pairs))[:faults]
    while len(chosen) < faults:
        chosen.append(rng.choice(pairs))
    rng.shuffle(chosen)
    gap = seconds / (faults + 1)
    steps: list[tuple[float, str, str, float]] = []
    for n, (action, kind) in enumerate(chosen):
        at = gap * (n + 0.5) + rng.uniform(0, gap * 0.5)
        if action == "kill":
            held = rng.uniform(0.5, 2.5)
        elif kind == "server":
            held = rng.choice([rng.uniform(0.5, 2.0), lease_s + rng.uniform(1.0, 2.5)])
        else:
            held = lease_s + rng.uniform(1.0, 2.5)
        steps.append((round(at, 2), action, kind, round(held, 2)))
    return Plan(steps)


class Injector:
    """Runs a plan in a thread of its own against a topology. ``on_fault`` measures a
    recovery after each fault (in the injector's thread: the next fault waits for it), from
    what ``before`` saw just before the fault."""

    def __init__(
        self,
        topology: Topology,
        schedule: Plan,
        rng: random.Random,
        lease_s: float,
        before: Callable[[Fault, Any], Any],
        recover: Callable[[Fault, Any, Any], None],
    ) -> None:
        self.topology = topology
        self.schedule = schedule
        self.rng = rng
        self.lease_s = lease_s
        self.before = before
        self.recover = recover
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-faults", daemon=True)

    def start(self) -> None:
        self._began = time.monotonic()
        self._thread.start()

    def finish(self) -> None:
        """No more faults: the one under way completes (its target comes back)."""
        self._halt.set()
        self._thread.join()

    def _run(self) -> None:
        for at, action, kind, held in self.schedule.steps:
            if self._halt.wait(max(0.0, self._began + at - time.monotonic())):
                return
            targets = self.topology.of(kind)
            if not targets:
                continue
            target = self.rng.choice(targets)
            aim = getattr(target, "aim", None)
            if aim is not None:  # a replicated database: the node Orbit writes through now
                aim()
            fault = Fault(action, kind, target.name, held, past_lease=held > self.lease_s)
            if isinstance(target, ServerTarget):
                fault.node = target.node
            elif hasattr(target, "address"):
                fault.node = target.address
            try:
                self._inject(fault, target)
            except Exception as exc:  # a target that cannot come back ends the run's faults
                self.errors.append(f"{action} {target.name}: {exc!r}")
                return
            self.faults.append(fault)

    def _inject(self, fault: Fault, target: Any) -> None:
        seen = self.before(fault, target)
        fault.began = time.time()
        if fault.action == "kill":
            target.kill()
        else:
            _signal(target.pid(), signal.SIGSTOP)
        time.sleep(fault.held_s)  # the fault's length, not a synchronisation
        fault.ended = time.time()
        if fault.action == "kill":
            target.restart()
        else:
            target.resume()
        fault.restarted = time.time()
        self.recover(fault, target, seen)

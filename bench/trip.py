"""How many of the server's function hops one workflow trip crosses.

A trip: ``POST /v1/workflows`` of a two-step definition → the first step's task created and
claimed → delivered to an SDK worker over its WebSocket → the worker's result → the result
event → the instance advanced, creating the second step's task. Two windows are recorded:

- **to the 2nd task**: the second step's task is on a queue no worker serves, so the trip
  ends when that task exists (seen in the database file);
- **to the finish**: both steps on the worker's queue, up to the instance succeeded.

The server runs as ``python -m bench.trip_server dev`` (``orbit dev`` on its own SQLite file,
with a profile hook, see there). After the server and one worker (capacity 1) are up, one
trip of each kind runs unrecorded, so that first-use work (imports, caches, prepared
statements) is not counted; then each recorded trip is followed by an idle window of the
same length with no workflow, which the background loops (lease recovery, the dispatch poll,
…) run in as they do in the trip's: the trip's figures are the window's calls less the idle
window's (each function, caller and root — see bench/trip_server.py — as many times as the
idle window had it), and both raw windows are shown beside them.

Figures per window: distinct ``orbit_server`` functions called, the files (modules) they are
in, the distinct cross-module call edges (caller's module ≠ callee's module; the caller is
the nearest ``orbit_server`` frame below the callee) and the calls, in all and per top-level
package (``api``, ``gateway``, ``pulse``, ``weave``, ``store``, …; a module directly in the
package is its own row). Hops do not depend on timing: the windows only need to hold the
trip and to be short.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orbit_sdk
from bench.throughput import _wait
from tests.support.processes import OrbitProcess

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"  # bench.noop_worker's
HOLD = "bench-trip-hold"  # no worker serves it: the second task stays where it was created
KINDS = ("second-task", "finish")
FIELDS = ("functions", "files", "edges", "calls")


def definitions() -> list[orbit_sdk.Workflow]:
    finish = orbit_sdk.Workflow("bench-trip-finish", version="1")
    finish.task("s1", queue=QUEUE, type="noop")
    finish.task("s2", queue=QUEUE, type="noop")
    second = orbit_sdk.Workflow("bench-trip-second-task", version="1")
    second.task("s1", queue=QUEUE, type="noop")
    second.task("s2", queue=HOLD, type="noop")
    return [finish, second]


@dataclass(frozen=True)
class Call:
    callee: str  # "<file>:<qualname>@<line>"
    caller: str | None
    root: str
    count: int


def module(function: str) -> str:
    return function.split(":", 1)[0]


def package(function: str) -> str:
    return module(function).split("/", 1)[0].removesuffix(".py")


def figures(calls: Iterable[Call]) -> dict[str, Any]:
    """The four figures, in all and per package (the callee's: an edge counts in the package
    it enters)."""
    rows: dict[str, dict[str, set[Any] | int]] = {}

    def row(name: str) -> dict[str, set[Any] | int]:
        return rows.setdefault(
            name, {"functions": set(), "files": set(), "edges": set(), "calls": 0}
        )

    for c in calls:
        for r in (row("all"), row(package(c.callee))):
            r["functions"].add(c.callee)  # type: ignore[union-attr]
            r["files"].add(module(c.callee))  # type: ignore[union-attr]
            if c.caller is not None and module(c.caller) != module(c.callee):
                r["edges"].add((module(c.caller), module(c.callee)))  # type: ignore[union-attr]
            r["calls"] += c.count  # type: ignore[operator]
    row("all")
    return {
        name: {k: v if isinstance(v, int) else len(v) for k, v in r.items()}
        for name, r in rows.items()
    }


# The trip's stages, by the root its calls run under (the function an asyncio task or thread
# began in): (stage, the roots' prefixes). A root no stage names counts as "other".
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("submit", ("api/",)),
    ("claim, deliver", ("gateway/dispatch.py:", "gateway/connection.py:Connection.writer")),
    ("worker frames", ("gateway/endpoint.py:", "gateway/connection.py:Connection.answer_")),
    ("start, result", ("gateway/coalesce.py:", "gateway/batch.py:")),
    ("advance", ("weave/runner.py:Runner.consume",)),
    ("loops woken", ("runtime/roles.py:",)),
)


STAGE_NAMES = (*(name for name, _ in STAGES), "other")


def stage(root: str) -> str:
    for name, prefixes in STAGES:
        if root.startswith(prefixes):
            return name
    return "other"


def stage_figures(calls: Iterable[Call]) -> dict[str, dict[str, int]]:
    """Distinct functions and files of each stage (a function two stages call counts in
    both; the table's "all" row counts it once)."""
    found: dict[str, tuple[set[str], set[str]]] = {}
    for c in calls:
        functions, files = found.setdefault(stage(c.root), (set(), set()))
        functions.add(c.callee)
        files.add(module(c.callee))
    return {
        name: {"functions": len(found[name][0]), "files": len(found[name][1])}
        for name in STAGE_NAMES
        if name in found
    }


@dataclass
class Window:
    kind: str
    seconds: float
    calls: list[Call]
    idle: list[Call] = field(default_factory=list)

    def trip_calls(self) -> list[Call]:
        """The window's calls less the idle window's, root by root: the passes of a
        background loop (a root that ran in the idle window too) are taken off, as many as
        the idle window saw; what a root did only in the trip window stays."""
        idle: Counter[tuple[str, str | None, str]] = Counter()
        for c in self.idle:
            idle[(c.callee, c.caller, c.root)] += c.count
        left = []
        for c in self.calls:
            count = c.count - idle[(c.callee, c.caller, c.root)]
            if count > 0:
                left.append(Call(c.callee, c.caller, c.root, count))
        return left


class TripServer:
    """``orbit dev`` under the profile hook, one worker process, and the SQLite file."""

    def __init__(self, folder: Path) -> None:
        self.windows = folder / "windows"
        self.windows.mkdir(parents=True)
        env = {
            "PYTHONPATH": str(ROOT),
            "ORBIT_LOG_LEVEL": "warning",
            "TRIP_OUT": str(self.windows),
        }
        data = folder / "data"
        self.server = OrbitProcess.command(
            [sys.executable, "-m", "bench.trip_server", "dev", "--data-dir", str(data),
             "--host", "127.0.0.1", "--port", "0"],
            env=env,
        )  # fmt: skip
        self.worker: OrbitProcess | None = None
        self.opened = 0
        announced = self.server.wait_for("ORBIT_URL", "ORBIT_API_KEY", timeout=180)
        self.url, self.key = announced["ORBIT_URL"], announced["ORBIT_API_KEY"]
        self.db = sqlite3.connect(data / "orbit.db", isolation_level=None, timeout=10)

    def start_worker(self) -> None:
        command = str(Path(sys.executable).parent / "orbit-worker")
        env = {"ORBIT_URL": self.url, "ORBIT_API_KEY": self.key, "PYTHONPATH": str(ROOT)}
        self.worker = OrbitProcess.command(
            [command, "bench.noop_worker:worker", "--concurrency", "1", "--log-level", "warning"],
            env=env,
        )

    def record(self, body: Callable[[], None]) -> tuple[list[Call], float]:
        """Open a window, run ``body``, close it: the calls it saw and its length."""
        self.opened += 1
        n = self.opened
        self.server.proc.send_signal(signal.SIGUSR1)
        self.server.wait_for(f"TRIP_ON_{n}", timeout=60)
        began = time.perf_counter()
        body()
        seconds = time.perf_counter() - began
        self.server.proc.send_signal(signal.SIGUSR2)
        path = Path(self.server.wait_for(f"TRIP_OFF_{n}", timeout=60)[f"TRIP_OFF_{n}"])
        rows = json.loads(path.read_text())["calls"]
        return [Call(callee, caller, root, count) for callee, caller, root, count in rows], seconds

    def until(self, what: str, query: str, args: tuple[str, ...], timeout: float = 120) -> None:
        """Read the database file every 5 ms until ``query`` answers a row."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.db.execute(query, args).fetchone() is not None:
                return
            time.sleep(0.005)
        raise TimeoutError(f"{what} did not happen within {timeout} s; the server said:\n"
                           f"{self.server.stderr[-1500:]}")  # fmt: skip

    def close(self) -> None:
        self.db.close()
        for proc in [self.worker, self.server]:
            if proc is not None:
                proc.stop(timeout=30)


def trip(server: TripServer, client: orbit_sdk.Client, kind: str, settle: float) -> None:
    """Start one instance and wait for the end of its trip, then ``settle`` seconds more for
    what the same events still do (the answers, the notifications)."""
    started = client.start_workflow(f"bench-trip-{kind}", {"trip": kind})
    if kind == "finish":
        server.until(
            "the instance's success",
            "SELECT 1 FROM workflows WHERE id = ? AND state = 'succeeded'",
            (started.id,),
        )
    else:
        server.until(
            "the second step's task",
            "SELECT 1 FROM tasks WHERE owner_id = ? AND owner_step = 's2'",
            (started.id,),
        )
    time.sleep(settle)


def run_once(settle: float) -> dict[str, Window]:
    with tempfile.TemporaryDirectory(prefix="orbit-trip-") as folder:
        server = TripServer(Path(folder))
        try:
            with orbit_sdk.Client(server.url, server.key, timeout=60) as client:
                for definition in definitions():
                    client.publish_workflow(definition)
                client.update_queue(QUEUE, paused=False)  # the queue exists: workers count
                server.start_worker()
                _wait(client, "workers", 1, 120)
                for kind in KINDS:  # first use, unrecorded
                    trip(server, client, kind, settle)
                time.sleep(1.0)
                found: dict[str, Window] = {}
                for kind in KINDS:
                    calls, seconds = server.record(lambda k=kind: trip(server, client, k, settle))
                    idle, _ = server.record(lambda s=seconds: time.sleep(s))
                    found[kind] = Window(kind, seconds, calls, idle)
                return found
        finally:
            server.close()


def _medians(
    runs: list[dict[str, dict[str, int]]], names: Iterable[str], fields: Iterable[str]
) -> dict[str, dict[str, float]]:
    """Each row's fields, the median over ``runs`` (a row a run lacks counts as zeros)."""
    zero = dict.fromkeys(fields, 0)
    return {
        name: {f: statistics.median(run.get(name, zero)[f] for run in runs) for f in zero}
        for name in names
    }


def _median_table(runs: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, float]]:
    names = sorted({name for run in runs for name in run}, key=lambda n: (n != "all", n))
    return _medians(runs, names, FIELDS)


def _median_stages(runs: list[dict[str, dict[str, int]]]) -> dict[str, dict[str, float]]:
    seen = {name for run in runs for name in run}
    return _medians(runs, [n for n in STAGE_NAMES if n in seen], ("functions", "files"))


def _fmt(value: float) -> str:
    return f"{value:g}"


def report(results: list[dict[str, Window]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(results), "kinds": {}}
    for kind in KINDS:
        trips = [figures(r[kind].trip_calls()) for r in results]
        raws = [figures(r[kind].calls) for r in results]
        idles = [figures(r[kind].idle) for r in results]
        out["kinds"][kind] = {
            "seconds": [round(r[kind].seconds, 3) for r in results],
            "median": _median_table(trips),
            "window_median": _median_table(raws)["all"],
            "idle_median": _median_table(idles)["all"],
            "per_run": [t["all"] for t in trips],
            "stages": _median_stages([stage_figures(r[kind].trip_calls()) for r in results]),
        }
    return out


def print_table(found: dict[str, Any]) -> None:
    for kind in KINDS:
        data = found["kinds"][kind]
        title = "to the 2nd step's task" if kind == "second-task" else "to the instance's finish"
        print(f"\n{title} — medians of {found['runs']} runs "
              f"(windows {', '.join(_fmt(s) for s in data['seconds'])} s)")  # fmt: skip
        print(f"{'package':<14}" + "".join(f"{f:>11}" for f in FIELDS))
        for name, row in data["median"].items():
            print(f"{name:<14}" + "".join(f"{_fmt(row[f]):>11}" for f in FIELDS))
        for label, row in (("window, raw", data["window_median"]),
                           ("idle window", data["idle_median"])):  # fmt: skip
            print(f"{label:<14}" + "".join(f"{_fmt(row[f]):>11}" for f in FIELDS))
        print(f"{'by stage':<14}{'functions':>11}{'files':>11}")
        for name, row in data["stages"].items():
            print(f"  {name:<14}{_fmt(row['functions']):>9}{_fmt(row['files']):>11}")
        runs = "; ".join(" ".join(f"{f}={r[f]}" for f in FIELDS) for r in data["per_run"])
        print(f"runs: {runs}")


def run_trip(*, runs: int, settle: float, as_json: bool, dump: Path | None = None) -> int:
    results = [run_once(settle) for _ in range(runs)]
    found = report(results)
    if dump is not None:
        raw = [
            {k: {"seconds": w.seconds, "calls": [c.__dict__ for c in w.calls],
                 "idle": [c.__dict__ for c in w.idle]} for k, w in r.items()}
            for r in results
        ]  # fmt: skip
        dump.write_text(json.dumps(raw, indent=1))
    if as_json:
        print(json.dumps({"trip": found}), flush=True)
    else:
        print_table(found)
    return 0

"""``python -m bench peer-workload``: the peer workload on the bare database, then through
Orbit at each capacity, on one MariaDB server in one run; Orbit's figures as ratios of the raw
ones, judged against the issue's targets. Writes ``bench/results/peer-workload-<time>.json``
and ``.md``."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import report
from bench.databases import Databases
from bench.peer import PeerFigures, run_peer_orbit
from bench.peer_baseline import CLAIM, LANES, run_peer_raw

# The targets. Shares are of the raw row's figure unless said otherwise.
TARGET_DRAIN_OF_RAW = 0.70  # at the best capacity
TARGET_SMALL_OF_BEST = 0.60  # capacity 8's drain, of the best capacity's
SMALL_CAPACITY = 8
TARGET_SINGLE_OF_RAW = 0.25
TARGET_TOTAL_OF_RAW = 0.50
TARGET_CPU_US_PER_SINGLE = 400.0
TARGET_CPU_US_PER_DRAINED = 150.0


@dataclass
class Target:
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run


def _ratio(orbit: float | None, raw: float | None) -> float | None:
    return orbit / raw if orbit is not None and raw else None


def judge(raw: PeerFigures, runs: list[PeerFigures]) -> list[Target]:
    """The issue's targets. The best capacity is the one that drained fastest; the figures
    that do not depend on the capacity (submits, CPU, total) are judged on its run too."""
    best = max(runs, key=lambda r: r.drain_per_s)
    small = next((r for r in runs if r.capacity == SMALL_CAPACITY), None)
    at = f"capacity {best.capacity}"

    def share(goal: str, value: float | None, floor: float) -> Target:
        if value is None:
            return Target(goal, "—", None)
        return Target(goal, f"{value:.1%}", value >= floor)

    def ceiling(goal: str, value: float | None, most: float) -> Target:
        if value is None:
            return Target(goal, "—", None)
        return Target(goal, f"{value:,} µs", value <= most)

    small_share = small.drain_per_s / best.drain_per_s if small and best.drain_per_s else None
    return [
        share(f"drain at the best capacity ({at}) ≥ {TARGET_DRAIN_OF_RAW:.0%} of raw drain",
              _ratio(best.drain_per_s, raw.drain_per_s), TARGET_DRAIN_OF_RAW),
        share(f"capacity {SMALL_CAPACITY} drain ≥ {TARGET_SMALL_OF_BEST:.0%} of the best "
              f"capacity's ({at})", small_share, TARGET_SMALL_OF_BEST),
        share(f"single submits ≥ {TARGET_SINGLE_OF_RAW:.0%} of raw single inserts ({at})",
              _ratio(best.single_per_s, raw.single_per_s), TARGET_SINGLE_OF_RAW),
        share(f"total ≥ {TARGET_TOTAL_OF_RAW:.0%} of raw total ({at})",
              _ratio(best.total_per_s, raw.total_per_s), TARGET_TOTAL_OF_RAW),
        ceiling(f"server CPU per single submit ≤ {TARGET_CPU_US_PER_SINGLE:g} µs ({at})",
                best.cpu_us_per_single, TARGET_CPU_US_PER_SINGLE),
        ceiling(f"server CPU per drained task ≤ {TARGET_CPU_US_PER_DRAINED:g} µs ({at})",
                best.cpu_us_per_drained, TARGET_CPU_US_PER_DRAINED),
    ]  # fmt: skip


def run_peer_suite(
    *, url: str | None, tasks: int, single: int, batch: int, capacities: list[int],
    processes: int, server_processes: int, out: Path, allow_tmpfs: bool = False,
) -> int:  # fmt: skip
    runs: list[PeerFigures] = []
    with Databases(url, allow_tmpfs=allow_tmpfs) as dbs:
        facts = dbs.facts
        raw_url = dbs.fresh("bench_peer_raw")
        raw = asyncio.run(run_peer_raw(raw_url, tasks=tasks, single=single, batch=batch))
        dbs.drop("bench_peer_raw")
        print(json.dumps({"peer_raw": asdict(raw)}), flush=True)
        for capacity in capacities:
            name = f"bench_peer_{capacity}"
            found = run_peer_orbit(
                dbs.fresh(name), tasks=tasks, single=single, batch=batch, capacity=capacity,
                processes=processes, server_processes=server_processes,
            )  # fmt: skip
            dbs.drop(name)  # each run starts from the same server state
            runs.append(found)
            print(json.dumps({"peer": asdict(found)}), flush=True)
    targets = judge(raw, runs)
    for target in targets:
        print(json.dumps({"peer_target": asdict(target)}), flush=True)
    path = write_report(out, raw, runs, targets, facts, processes, server_processes)
    print(f"report: {path}")
    return 0


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,}"


def _share(orbit: float | None, raw: float | None) -> str:
    value = _ratio(orbit, raw)
    return "—" if value is None else f"{value:.1%}"


def write_report(
    out: Path, raw: PeerFigures, runs: list[PeerFigures], targets: list[Target],
    facts: dict[str, Any], processes: int, server_processes: int,
) -> Path:  # fmt: skip
    batched = raw.tasks - raw.single
    body = [
        f"{raw.tasks:,} no-op tasks on one queue: the first {raw.single:,} submitted one per "
        f"request (raw: one per transaction), one after another from one client, the other "
        f"{batched:,} in batches of {raw.batch:,}, all while the queue is paused; then the "
        "queue is drained. Orbit: one `orbit server` "
        f"(`--processes {server_processes}`) on a fresh database per capacity, "
        f"{processes} SDK worker {'process' if processes == 1 else 'processes'} "
        "(`bench.noop_worker`) sharing the capacity; its "
        "drain runs from the first handler start (earliest attempt `started_at`) to the last "
        "`finished_at`. Raw: no Orbit code, `asyncmy` on the same server; its drain claims up "
        f"to {CLAIM} rows per transaction (`SELECT … FOR UPDATE SKIP LOCKED` + `UPDATE`) and "
        f"marks them done in another, in {LANES} lanes. Total = tasks ÷ (single + batched + "
        "drain time). Server CPU: user + system time of the `orbit server` process and any "
        "it forked, read before and after each phase.",
        "",
        "| run | single submits/s | batched submits/s | drain tasks/s | total tasks/s "
        "| single s | batched s | drain s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in [raw, *runs]:
        label = "raw database" if r.system == "raw" else f"Orbit, capacity {r.capacity}"
        body.append(
            f"| {label} | {r.single_per_s:,} | {_rate(r.batch_per_s)} | {r.drain_per_s:,} "
            f"| {r.total_per_s:,} | {r.single_s} | {r.batch_s} | {r.drain_s} |"
        )
    body += [
        "",
        "Orbit as a share of the raw database, and the server's CPU:",
        "",
        "| capacity | single | batched | drain | total | CPU µs per single submit "
        "| per batched task | per drained task |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    body += [
        f"| {r.capacity} | {_share(r.single_per_s, raw.single_per_s)} "
        f"| {_share(r.batch_per_s, raw.batch_per_s)} | {_share(r.drain_per_s, raw.drain_per_s)} "
        f"| {_share(r.total_per_s, raw.total_per_s)} | {_rate(r.cpu_us_per_single)} "
        f"| {_rate(r.cpu_us_per_batched)} | {_rate(r.cpu_us_per_drained)} |"
        for r in runs
    ]
    body += [
        "",
        "Targets (from the issue; a miss does not fail the run):",
        "",
        "| target | measured | verdict |",
        "| --- | ---: | --- |",
    ]
    body += [
        f"| {t.goal} | {t.measured} "
        f"| {'not measured' if t.met is None else 'met' if t.met else 'missed'} |"
        for t in targets
    ]
    ratios = [
        {
            "capacity": r.capacity,
            **{
                name: _rounded(_ratio(getattr(r, f"{name}_per_s"), getattr(raw, f"{name}_per_s")))
                for name in ("single", "batch", "drain", "total")
            },
        }
        for r in runs
    ]
    data = {
        "raw": asdict(raw),
        "orbit": [asdict(r) for r in runs],
        "ratios": ratios,
        "targets": [asdict(t) for t in targets],
    }
    return report.write(out, "peer-workload", "Peer workload", facts, data, body)

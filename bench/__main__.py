"""``python -m bench <scenario> …`` — see bench/README.md."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOW_TMPFS_HELP = "measure even when the database's data is on tmpfs or ramfs (the report says so)"


def main(argv: list[str] | None = None) -> int:
    # The driver logs the server's notes ("database … doesn't exist" for DROP … IF EXISTS,
    # "table already exists" for CREATE … IF NOT EXISTS): expected here, not news.
    logging.getLogger("asyncmy").setLevel(logging.ERROR)
    # The MariaDB harness of the test suite starts a private server for a run.
    sys.path.insert(0, str(ROOT / "server"))
    from bench.databases import DataInMemoryError
    from bench.trip import run_trip

    parser = argparse.ArgumentParser(prog="python -m bench")
    sub = parser.add_subparsers(dest="scenario", required=True)
    # What every scenario on a database takes: where it runs, where its report goes.
    on_database = argparse.ArgumentParser(add_help=False)
    on_database.add_argument(
        "--url", help="mysql://… of an existing server (default: a private MariaDB)"
    )
    on_database.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results", help="report folder"
    )
    on_database.add_argument(
        "--smoke", action="store_true", help="tiny sizes, to check the runner works"
    )
    on_database.add_argument("--allow-tmpfs", action="store_true", help=ALLOW_TMPFS_HELP)
    # What scenarios that start an Orbit server, or SDK worker processes, take.
    servers = argparse.ArgumentParser(add_help=False)
    servers.add_argument(
        "--server-processes", type=int, default=1, help="orbit server --processes (default 1)"
    )
    workers = argparse.ArgumentParser(add_help=False)
    workers.add_argument("--processes", type=int, default=2, help="SDK worker processes")
    claim = sub.add_parser(
        "claim",
        parents=[on_database],
        help="service-level claim + start + complete vs backlog size",
    )
    claim.add_argument(
        "--backlog",
        type=int,
        action="append",
        help="pending tasks (repeatable; default 10000 and 1000000)",
    )
    claim.add_argument(
        "--measure", type=int, default=5000, help="tasks claimed and completed per run"
    )
    claim.add_argument("--batch", type=int, default=100, help="tasks per claim")
    tp = sub.add_parser(
        "throughput",
        parents=[on_database, servers, workers],
        help="raw-database baseline, then Orbit end to end with SDK workers",
    )
    tp.add_argument("--tasks", type=int, default=20_000, help="tasks per scenario run")
    tp.add_argument(
        "--capacity", type=int, action="append", help="total worker capacity (default 8, 64, 256)"
    )
    tp.add_argument(
        "--mode", choices=["burn-down", "steady"], action="append", help="default: both"
    )
    tp.add_argument(
        "--features",
        action="store_true",
        help="per-key exclusion (1,000 keys), fairness (10 keys) and a queue limit, all on",
    )
    tp.add_argument("--baseline-tasks", type=int, default=40_000, help="tasks of the baseline")
    lat = sub.add_parser(
        "latency", parents=[on_database], help="submit → start and → result with idle workers"
    )
    lat.add_argument("--tasks", type=int, default=500, help="tasks submitted one by one")
    mem = sub.add_parser(
        "memory", parents=[on_database, workers], help="server memory over a steady run"
    )
    mem.add_argument("--minutes", type=float, default=10.0, help="length of the steady run")
    mem.add_argument("--rate", type=int, default=500, help="tasks submitted per second")
    mem.add_argument("--capacity", type=int, default=64, help="total worker capacity")
    mem.add_argument(
        "--outages", type=int, default=0, help="times the database is stopped during the run"
    )
    mem.add_argument("--outage-s", type=float, default=8.0, help="length of each outage")
    sch = sub.add_parser(
        "schedules",
        parents=[on_database, servers],
        help="interval schedules firing: lag, passes, creates/s",
    )
    sch.add_argument("--schedules", type=int, default=10_000, help="interval schedules per run")
    sch.add_argument("--minutes", type=float, default=3.0, help="length of the measured window")
    sch.add_argument("--mode", choices=["phased", "aligned"], action="append", help="default: both")
    sch.add_argument(
        "--batch", type=int, default=500, help="the server's ORBIT_SCHEDULE_BATCH (default 500)"
    )
    wf = sub.add_parser(
        "workflows",
        parents=[on_database, servers, workers],
        help="five-step workflows: steps/s and step-to-step latency",
    )
    wf.add_argument("--instances", type=int, default=1000, help="instances started")
    wf.add_argument("--capacity", type=int, default=64, help="total worker capacity")
    wf.add_argument("--paced", type=int, default=200, help="instances of the paced phase")
    wf.add_argument("--paced-rate", type=float, default=20.0, help="paced starts per second")
    wf.add_argument("--baseline-tasks", type=int, default=40_000, help="tasks of the baseline")
    peer = sub.add_parser(
        "peer-workload",
        parents=[on_database, servers, workers],
        help="single submits, batched submits, drain: Orbit beside the raw database",
    )
    peer.add_argument("--tasks", type=int, default=20_000, help="tasks per run")
    peer.add_argument(
        "--single", type=int, default=2000, help="of them submitted one per request first"
    )
    peer.add_argument("--batch", type=int, default=1000, help="tasks per batch of the rest")
    peer.add_argument(
        "--capacity", type=int, action="append", help="total worker capacity (default 8, 256)"
    )
    con = sub.add_parser(
        "console", parents=[on_database], help="the operator console's page times, big database"
    )
    con.add_argument("--tasks", type=int, default=1_000_000, help="tasks seeded")
    con.add_argument("--workflows", type=int, default=100_000, help="workflow instances seeded")
    con.add_argument("--requests", type=int, default=20, help="requests per page, after warm-ups")
    trip = sub.add_parser("trip", help="orbit_server function hops of one workflow trip")
    trip.add_argument("--runs", type=int, default=3, help="runs, each on a fresh server")
    trip.add_argument(
        "--settle", type=float, default=0.2, help="seconds recorded after the trip's end"
    )
    trip.add_argument("--json", action="store_true", help="one JSON line instead of tables")
    trip.add_argument("--dump", type=Path, help="write every recorded call to this file")
    trip.add_argument("--smoke", action="store_true", help="one run, to check the runner works")
    chaos = sub.add_parser(
        "chaos", help="servers, workers and the database killed and stopped under load; checked"
    )
    chaos.add_argument("--profile", choices=["short", "medium", "long"], default="short")
    chaos.add_argument(
        "--topology", choices=["single", "galera", "semisync"], default="single",
        help="one MariaDB, a 3-node Galera cluster, or a primary with a semi-sync replica",
    )  # fmt: skip
    chaos.add_argument("--seed", type=int, default=1, help="seeds the load and the faults")
    chaos.add_argument("--servers", type=int, default=3, help="orbit server processes")
    chaos.add_argument("--workers", type=int, default=4, help="SDK worker processes")
    chaos.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="report folder")
    chaos.add_argument("--allow-tmpfs", action="store_true", help=ALLOW_TMPFS_HELP)
    args = parser.parse_args(argv)
    if args.scenario == "chaos":
        from bench.chaos import run_chaos

        return run_chaos(
            profile=args.profile, seed=args.seed, servers=args.servers, workers=args.workers,
            out=args.out, allow_tmpfs=args.allow_tmpfs, topology=args.topology,
        )  # fmt: skip
    if args.scenario == "trip":
        runs = 1 if args.smoke else args.runs
        return run_trip(runs=runs, settle=args.settle, as_json=args.json, dump=args.dump)
    if args.scenario == "peer-workload" and not _peer_sizes_ok(args):
        parser.error("peer-workload needs 0 ≤ --single ≤ --tasks and 1 ≤ --batch ≤ 1000")
    try:
        return _run(args)
    except DataInMemoryError as exc:
        print(f"python -m bench {args.scenario}: refused: {exc}", file=sys.stderr)
        return 2


def _peer_sizes_ok(args: argparse.Namespace) -> bool:
    # A batch of more than 1,000 is refused by the API (POST /v1/tasks:batch).
    return bool(args.smoke) or (0 <= args.single <= args.tasks and 1 <= args.batch <= 1000)


def _run(args: argparse.Namespace) -> int:
    from bench.claim import run_claim_benchmark
    from bench.console import run_console_suite
    from bench.peer_suite import run_peer_suite
    from bench.suite import (
        run_latency_suite,
        run_memory_suite,
        run_schedules_suite,
        run_suite,
        run_workflows_suite,
    )

    allow_tmpfs = args.allow_tmpfs
    if args.scenario == "console":
        return run_console_suite(
            url=args.url,
            tasks=2000 if args.smoke else args.tasks,
            workflows=200 if args.smoke else args.workflows,
            requests=3 if args.smoke else args.requests,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    if args.scenario == "peer-workload":
        return run_peer_suite(
            url=args.url,
            tasks=200 if args.smoke else args.tasks,
            single=50 if args.smoke else args.single,
            batch=50 if args.smoke else args.batch,
            capacities=args.capacity or ([8] if args.smoke else [8, 256]),
            processes=1 if args.smoke else args.processes,
            server_processes=args.server_processes,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    if args.scenario == "workflows":
        return run_workflows_suite(
            url=args.url,
            instances=20 if args.smoke else args.instances,
            capacity=8 if args.smoke else args.capacity,
            processes=1 if args.smoke else args.processes,
            server_processes=args.server_processes,
            paced=10 if args.smoke else args.paced,
            paced_per_s=args.paced_rate,
            baseline_tasks=800 if args.smoke else args.baseline_tasks,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    if args.scenario == "schedules":
        return run_schedules_suite(
            url=args.url,
            schedules=50 if args.smoke else args.schedules,
            # smoke: three slots of the shortest interval a schedule may have
            minutes=0.05 if args.smoke else args.minutes,
            interval_ms=1000 if args.smoke else 60_000,
            modes=args.mode or ["phased", "aligned"],
            server_processes=args.server_processes,
            batch=args.batch,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    if args.scenario == "memory":
        return run_memory_suite(
            url=args.url,
            minutes=0.05 if args.smoke else args.minutes,
            rate=50 if args.smoke else args.rate,
            capacity=8 if args.smoke else args.capacity,
            processes=1 if args.smoke else args.processes,
            out=args.out,
            sample_s=0.5 if args.smoke else 10.0,
            allow_tmpfs=allow_tmpfs,
            outages=args.outages,
            outage_s=args.outage_s,
        )
    if args.scenario == "latency":
        return run_latency_suite(
            url=args.url,
            tasks=20 if args.smoke else args.tasks,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    if args.scenario == "throughput":
        return run_suite(
            url=args.url,
            tasks=200 if args.smoke else args.tasks,
            capacities=args.capacity or ([8] if args.smoke else [8, 64, 256]),
            modes=args.mode or ["burn-down", "steady"],
            processes=args.processes,
            server_processes=args.server_processes,
            features=args.features,
            baseline_tasks=800 if args.smoke else args.baseline_tasks,
            out=args.out,
            allow_tmpfs=allow_tmpfs,
        )
    backlogs = args.backlog or ([300] if args.smoke else [10_000, 1_000_000])
    measure = 100 if args.smoke else args.measure
    return run_claim_benchmark(
        backlogs,
        measure=measure,
        batch=args.batch,
        url=args.url,
        out=args.out,
        allow_tmpfs=allow_tmpfs,
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""Schedules firing on time: ``--schedules`` interval schedules (one minute, overlap ``allow``, a
no-op task template) created over HTTP through one ``orbit server``, then left to fire with no
workers (their tasks stay pending); afterwards the fire ledger (``schedule_fires``) is read
with SQL.

- **phased**: no ``start_at``: each schedule fires one interval after its creation and every
  interval after, so the slots spread over the time creation took, as those of schedules made
  by real use do;
- **aligned**: every schedule has the same ``start_at``, a whole interval at least half an
  interval after creation is expected to end (at the rate of a short probe): all fire at the
  same instant, the worst burst.

Only the slots of the measured window count: ``periods`` whole intervals from the end of
creation (phased) or from the common start (aligned), so that every schedule has ``periods``
slots in it. Fire lag is ``recorded_at − fire_at`` of a fired slot; ``recorded_at`` is the clock
a scheduler pass reads as it begins, shared by every row it records. The pass's own work comes
after that reading, so the runner also polls the ledger every 50 ms and notes when each pass's
rows first became visible: the *seen* lag, from the fire time to the commit (at most one poll
late), is what a user waiting for the task sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncmy

import orbit_sdk
from bench.baseline import _connect_args
from bench.latency import _percentile
from bench.throughput import Stack

TEMPLATE = {"queue": "bench-sched", "type": "noop"}
IN_FLIGHT = 32  # creates (and deletes) in flight at once
PROBE = 256  # aligned: creates timed first, to plan the common start (then deleted)
POLL_S = 0.05  # how often the runner looks for newly committed passes
LOOKBACK = timedelta(seconds=30)  # a pass commits within this of its clock reading
GRACE_S = 60.0  # after the window, the longest the runner waits for its slots to be recorded
TARGET_LAG_MS = 1000.0  # the target: fire lag p99 at most 1 s
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class SchedulesResult:
    mode: str
    schedules: int
    interval_ms: int
    periods: int  # slots of each schedule in the measured window
    server_processes: int
    batch: int  # ORBIT_SCHEDULE_BATCH: the most schedules one scheduler transaction handles
    create_s: float
    creates_per_s: float
    window_start: str
    spread_s: float  # fire times in the window's first interval: latest − earliest
    expected: int  # schedules × periods
    unrecorded: int  # slots of the window with no ledger row when the run ended
    fired: int
    missed: int
    skipped: int
    other: int  # paused or queued: none expected
    duplicates: int  # ledger rows beyond one per (schedule, fire time)
    per_schedule_min: int  # fired slots of a schedule in the window
    per_schedule_max: int
    lag_p50_ms: float
    lag_p95_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    seen_p50_ms: float
    seen_p99_ms: float
    seen_max_ms: float
    passes: int  # scheduler passes that fired a slot of the window
    rows_per_pass_p50: float
    rows_per_pass_max: int
    tasks: int  # tasks made by schedules over the whole run
    fired_total: int  # fired ledger rows over the whole run
    meets_lag: bool  # lag p99 ≤ 1 s
    meets_lag_seen: bool  # seen lag p99 ≤ 1 s
    meets_batch: bool  # no pass recorded more than ``batch`` rows


@dataclass(frozen=True)
class _Window:
    first: datetime
    end: datetime
    interval: timedelta


@dataclass
class _Run:
    """What a run leaves to summarise."""

    create_s: float
    window: _Window
    ledger: list[tuple[str, datetime, str, datetime]]  # schedule, fire time, outcome, recorded
    schedule_ids: list[str]
    tasks: int  # made by schedules
    seen: dict[datetime, datetime]  # a pass's recorded_at → when a poll first saw its rows


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(value: datetime) -> datetime:
    """A ``DATETIME(6)`` read from the database (UTC, naive) as an aware time."""
    return value.replace(tzinfo=UTC)


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None)


def _grid_at(moment: datetime, interval: timedelta) -> datetime:
    """The first whole multiple of ``interval`` since the Unix epoch at or after ``moment``."""
    return EPOCH + interval * math.ceil((moment - EPOCH) / interval)


def _pct(values: list[float], q: float) -> float:
    return _percentile(values, q) if values else 0.0


async def _lanes(count: int, call: Callable[[int], Awaitable[Any]]) -> None:
    """``call(0)`` … ``call(count − 1)``, at most ``IN_FLIGHT`` at once."""
    numbers = iter(range(count))

    async def lane() -> None:
        for n in numbers:  # shared: each number goes to one lane
            await call(n)

    await asyncio.gather(*(lane() for _ in range(min(IN_FLIGHT, count))))


async def _create(
    client: orbit_sdk.AsyncClient, count: int, interval_ms: int, start_at: datetime | None,
    prefix: str = "s",
) -> None:  # fmt: skip
    async def create(n: int) -> None:
        await client.create_schedule(
            f"{prefix}{n}", task=TEMPLATE, interval_ms=interval_ms, overlap="allow",
            start_at=start_at,
        )  # fmt: skip

    await _lanes(count, create)


async def _plan_start(client: orbit_sdk.AsyncClient, schedules: int, interval_ms: int) -> datetime:
    """The common start of the aligned schedules: a whole interval at least half an interval
    after creation is expected to end, at the rate of a probe (schedules that would start a
    day later, created, timed and deleted)."""
    probe = min(PROBE, schedules)
    began = time.perf_counter()
    await _create(client, probe, interval_ms, _now() + timedelta(days=1), prefix="probe-")
    rate = probe / (time.perf_counter() - began)
    await _lanes(probe, lambda n: client.delete_schedule(f"probe-{n}"))
    interval = timedelta(milliseconds=interval_ms)
    ends = _now() + timedelta(seconds=1.25 * schedules / rate)  # the table grows: some slack
    return _grid_at(ends + interval / 2, interval)


async def _watch_passes(url: str, seen: dict[datetime, datetime], stop: asyncio.Event) -> None:
    """Note when each scheduler pass's rows first became visible: its ``recorded_at`` → the
    start of the first poll that saw them (a poll sees what was committed before it began)."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    latest = EPOCH
    try:
        async with conn.cursor() as cur:
            while not stop.is_set():
                at = _now()
                await cur.execute(
                    "SELECT DISTINCT recorded_at FROM schedule_fires WHERE recorded_at > %s",
                    (_naive(latest - LOOKBACK),),
                )
                for (recorded,) in await cur.fetchall():
                    seen.setdefault(_utc(recorded), at)
                    latest = max(latest, _utc(recorded))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_S)
    finally:
        conn.close()


async def _await_recorded(cur: Any, window: _Window, expected: int, seconds: float) -> None:
    """Wait until every slot of the window has its ledger row, or ``seconds`` have passed (the
    report then counts the slots without one)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await cur.execute(
            "SELECT COUNT(*) FROM schedule_fires WHERE fire_at >= %s AND fire_at < %s",
            (_naive(window.first), _naive(window.end)),
        )
        row = await cur.fetchone()
        if row is not None and int(row[0]) >= expected:
            return
        await asyncio.sleep(0.5)


async def _measure(
    stack: Stack, url: str, *, mode: str, schedules: int, interval_ms: int, periods: int
) -> _Run:
    interval = timedelta(milliseconds=interval_ms)
    seen: dict[datetime, datetime] = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch_passes(url, seen, stop))
    try:
        async with orbit_sdk.AsyncClient(stack.url, stack.key, timeout=120) as client:
            start_at = None
            if mode == "aligned":
                start_at = await _plan_start(client, schedules, interval_ms)
            began = time.perf_counter()
            await _create(client, schedules, interval_ms, start_at)
            create_s = time.perf_counter() - began
        created = _now()
        first = created
        if start_at is not None:  # when creation took longer than planned, a later slot
            first = max(start_at, _grid_at(created + interval / 2, interval))
        window = _Window(first, first + interval * periods, interval)
        await asyncio.sleep(max(0.0, (window.end - _now()).total_seconds()))
        conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
        try:
            async with conn.cursor() as cur:
                await _await_recorded(cur, window, schedules * periods, GRACE_S)
                # The schedules go on firing: the ledger and the tasks are read at one instant.
                await cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                await cur.execute(
                    "SELECT schedule_id, fire_at, outcome, recorded_at FROM schedule_fires"
                )
                ledger = [(str(s), _utc(f), str(o), _utc(r)) for s, f, o, r in await cur.fetchall()]
                await cur.execute("SELECT id FROM schedules")
                ids = [str(row[0]) for row in await cur.fetchall()]
                await cur.execute("SELECT COUNT(*) FROM tasks WHERE owner_kind = 'schedule'")
                tasks = int((await cur.fetchone())[0])
                await cur.execute("COMMIT")
        finally:
            conn.close()
    finally:
        stop.set()
        await watcher
    return _Run(create_s, window, ledger, ids, tasks, seen)


def _summarise(run: _Run) -> dict[str, Any]:
    """The figures of the window's slots (and the ledger's totals)."""
    window = run.window
    in_window = [r for r in run.ledger if window.first <= r[1] < window.end]
    fired = [r for r in in_window if r[2] == "fired"]
    outcomes = Counter(r[2] for r in in_window)
    per_schedule = Counter(r[0] for r in fired)
    counts = [per_schedule[sid] for sid in run.schedule_ids]
    lags = [(r[3] - r[1]).total_seconds() * 1000 for r in fired]
    seen_lags = [(run.seen[r[3]] - r[1]).total_seconds() * 1000 for r in fired if r[3] in run.seen]
    pass_rows = Counter(r[3] for r in run.ledger)  # every row a pass recorded, in the window or not
    sizes = [float(pass_rows[p]) for p in {r[3] for r in fired}]
    opening = [r[1] for r in fired if r[1] < window.first + window.interval]
    return {
        "spread_s": round((max(opening) - min(opening)).total_seconds(), 3) if opening else 0.0,
        "in_window": len(in_window),
        "fired": len(fired),
        "missed": outcomes["missed"],
        "skipped": outcomes["skipped"],
        "other": len(in_window) - len(fired) - outcomes["missed"] - outcomes["skipped"],
        "duplicates": len(in_window) - len({(r[0], r[1]) for r in in_window}),
        "per_schedule_min": min(counts, default=0),
        "per_schedule_max": max(counts, default=0),
        "lag_p50_ms": _pct(lags, 0.5),
        "lag_p95_ms": _pct(lags, 0.95),
        "lag_p99_ms": _pct(lags, 0.99),
        "lag_max_ms": round(max(lags, default=0.0), 2),
        "seen_p50_ms": _pct(seen_lags, 0.5),
        "seen_p99_ms": _pct(seen_lags, 0.99),
        "seen_max_ms": round(max(seen_lags, default=0.0), 2),
        "passes": len(sizes),
        "rows_per_pass_p50": _pct(sizes, 0.5),
        "rows_per_pass_max": int(max(sizes, default=0)),
        "fired_total": sum(1 for r in run.ledger if r[2] == "fired"),
    }


def run_schedules(
    url: str, *, mode: str, schedules: int, minutes: float, interval_ms: int,
    server_processes: int, batch: int,
) -> SchedulesResult:  # fmt: skip
    periods = max(1, round(minutes * 60_000 / interval_ms))
    stack = Stack(url, server_processes, settings={"ORBIT_SCHEDULE_BATCH": str(batch)})
    try:
        run = asyncio.run(
            _measure(stack, url, mode=mode, schedules=schedules, interval_ms=interval_ms,
                     periods=periods)
        )  # fmt: skip
    except orbit_sdk.OrbitError as exc:
        raise RuntimeError(f"{exc}; the server said:\n{stack.server.stderr[-1500:]}") from exc
    finally:
        stack.close()
    found = _summarise(run)
    expected = schedules * periods
    found["unrecorded"] = max(0, expected - found.pop("in_window"))
    return SchedulesResult(
        mode=mode, schedules=schedules, interval_ms=interval_ms, periods=periods,
        server_processes=server_processes, batch=batch, create_s=round(run.create_s, 3),
        creates_per_s=round(schedules / run.create_s, 1),
        window_start=run.window.first.isoformat(), expected=expected, tasks=run.tasks,
        meets_lag=found["fired"] > 0 and found["lag_p99_ms"] <= TARGET_LAG_MS,
        meets_lag_seen=found["fired"] > 0 and found["seen_p99_ms"] <= TARGET_LAG_MS,
        meets_batch=found["rows_per_pass_max"] <= batch, **found,
    )  # fmt: skip

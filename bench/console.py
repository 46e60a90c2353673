"""The operator console's page times with a big database: ``--tasks`` tasks (1,000,000) over
five queues and ``--workflows`` workflow instances (100,000) of three published definitions,
with schedules, bulk operations and a connected worker, served by one ``orbit server``.

The rows are written straight into the tables in big multi-row transactions (no HTTP, no
services: seeding through the API would take most of a run for the same answer), in a mix of
states a server that has run for days would hold. The queue counters are set to what was
seeded. The definitions, schedules and bulk operations go through the HTTP API.

Then each page is requested over HTTP with a signed-in cookie, ``--requests`` times after two
warm-ups, one request at a time, and the server's own time for each answer is read from its
``Server-Timing: app;dur=<ms>`` header: median, p95 and max per page, judged against the
acceptance's 300 ms.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncmy
import httpx2

import orbit_sdk
from bench import report
from bench.baseline import _connect_args
from bench.databases import Databases
from bench.throughput import Stack
from orbit_server.ids import new_id
from orbit_server.store import open_database
from orbit_server.store.migrate import migrate

TENANT = ENVIRONMENT = "bench"  # the scope of the key the Stack makes
QUEUES = ("emails", "billing", "reports", "images", "webhooks")
TYPES = ("send", "sync", "render")
# (state, share) of the seeded tasks; pending ones are in the claim range too
TASK_MIX = (("succeeded", 0.91), ("pending", 0.05), ("failed", 0.025), ("cancelled", 0.01),
            ("needs_review", 0.005))  # fmt: skip
WORKFLOW_MIX = (("succeeded", 0.80), ("failed", 0.08), ("running", 0.08), ("paused", 0.03),
                ("cancelled", 0.01))  # fmt: skip
# name → its task steps (step id, queue); version "1" of each is published
DEFINITIONS = {
    "order-fulfilment": (("reserve", "billing"), ("charge", "billing"), ("ship", "webhooks")),
    "report-build": (("gather", "reports"), ("render", "reports")),
    "user-onboarding": (("welcome", "emails"), ("provision", "webhooks"), ("notify", "emails")),
}
CHUNK = 5000  # rows per statement and transaction
# The seeded history: created over the last six days, inside the server's default retention
# of finished work (seven days), so that its pruning deletes nothing while the pages are read.
SPAN = timedelta(days=6)
LIMIT_MS = 300.0
WARM_UPS = 2


@dataclass
class SeedResult:
    tasks: int
    workflows: int
    step_rows: int
    tasks_s: float
    workflows_s: float
    by_state: dict[str, int]
    workflows_by_state: dict[str, int]


@dataclass
class PageResult:
    page: str
    path: str
    requests: int
    median_ms: float
    p95_ms: float
    max_ms: float
    client_median_ms: float  # the whole request as the client saw it
    bytes: int
    within: bool  # max ≤ 300 ms


def _pick(rng: random.Random, mix: tuple[tuple[str, float], ...]) -> str:
    roll = rng.random()
    for state, share in mix:
        roll -= share
        if roll < 0:
            return state
    return mix[0][0]


def _values(rows: int, columns: int) -> str:
    one = "(" + ",".join(["%s"] * columns) + ")"
    return ",".join([one] * rows)


TASK_COLUMNS = (
    "id, tenant, environment, queue, type, state, params, priority, run_at, attempts, "
    "max_attempts, initial_backoff_ms, backoff_multiplier, max_backoff_ms, timeout_ms, "
    "side_effect, labels, result, error, cancel_requested, lease_epoch, event_seq, node, "
    "worker_id, created_at, updated_at, finished_at"
)
READY_COLUMNS = "task_id, tenant, environment, queue, type, priority, run_at, fairness_key"
ATTEMPT_COLUMNS = (
    "task_id, number, state, cause, worker_id, session_id, node, leased_at, started_at, "
    "ended_at, lease_expires_at, error"
)


async def _insert(cur: Any, table: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        flat = [v for row in rows for v in row]
        width = len(rows[0])
        await cur.execute(f"INSERT INTO {table} ({columns}) VALUES {_values(len(rows), width)}",
                          flat)  # fmt: skip


async def migrate_only(url: str) -> None:
    db = open_database(url, pool_max=1)
    await db.connect()
    try:
        await migrate(db)
    finally:
        await db.close()


async def seed_tasks(url: str, count: int) -> Counter[str]:
    """``count`` tasks over the queues, created over the last six days in id order (the newest
    last), finished a little after they were created; an attempt row for each that ran; the
    pending ones in the claim range and counted in their queue's counter."""
    rng = random.Random(1)
    now = datetime.now(UTC).replace(tzinfo=None)
    start = now - SPAN
    states: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    conn = await asyncmy.connect(**_connect_args(url))
    try:
        async with conn.cursor() as cur:
            done = 0
            while done < count:
                size = min(CHUNK, count - done)
                tasks: list[tuple[Any, ...]] = []
                ready: list[tuple[Any, ...]] = []
                attempts: list[tuple[Any, ...]] = []
                for n in range(done, done + size):
                    task_id = new_id()
                    queue = QUEUES[n % len(QUEUES)]
                    type_ = TYPES[rng.randrange(len(TYPES))]
                    state = _pick(rng, TASK_MIX)
                    states[state] += 1
                    created = start + SPAN * (n / count)
                    ran = state in ("succeeded", "failed", "needs_review")
                    began = created + timedelta(milliseconds=rng.randrange(5, 2000))
                    ended = began + timedelta(milliseconds=rng.randrange(20, 30_000))
                    finished = ended if state in ("succeeded", "failed", "cancelled") else None
                    if state == "cancelled":
                        finished = began
                    error = None
                    if state == "failed":
                        error = json.dumps({"code": "upstream_timeout", "retryable": False,
                                            "message": f"{queue}: no answer"})  # fmt: skip
                    result = json.dumps({"ok": True, "n": n}) if state == "succeeded" else None
                    labels = json.dumps({"customer": f"c{n % 500}",
                                         "region": ("eu", "us", "ap")[n % 3]})  # fmt: skip
                    params = json.dumps({"n": n, "to": f"user{n % 10_000}@example.com"})
                    node = "node-a" if ran else None
                    worker = f"worker-{n % 8}" if ran else None
                    tasks.append((
                        task_id, TENANT, ENVIRONMENT, queue, type_, state, params, 0, created,
                        1 if ran else 0, 3, 1000, 2.0, 60_000, 300_000, "idempotent", labels,
                        result, error, 0, 1 if ran else 0, 1 if ran else 0, node, worker,
                        created, finished or ended, finished,
                    ))  # fmt: skip
                    if state == "pending":
                        pending[queue] += 1
                        ready.append((task_id, TENANT, ENVIRONMENT, queue, type_, 0, created, ""))
                    elif ran:
                        cause = {"failed": "error", "needs_review": "lease_expired"}.get(state)
                        attempts.append((
                            task_id, 1, state, cause, worker, f"ses_{n % 8}", node, began,
                            began, None if state == "needs_review" else ended, None, error,
                        ))  # fmt: skip
                await _insert(cur, "tasks", TASK_COLUMNS, tasks)
                await _insert(cur, "task_ready", READY_COLUMNS, ready)
                await _insert(cur, "task_attempts", ATTEMPT_COLUMNS, attempts)
                await conn.commit()
                done += size
            for queue in QUEUES:
                await cur.execute(
                    "INSERT INTO queues (tenant, environment, name, paused, concurrency_limit, "
                    "key_concurrency, max_pending, pending, active, created_at, updated_at) "
                    "VALUES (%s, %s, %s, 0, NULL, 1, NULL, %s, 0, %s, %s)",
                    (TENANT, ENVIRONMENT, queue, pending[queue], start, now),
                )
            await conn.commit()
    finally:
        conn.close()
    return states


async def check_counters(url: str) -> None:
    """The queues' counters hold what their tasks say (the pages read them)."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT q.name, q.pending, q.active, "
                "(SELECT COUNT(*) FROM tasks t WHERE t.tenant = q.tenant "
                "AND t.environment = q.environment AND t.queue = q.name "
                "AND t.state IN ('scheduled', 'pending')), "
                "(SELECT COUNT(*) FROM tasks t WHERE t.tenant = q.tenant "
                "AND t.environment = q.environment AND t.queue = q.name "
                "AND t.state IN ('leased', 'running')) FROM queues q"
            )
            for name, counted, active, waiting, running in await cur.fetchall():
                if (int(counted), int(active)) != (int(waiting), int(running)):
                    raise RuntimeError(
                        f"queue {name}: counters {counted}/{active}, tasks {waiting}/{running}"
                    )
    finally:
        conn.close()


def _steps(state: str, steps: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """(step id, step state) of an instance in ``state``: how far it got."""
    ids = [s for s, _ in steps]
    if state == "succeeded":
        return [(s, "succeeded") for s in ids]
    if state == "cancelled":
        return [(ids[0], "cancelled")]
    last = {"failed": "failed", "running": "running", "paused": "pending"}[state]
    return [(ids[0], "succeeded"), (ids[1], last)]


async def seed_workflows(url: str, count: int) -> tuple[Counter[str], int]:
    """``count`` instances of the published definitions over the last six days, each with its
    gate and the rows of the steps it reached (no tasks of their own)."""
    rng = random.Random(2)
    now = datetime.now(UTC).replace(tzinfo=None)
    start = now - SPAN
    names = list(DEFINITIONS)
    states: Counter[str] = Counter()
    step_rows = 0
    conn = await asyncmy.connect(**_connect_args(url))
    try:
        async with conn.cursor() as cur:
            done = 0
            while done < count:
                size = min(CHUNK, count - done)
                flows: list[tuple[Any, ...]] = []
                gates: list[tuple[Any, ...]] = []
                steps: list[tuple[Any, ...]] = []
                for n in range(done, done + size):
                    name = names[n % len(names)]
                    state = _pick(rng, WORKFLOW_MIX)
                    states[state] += 1
                    created = start + SPAN * (n / count)
                    wf_id, gate_id = new_id("wf_"), new_id("gate_")
                    reached = _steps(state, DEFINITIONS[name])
                    at = created
                    outputs: dict[str, Any] = {}
                    for seq, (step, step_state) in enumerate(reached, start=1):
                        ended = at + timedelta(milliseconds=rng.randrange(50, 20_000))
                        over = step_state in ("succeeded", "failed", "cancelled")
                        output = {"ok": True} if step_state == "succeeded" else None
                        error = (json.dumps({"code": "card_declined", "message": "declined"})
                                 if step_state == "failed" else None)  # fmt: skip
                        if output is not None:
                            outputs[step] = {"output": output}
                        steps.append((
                            wf_id, step, seq, step, "task", step_state, None, None, None, None,
                            None, 1 if step_state != "pending" else 0,
                            json.dumps({"order": n}),
                            None if output is None else json.dumps(output), error, None, None,
                            1 if over else 0, None, None, at, ended if over else None,
                            ended if over else at,
                        ))  # fmt: skip
                        at = ended
                    step_rows += len(reached)
                    finished = at if state in ("succeeded", "failed", "cancelled") else None
                    error = (json.dumps({"code": "step_failed", "message": "charge failed"})
                             if state == "failed" else None)  # fmt: skip
                    context = {"steps": outputs, "visits": {}, "seq": len(reached)}
                    flows.append((
                        wf_id, TENANT, ENVIRONMENT, name, "1", state, json.dumps({"order": n}),
                        json.dumps({"ok": True}) if state == "succeeded" else None, error,
                        json.dumps(context), 0, gate_id, created, at, finished,
                    ))  # fmt: skip
                    gates.append((gate_id, TENANT, ENVIRONMENT, 0 if state == "paused" else 1,
                                  0, created, at))  # fmt: skip
                await _insert(cur, "gates", "id, tenant, environment, open, version, "
                              "created_at, updated_at", gates)  # fmt: skip
                await _insert(cur, "workflows", "id, tenant, environment, definition, version, "
                              "state, input, output, error, context, control_version, gate_id, "
                              "created_at, updated_at, finished_at", flows)  # fmt: skip
                await _insert(cur, "workflow_steps", "workflow_id, step_key, seq, step, kind, "
                              "state, parent_key, branch, item, round, task_id, tries, input, "
                              "output, error, progress, items, followed, due_at, wake_at, "
                              "started_at, ended_at, updated_at", steps)  # fmt: skip
                await conn.commit()
                done += size
    finally:
        conn.close()
    return states, step_rows


async def _one(url: str, sql: str) -> Any:
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return await cur.fetchall()
    finally:
        conn.close()


def definition(name: str) -> orbit_sdk.Workflow:
    wf = orbit_sdk.Workflow(name, version="1")
    for step, queue in DEFINITIONS[name]:
        wf.task(step, queue=queue, type="step")
    return wf


def _api_setup(stack: Stack, url: str) -> list[str]:
    """Definitions, schedules and bulk operations through the API; answers the operations'
    ids once each has finished."""
    with orbit_sdk.Client(stack.url, stack.key, timeout=120) as client:
        for name in DEFINITIONS:
            client.publish_workflow(definition(name))
        for n, queue in enumerate(QUEUES):
            client.create_schedule(f"nightly-{queue}", task={"queue": queue, "type": "sync"},
                                   cron=f"{n} 3 * * *")  # fmt: skip
        # one that fires every second, for a fire ledger (its queue has no worker)
        client.create_schedule("heartbeat", task={"queue": "ticks", "type": "tick"},
                               interval_ms=1000)  # fmt: skip
    pending = [r[0] for r in asyncio.run(_one(url, (
        "SELECT id FROM tasks WHERE tenant = 'bench' AND environment = 'bench' "
        "AND queue = 'emails' AND state = 'pending' ORDER BY id DESC LIMIT 200")))]  # fmt: skip
    mixed = [r[0] for r in asyncio.run(_one(url, (
        "SELECT id FROM tasks WHERE tenant = 'bench' AND environment = 'bench' "
        "AND queue = 'billing' ORDER BY id DESC LIMIT 100")))]  # fmt: skip
    bodies = [
        {"action": "set_priority", "filter": {"ids": pending}, "params": {"priority": 5}},
        {"action": "cancel", "filter": {"ids": mixed}, "params": {"reason": "bench"}},
    ]
    ids = []
    headers = {"Authorization": f"Bearer {stack.key}"}
    with httpx2.Client(base_url=stack.url, headers=headers, timeout=120) as http:
        for body in bodies:
            answer = http.post("/v1/tasks:bulk", json=body)
            answer.raise_for_status()
            ids.append(str(answer.json()["id"]))
        deadline = time.monotonic() + 120
        for op_id in ids:
            while http.get(f"/v1/bulk-operations/{op_id}").json()["state"] == "running":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bulk operation {op_id} still runs")
                time.sleep(0.2)
    return ids


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _timing(answer: httpx2.Response) -> float:
    header = answer.headers.get("server-timing", "")
    for part in header.split(";"):
        if part.strip().startswith("dur="):
            return float(part.strip()[4:])
    raise RuntimeError(f"{answer.request.url}: no Server-Timing duration in {header!r}")


def measure_pages(
    console: str, key: str, pages: list[tuple[str, str]], requests: int
) -> list[PageResult]:
    """Each page ``requests`` times after the warm-ups, one request at a time."""
    results = []
    with httpx2.Client(base_url=console, timeout=60, follow_redirects=False) as http:
        signed = http.post("/console/sign-in", data={"key": key})
        if signed.status_code != 303 or not http.cookies:
            raise RuntimeError(f"sign-in answered {signed.status_code}")
        for name, path in pages:
            server: list[float] = []
            client: list[float] = []
            size = 0
            for n in range(WARM_UPS + requests):
                began = time.perf_counter()
                answer = http.get(path)
                took = (time.perf_counter() - began) * 1000
                if answer.status_code != 200:
                    raise RuntimeError(f"{path} answered {answer.status_code}")
                if n >= WARM_UPS:
                    server.append(_timing(answer))
                    client.append(took)
                    size = len(answer.content)
            result = PageResult(
                page=name, path=path, requests=requests,
                median_ms=round(statistics.median(server), 1),
                p95_ms=round(_pct(server, 0.95), 1), max_ms=round(max(server), 1),
                client_median_ms=round(statistics.median(client), 1), bytes=size,
                within=max(server) <= LIMIT_MS,
            )  # fmt: skip
            print(json.dumps({"console_page": asdict(result)}), flush=True)
            results.append(result)
    return results


def _targets(url: str) -> dict[str, str]:
    """Ids and names the detail pages show: a failed task, a failed workflow."""
    task = asyncio.run(_one(url, (
        "SELECT id FROM tasks WHERE tenant = 'bench' AND environment = 'bench' "
        "AND state = 'failed' ORDER BY id DESC LIMIT 1")))  # fmt: skip
    flow = asyncio.run(_one(url, (
        "SELECT id FROM workflows WHERE tenant = 'bench' AND environment = 'bench' "
        "AND state = 'failed' ORDER BY id DESC LIMIT 1")))  # fmt: skip
    return {"task": str(task[0][0]), "workflow": str(flow[0][0])}


def pages_of(targets: dict[str, str], bulk_id: str) -> list[tuple[str, str]]:
    queue = QUEUES[0]
    name = next(iter(DEFINITIONS))
    return [
        ("overview", "/console/"),
        ("tasks", "/console/tasks"),
        ("tasks: failed", "/console/tasks?state=failed"),
        ("tasks: queue, pending", f"/console/tasks?queue={queue}&state=pending"),
        ("task", f"/console/tasks/{targets['task']}"),
        ("queue", f"/console/queues/{queue}"),
        ("review inbox", "/console/inbox"),
        ("workflows", "/console/workflows"),
        ("workflows: failed", "/console/workflows?state=failed"),
        ("workflow", f"/console/workflows/{targets['workflow']}"),
        ("definition", f"/console/definitions/{name}/1"),
        ("schedules", "/console/schedules"),
        ("schedule", "/console/schedules/heartbeat"),
        ("workers", "/console/workers"),
        ("bulk operations", "/console/bulk"),
        ("bulk operation", f"/console/bulk/{bulk_id}"),
        ("audit log", "/console/audit"),
    ]


def run_console(
    url: str, *, tasks: int, workflows: int, requests: int
) -> tuple[SeedResult, list[PageResult]]:
    """Seed, start the server and its setup, then time every page."""
    asyncio.run(migrate_only(url))
    began = time.perf_counter()
    task_states = asyncio.run(seed_tasks(url, tasks))
    tasks_s = time.perf_counter() - began
    asyncio.run(check_counters(url))
    print(json.dumps({"console_seeded": {"tasks": tasks, "seconds": round(tasks_s, 1)}}),
          flush=True)  # fmt: skip
    stack = Stack(url)
    try:
        stack.start_workers(1, 1)  # a connected session for the workers page
        bulk_ids = _api_setup(stack, url)
        began = time.perf_counter()
        flow_states, step_rows = asyncio.run(seed_workflows(url, workflows))
        workflows_s = time.perf_counter() - began
        seconds = round(workflows_s, 1)
        print(json.dumps({"console_seeded": {"workflows": workflows, "seconds": seconds}}),
              flush=True)  # fmt: skip
        seeded = SeedResult(
            tasks=tasks, workflows=workflows, step_rows=step_rows, tasks_s=round(tasks_s, 1),
            workflows_s=round(workflows_s, 1), by_state=dict(task_states),
            workflows_by_state=dict(flow_states),
        )  # fmt: skip
        results = measure_pages(stack.url, stack.key, pages_of(_targets(url), bulk_ids[-1]),
                                requests)  # fmt: skip
    except (TimeoutError, RuntimeError) as exc:
        raise RuntimeError(f"{exc}; the server said:\n{stack.server.stderr[-1500:]}") from None
    finally:
        stack.close()
    return seeded, results


def run_console_suite(
    *, url: str | None, tasks: int, workflows: int, requests: int, out: Path,
    allow_tmpfs: bool = False,
) -> int:  # fmt: skip
    """``python -m bench console``: seed a fresh database, serve it, time every page."""
    with Databases(url, allow_tmpfs=allow_tmpfs) as dbs:
        facts = dbs.facts
        db_url = dbs.fresh("bench_console")
        seeded, results = run_console(db_url, tasks=tasks, workflows=workflows,
                                      requests=requests)  # fmt: skip
        dbs.drop("bench_console")
    over = [r.page for r in results if not r.within]
    verdict = (f"every page ≤ {LIMIT_MS:g} ms" if not over
               else f"over {LIMIT_MS:g} ms: {', '.join(over)}")  # fmt: skip
    print(verdict, flush=True)
    path = write_report(out, seeded, results, facts, verdict)
    print(f"report: {path}")
    return 0


def write_report(
    out: Path, seeded: SeedResult, results: list[PageResult], facts: dict[str, Any],
    verdict: str,
) -> Path:  # fmt: skip
    mix = ", ".join(f"{n:,} {s}" for s, n in sorted(seeded.by_state.items(), key=lambda x: -x[1]))
    flows = ", ".join(
        f"{n:,} {s}" for s, n in sorted(seeded.workflows_by_state.items(), key=lambda x: -x[1])
    )
    requests = results[0].requests if results else 0
    body = [
        f"{seeded.tasks:,} tasks over {len(QUEUES)} queues ({mix}), seeded in "
        f"{seeded.tasks_s} s; {seeded.workflows:,} workflow instances of {len(DEFINITIONS)} "
        f"definitions ({flows}; {seeded.step_rows:,} step rows), seeded in "
        f"{seeded.workflows_s} s. Six schedules, two bulk operations, one connected worker.",
        "",
        f"Each page {requests} times, one at a time, after {WARM_UPS} warm-ups; the server's "
        "time from its `Server-Timing` header (up to the answer's first byte), and the whole "
        "request as the client saw it.",
        "",
        f"| page | path | median ms | p95 ms | max ms | client median ms | ≤ {LIMIT_MS:g} ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    body += [
        f"| {r.page} | `{r.path}` | {r.median_ms} | {r.p95_ms} | {r.max_ms} | "
        f"{r.client_median_ms} | {'yes' if r.within else '**no**'} |"
        for r in results
    ]
    body += ["", f"Verdict (on each page's max): {verdict}."]
    data = {
        "limit_ms": LIMIT_MS,
        "seed": asdict(seeded),
        "pages": [asdict(r) for r in results],
        "verdict": verdict,
    }
    return report.write(out, "console", "Console page times", facts, data, body)

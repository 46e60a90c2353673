"""The chaos scenario's checks, from the database (SQL on the tables) and the workers' own
records (``bench.chaos_worker``), after the run has settled.

Clocks: the runner, the workers and the Orbit servers all run on this host and read the same
clock (``time.time()``; Orbit writes its timestamps from it), so intervals from different
processes compare directly. ``SKEW_S`` is what is left: a line is written a few instructions
after the moment it stands for, and the clock may be slewed (never stepped) by NTP meanwhile.
On several hosts the tolerance would have to be their measured skew.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SKEW_S = 0.010
SETTLED = ("succeeded", "failed", "cancelled", "needs_review")
UNSETTLED = ("scheduled", "pending", "leased", "running")
QUEUE_LIMIT = 2  # the concurrency limit of the queue chaos-limited
KEY_LIMIT = 1
EXAMPLES = 10


@dataclass
class Submit:
    """One submit of the load: every send of it carried the same body and idempotency key."""

    key: str
    kind: str
    sends: int = 0
    ambiguous: int = 0  # answers that said nothing definite: timeout, connection error, 5xx, 429
    outcome: str = "pending"  # acked | conflict | rejected | gave_up
    id: str | None = None
    ids: list[str] = field(default_factory=list)  # every id an answer carried
    status: int | None = None
    sent: float = 0.0  # when the send that got the definite answer left
    answered: float = 0.0  # when that answer arrived


@dataclass
class Check:
    name: str
    passed: bool
    figures: dict[str, Any]
    violations: list[str] = field(default_factory=list)


def read_records(folder: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(folder.glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _ts(value: datetime | None) -> float | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC).timestamp() if value.tzinfo is None else value.timestamp()


@dataclass
class Facts:
    """What the checks read from the database."""

    tasks: dict[str, dict[str, Any]]  # id → row
    attempts: dict[tuple[str, int], dict[str, Any]]  # (task, number) → row
    events: dict[str, list[dict[str, Any]]]  # task → its result events


async def read_facts(cur: Any, tenant: str, environment: str) -> Facts:
    await cur.execute(
        "SELECT id, queue, type, state, idempotency_key, concurrency_key, side_effect,"
        " lease_epoch, attempts, result FROM tasks WHERE tenant = %s AND environment = %s",
        (tenant, environment),
    )
    names = ("id", "queue", "type", "state", "idempotency_key", "concurrency_key",
             "side_effect", "lease_epoch", "attempts", "result")  # fmt: skip
    tasks = {row[0]: dict(zip(names, row, strict=True)) for row in await cur.fetchall()}
    await cur.execute(
        "SELECT a.task_id, a.number, a.state, a.cause, a.leased_at, a.started_at, a.ended_at"
        " FROM task_attempts a JOIN tasks t ON t.id = a.task_id"
        " WHERE t.tenant = %s AND t.environment = %s",
        (tenant, environment),
    )
    attempts: dict[tuple[str, int], dict[str, Any]] = {}
    for task_id, number, state, cause, leased, started, ended in await cur.fetchall():
        attempts[(task_id, int(number))] = {
            "state": state, "cause": cause, "leased_at": _ts(leased),
            "started_at": _ts(started), "ended_at": _ts(ended),
        }  # fmt: skip
    await cur.execute(
        "SELECT task_id, attempt, seq, state FROM task_events"
        " WHERE tenant = %s AND environment = %s",
        (tenant, environment),
    )
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for task_id, attempt, seq, state in await cur.fetchall():
        events[task_id].append({"attempt": int(attempt), "seq": int(seq), "state": state})
    return Facts(tasks, attempts, dict(events))


def check_all(
    submits: list[Submit],
    records: list[dict[str, Any]],
    facts: Facts,
    db_windows: list[tuple[float, float]],
) -> list[Check]:
    return [
        every_submit_acknowledged(submits),
        acknowledged_not_lost(submits, facts),
        one_task_per_key(submits, facts),
        every_task_settled(facts),
        unsafe_at_most_once(records, facts),
        one_accepted_completion(records, facts),
        *limits_held(records, facts),
        no_ack_while_database_down(submits, db_windows),
    ]


def every_submit_acknowledged(submits: list[Submit]) -> Check:
    """Every body the load sends is valid, and each fault ends: so every submit must in the end
    be acknowledged, after as many re-sends as it takes (up to the load's bound)."""
    refused = [s for s in submits if s.outcome != "acked"]
    return Check(
        "every submit acknowledged in the end",
        not refused,
        {"submits": len(submits), "not acknowledged": len(refused)},
        [f"{s.key}: {s.outcome} (HTTP {s.status}) after {s.sends} sends" for s in refused][
            :EXAMPLES
        ],
    )


def acknowledged_not_lost(submits: list[Submit], facts: Facts) -> Check:
    acked = [s for s in submits if s.outcome == "acked"]
    missing = [s for s in acked if s.id not in facts.tasks]
    return Check(
        "nothing acknowledged lost",
        not missing,
        {"acknowledged": len(acked), "missing": len(missing)},
        [f"{s.key}: acknowledged as {s.id}, not in the database" for s in missing[:EXAMPLES]],
    )


def one_task_per_key(submits: list[Submit], facts: Facts) -> Check:
    by_key: dict[str | None, list[str]] = defaultdict(list)
    for task_id, task in facts.tasks.items():
        by_key[task["idempotency_key"]].append(task_id)
    ours = {s.key for s in submits}
    violations = [f"{k}: {len(ids)} tasks" for k, ids in by_key.items() if len(ids) > 1]
    violations += [
        f"{s.key}: answers carried several ids {sorted(set(s.ids))}"
        for s in submits
        if len(set(s.ids)) > 1
    ]
    violations += [
        f"{s.key}: acknowledged as {s.id}, the database has {by_key.get(s.key)}"
        for s in submits
        if s.outcome == "acked" and by_key.get(s.key) != [s.id]
    ]
    strangers = [k for k in by_key if k not in ours]
    violations += [f"a task with key {k!r}, which no submit sent" for k in strangers]
    conflicts = [s for s in submits if s.outcome == "conflict"]
    violations += [f"{s.key}: a re-send got 409 idempotency_conflict" for s in conflicts]
    resent = [s for s in submits if s.sends > 1]
    return Check(
        "one task per idempotency key",
        not violations,
        {
            "keys submitted": len(ours),
            "tasks": len(facts.tasks),
            "submits re-sent": len(resent),
            "re-sends": sum(s.sends - 1 for s in submits),
            "re-sent and acknowledged": sum(1 for s in resent if s.outcome == "acked"),
            "conflicts": len(conflicts),
        },
        violations[:EXAMPLES],
    )


def every_task_settled(facts: Facts) -> Check:
    states = Counter(t["state"] for t in facts.tasks.values())
    stuck = [i for i, t in facts.tasks.items() if t["state"] not in SETTLED]
    return Check(
        "every task settled",
        not stuck,
        {"by state": dict(sorted(states.items())), "unsettled": len(stuck)},
        [f"{i}: {facts.tasks[i]['state']}" for i in stuck[:EXAMPLES]],
    )


def _by_attempt(records: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(task, attempt) → {"start": t, "end": t | None, "pid": …}; a second start of the same
    attempt (which would be a bug of the worker) is kept as ``restarts``."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: r["t"]):
        key = (r["task"], int(r["attempt"]))
        if r["event"] == "start":
            if key in found:
                found[key]["restarts"] += 1
                continue
            found[key] = {"start": r["t"], "end": None, "pid": r["pid"], "record": r,
                          "restarts": 0}  # fmt: skip
        elif key in found and found[key]["end"] is None:
            found[key]["end"] = r["t"]
    return found


def unsafe_at_most_once(records: list[dict[str, Any]], facts: Facts) -> Check:
    runs = _by_attempt(records)
    starts: dict[str, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (task_id, attempt), run in runs.items():
        starts[task_id].append((attempt, run))
    unsafe = {i: t for i, t in facts.tasks.items() if t["side_effect"] == "unsafe"}
    violations: list[str] = []
    unknown = review_without_start = 0
    for task_id, task in unsafe.items():
        ran = starts.get(task_id, [])
        restarts = sum(run["restarts"] for _, run in ran)
        if len(ran) + restarts > 1:
            violations.append(f"{task_id}: started {len(ran) + restarts} times (attempts "
                              f"{sorted(a for a, _ in ran)})")  # fmt: skip
        unfinished = [a for a, run in ran if run["end"] is None]
        if unfinished:
            unknown += 1
            if task["state"] != "needs_review":
                violations.append(
                    f"{task_id}: its handler never finished (attempt {unfinished[0]}), "
                    f"yet the task is {task['state']}, not needs_review"
                )
        if task["state"] == "needs_review" and not ran:
            review_without_start += 1  # the start was confirmed, the process died before the
            # handler's first line: the server cannot know, needs_review is right
    states = Counter(t["state"] for t in unsafe.values())
    return Check(
        "unsafe work started at most once",
        not violations,
        {
            "unsafe tasks": len(unsafe),
            "started": sum(1 for i in unsafe if i in starts),
            "outcome unknown (handler never finished)": unknown,
            "needs_review without a recorded start": review_without_start,
            "by state": dict(sorted(states.items())),
        },
        violations[:EXAMPLES],
    )


def one_accepted_completion(records: list[dict[str, Any]], facts: Facts) -> Check:
    runs = _by_attempt(records)
    succeeded_attempts: dict[str, list[int]] = defaultdict(list)
    for (task_id, number), row in facts.attempts.items():
        if row["state"] == "succeeded":
            succeeded_attempts[task_id].append(number)
    violations: list[str] = []
    for task_id, task in facts.tasks.items():
        accepted = succeeded_attempts.get(task_id, [])
        epoch = int(task["lease_epoch"])
        if task["state"] == "succeeded":
            if accepted != [epoch]:
                violations.append(f"{task_id}: succeeded attempts {accepted}, lease {epoch}")
            result = json.loads(task["result"]) if task["result"] else {}
            if result.get("attempt") != epoch:
                violations.append(f"{task_id}: result from attempt {result.get('attempt')}, "
                                  f"current lease {epoch}")  # fmt: skip
            run = runs.get((task_id, epoch))
            if run is None or run["end"] is None or run["pid"] != result.get("pid"):
                violations.append(f"{task_id}: no handler of the worker {result.get('pid')} "
                                  f"finished attempt {epoch}")  # fmt: skip
        elif accepted:
            violations.append(f"{task_id}: {task['state']} but attempts {accepted} succeeded")
        if task["state"] in SETTLED:
            ends = [e for e in facts.events.get(task_id, []) if e["state"] in SETTLED]
            if len(ends) != 1:
                violations.append(f"{task_id}: {len(ends)} result events")
            elif ends[0]["attempt"] != epoch or ends[0]["state"] != task["state"]:
                violations.append(f"{task_id}: result event {ends[0]}, task {task['state']} "
                                  f"at lease {epoch}")  # fmt: skip
    return Check(
        "one accepted completion per task, from its current lease",
        not violations,
        {
            "tasks succeeded": sum(1 for t in facts.tasks.values() if t["state"] == "succeeded"),
            "attempts": len(facts.attempts),
            "handler runs recorded": len(runs),
            "result events": sum(len(e) for e in facts.events.values()),
        },
        violations[:EXAMPLES],
    )


def _intervals(
    records: list[dict[str, Any]], facts: Facts
) -> tuple[list[tuple[float, float, dict[str, Any]]], float]:
    """Each handler run as [start, end]: the end is the worker's own, or, when the attempt
    ended on the server before that (its lease ran out while the worker was stopped or cut
    off), the server's end of the attempt: past it Orbit has given the permits away, and a
    process that was frozen cannot be told to stop until it runs again. Answers the runs and
    the seconds of handler time cut off that way."""
    found: list[tuple[float, float, dict[str, Any]]] = []
    cut = 0.0
    for (task_id, attempt), run in _by_attempt(records).items():
        row = facts.attempts.get((task_id, attempt), {})
        server_end = row.get("ended_at")
        end = run["end"]
        if end is None:
            end = server_end if server_end is not None else run["start"]
        elif server_end is not None and server_end < end:
            cut += end - server_end
            end = server_end
        found.append((run["start"], end, run["record"]))
    return found, cut


def _most_at_once(spans: list[tuple[float, float]]) -> tuple[int, float]:
    """The most spans open at one instant (each shrunk by the skew tolerance at both ends),
    and that instant."""
    edges: list[tuple[float, int]] = []
    for start, end in spans:
        if end - start > 2 * SKEW_S:
            edges += [(start + SKEW_S, 1), (end - SKEW_S, -1)]
    edges.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = now = 0
    when = 0.0
    for at, step in edges:
        now += step
        if now > most:
            most, when = now, at
    return most, when


def limits_held(records: list[dict[str, Any]], facts: Facts) -> list[Check]:
    runs, cut = _intervals(records, facts)
    per_key: dict[str, list[tuple[float, float]]] = defaultdict(list)
    per_queue: list[tuple[float, float]] = []
    for start, end, record in runs:
        if record.get("concurrency_key"):
            per_key[record["concurrency_key"]].append((start, end))
        if record["queue"] == "chaos-limited":
            per_queue.append((start, end))
    key_violations = []
    worst_key = 0
    for key, spans in sorted(per_key.items()):
        most, when = _most_at_once(spans)
        worst_key = max(worst_key, most)
        if most > KEY_LIMIT:
            key_violations.append(f"key {key}: {most} handlers at once at {when:.3f}")
    most_queue, when_queue = _most_at_once(per_queue)
    return [
        Check(
            "per-key limit never exceeded",
            not key_violations,
            {
                "keys": len(per_key),
                "runs": sum(len(s) for s in per_key.values()),
                "most at once": worst_key,
                "limit": KEY_LIMIT,
                "skew tolerance s": SKEW_S,
                "handler seconds past a lost lease, not counted": round(cut, 3),
            },
            key_violations[:EXAMPLES],
        ),
        Check(
            "queue limit never exceeded",
            most_queue <= QUEUE_LIMIT,
            {"runs": len(per_queue), "most at once": most_queue, "limit": QUEUE_LIMIT},
            [] if most_queue <= QUEUE_LIMIT else [f"{most_queue} at once at {when_queue:.3f}"],
        ),
    ]


def no_ack_while_database_down(submits: list[Submit], windows: list[tuple[float, float]]) -> Check:
    """A window is [the kill -9 or SIGSTOP signal, the restart or SIGCONT]: no statement can
    commit inside it. A send that left after the window opened and was acknowledged before it
    closed was acknowledged without a commit. A send that left before the window opened may
    have committed just before it and be answered a little later: counted, not a violation.
    No tolerance is needed at either edge, since each edge is read on the safe side (before
    the signal, before the restart)."""
    violations = []
    late_answers = 0
    for s in submits:
        if s.outcome != "acked":
            continue
        for began, ended in windows:
            if began < s.answered < ended:
                if s.sent > began:
                    violations.append(
                        f"{s.key}: sent {s.sent - began:.3f} s into the outage "
                        f"and acknowledged {s.answered - began:.3f} s into it"
                    )
                else:
                    late_answers += 1
    return Check(
        "no acknowledgement while the database was unreachable",
        not violations,
        {
            "database outages": len(windows),
            "outage seconds": round(sum(e - b for b, e in windows), 2),
            "answers arriving in an outage for sends before it": late_answers,
        },
        violations[:EXAMPLES],
    )

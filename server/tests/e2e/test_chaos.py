"""Orbit's own chaos suite: the short profile of ``python -m bench chaos`` (three servers, four
workers, a mixed load with re-sent submits, servers, workers and the database killed and
stopped) passes every check; and the checks themselves catch what they are there to catch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def checks() -> Iterator[Any]:
    """``bench.chaos_checks`` (the benchmark runner lives beside the test suite, not in it)."""
    sys.path.insert(0, str(ROOT))
    try:
        import bench.chaos_checks

        yield bench.chaos_checks
    finally:
        sys.path.remove(str(ROOT))


def test_the_short_chaos_profile_holds_every_invariant(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench", "chaos", "--profile", "short", "--seed", "10",
               "--out", str(tmp_path), "--allow-tmpfs"]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    reports = list(tmp_path.glob("chaos-*.json"))
    assert len(reports) == 1, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(reports[0].read_text())
    failed = [c for c in document["checks"] if not c["passed"]]
    assert done.returncode == 0 and not failed, json.dumps(failed, indent=1)
    assert document["verdict"] == "pass"
    names = {c["name"] for c in document["checks"]}
    assert {"nothing acknowledged lost", "one task per idempotency key", "every task settled",
            "unsafe work started at most once", "per-key limit never exceeded",
            "queue limit never exceeded",
            "no acknowledgement while the database was unreachable"} <= names  # fmt: skip
    # Every kind of fault was injected, each with its time.
    faults = document["faults"]
    assert {(f["action"], f["kind"]) for f in faults} >= {
        ("kill", "server"), ("kill", "worker"), ("kill", "database"),
        ("stop", "server"), ("stop", "worker"), ("stop", "database"),
    }  # fmt: skip
    assert any(f["kind"] == "server" and f["action"] == "stop" and f["past_lease"] for f in faults)
    assert all(f["began"] > 0 and f["ended"] >= f["began"] for f in faults)
    # The load was re-sent after ambiguous answers and everything was acknowledged.
    load = document["load"]
    assert load["ambiguous answers"] > 0 and load["outcomes"] == {"acked": load["submits"]}
    assert document["recovery"]["database_ready"], "no database recovery was measured"
    markdown = reports[0].with_suffix(".md").read_text()
    assert "**Verdict: PASS**" in markdown and "| kill -9 database | db1 |" in markdown


def _run(task: str, attempt: int, start: float, end: float | None, **extra: Any) -> list[Any]:
    fields = {"task": task, "attempt": attempt, "queue": "chaos", "type": "keyed", "key": task,
              "pid": 1, **extra}  # fmt: skip
    lines = [{**fields, "event": "start", "t": start}]
    return lines + ([{**fields, "event": "end", "t": end}] if end is not None else [])


def test_the_checks_catch_overlaps_double_starts_and_acks_during_an_outage(checks: Any) -> None:
    task = {"queue": "chaos", "type": "keyed", "idempotency_key": "a", "concurrency_key": "k0",
            "lease_epoch": 1, "attempts": 1, "result": None}  # fmt: skip
    facts = checks.Facts(
        tasks={
            "t1": {**task, "id": "t1", "state": "succeeded", "side_effect": "idempotent"},
            "t2": {**task, "id": "t2", "state": "succeeded", "side_effect": "idempotent"},
            "u1": {
                **task,
                "id": "u1",
                "state": "succeeded",
                "side_effect": "unsafe",
                "lease_epoch": 2,
            },
        },
        attempts={},
        events={},
    )
    records = [
        *_run("t1", 1, 100.0, 101.0, concurrency_key="k0"),
        *_run("t2", 1, 100.5, 101.5, concurrency_key="k0"),  # overlaps t1 by 0.5 s
        *_run("u1", 1, 200.0, None),  # an unsafe task started twice, the first never ended
        *_run("u1", 2, 210.0, 211.0),
    ]
    [keys, queue] = checks.limits_held(records, facts)
    assert not keys.passed and keys.figures["most at once"] == 2
    assert queue.passed
    unsafe = checks.unsafe_at_most_once(records, facts)
    assert not unsafe.passed and any("started 2 times" in v for v in unsafe.violations)
    assert any("not needs_review" in v for v in unsafe.violations)
    # The server ended t2's attempt at 100.9 (its lease ran out while the worker was frozen):
    # past that instant its handler no longer counts against the key.
    facts.attempts[("t2", 1)] = {"ended_at": 100.9, "state": "needs_review"}
    facts.attempts[("t1", 1)] = {"ended_at": None, "state": "succeeded"}
    records = [*_run("t1", 1, 101.0, 102.0, concurrency_key="k0"),
               *_run("t2", 1, 100.5, 101.5, concurrency_key="k0")]  # fmt: skip
    [keys, _] = checks.limits_held(records, facts)
    assert keys.passed and keys.figures["handler seconds past a lost lease, not counted"] == 0.6
    # An acknowledgement of a send made inside a database outage is a violation; one of a
    # send made before it is not.
    inside = checks.Submit(key="a", kind="idempotent", outcome="acked", id="t1", sent=50.5,
                           answered=51.0)  # fmt: skip
    before = checks.Submit(key="b", kind="idempotent", outcome="acked", id="t2", sent=49.9,
                           answered=50.2)  # fmt: skip
    verdict = checks.no_ack_while_database_down([inside, before], [(50.0, 55.0)])
    assert not verdict.passed and len(verdict.violations) == 1
    assert verdict.figures["answers arriving in an outage for sends before it"] == 1
    # A re-sent submit whose answers carried two ids is two tasks for one key.
    twice = checks.Submit(key="t1", kind="idempotent", outcome="acked", id="t1",
                          ids=["t1", "t9"])  # fmt: skip
    assert not checks.one_task_per_key([twice], facts).passed

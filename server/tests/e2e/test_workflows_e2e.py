"""Workflows end to end with real processes: ``orbit server`` on MariaDB (and ``orbit dev`` on
SQLite), SDK workers started with ``orbit-worker``, definitions built with the SDK's builder.
Every step kind; a server killed between a step task's completion and the advancement; a map
over 10,000 items; a pause while 50 step tasks run (SPEC W2–W9)."""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx2
import pytest

import orbit_sdk
from orbit_sdk import TaskStep, When, Workflow
from tests.conftest import SCOPE, make_key_at
from tests.e2e.test_workers import ROLES, Cluster, eventually
from tests.support.processes import OrbitProcess

Q = "wf-e2e"

APP = """
import os
import pathlib

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
LOG = pathlib.Path(os.environ["E2E_LOG"])
RELEASE = pathlib.Path(os.environ["E2E_RELEASE"])


@worker.handler(queue="wf-e2e", type="echo")
def echo(ctx: TaskContext) -> object:
    return ctx.params


@worker.handler(queue="wf-e2e", type="square")
def square(ctx: TaskContext) -> dict:
    return {"y": ctx.params["x"] ** 2}


@worker.handler(queue="wf-e2e", type="count")
def count(ctx: TaskContext) -> dict:
    return {"round": ctx.params["round"]}


@worker.handler(queue="wf-e2e", type="hold")
def hold(ctx: TaskContext) -> dict:
    with LOG.open("a") as log:
        log.write(f"start {ctx.task_id} {ctx.attempt} {os.getpid()}\\n")
    while not RELEASE.exists():
        if ctx.cancel_event.wait(0.02):
            ctx.raise_if_cancelled()
    return {"held": ctx.params["x"]}
"""


def every_kind() -> Workflow:
    wf = Workflow("every-kind", version="1")
    wf.task("prepare", queue=Q, type="echo", params="{'n': input.n}")
    wf.choice("route", [When("steps.prepare.output.n > 0", "fan")], default="negative")
    fan = wf.parallel("fan")
    fan.branch("a").task("left", queue=Q, type="echo", params="{'side': 'left'}")
    fan.branch("b").task("right", queue=Q, type="echo", params="{'side': 'right'}")
    wf.map(
        "each",
        items="input.items",
        max_concurrency=5,
        task=TaskStep(queue=Q, type="square", params="{'x': item}", output="result.y"),
    )
    wf.timer("nap", duration=timedelta(milliseconds=200))
    wf.signal("approval", name="approved", timeout=timedelta(seconds=60), output="signal.by")
    wf.poll(
        "check",
        task=TaskStep(queue=Q, type="count", params="{'round': round}"),
        until="result.round >= 3",
        interval=timedelta(milliseconds=100),
        max_rounds=10,
    )
    wf.succeed(
        "done",
        output="{'fan': steps.fan.output, 'each': steps.each.output, "
        "'by': steps.approval.output, 'rounds': steps.check.output.round}",
    )
    wf.fail("negative", code="negative", message="n must be positive")
    return wf


def run_out() -> Workflow:
    """A signal that never comes, then a poll that never holds: both take their way out."""
    wf = Workflow("run-out", version="1")
    wf.signal("wait", name="never", timeout=timedelta(milliseconds=300), on_timeout="poll")
    wf.fail("unexpected", code="unexpected")
    wf.poll(
        "poll",
        task=TaskStep(queue=Q, type="count", params="{'round': round}"),
        until="result.round > 100",
        interval=timedelta(milliseconds=50),
        max_rounds=3,
        on_exhausted="gave_up",
    )
    wf.succeed("gave_up", output="steps.poll.output")
    return wf


def two_steps() -> Workflow:
    wf = Workflow("two-steps", version="1")
    wf.task("first", queue=Q, type="echo", params="{'step': 1}")
    wf.task("second", queue=Q, type="echo", params="{'step': 2}")
    return wf


def exercise_every_kind(client: orbit_sdk.Client) -> None:
    for wf in (every_kind(), run_out()):
        client.publish_workflow(wf)
    started = client.start_workflow("every-kind", {"n": 2, "items": list(range(12))})
    # Sent before its wait step is reached: kept and delivered there.
    client.signal_workflow(started.id, "approved", {"by": "ann"}, idempotency_key="a-1")
    client.signal_workflow(started.id, "approved", {"by": "ann"}, idempotency_key="a-1")
    done = client.wait_for_workflow(started.id, timeout=60)
    assert done.state == "succeeded", done
    assert done.output == {
        "fan": {"a": {"side": "left"}, "b": {"side": "right"}},
        "each": [i * i for i in range(12)],
        "by": "ann",
        "rounds": 3,
    }
    keys = [s.key for s in client.iter_workflow_steps(started.id)]
    assert keys[:6] == ["prepare", "route", "fan", "left", "right", "each"]
    assert [k for k in keys if k.startswith("check:r")] == ["check:r1", "check:r2", "check:r3"]
    assert len([k for k in keys if k.startswith("each:i")]) == 12
    assert len(keys) == len(set(keys))

    negative = client.start_workflow("every-kind", {"n": -1, "items": []})
    failed = client.wait_for_workflow(negative.id, timeout=60)
    assert failed.state == "failed" and failed.error is not None
    assert failed.error.code == "negative"

    out = client.start_workflow("run-out", None)
    gave_up = client.wait_for_workflow(out.id, timeout=60)
    assert (gave_up.state, gave_up.output) == ("succeeded", {"round": 3})
    steps = {s.key: s for s in client.iter_workflow_steps(out.id)}
    assert steps["wait"].error is not None and steps["wait"].error.code == "signal_timeout"
    assert steps["poll"].error is not None and steps["poll"].error.code == "poll_exhausted"


@pytest.fixture
async def wf_cluster(migrated_mariadb_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    env = {"ORBIT_DATABASE_URL": migrated_mariadb_url}
    key = await make_key_at(migrated_mariadb_url, SCOPE, *ROLES)
    (tmp_path / "e2e_app.py").write_text(APP)
    found = Cluster(env, key, tmp_path, [], [])
    try:
        yield found
    finally:
        for proc in found.workers + found.servers:
            if proc.proc.poll() is None:
                proc.proc.kill()
            proc.stop(timeout=10)


def test_every_step_kind_runs_with_real_workers_on_mariadb(wf_cluster: Cluster) -> None:
    url = wf_cluster.server("a")
    wf_cluster.worker(url, concurrency=8)
    with wf_cluster.client(url) as client:
        exercise_every_kind(client)


def test_every_step_kind_runs_on_orbit_dev(tmp_path: Path) -> None:
    (tmp_path / "e2e_app.py").write_text(APP)
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "data"), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        url, key = announced["ORBIT_URL"], announced["ORBIT_API_KEY"]
        worker = OrbitProcess.command(
            [
                str(Path(sys.executable).parent / "orbit-worker"),
                "e2e_app:worker",
                "--url",
                url,
                "--concurrency",
                "8",
            ],
            env={
                "ORBIT_API_KEY": key,
                "E2E_LOG": str(tmp_path / "log"),
                "E2E_RELEASE": str(tmp_path / "release"),
                "PYTHONPATH": str(tmp_path),
            },
        )
        try:
            with orbit_sdk.Client(url, key) as client:
                exercise_every_kind(client)
        finally:
            assert worker.stop() == 0
    finally:
        assert dev.stop() == 0


def test_a_server_killed_before_advancing_leaves_the_instance_to_advance_once(
    wf_cluster: Cluster,
) -> None:
    # The first server runs every role but the result events': it completes the step's
    # task and never advances the instance, so the kill always lands in that window.
    wf_cluster.env["ORBIT_ROLES"] = "api,gateway,dispatch,recovery,scheduler,advancement"
    url = wf_cluster.server("a")
    worker = wf_cluster.worker(url)
    with wf_cluster.client(url) as client:
        client.publish_workflow(two_steps())
        started = client.start_workflow("two-steps", {})
        [first] = client.workflow_steps(started.id).items
        assert first.task_id is not None
        assert client.wait_for_task(first.task_id, timeout=30).state == "succeeded"
        assert [s.key for s in client.workflow_steps(started.id).items] == ["first"]
    wf_cluster.servers[0].proc.send_signal(signal.SIGKILL)
    wf_cluster.servers[0].proc.wait()
    assert worker.stop(timeout=30) == 0
    del wf_cluster.env["ORBIT_ROLES"]
    url = wf_cluster.server("b")
    wf_cluster.worker(url)
    with wf_cluster.client(url) as client:
        done = client.wait_for_workflow(started.id, timeout=60)
        steps = client.workflow_steps(started.id).items
        owned = [t for t in client.iter_tasks(queue=Q) if t.owner and t.owner.id == started.id]
    assert (done.state, done.output) == ("succeeded", {"step": 2})
    assert [(s.key, s.state) for s in steps] == [("first", "succeeded"), ("second", "succeeded")]
    assert sorted(t.owner.step for t in owned if t.owner) == ["first", "second"]  # once each


def writes_bound(metrics: str) -> tuple[int, int]:
    """From /metrics: the advancement transactions counted, and the smallest bucket holding
    them all."""
    count = int(float(re.search(r"orbit_workflow_advancement_writes_count (\S+)", metrics)[1]))  # type: ignore[index]
    for bound, seen in re.findall(
        r'orbit_workflow_advancement_writes_bucket\{le="([0-9.]+)"\} (\S+)', metrics
    ):
        if int(float(seen)) == count:
            return count, int(float(bound))
    raise AssertionError("an advancement wrote more than the largest bucket")


def test_a_map_over_10000_items_completes_in_bounded_transactions(wf_cluster: Cluster) -> None:
    url = wf_cluster.server("a")
    wf_cluster.worker(url, concurrency=64)
    wf_cluster.worker(url, concurrency=64)
    wf = Workflow("big-map", version="1")
    wf.map(
        "each",
        items="input.items",
        max_concurrency=100,
        task=TaskStep(queue=Q, type="square", params="{'x': item}", output="result.y"),
    )
    began = time.monotonic()
    with wf_cluster.client(url) as client:
        client.publish_workflow(wf)
        started = client.start_workflow("big-map", {"items": list(range(10_000))})
        done = client.wait_for_workflow(started.id, timeout=600)
        elapsed = time.monotonic() - began
        metrics = httpx2.get(f"{url}/metrics").text
    assert done.state == "succeeded"
    assert done.output == [i * i for i in range(10_000)]
    count, bound = writes_bound(metrics)
    print(
        f"map of 10,000 items, max_concurrency 100: {elapsed:.1f} s; {count} advancement "
        f"transactions, each writing at most {bound} rows"
    )
    assert bound <= 500  # the first batch: 100 item rows, 100 tasks and the map's row


def test_a_pause_lets_50_running_step_tasks_finish_and_starts_nothing_until_resume(
    wf_cluster: Cluster,
) -> None:
    url = wf_cluster.server("a")
    wf_cluster.worker(url, concurrency=32)
    wf_cluster.worker(url, concurrency=32)
    wf = Workflow("pausable", version="1")
    wf.map(
        "each",
        items="input.items",
        max_concurrency=50,
        task=TaskStep(queue=Q, type="hold", params="{'x': item}", output="result.held"),
    )
    wf.task("after", queue=Q, type="echo", params="{'sum': steps.each.output.size()}")
    with wf_cluster.client(url) as client:
        client.publish_workflow(wf)
        started = client.start_workflow("pausable", {"items": list(range(60))})
        eventually(lambda: len(wf_cluster.events("start")) == 50, "50 step tasks to run", 60)
        paused = client.pause_workflow(started.id, reason="maintenance")
        assert paused.state == "paused"
        wf_cluster.release.touch()

        def items_done() -> int:
            steps = client.iter_workflow_steps(started.id)
            return sum(1 for s in steps if s.item is not None and s.state == "succeeded")

        eventually(lambda: items_done() == 50, "the 50 running tasks to be recorded", 60)
        # Recorded while paused and not followed: the other 10 items and the next step
        # never started (their tasks would need the map to go on).
        view = client.get_workflow(started.id)
        rows = list(client.iter_workflow_steps(started.id))
        assert view.state == "paused" and "after" not in [s.key for s in rows]
        assert len([s for s in rows if s.item is not None and s.task_id is not None]) == 50
        assert len(wf_cluster.events("start")) == 50
        client.resume_workflow(started.id)
        done = client.wait_for_workflow(started.id, timeout=60)
    assert done.state == "succeeded" and done.output == {"sum": 60}
    assert len(wf_cluster.events("start")) == 60

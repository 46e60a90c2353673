"""``orbit_sdk.testing`` against a real ``orbit dev --testing``, through the plugin's own
fixtures: isolation between tests, the in-process worker, failure injection on sync and async
handlers, the clock, and the async helpers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from orbit_sdk import Client, NotFoundError, RetryPolicy, Workflow
from orbit_sdk.testing import InjectedFailure, OrbitServer, OrbitTest, TestWorker
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()
ran: list[tuple[str, int]] = []
ran_lock = threading.Lock()


@worker.handler(queue="tools", type="echo")
def echo(ctx: TaskContext) -> object:
    with ran_lock:
        ran.append((ctx.task_id, ctx.attempt))
    return ctx.params


@worker.handler(queue="tools", type="echo-async")
async def echo_async(ctx: TaskContext) -> object:
    return ctx.params


@worker.handler(queue="tools", type="versioned", version="1")
def version_one(ctx: TaskContext) -> str:
    return "v1"


@worker.handler(queue="tools", type="versioned", version="2")
def version_two(ctx: TaskContext) -> str:
    return "v2"


class Declined(Exception):
    code = "declined"
    retryable = False


def test_each_test_has_an_environment_of_its_own(
    orbit: OrbitTest, orbit_server: OrbitServer, orbit_client: Client
) -> None:
    task = orbit_client.submit("tools", "echo", {"n": 1}, idempotency_key="same-key")
    other = OrbitTest(orbit_server)
    try:
        assert other.environment != orbit.environment
        with pytest.raises(NotFoundError):
            other.client.get_task(task.id)
        again = other.client.submit("tools", "echo", {"n": 2}, idempotency_key="same-key")
        assert again.id != task.id  # the key is free in the other environment
    finally:
        other.close()


def test_the_worker_runs_every_version_and_leaves_the_source_alone(orbit: OrbitTest) -> None:
    with orbit.worker(worker):
        one = orbit.run_task("tools", "versioned", handler_version="1")
        two = orbit.run_task("tools", "versioned", handler_version="2")
    assert (one.result, two.result) == ("v1", "v2")
    assert worker.concurrency == 16  # the module's Worker was not reconfigured


def test_a_sync_handler_fails_then_runs(orbit: OrbitTest) -> None:
    with orbit.worker(worker) as test_worker:
        test_worker.fail_next("tools", "echo", times=1)
        test_worker.fail_next("tools", "echo", error=Declined)
        first = orbit.run_task("tools", "echo", {"a": 1}, retry=RetryPolicy(max_attempts=2))
        second = orbit.run_task("tools", "echo", {"a": 2})
        third = orbit.run_task("tools", "echo", {"a": 3})
    assert first.state == "failed" and first.error is not None
    assert first.error.code == "declined"  # after a retryable injected failure
    assert [a.error.code for a in orbit.attempts_of(first.id) if a.error] == [
        "InjectedFailure",
        "declined",
    ]
    assert (second.state, second.result) == ("succeeded", {"a": 2})
    assert third.result == {"a": 3}
    assert test_worker.faults.pending("tools", "echo") == 0


def test_a_sync_handler_loses_its_attempt(orbit: OrbitTest) -> None:
    before = orbit.now()
    with orbit.worker(worker) as test_worker:
        test_worker.lose_next("tools", "echo")
        task = orbit.run_task("tools", "echo", {"lost": "once"})
    first, second = orbit.attempts_of(task.id)
    assert (first.cause, second.state) == ("lease_expired", "succeeded")
    assert (task.id, 1) not in ran  # the handler never ran for the lost attempt
    assert (task.id, 2) in ran
    assert orbit.now() - before >= timedelta(milliseconds=orbit.lease_ms)


def test_skip_waits_runs_a_delayed_task_now(orbit: OrbitTest) -> None:
    with orbit.worker(worker):
        task = orbit.run_task("tools", "echo", {}, delay_ms=86_400_000, skip_waits=True, timeout=20)
    assert task.state == "succeeded"


def test_a_wait_without_a_worker_times_out(orbit: OrbitTest) -> None:
    with pytest.raises(TimeoutError, match="is a worker running"):
        orbit.run_task("tools", "echo", {}, timeout=0.5)


def test_a_worker_that_stops_on_its_own_is_reported(orbit: OrbitTest) -> None:
    made = orbit.worker(worker)
    made.worker.configure(api_key="ok_bad_key_that_is_long_enough_to_parse")
    made.start()
    with pytest.raises(RuntimeError, match="stopped"):
        orbit.run_task("tools", "echo", {}, timeout=20)
    with pytest.raises(Exception, match="refused the worker"):
        made.stop()


def test_orbit_worker_runs_until_the_test_ends(
    orbit: OrbitTest, orbit_worker: Callable[..., TestWorker]
) -> None:
    started = orbit_worker(worker, concurrency=2)
    assert started.running
    assert orbit.run_task("tools", "echo-async", {"x": 1}).result == {"x": 1}


async def test_the_async_helpers(orbit: OrbitTest) -> None:
    flow = Workflow("tools-flow", version="1")
    flow.timer("nap", duration=timedelta(hours=3))
    flow.task("echo", queue="tools", type="echo-async", params="{'x': input.x}")
    async with orbit.worker(worker) as test_worker:
        test_worker.fail_next("tools", "echo-async", times=1)
        task = await orbit.run_task_async("tools", "echo-async", {"y": 2})
        attempts = await orbit.attempts_of_async(task.id)
        done = await orbit.run_workflow_async(flow, {"x": 6}, skip_waits=True, timeout=20)
        moved = await orbit.advance_clock_async(0)
    assert task.result == {"y": 2}
    assert [a.state for a in attempts] == ["failed", "succeeded"]
    assert attempts[0].error is not None and attempts[0].error.code == InjectedFailure.__name__
    assert (done.state, done.output) == ("succeeded", {"x": 6})
    assert done.finished_at is not None and moved >= done.created_at + timedelta(hours=3)


def test_skip_waits_runs_a_workflow_through_its_timer(orbit: OrbitTest) -> None:
    flow = Workflow("tools-nap", version="1")
    flow.task("before", queue="tools", type="echo", params="{'n': 1}")
    flow.timer("nap", duration=timedelta(days=2))
    flow.task("after", queue="tools", type="echo", params="{'n': 2}")
    with orbit.worker(worker):
        done = orbit.run_workflow(flow, skip_waits=True, timeout=20)
    assert (done.state, done.output) == ("succeeded", {"n": 2})
    assert done.finished_at is not None
    assert done.finished_at - done.created_at >= timedelta(days=2)


def test_the_clock_only_moves_forward(orbit: OrbitTest) -> None:
    before = orbit.now()
    after = orbit.advance_clock(90)
    assert after - before >= timedelta(seconds=90)
    with pytest.raises(ValueError, match="forward"):
        orbit.advance_clock(-1)


def test_a_failing_test_is_not_hidden_by_its_worker(orbit: OrbitTest) -> None:
    made = orbit.worker(worker)
    made.worker.configure(api_key="ok_bad_key_that_is_long_enough_to_parse")

    def a_test_that_fails() -> None:
        with made:
            with pytest.raises(RuntimeError, match="stopped"):  # the worker was refused
                orbit.run_task("tools", "echo", {}, timeout=20)
            raise AssertionError("the test's own failure")

    with pytest.raises(AssertionError, match="the test's own"):
        a_test_that_fails()
    assert made.error is not None  # kept, though its stop raised nothing

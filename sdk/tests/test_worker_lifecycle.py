"""The worker across connections: reconnects, held attempts, drain, stop and fatal refusals."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_worker_support import TIMEOUT, FakeServer, delivery, keys, ref, running

from orbit_sdk import ConfigurationError
from orbit_sdk.worker import TaskContext, Worker, WorkerError


def blocking_worker(
    url: str | list[str], *, concurrency: int = 2
) -> tuple[Worker, dict[str, asyncio.Event], dict[str, TaskContext]]:
    """A worker whose handler runs until the test sets ``gates[task_id]``."""
    gates: dict[str, asyncio.Event] = {}
    contexts: dict[str, TaskContext] = {}
    worker = Worker(url, "test-key", concurrency=concurrency, prefetch=0)

    @worker.handler(queue="q", type="t")
    async def handle(ctx: TaskContext) -> str:
        contexts[ctx.task_id] = ctx
        await gates.setdefault(ctx.task_id, asyncio.Event()).wait()
        return f"done {ctx.task_id}"

    return worker, gates, contexts


def unavailable(request_id: int, retry_after_ms: int = 60_000) -> dict[str, Any]:
    return {
        "type": "error",
        "code": "unavailable",
        "message": "try later",
        "re": request_id,
        "retry_after_ms": retry_after_ms,
    }


async def wait_for(predicate: Any) -> None:
    """Yield to the loop until ``predicate()`` holds (a state set by the loop's own work)."""
    async with asyncio.timeout(TIMEOUT):
        while not predicate():
            await asyncio.sleep(0)


async def test_results_are_sent_again_after_a_reconnect_until_acked() -> None:
    async with FakeServer() as server:
        worker, gates, _ = blocking_worker(server.url)
        gates["tsk_1"] = asyncio.Event()
        gates["tsk_1"].set()
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            result = await conn.expect("result")
            await conn.close(1011)  # lost before the ack

            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["held"] == [ref()]  # held until its result is acknowledged
            again = await conn.expect("result")
            assert again["items"] == result["items"]
            await conn.ack(again, "already")
            await conn.close(1011)

            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["held"] == []
            assert hello["capacity"] == 2


async def test_welcome_verdicts_stop_or_continue_held_attempts() -> None:
    async with FakeServer() as server:
        worker, gates, contexts = blocking_worker(server.url)
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_a"), delivery("tsk_b")]})
            await conn.start_all()
            await wait_for(lambda: len(contexts) == 2)
            await conn.close(1011)

            conn = await server.accept()
            verdicts = [
                {"task_id": "tsk_a", "attempt": 1, "verdict": "stop"},
                {"task_id": "tsk_b", "attempt": 1, "verdict": "continue"},
            ]
            hello = await conn.welcome(held=verdicts)
            assert sorted(keys(hello["held"])) == [("tsk_a", 1), ("tsk_b", 1)]
            assert hello["capacity"] == 0  # both slots still busy
            await conn.credits(1)  # tsk_a was stopped: its slot is free again
            ctx_a = contexts["tsk_a"]
            assert ctx_a.cancelled and not ctx_a.cancel_requested

            gates["tsk_b"].set()
            result = await conn.expect("result")
            assert result["items"] == [
                {**ref("tsk_b"), "outcome": "succeeded", "result": "done tsk_b"}
            ]
            await conn.ack(result)
            await conn.credits(2)
            assert not contexts["tsk_b"].cancelled


async def test_drain_releases_unstarted_work_and_lets_running_work_report() -> None:
    async with FakeServer() as server:
        worker, gates, contexts = blocking_worker(server.url)
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_run")]})
            await conn.start_all()
            await wait_for(lambda: "tsk_run" in contexts)
            await conn.send({"type": "tasks", "items": [delivery("tsk_wait")]})
            start = await conn.expect("start")
            await conn.send(unavailable(start["id"]))  # its start waits a minute to be resent

            await conn.send({"type": "drain", "grace_ms": 30_000})
            release = await conn.expect("release")
            assert release["items"] == [ref("tsk_wait")]
            released = [{"task_id": "tsk_wait", "attempt": 1, "released": True}]
            await conn.send({"type": "released", "re": release["id"], "items": released})

            gates["tsk_run"].set()
            result = await conn.expect("result")
            assert keys(result["items"]) == [("tsk_run", 1)]
            await conn.ack(result)
            await conn.close(1001)
            assert conn.credited == 0  # no new work while draining

            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["held"] == []
            assert hello["capacity"] == 2


async def test_work_whose_release_is_refused_is_reported_not_started() -> None:
    """Its start committed but the answer was lost: the handler never ran, so the worker says
    so instead of letting the lease run out (which would send unsafe work to review)."""
    async with FakeServer() as server:
        worker, _, contexts = blocking_worker(server.url)
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_wait")]})
            start = await conn.expect("start")
            await conn.send(unavailable(start["id"]))
            await conn.send({"type": "drain", "grace_ms": 30_000})
            release = await conn.expect("release")
            refused = [{"task_id": "tsk_wait", "attempt": 1, "released": False}]
            await conn.send({"type": "released", "re": release["id"], "items": refused})
            result = await conn.expect("result")
            [item] = result["items"]
            error = item["error"]
            assert (item["outcome"], error["code"], error["retryable"], error["safe_to_retry"]) == (
                "failed",
                "not_started",
                True,
                True,
            )
            assert "tsk_wait" not in contexts  # the handler never ran
            await conn.ack(result)
            await conn.close(1001)


async def test_a_graceful_stop_releases_waits_reports_and_closes() -> None:
    async with FakeServer() as server:
        worker, gates, contexts = blocking_worker(server.url)
        async with running(worker) as task:
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_run")]})
            await conn.start_all()
            await wait_for(lambda: "tsk_run" in contexts)
            await conn.send({"type": "tasks", "items": [delivery("tsk_wait")]})
            start = await conn.expect("start")
            await conn.send(unavailable(start["id"]))

            stopping = asyncio.create_task(worker.stop_async(grace_s=TIMEOUT))
            release = await conn.expect("release")
            assert release["items"] == [ref("tsk_wait")]
            released = [{"task_id": "tsk_wait", "attempt": 1, "released": True}]
            await conn.send({"type": "released", "re": release["id"], "items": released})
            assert not stopping.done()

            gates["tsk_run"].set()
            result = await conn.expect("result")
            await conn.ack(result)
            await asyncio.wait_for(stopping, TIMEOUT)
            assert task.done() and task.exception() is None
            await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
            assert conn.ws.close_code == 1000
            assert conn.credited == 0


async def test_a_stop_whose_grace_runs_out_abandons_running_handlers() -> None:
    async with FakeServer() as server:
        worker, _, contexts = blocking_worker(server.url)
        async with running(worker) as task:
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            await wait_for(lambda: "tsk_1" in contexts)
            await asyncio.wait_for(worker.stop_async(grace_s=0.05), TIMEOUT)
            assert task.done()
            await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
            assert "result" not in conn.types()
            assert contexts["tsk_1"].cancelled


async def test_reconnects_go_round_the_urls() -> None:
    async with FakeServer() as first, FakeServer() as second:
        worker, _, _ = blocking_worker([first.url, second.url])
        async with running(worker):
            conn = await first.accept()
            await conn.welcome()
            await conn.send({"type": "drain", "grace_ms": 0})
            await conn.close(1001)
            conn = await second.accept()
            await conn.welcome()
            await conn.close(1011)
            conn = await first.accept()
            await conn.welcome()


async def test_a_server_that_stops_answering_renewals_is_left_for_the_next_url() -> None:
    async with FakeServer() as silent, FakeServer() as other:
        worker, gates, contexts = blocking_worker([silent.url, other.url], concurrency=1)
        async with running(worker):
            conn = await silent.accept()
            await conn.welcome(heartbeat_ms=100, lease_ms=3000)
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            await wait_for(lambda: "tsk_1" in contexts)
            # From here the first server answers nothing, and its connection stays open.
            await conn.heartbeat_with(("tsk_1", 1))
            moved = await other.accept()
            hello = await moved.welcome(heartbeat_ms=100, lease_ms=3000)
            assert hello["held"] == [ref()]  # taken along, before its lease ran out
            await asyncio.wait_for(conn.closed.wait(), TIMEOUT)
            assert not contexts["tsk_1"].cancelled
            gates["tsk_1"].set()
            result = await moved.expect("result")
            assert result["items"] == [{**ref(), "outcome": "succeeded", "result": "done tsk_1"}]
            await moved.ack(result)
            assert "result" not in conn.types()


@pytest.mark.parametrize("code", [4403, 4409, 4400])
async def test_fatal_close_codes_end_run_with_a_worker_error(code: int) -> None:
    async with FakeServer() as server:
        worker, _, _ = blocking_worker(server.url)
        task = asyncio.create_task(worker.run_async())
        conn = await server.accept()
        await conn.expect("hello")
        error = {"type": "error", "code": "forbidden", "message": "queue q is not allowed"}
        await conn.send(error)
        await conn.close(code)
        with pytest.raises(WorkerError) as caught:
            await asyncio.wait_for(task, TIMEOUT)
    assert caught.value.close_code == code
    assert "queue q is not allowed" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_ends_run_with_a_worker_error(status: int) -> None:
    async with FakeServer(refuse=status) as server:
        worker, _, _ = blocking_worker(server.url)
        with pytest.raises(WorkerError) as caught:
            await asyncio.wait_for(worker.run_async(), TIMEOUT)
    assert caught.value.status == status


async def test_a_refused_upgrade_with_503_is_retried() -> None:
    async with FakeServer(refuse=503) as refusing, FakeServer() as server:
        worker, _, _ = blocking_worker([refusing.url, server.url])
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()


async def test_missing_configuration_is_reported_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ORBIT_URL", raising=False)
    monkeypatch.delenv("ORBIT_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="handlers"):
        await Worker("http://127.0.0.1:9", "k").run_async()
    with pytest.raises(ConfigurationError, match="ORBIT_URL"):
        await _with_handler(Worker(api_key="k")).run_async()
    with pytest.raises(ConfigurationError, match="ORBIT_API_KEY"):
        await _with_handler(Worker("http://127.0.0.1:9")).run_async()


async def test_the_environment_supplies_url_and_key_when_the_worker_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeServer() as server:
        worker = _with_handler(Worker())
        monkeypatch.setenv("ORBIT_URL", server.url)
        monkeypatch.setenv("ORBIT_API_KEY", "env-key")
        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            assert conn.headers["Authorization"] == "Bearer env-key"


def _with_handler(worker: Worker) -> Worker:
    worker.handler(queue="q", type="t")(lambda ctx: None)
    return worker

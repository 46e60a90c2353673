"""The worker against a fake node: deliveries, starts, results, cancellation and leases."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from test_worker_support import FakeServer, delivery, keys, ref, running, ts

from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

TIMEOUT = 5.0


def make_worker(server: FakeServer, **kwargs: Any) -> Worker:
    kwargs.setdefault("concurrency", 4)
    kwargs.setdefault("prefetch", 0)  # each test that holds more says so
    return Worker(server.url, "test-key", worker_id="w-test", **kwargs)


async def test_hello_lists_handlers_versions_and_capacity() -> None:
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=7)

        @worker.handler(queue="emails", type="send")
        def send(ctx: TaskContext) -> None: ...

        @worker.handler(queue="reports", type="build", version="10")
        def build_10(ctx: TaskContext) -> None: ...

        @worker.handler(queue="reports", type="build", version="2")
        async def build_2(ctx: TaskContext) -> None: ...

        async with running(worker):
            conn = await server.accept()
            hello = await conn.welcome()
            assert conn.path == "/v1/worker"
            assert conn.headers["Authorization"] == "Bearer test-key"
            assert hello["protocol"] == [1]
            assert hello["worker_id"] == "w-test"
            assert hello["capacity"] == 7
            assert hello["held"] == []
            assert hello["sdk"].startswith("orbit-sdk/")
            assert hello["handlers"] == [
                {"queue": "emails", "type": "send", "versions": []},
                {"queue": "reports", "type": "build", "versions": ["2", "10"]},
            ]


async def test_delivery_is_started_run_reported_acked_and_credited() -> None:
    seen: list[TaskContext] = []
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=2)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> dict[str, Any]:
            seen.append(ctx)
            return {"doubled": ctx.params["n"] * 2}

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send(
                {
                    "type": "tasks",
                    "items": [
                        delivery("tsk_a", params={"n": 1}),
                        delivery("tsk_b", 3, params={"n": 2}, future_field=True),
                    ],
                }
            )
            start = await conn.start_all()
            assert start["items"] == [ref("tsk_a"), ref("tsk_b", 3)]  # one batch
            result = await conn.expect("result")
            by_task = {item["task_id"]: item for item in result["items"]}
            assert by_task["tsk_a"] == {
                **ref("tsk_a"),
                "outcome": "succeeded",
                "result": {"doubled": 2},
            }
            assert by_task["tsk_b"]["result"] == {"doubled": 4}
            await conn.credits(2)
            assert conn.types() == ["hello", "start", "result", "credit"]  # results first
            await conn.ack(result)

    ctx = next(c for c in seen if c.task_id == "tsk_a")
    assert (ctx.queue, ctx.type, ctx.attempt, ctx.attempts, ctx.max_attempts) == ("q", "t", 1, 0, 5)
    assert ctx.labels == {"team": "tests"}
    assert ctx.traceparent is not None and ctx.traceparent.startswith("00-4bf92f35")
    assert ctx.deadline.tzinfo is not None
    assert not ctx.cancelled


async def test_failures_carry_code_message_and_retryable() -> None:
    class SmtpTimeout(Exception):
        code = "smtp_timeout"
        retryable = False

    failures: dict[str, BaseException] = {
        "plain": ValueError("boom"),
        "final": NonRetryableError("bad input", code="bad_input"),
        "coded": SmtpTimeout("no answer"),
    }

    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> object:
            if ctx.params == "unencodable":
                return object()
            raise failures[ctx.params]

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            names = [*failures, "unencodable"]
            items = [delivery(f"tsk_{name}", params=name) for name in names]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            results = await conn.results(len(names))
            assert {item["outcome"] for item in results.values()} == {"failed"}
            errors = {task_id: item["error"] for task_id, item in results.items()}

    assert errors["tsk_plain"] == {
        "code": "ValueError",
        "message": "boom",
        "retryable": True,
        "details": {"type": "ValueError"},
    }
    assert errors["tsk_final"]["code"] == "bad_input"
    assert errors["tsk_final"]["retryable"] is False
    assert errors["tsk_final"]["details"]["type"] == "orbit_sdk.worker._errors.NonRetryableError"
    assert (errors["tsk_coded"]["code"], errors["tsk_coded"]["retryable"]) == (
        "smtp_timeout",
        False,
    )
    assert errors["tsk_unencodable"]["code"] == "result_not_serializable"
    assert errors["tsk_unencodable"]["retryable"] is False


async def test_denied_and_stale_starts_are_dropped_and_credited() -> None:
    ran = []
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=2)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> None:
            ran.append(ctx.task_id)

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_a"), delivery("tsk_b")]})
            start = await conn.expect("start")
            verdicts = [
                {"task_id": "tsk_a", "attempt": 1, "verdict": "denied"},
                {"task_id": "tsk_b", "attempt": 1, "verdict": "stale"},
            ]
            await conn.send({"type": "started", "re": start["id"], "items": verdicts})
            await conn.credits(2)
    assert ran == []


async def test_a_stale_renewal_cancels_the_handler_and_nothing_is_reported() -> None:
    running_now, finished = asyncio.Event(), asyncio.Event()
    contexts: list[TaskContext] = []
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> str:
            contexts.append(ctx)
            running_now.set()
            try:
                await ctx.wait_cancelled()
                await asyncio.sleep(3600)
            finally:
                finished.set()
            return "unreachable"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome(heartbeat_ms=50)
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            await asyncio.wait_for(running_now.wait(), TIMEOUT)
            heartbeat = await conn.heartbeat_with(("tsk_1", 1))
            assert heartbeat["items"] == [ref()]
            stale = {"task_id": "tsk_1", "attempt": 1, "verdict": "stale"}
            await conn.send({"type": "renewed", "re": heartbeat["id"], "items": [stale]})
            await asyncio.wait_for(finished.wait(), TIMEOUT)
            await conn.credits(1)  # the slot is back, and no result came before it
            assert "result" not in conn.types()

    (ctx,) = contexts
    assert ctx.cancelled and not ctx.cancel_requested
    assert ctx.cancel_reason is not None and "lost" in ctx.cancel_reason


async def test_a_lease_without_confirmed_renewal_is_lost() -> None:
    cancelled = threading.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1, lease_margin=0.1)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> str:
            if ctx.cancel_event.wait(TIMEOUT):
                cancelled.set()
            return "too late"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()  # heartbeats every 60 s: none before the lease ends
            await conn.send({"type": "tasks", "items": [delivery()]})
            start = await conn.expect("start")
            item = {
                "task_id": "tsk_1",
                "attempt": 1,
                "verdict": "started",
                "lease_expires_at": ts(0.3),
                "deadline_at": ts(300),
            }
            await conn.send({"type": "started", "re": start["id"], "items": [item]})
            await conn.credits(1)  # the sync handler returned; its result is not sent
            assert "result" not in conn.types()
    assert cancelled.is_set()


async def test_cancel_reaches_async_and_sync_handlers_and_reports_cancelled() -> None:
    started = {"async": asyncio.Event(), "sync": threading.Event()}
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=2)

        @worker.handler(queue="q", type="async")
        async def slow_async(ctx: TaskContext) -> None:
            started["async"].set()
            await asyncio.sleep(3600)

        @worker.handler(queue="q", type="sync")
        def slow_sync(ctx: TaskContext) -> None:
            started["sync"].set()
            ctx.cancel_event.wait(TIMEOUT)
            ctx.raise_if_cancelled()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome(heartbeat_ms=50)
            items = [delivery("tsk_a", type="async"), delivery("tsk_s", type="sync")]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            await asyncio.wait_for(started["async"].wait(), TIMEOUT)
            assert await asyncio.to_thread(started["sync"].wait, TIMEOUT)

            cancel = {"task_id": "tsk_a", "attempt": 1, "reason": "customer asked"}
            await conn.send({"type": "cancel", "items": [cancel]})
            result = await conn.expect("result")
            assert result["items"] == [{**ref("tsk_a"), "outcome": "cancelled"}]
            await conn.ack(result)

            heartbeat = await conn.heartbeat_with(("tsk_s", 1))
            verdict = {
                "task_id": "tsk_s",
                "attempt": 1,
                "verdict": "cancel_requested",
                "lease_expires_at": ts(30),
            }
            await conn.send({"type": "renewed", "re": heartbeat["id"], "items": [verdict]})
            result = await conn.expect("result")
            assert result["items"] == [{**ref("tsk_s"), "outcome": "cancelled"}]
            await conn.ack(result)


async def test_sync_handlers_run_on_at_most_concurrency_threads() -> None:
    concurrency = 3
    barrier = threading.Barrier(concurrency + 1, timeout=TIMEOUT)
    gate = threading.Event()
    lock = threading.Lock()
    active, peak, threads = [0], [0], set()

    async with FakeServer() as server:
        worker = make_worker(server, concurrency=concurrency)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> int:
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
                threads.add(threading.current_thread().name)
            if ctx.params["wave"] == 1:
                barrier.wait()  # all three run at the same time
                gate.wait(TIMEOUT)
            with lock:
                active[0] -= 1
            return threading.get_ident()

        try:
            async with running(worker):
                conn = await server.accept()
                hello = await conn.welcome()
                assert hello["capacity"] == concurrency
                for wave in (1, 2):
                    # The worker gave as many credits as it has slots, and no more.
                    await conn.credits(concurrency * (wave - 1))
                    items = [delivery(f"tsk_{wave}_{i}", params={"wave": wave}) for i in range(3)]
                    await conn.send({"type": "tasks", "items": items})
                    await conn.start_all()
                    if wave == 1:
                        await asyncio.to_thread(barrier.wait)
                        gate.set()
                    done = (await conn.results(3)).values()
                    assert {i["outcome"] for i in done} == {"succeeded"}
                    assert threading.get_ident() not in {i["result"] for i in done}
                await conn.credits(concurrency * 2)
        finally:
            gate.set()
    assert peak[0] == concurrency
    assert len(threads) <= concurrency
    assert all(name.startswith("orbit-worker") for name in threads)


async def test_the_task_version_picks_the_handler() -> None:
    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.handler(queue="q", type="t", version="1")
        def v1(ctx: TaskContext) -> str:
            return "v1"

        @worker.handler(queue="q", type="t", version="2")
        def v2(ctx: TaskContext) -> str:
            return "v2"

        async with running(worker):
            conn = await server.accept()
            hello = await conn.welcome()
            assert hello["handlers"][0]["versions"] == ["1", "2"]
            items = [delivery("tsk_v1", handler_version="1"), delivery("tsk_any")]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            results = await conn.results(2)
    assert {task_id: item["result"] for task_id, item in results.items()} == {
        "tsk_v1": "v1",
        "tsk_any": "v2",
    }


async def test_unknown_frames_from_the_server_are_ignored() -> None:
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> str:
            return "ok"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "something-new", "x": 1})
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            result = await conn.expect("result")
            assert result["items"][0]["result"] == "ok"


@pytest.mark.parametrize("kind", ["start", "result"])
async def test_an_unavailable_request_is_sent_again_after_retry_after(kind: str) -> None:
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        def handle(ctx: TaskContext) -> str:
            return "ok"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery()]})
            first = await conn.expect("start")
            if kind == "start":
                await conn.send(_unavailable(first["id"]))
                second = await conn.expect("start")
                assert second["id"] != first["id"] and second["items"] == first["items"]
                await conn.start_all(second)
            else:
                await conn.start_all(first)
            result = await conn.expect("result")
            if kind == "result":
                await conn.send(_unavailable(result["id"]))
                await conn.credits(1)  # credits do not wait for acks
                again = await conn.expect("result")
                assert again["id"] != result["id"] and again["items"] == result["items"]
                result = again
            await conn.ack(result)


async def test_an_unavailable_heartbeat_is_sent_again() -> None:
    running_now, release = asyncio.Event(), asyncio.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> None:
            running_now.set()
            await release.wait()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome(heartbeat_ms=60_000)
            await conn.send({"type": "tasks", "items": [delivery()]})
            await conn.start_all()
            await asyncio.wait_for(running_now.wait(), TIMEOUT)
            # The ticker's first beat came at welcome, with nothing held; the next is a
            # minute away, so a heartbeat now can only be the resent one.
            await conn.close(1011)
            conn = await server.accept()
            await conn.welcome(heartbeat_ms=60_000)
            first = await conn.heartbeat_with(("tsk_1", 1))
            await conn.send(_unavailable(first["id"]))
            second = await conn.heartbeat_with(("tsk_1", 1))
            assert second["id"] != first["id"]
            release.set()
            await conn.ack(await conn.expect("result"))


def _unavailable(request_id: int) -> dict[str, Any]:
    return {
        "type": "error",
        "code": "unavailable",
        "message": "the database does not answer",
        "re": request_id,
        "retry_after_ms": 20,
    }


def test_keys_helper() -> None:
    assert keys([ref("a", 2)]) == [("a", 2)]


async def test_results_are_split_to_fit_the_frame_limit_and_oversized_ones_fail() -> None:
    gate = asyncio.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=3)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> str:
            await gate.wait()
            return "x" * ctx.params

        async with running(worker):
            conn = await server.accept()
            await conn.welcome(max_frame_bytes=1200)  # 944 bytes for items
            sizes = {"tsk_a": 400, "tsk_b": 400, "tsk_huge": 5000}
            items = [delivery(task_id, params=size) for task_id, size in sizes.items()]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            gate.set()  # all three finish in the same turn of the loop
            frames = [await conn.expect("result") for _ in range(2)]
            for frame in frames:
                await conn.ack(frame)
    assert [len(frame["items"]) for frame in frames] == [1, 2]
    by_task = {item["task_id"]: item for frame in frames for item in frame["items"]}
    assert by_task["tsk_a"]["result"] == "x" * 400
    assert by_task["tsk_huge"]["outcome"] == "failed"
    assert by_task["tsk_huge"]["error"]["code"] == "result_too_large"
    assert by_task["tsk_huge"]["error"]["retryable"] is False


async def test_handlers_run_in_the_trace_of_the_task() -> None:
    trace = pytest.importorskip("opentelemetry.trace")

    def trace_id() -> str:
        return format(trace.get_current_span().get_span_context().trace_id, "032x")

    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.handler(queue="q", type="sync")
        def in_thread(ctx: TaskContext) -> str:
            return trace_id()

        @worker.handler(queue="q", type="async")
        async def on_loop(ctx: TaskContext) -> str:
            return trace_id()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            items = [delivery("tsk_s", type="sync"), delivery("tsk_a", type="async")]
            await conn.send({"type": "tasks", "items": items})
            await conn.start_all()
            results = await conn.results(2)
    expected = "4bf92f3577b34da6a3ce929d0e0e4736"  # from the delivery's traceparent
    assert {item["result"] for item in results.values()} == {expected}


async def test_unsafe_handlers_given_idempotent_tasks_log_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeServer() as server:
        worker = make_worker(server)

        @worker.handler(queue="q", type="t", side_effect="unsafe")
        def charge(ctx: TaskContext) -> None: ...

        with caplog.at_level(logging.WARNING, logger="orbit_sdk.worker"):
            async with running(worker):
                conn = await server.accept()
                await conn.welcome()
                await conn.send({"type": "tasks", "items": [delivery("a"), delivery("b")]})
                await conn.start_all()
                await conn.results(2)
    warnings = [r for r in caplog.records if "registered as unsafe" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize("eager", [True, False])
async def test_only_an_eager_delivery_runs_before_its_start_answer(eager: bool) -> None:
    """``eager_start``: the handler runs once the start is sent, and its result goes without
    waiting for ``started`` (decision 0008); without it, the handler runs only after
    ``started``. Either way the start is sent before the result."""
    ran = asyncio.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> str:
            ran.set()
            return "done"

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_a", eager_start=eager)]})
            start = await conn.expect("start")
            if eager:
                await asyncio.wait_for(ran.wait(), TIMEOUT)  # no answer to the start yet
                early = await conn.expect("result")  # nor is one needed for the result
                await conn.start_all(start)
                await conn.ack(early)
                [result] = early["items"]
            else:
                for _ in range(20):  # let the worker run whatever it would run
                    await asyncio.sleep(0)
                assert not ran.is_set()
                assert conn.frames.empty()  # and no result
                await conn.start_all(start)
                [result] = (await conn.results(1)).values()
            assert result["outcome"] == "succeeded" and result["result"] == "done"
            await conn.credits(1)
    assert conn.types().index("start") < conn.types().index("result")


async def test_eager_and_plain_starts_go_in_requests_of_their_own() -> None:
    """The server may hold eager starts briefly (decision 0008): a plain start never waits
    with them."""
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=2)
        gate = asyncio.Event()

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> None:
            await gate.wait()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            items = [delivery("tsk_a", eager_start=True), delivery("tsk_b", eager_start=False)]
            await conn.send({"type": "tasks", "items": items})
            first, second = await conn.expect("start"), await conn.expect("start")
            assert sorted([keys(first["items"]), keys(second["items"])]) == [
                [("tsk_a", 1)],
                [("tsk_b", 1)],
            ]
            await conn.start_all(first)
            await conn.start_all(second)
            gate.set()
            await conn.results(2)
            await conn.credits(2)


@pytest.mark.parametrize("verdict", ["denied", "stale"])
async def test_an_eager_handler_refused_its_start_is_stopped_and_not_reported(
    verdict: str,
) -> None:
    running_now, stopped = asyncio.Event(), asyncio.Event()
    async with FakeServer() as server:
        worker = make_worker(server, concurrency=1)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> None:
            running_now.set()
            try:
                await asyncio.Event().wait()
            finally:
                stopped.set()

        async with running(worker):
            conn = await server.accept()
            await conn.welcome()
            await conn.send({"type": "tasks", "items": [delivery("tsk_a", eager_start=True)]})
            start = await conn.expect("start")
            await asyncio.wait_for(running_now.wait(), TIMEOUT)
            item = {"task_id": "tsk_a", "attempt": 1, "verdict": verdict}
            await conn.send({"type": "started", "re": start["id"], "items": [item]})
            await asyncio.wait_for(stopped.wait(), TIMEOUT)
            await conn.credits(1)
    assert "result" not in conn.types()

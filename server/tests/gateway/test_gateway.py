"""The worker endpoint end to end over a real WebSocket (on SQLite and MariaDB): refusals
before the upgrade, the handshake, delivery → start → result with acknowledgements, renewals,
cancel, fencing after a lost lease, reconnect verdicts, credits and drain."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import timedelta
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from orbit_server.audit import Actor
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.model import TaskSpec
from tests.conftest import SCOPE, make_key
from tests.gateway.conftest import Live, hello, recv, ref, send

ACTOR = Actor("test")


async def submit(live: Live, count: int = 1, **fields: Any) -> list[str]:
    spec = TaskSpec(**{"queue": "emails", "type": "send", **fields})
    done = await live.node.tasks.submit_many(SCOPE, [spec] * count)
    return [d.task.id for d in done]


async def deliveries(ws: Any, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while len(found) < count:
        frame = await recv(ws)
        assert frame["type"] == "tasks", frame
        found += frame["items"]
    return found


async def closed_with(ws: Any) -> int:
    """The close code, once every frame before it has been read."""

    async def drain() -> None:
        while True:
            await recv(ws)

    with pytest.raises(ConnectionClosed) as closed:
        await drain()
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


async def test_the_upgrade_is_refused_without_a_worker_key(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with pytest.raises(InvalidStatus) as missing:
        async with live.connect(key="nonsense"):
            pass
    assert missing.value.response.status_code == 401
    submitter = await make_key(live.node, SCOPE, Role.SUBMITTER)
    with pytest.raises(InvalidStatus) as forbidden:
        async with live.connect(key=submitter):
            pass
    assert forbidden.value.response.status_code == 403
    assert b'"code":"forbidden"' in forbidden.value.response.body
    # A routine refusal is no server error: nothing at ERROR (uvicorn logged one per refusal).
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "hello", "protocol": [99], "worker_id": "w",
          "handlers": [{"queue": "q", "type": "t"}], "capacity": 1}, 4409),
        ({"type": "credit", "n": 1}, 4400),
        ({"type": "nonsense"}, 4400),
    ],
)  # fmt: skip
async def test_a_bad_handshake_closes_with_its_code(
    live: Live, frame: dict[str, Any], code: int
) -> None:
    async with live.connect() as ws:
        await send(ws, frame)
        error = await recv(ws)
        assert error["type"] == "error"
        assert await closed_with(ws) == code


async def test_a_queue_outside_the_keys_list_is_forbidden(live: Live) -> None:
    key = await make_key(live.node, SCOPE, Role.WORKER, queues=("reports",))
    async with live.connect(key=key) as ws:
        handlers = [{"queue": "emails", "type": "send"}]
        await send(ws, {"type": "hello", "protocol": [1], "worker_id": "w",
                        "handlers": handlers, "capacity": 1})  # fmt: skip
        assert (await recv(ws))["code"] == "forbidden"
        assert await closed_with(ws) == 4403


async def test_a_frame_over_the_limit_closes_1009(live: Live) -> None:
    async with live.connect(max_size=None) as ws:
        await hello(ws)
        big = {"type": "result", "id": 1, "items": [{"task_id": "t", "attempt": 1,
               "lease_token": "x", "outcome": "succeeded",
               "result": "x" * live.node.settings.ws_max_frame_bytes}]}  # fmt: skip
        await send(ws, big)
        assert await closed_with(ws) == 1009


async def test_no_hello_before_the_deadline_closes_4408(live: Live) -> None:
    live.node.settings = dataclasses.replace(live.node.settings, handshake_timeout_ms=100)
    async with live.connect() as ws:
        assert (await recv(ws))["code"] == "handshake_timeout"
        assert await closed_with(ws) == 4408


async def test_delivery_start_result_and_a_harmless_resend(live: Live) -> None:
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    [task_id] = await submit(live, params={"to": "a@example.com"}, traceparent=trace)
    async with live.connect() as ws:
        welcome = await hello(ws)
        assert welcome["lease_ms"] == live.node.settings.lease_ms and welcome["held"] == []
        [d] = await deliveries(ws, 1)
        assert (d["task_id"], d["attempt"], d["params"]) == (task_id, 1, {"to": "a@example.com"})
        assert d["traceparent"] == trace  # the submitter's trace context reaches the worker
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        started = await recv(ws)
        [answer] = started["items"]
        assert (started["re"], answer["task_id"], answer["verdict"]) == (1, task_id, "started")
        assert answer["lease_expires_at"] <= answer["deadline_at"]
        await send(ws, {"type": "start", "id": 9, "items": [ref(d)]})  # its answer was lost
        assert (await recv(ws))["items"][0]["verdict"] == "started"
        item = {**ref(d), "outcome": "succeeded", "result": {"ok": True}}
        result = {"type": "result", "id": 2, "items": [item]}
        await send(ws, result)
        acked = await recv(ws)
        assert acked["re"] == 2 and acked["items"][0]["verdict"] == "accepted"
        await send(ws, {**result, "id": 3})
        assert (await recv(ws))["items"][0]["verdict"] == "already"
    task = await live.node.tasks.get(SCOPE, task_id)
    assert (task.state, task.result) == ("succeeded", {"ok": True})


async def test_only_idempotent_tasks_without_a_gate_may_start_eagerly(live: Live) -> None:
    """``eager_start``: the worker may run the handler before the start answer only where the
    start check could refuse nothing but a lost lease."""
    gate = await live.node.gates.create(SCOPE)
    [plain] = await submit(live)
    [unsafe] = await submit(live, side_effect="unsafe")
    [gated] = await submit(live, gate_id=gate)
    async with live.connect() as ws:
        await hello(ws, capacity=3)
        eager = {d["task_id"]: d["eager_start"] for d in await deliveries(ws, 3)}
    assert eager == {plain: True, unsafe: False, gated: False}


async def test_a_failure_with_retryable_false_fails_the_task(live: Live) -> None:
    [task_id] = await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        await recv(ws)
        error = {"code": "bad_address", "message": "no such mailbox", "retryable": False}
        await send(ws, {"type": "result", "id": 2,
                        "items": [{**ref(d), "outcome": "failed", "error": error}]})  # fmt: skip
        assert (await recv(ws))["items"][0]["verdict"] == "accepted"
    task = await live.node.tasks.get(SCOPE, task_id)
    assert task.state == "failed" and task.error is not None
    assert task.error["code"] == "bad_address"


async def test_an_oversized_error_keeps_what_decides_the_outcome(live: Live) -> None:
    """An error over 16 KiB is stored shortened, but ``retryable`` and ``safe_to_retry`` stay:
    an unsafe task whose handler vouches that nothing happened is retried, not sent to
    review."""
    [task_id] = await submit(live, side_effect="unsafe")
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        await recv(ws)
        error = {"code": "busy", "message": "try later", "retryable": True,
                 "safe_to_retry": True, "details": {"dump": "x" * 40_000}}  # fmt: skip
        await send(ws, {"type": "result", "id": 2,
                        "items": [{**ref(d), "outcome": "failed", "error": error}]})  # fmt: skip
        assert (await recv(ws))["items"][0]["verdict"] == "accepted"
    task = await live.node.tasks.get(SCOPE, task_id)
    assert task.state == "scheduled" and task.error is not None  # retried after its backoff
    assert task.error["details"] == {"truncated": True} and task.error["safe_to_retry"]


async def test_a_cancel_reaches_the_running_worker_through_its_heartbeat(live: Live) -> None:
    [task_id] = await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        await recv(ws)
        await live.node.tasks.cancel(SCOPE, task_id, reason="user asked", actor=ACTOR)
        pushed = await recv(ws)  # the cancel was requested on this node: pushed at once
        item = {"task_id": task_id, "attempt": 1, "reason": "user asked"}
        assert pushed == {"type": "cancel", "items": [item]}
        await send(ws, {"type": "heartbeat", "id": 2, "items": [ref(d)]})
        renewed = await recv(ws)
        assert renewed["items"][0]["verdict"] == "cancel_requested"
        await send(ws, {"type": "result", "id": 3,
                        "items": [{**ref(d), "outcome": "cancelled"}]})  # fmt: skip
        assert (await recv(ws))["items"][0]["verdict"] == "accepted"
    assert (await live.node.tasks.get(SCOPE, task_id)).state == "cancelled"


async def test_a_worker_partitioned_past_its_lease_cannot_complete(
    live: Live, clock: FakeClock
) -> None:
    [task_id] = await submit(live)
    async with live.connect() as old, live.connect() as new:
        await hello(old, capacity=1)  # its one credit is in use: the retry goes elsewhere
        [d] = await deliveries(old, 1)
        await send(old, {"type": "start", "id": 1, "items": [ref(d)]})
        await recv(old)
        clock.advance(timedelta(milliseconds=live.node.settings.lease_ms + 1))
        assert await live.node.workers.expire_leases() == 1  # idempotent: retried
        clock.advance(timedelta(hours=1))
        await live.node.workers.promote_due()
        await hello(new)
        [again] = await deliveries(new, 1)
        assert (again["task_id"], again["attempt"]) == (task_id, 2)
        await send(old, {"type": "heartbeat", "id": 2, "items": [ref(d)]})
        assert (await recv(old))["items"][0]["verdict"] == "stale"
        await send(old, {"type": "result", "id": 3,
                         "items": [{**ref(d), "outcome": "succeeded", "result": 1}]})  # fmt: skip
        assert (await recv(old))["items"][0]["verdict"] == "stale"
        await send(new, {"type": "start", "id": 1, "items": [ref(again)]})
        assert (await recv(new))["items"][0]["verdict"] == "started"
    task = await live.node.tasks.get(SCOPE, task_id)
    assert task.state == "running" and task.result is None


async def test_a_reconnecting_worker_gets_a_verdict_for_each_held_attempt(
    live: Live, clock: FakeClock
) -> None:
    await submit(live, 2)
    async with live.connect() as ws:
        await hello(ws)
        first, second = await deliveries(ws, 2)
        await send(ws, {"type": "start", "id": 1, "items": [ref(first), ref(second)]})
        await recv(ws)
    await live.node.tasks.cancel(SCOPE, second["task_id"], reason=None, actor=ACTOR)
    await live.node.workers.renew([])  # nothing else happens meanwhile
    async with live.connect() as ws:
        welcome = await hello(ws, held=[ref(first), ref(second)])
        verdicts = {h["task_id"]: h["verdict"] for h in welcome["held"]}
        # The cancel of running work only asks; the attempt still holds until it reports.
        assert verdicts == {first["task_id"]: "continue", second["task_id"]: "continue"}
        clock.advance(timedelta(milliseconds=live.node.settings.lease_ms + 1))
    async with live.connect() as ws:
        welcome = await hello(ws, held=[ref(first)])
        assert welcome["held"] == [{"task_id": first["task_id"], "attempt": 1, "verdict": "stop"}]


async def test_credits_bound_what_is_delivered(live: Live) -> None:
    await submit(live, 3)
    async with live.connect() as ws:
        await hello(ws, capacity=1)
        [d] = await deliveries(ws, 1)
        await send(ws, {"type": "start", "id": 1, "items": [ref(d)]})
        await recv(ws)
        await send(ws, {"type": "result", "id": 2,
                        "items": [{**ref(d), "outcome": "succeeded"}]})  # fmt: skip
        assert (await recv(ws))["type"] == "acked"
        queue = await live.node.queues.list_queues(SCOPE, limit=10, after=None)
        assert queue[0].counts.get("pending") == 2  # nothing more without credit
        await send(ws, {"type": "credit", "n": 2})
        assert len(await deliveries(ws, 2)) == 2


async def test_requests_during_a_database_outage_answer_unavailable(live: Live) -> None:
    await submit(live)
    async with live.connect() as ws:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await live.node.db.close()  # the database is gone: nothing can be committed
        await send(ws, {"type": "start", "id": 5, "items": [ref(d)]})
        error = await recv(ws)
        assert (error["type"], error["re"], error["code"]) == ("error", 5, "unavailable")
        assert error["retry_after_ms"] > 0


async def test_attempts_a_worker_gave_up_stop_counting_against_the_node(live: Live) -> None:
    await submit(live, 2)
    async with live.connect() as ws:
        await hello(ws, capacity=2)  # no credit is left: nothing is delivered meanwhile
        first, second = await deliveries(ws, 2)
        await send(ws, {"type": "start", "id": 1, "items": [ref(first)]})
        await recv(ws)
        await send(ws, {"type": "release", "id": 2, "items": [ref(first), ref(second)]})
        released = await recv(ws)
        assert [i["released"] for i in released["items"]] == [False, True]  # first started
        assert live.gateway.dispatcher.inflight == 1
        for request_id in (3, 4):  # the worker lost the first (its lease ran out there)
            await send(ws, {"type": "heartbeat", "id": request_id, "items": []})
            await recv(ws)
        assert live.gateway.dispatcher.inflight == 0


async def test_connected_workers_are_counted_per_queue(live: Live) -> None:
    async with live.connect() as ws:
        await hello(ws, queue="reports", type_="build")
        assert await live.node.sessions.workers_per_queue(SCOPE) == {"reports": 1}


async def test_drain_asks_workers_to_release_and_closes_1001(live: Live) -> None:
    [task_id] = await submit(live)
    async with live.connect() as ws, live.connect() as idle:
        await hello(ws)
        [d] = await deliveries(ws, 1)
        await hello(idle, queue="reports", type_="build")
        draining = asyncio.create_task(live.gateway.drain())
        notice = await recv(ws)
        assert notice == {"type": "drain", "grace_ms": live.node.settings.drain_grace_ms}
        assert (await recv(idle))["type"] == "drain"
        assert await closed_with(idle) == 1001  # nothing in flight there: closed at once
        await send(ws, {"type": "release", "id": 1, "items": [ref(d)]})
        released = await recv(ws)
        assert released["items"] == [{"task_id": task_id, "attempt": 1, "released": True}]
        assert await closed_with(ws) == 1001
        await draining
    task = await live.node.tasks.get(SCOPE, task_id)
    assert (task.state, task.attempts) == ("pending", 0)
    with pytest.raises(InvalidStatus) as refused:  # a draining node takes no new workers
        async with live.connect():
            pass
    assert refused.value.response.status_code == 503

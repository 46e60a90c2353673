"""Tasks over HTTP on every dialect: submit, idempotency, batch, get/wait, list, cancel."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from orbit_server.store import claim_range as ready_store
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from tests.api.test_error_contract import assert_error
from tests.conftest import OTHER_TENANT, SCOPE, bearer, make_key

TASK_FIELDS = {
    "id", "queue", "type", "state", "params", "priority", "run_at", "attempts", "max_attempts",
    "result", "error", "cancel_requested", "idempotency_key", "concurrency_key", "fairness_key",
    "side_effect", "labels", "owner", "created_at", "updated_at", "finished_at",
}  # fmt: skip


@pytest.fixture
async def submitter(node: Node) -> dict[str, str]:
    return bearer(await make_key(node, SCOPE, Role.SUBMITTER))


async def submit(http: httpx2.AsyncClient, auth: dict[str, str], **body: Any) -> httpx2.Response:
    return await http.post(
        "/v1/tasks", json={"queue": "emails", "type": "send", **body}, headers=auth
    )


async def test_submit_answers_the_task_object(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    response = await submit(
        http, submitter, params={"user": 42}, priority=3, labels={"team": "growth"},
        side_effect="unsafe", retry={"max_attempts": 5}, concurrency_key="user-42",
    )  # fmt: skip
    assert response.status_code == 201, response.text
    task = response.json()
    assert set(task) >= TASK_FIELDS
    assert (task["state"], task["params"], task["priority"], task["max_attempts"]) == (
        "pending", {"user": 42}, 3, 5,
    )  # fmt: skip
    assert task["side_effect"] == "unsafe" and task["labels"] == {"team": "growth"}
    assert task["attempts"] == 0 and task["owner"] is None
    assert task["run_at"].endswith("Z") and len(task["run_at"]) == 24
    fetched = (await http.get(f"/v1/tasks/{task['id']}", headers=submitter)).json()
    # No worker key exists in this environment: the read says why no worker takes the task.
    assert fetched.pop("unserved")["reason"] == "queue_out_of_scope"
    assert task.pop("unserved") is None and fetched == task


async def test_delayed_tasks_are_scheduled(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    task = (await submit(http, submitter, delay_ms=60_000)).json()
    assert task["state"] == "scheduled" and task["run_at"] > task["created_at"]
    at = (await submit(http, submitter, run_at="2099-01-01T00:00:00Z")).json()
    assert at["state"] == "scheduled" and at["run_at"] == "2099-01-01T00:00:00.000Z"


async def test_idempotency_same_body_replays_other_body_conflicts(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    first = await submit(http, submitter, idempotency_key="welcome-42", params={"u": 1})
    again = await submit(http, submitter, idempotency_key="welcome-42", params={"u": 1})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = await submit(http, submitter, idempotency_key="welcome-42", params={"u": 2})
    assert_error(other, 409, "idempotency_conflict", "conflict")
    traced = await http.post(
        "/v1/tasks",
        json={
            "queue": "emails",
            "type": "send",
            "idempotency_key": "welcome-42",
            "params": {"u": 1},
        },
        headers={**submitter, "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
    )
    assert traced.status_code == 200  # trace context is not part of the request


async def test_concurrent_submissions_of_one_key_create_one_task(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    responses = await asyncio.gather(
        *(submit(http, submitter, idempotency_key="race", params={"n": 1}) for _ in range(8))
    )
    assert sorted(r.status_code for r in responses) == [200] * 7 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    listed = (await http.get("/v1/tasks", headers=submitter)).json()["items"]
    assert len(listed) == 1
    queue = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "emails"))
    assert queue is not None and queue.pending == 1  # counted once


async def test_batch_is_validated_all_or_nothing(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    bad = await http.post(
        "/v1/tasks:batch",
        json={"tasks": [{"queue": "a", "type": "t"}, {"queue": "a", "type": "t", "delay_ms": -1}]},
        headers=submitter,
    )
    assert_error(bad, 400, "invalid_request", "protocol")
    semantic = await http.post(
        "/v1/tasks:batch",
        json={"tasks": [{"queue": "a", "type": "t"}, {"queue": "a", "type": "t", "delay_ms": 5,
              "run_at": "2099-01-01T00:00:00Z"}]},
        headers=submitter,
    )  # fmt: skip
    assert "tasks[1]" in str(assert_error(semantic, 400, "invalid_request", "protocol")["message"])
    assert (await http.get("/v1/tasks", headers=submitter)).json()["items"] == []
    too_many = await http.post(
        "/v1/tasks:batch", json={"tasks": [{"queue": "a", "type": "t"}] * 1001}, headers=submitter
    )
    assert_error(too_many, 400, "invalid_request", "protocol")


async def test_batch_answers_in_order_with_replays(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    existing = (await submit(http, submitter, idempotency_key="k0")).json()
    body = {
        "tasks": [
            {"queue": "emails", "type": "send", "idempotency_key": "k0"},
            {"queue": "b", "type": "t", "params": {"i": 1}},
            {"queue": "b", "type": "t", "idempotency_key": "k2"},
            {"queue": "b", "type": "t", "idempotency_key": "k2"},
        ]
    }
    response = await http.post("/v1/tasks:batch", json=body, headers=submitter)
    assert response.status_code == 201
    tasks = response.json()["tasks"]
    assert tasks[0]["id"] == existing["id"]
    assert tasks[1]["params"] == {"i": 1} and tasks[2]["id"] == tasks[3]["id"]
    assert len({t["id"] for t in tasks}) == 3


async def test_invalid_submissions_name_the_problem(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    cases = [
        ({"delay_ms": 5, "run_at": "2099-01-01T00:00:00Z"}, "run_at"),
        ({"run_at": "2099-01-01T00:00:00"}, "run_at"),  # no time zone
        ({"timeout_ms": node.settings.max_task_timeout_ms + 1}, "timeout_ms"),
        ({"retry": {"initial_backoff_ms": 10, "max_backoff_ms": 5}}, "max_backoff_ms"),
        ({"side_effect": "maybe"}, "side_effect"),
        ({"priority": False}, "priority"),
        ({"queue": ""}, "queue"),
        ({"concurrency_key": "user-1 "}, "concurrency_key"),
        ({"idempotency_key": " k"}, "idempotency_key"),
    ]
    for body, named in cases:
        response = await submit(http, submitter, **body)
        message = str(assert_error(response, 400, "invalid_request", "protocol")["message"])
        assert named in message, (body, message)
    assert (await http.get("/v1/tasks", headers=submitter)).json()["items"] == []


async def test_params_over_the_limit_are_413(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    response = await submit(http, submitter, params={"blob": "x" * node.settings.max_params_bytes})
    assert_error(response, 413, "payload_too_large", "protocol")


async def test_roles_and_scopes(
    http: httpx2.AsyncClient, node: Node, submitter: dict[str, str]
) -> None:
    worker = bearer(await make_key(node, SCOPE, Role.WORKER))
    assert_error(await submit(http, worker), 403, "forbidden", "permission")
    task = (await submit(http, submitter)).json()
    foreign = bearer(await make_key(node, OTHER_TENANT, Role.SUBMITTER))
    assert_error(
        await http.get(f"/v1/tasks/{task['id']}", headers=foreign), 404, "not_found", "protocol"
    )
    assert_error(
        await http.post(f"/v1/tasks/{task['id']}/cancel", headers=foreign),
        404,
        "not_found",
        "protocol",
    )
    assert (await http.get("/v1/tasks", headers=foreign)).json()["items"] == []


async def test_list_filters_and_pages(http: httpx2.AsyncClient, submitter: dict[str, str]) -> None:
    made = []
    for i in range(5):
        made.append(
            (await submit(http, submitter, queue="a" if i % 2 else "b", type=f"t{i % 2}",
                          labels={"n": str(i)}, delay_ms=60_000 if i == 4 else 0)).json()
        )  # fmt: skip
    ids = [t["id"] for t in reversed(made)]

    async def listed(**params: Any) -> list[str]:
        body = (await http.get("/v1/tasks", params=params, headers=submitter)).json()
        return [t["id"] for t in body["items"]]

    assert await listed() == ids
    assert await listed(queue="a") == [made[3]["id"], made[1]["id"]]
    assert await listed(state="scheduled") == [made[4]["id"]]
    assert await listed(type="t0") == [made[4]["id"], made[2]["id"], made[0]["id"]]
    assert await listed(label="n:3") == [made[3]["id"]]
    page1 = (await http.get("/v1/tasks", params={"limit": 2}, headers=submitter)).json()
    page2 = (
        await http.get(
            "/v1/tasks", params={"limit": 2, "cursor": page1["next_cursor"]}, headers=submitter
        )
    ).json()
    assert [t["id"] for t in page1["items"] + page2["items"]] == ids[:4]
    for bad in ({"state": "sleeping"}, {"label": "nocolon"}):
        assert_error(
            await http.get("/v1/tasks", params=bad, headers=submitter),
            400,
            "invalid_request",
            "protocol",
        )


async def test_cancel_pending_and_scheduled_at_once(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    pending = (await submit(http, submitter)).json()
    scheduled = (await submit(http, submitter, delay_ms=60_000)).json()
    for task in (pending, scheduled):
        response = await http.post(
            f"/v1/tasks/{task['id']}/cancel", json={"reason": "not needed"}, headers=submitter
        )
        assert response.status_code == 200
        body = response.json()
        assert body["state"] == "cancelled" and body["finished_at"] is not None
        assert body["cancel_reason"] == "not needed"
    again = await http.post(f"/v1/tasks/{pending['id']}/cancel", headers=submitter)
    assert again.status_code == 200 and again.json()["state"] == "cancelled"  # idempotent
    queue = await node.db.read(lambda tx: queue_store.queue_get(tx, SCOPE, "emails"))
    assert queue is not None and queue.pending == 0  # permits and counters given back
    oldest = await node.db.read(lambda tx: ready_store.queue_oldest_ready_at(tx, SCOPE, "emails"))
    assert oldest is None  # out of the claim range
    events = await node.db.read(lambda tx: event_store.task_event_list_pending(tx, limit=10))
    assert {(e.task_id, e.state) for e in events} == {
        (pending["id"], "cancelled"),
        (scheduled["id"], "cancelled"),
    }
    audit = (
        await http.get(
            "/v1/audit",
            params={"target_kind": "task", "target_id": pending["id"]},
            headers=bearer(await make_key(node, SCOPE, Role.OPERATOR)),
        )
    ).json()["items"]
    assert [e["action"] for e in audit] == ["task.cancel"]  # the repeat audited nothing
    from orbit_server.pulse.worker import Session, Want

    finished = (await submit(http, submitter, queue="done")).json()
    [lease] = await node.workers.claim(
        SCOPE, Session("s", "n", "w"), [Want("done", "send", 1)], limit=1
    )
    await node.workers.start(lease.ref)
    await node.workers.complete(lease.ref, None)
    late = await http.post(f"/v1/tasks/{finished['id']}/cancel", headers=submitter)
    assert_error(late, 409, "state_conflict", "conflict")


async def test_wait_returns_settled_tasks_and_wakes_on_local_changes(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    task = (await submit(http, submitter)).json()
    quick = await http.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 50}, headers=submitter)
    assert quick.json()["state"] == "pending"  # not settled: answered as it is at the deadline
    node.tasks._watch.poll_s = 60  # only a wake-up can end the wait early

    async def cancel_soon() -> None:
        while node.tasks._watch.waiting == 0:
            await asyncio.sleep(0)
        await http.post(f"/v1/tasks/{task['id']}/cancel", headers=submitter)

    async with asyncio.timeout(10):
        waited, _ = await asyncio.gather(
            http.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 30_000}, headers=submitter),
            cancel_soon(),
        )
    assert waited.json()["state"] == "cancelled"
    over = await http.get(f"/v1/tasks/{task['id']}", params={"wait_ms": 60_001}, headers=submitter)
    assert_error(over, 400, "invalid_request", "protocol")


async def test_attempts_of_a_new_task_are_empty(
    http: httpx2.AsyncClient, submitter: dict[str, str]
) -> None:
    task = (await submit(http, submitter)).json()
    response = await http.get(f"/v1/tasks/{task['id']}/attempts", headers=submitter)
    assert response.json() == {"items": [], "next_cursor": None}
    missing = await http.get("/v1/tasks/nope/attempts", headers=submitter)
    assert_error(missing, 404, "not_found", "protocol")


async def test_retry_and_resolve_are_for_operators_and_check_state(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    task = (await submit(http, submitter)).json()
    forbidden = await http.post(f"/v1/tasks/{task['id']}/retry", headers=submitter)
    assert_error(forbidden, 403, "forbidden", "permission")
    not_yet = await http.post(f"/v1/tasks/{task['id']}/retry", headers=operator)
    assert_error(not_yet, 409, "state_conflict", "conflict")
    await http.post(f"/v1/tasks/{task['id']}/cancel", headers=submitter)
    retried = await http.post(f"/v1/tasks/{task['id']}/retry", headers=operator)
    assert retried.status_code == 200 and retried.json()["state"] == "pending"
    resolve = await http.post(
        f"/v1/tasks/{task['id']}/resolve", json={"outcome": "succeeded"}, headers=operator
    )
    assert_error(resolve, 409, "state_conflict", "conflict")
    missing_error = await http.post(
        f"/v1/tasks/{task['id']}/resolve", json={"outcome": "failed"}, headers=operator
    )
    assert_error(missing_error, 400, "invalid_request", "protocol")


async def test_submissions_over_the_keys_rate_are_429(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    from orbit_server.runtime.ratelimit import RateLimiter

    node.submit_limiter = RateLimiter(rate_per_s=1, burst=2, now=lambda: 0.0)
    assert (await submit(http, submitter)).status_code == 201
    assert (await submit(http, submitter)).status_code == 201
    limited = await submit(http, submitter)
    assert_error(limited, 429, "rate_limited", "transient")
    assert limited.headers["retry-after"] == "1"
    too_big = await http.post(
        "/v1/tasks:batch", json={"tasks": [{"queue": "q", "type": "t"}] * 3}, headers=submitter
    )
    assert "split the batch" in str(
        assert_error(too_big, 400, "invalid_request", "protocol")["message"]
    )
    assert len((await http.get("/v1/tasks", headers=submitter)).json()["items"]) == 2


async def test_submissions_during_a_database_outage_are_refused(
    http: httpx2.AsyncClient, submitter: dict[str, str], node: Node
) -> None:
    await node.db.close()
    response = await submit(http, submitter, idempotency_key="during-outage")
    assert_error(response, 503, "unavailable", "transient")
    assert "retry-after" in response.headers
    batch = await http.post(
        "/v1/tasks:batch", json={"tasks": [{"queue": "q", "type": "t"}]}, headers=submitter
    )
    assert_error(batch, 503, "unavailable", "transient")

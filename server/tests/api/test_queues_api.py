"""Queues over HTTP: counts, operator settings, max_pending."""

from __future__ import annotations

import httpx2

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.conftest import SCOPE, bearer, make_key


async def test_queue_counts_and_settings(http: httpx2.AsyncClient, node: Node) -> None:
    submitter = bearer(await make_key(node, SCOPE, Role.SUBMITTER))
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    for delay in (0, 0, 60_000):
        await http.post(
            "/v1/tasks",
            json={"queue": "emails", "type": "send", "delay_ms": delay},
            headers=submitter,
        )
    queues = (await http.get("/v1/queues", headers=submitter)).json()["items"]
    assert [q["name"] for q in queues] == ["emails"]
    emails = queues[0]
    assert emails["counts"]["pending"] == 2 and emails["counts"]["scheduled"] == 1
    assert emails["oldest_pending_age_ms"] >= 0 and emails["workers"] == 0
    assert (emails["paused"], emails["key_concurrency"], emails["max_pending"]) == (False, 1, None)
    forbidden = await http.put("/v1/queues/emails", json={"paused": True}, headers=submitter)
    assert_error(forbidden, 403, "forbidden", "permission")
    changed = await http.put(
        "/v1/queues/emails",
        json={"paused": True, "concurrency_limit": 10, "key_concurrency": 2, "max_pending": 100},
        headers=operator,
    )
    assert changed.status_code == 200
    settings = ("paused", "concurrency_limit", "key_concurrency", "max_pending")
    assert [changed.json()[k] for k in settings] == [True, 10, 2, 100]
    trail = (
        await http.get(
            "/v1/audit", params={"target_kind": "queue", "target_id": "emails"}, headers=operator
        )
    ).json()["items"]
    assert [e["action"] for e in trail] == ["queue.update"]
    partial = await http.put("/v1/queues/emails", json={"paused": False}, headers=operator)
    assert [partial.json()[k] for k in settings] == [False, 10, 2, 100]  # absent: unchanged
    cleared = await http.put(
        "/v1/queues/emails", json={"max_pending": None, "concurrency_limit": None}, headers=operator
    )
    assert [cleared.json()[k] for k in settings] == [False, None, 2, None]  # null: no limit
    invalid = await http.put("/v1/queues/emails", json={"key_concurrency": 0}, headers=operator)
    assert_error(invalid, 400, "invalid_request", "protocol")


async def test_max_pending_refuses_with_429_and_writes_nothing(
    http: httpx2.AsyncClient, node: Node
) -> None:
    submitter = bearer(await make_key(node, SCOPE, Role.SUBMITTER))
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    await http.put("/v1/queues/emails", json={"max_pending": 2}, headers=operator)
    body = {"queue": "emails", "type": "send"}
    assert (await http.post("/v1/tasks", json=body, headers=submitter)).status_code == 201
    batch = await http.post("/v1/tasks:batch", json={"tasks": [body, body]}, headers=submitter)
    error = assert_error(batch, 429, "queue_full", "transient")
    assert error["retryable"] is True and batch.headers["retry-after"] == "1"
    listed = (await http.get("/v1/tasks", headers=submitter)).json()["items"]
    assert len(listed) == 1  # the refused batch wrote nothing
    assert (await http.post("/v1/tasks", json=body, headers=submitter)).status_code == 201
    full = await http.post("/v1/tasks", json=body, headers=submitter)
    assert_error(full, 429, "queue_full", "transient")

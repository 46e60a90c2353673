"""The HTTP edge: keys and roles before bodies, bounded and strict JSON bodies."""

from __future__ import annotations

import base64

import httpx2
import pytest

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.conftest import SCOPE, bearer, make_key

JSON = {"content-type": "application/json"}
EVERY_ROLE = (Role.SUBMITTER, Role.OPERATOR, Role.ADMIN)


def nested(depth: int) -> bytes:
    """A task whose body nests ``depth`` levels in all (the body's own object included)."""
    inner = depth - 1
    return b'{"queue": "q", "type": "t", "params": ' + b"[" * inner + b"]" * inner + b"}"


JSON_ROUTES = [
    ("POST", "/v1/tasks"),
    ("POST", "/v1/tasks:batch"),
    ("POST", "/v1/tasks/tsk_x/cancel"),
    ("POST", "/v1/tasks/tsk_x/resolve"),
    ("PUT", "/v1/queues/q"),
    ("POST", "/v1/keys"),
]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_a_deeply_nested_body_without_a_key_is_401(
    http: httpx2.AsyncClient, method: str, path: str
) -> None:
    response = await http.request(method, path, content=nested(5000), headers=JSON)
    assert_error(response, 401, "unauthenticated", "permission")


@pytest.mark.parametrize("depth", [65, 1000, 5000])
@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
async def test_a_deeply_nested_body_is_400_not_500(
    http: httpx2.AsyncClient, node: Node, method: str, path: str, depth: int
) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    response = await http.request(
        method, path, content=nested(depth), headers={**bearer(key), **JSON}
    )
    error = assert_error(response, 400, "invalid_request", "protocol")
    assert "deeper than 64" in str(error["message"])


async def test_nesting_up_to_the_bound_is_accepted(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    response = await http.post("/v1/tasks", content=nested(64), headers={**bearer(key), **JSON})
    assert response.status_code == 201, response.text
    # Brackets inside strings are text, not nesting.
    text = b'{"queue": "q", "type": "t", "params": "' + b"[{" * 500 + b'\\"]"}'
    response = await http.post("/v1/tasks", content=text, headers={**bearer(key), **JSON})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/tasks", b'{"queue": 1}'),
        ("POST", "/v1/tasks:batch", b'{"tasks": "no"}'),
        ("POST", "/v1/tasks/tsk_x/cancel", b'{"reason": 1}'),
        ("POST", "/v1/tasks/tsk_x/resolve", b'{"outcome": "maybe"}'),
        ("PUT", "/v1/queues/q", b'{"paused": "yes"}'),
        ("POST", "/v1/keys", b'{"roles": 1}'),
        ("POST", "/v1/keys", b'{"roles": ['),
    ],
)
async def test_roles_are_checked_before_the_body(
    http: httpx2.AsyncClient, node: Node, method: str, path: str, body: bytes
) -> None:
    key = await make_key(node, SCOPE, Role.WORKER)
    response = await http.request(method, path, content=body, headers={**bearer(key), **JSON})
    assert_error(response, 403, "forbidden", "permission")


# Workflow and schedule writes with a body the server refuses, and the roles that may call them.
WORKFLOW_AND_SCHEDULE_WRITES = [
    ("POST", "/v1/workflow-definitions", b'["not", "an", "object"]', Role.OPERATOR),
    ("POST", "/v1/workflows", b'{"definition": 1}', Role.SUBMITTER),
    ("POST", "/v1/workflows/wf_x/signals", b'{"name": ""}', Role.SUBMITTER),
    ("POST", "/v1/workflows/wf_x/pause", b'{"reason": 1}', Role.OPERATOR),
    ("POST", "/v1/workflows/wf_x/resume", b'{"reason": 1}', Role.ADMIN),
    ("POST", "/v1/workflows/wf_x/cancel", b'{"reason": 1}', Role.SUBMITTER),
    ("POST", "/v1/workflows/wf_x/steps/s/retry", b'{"unknown": 1}', Role.OPERATOR),
    ("POST", "/v1/workflows/wf_x/steps/s/skip", b'{"outputs": 1}', Role.OPERATOR),
    ("POST", "/v1/workflows/wf_x/steps/s/resolve", b'{"outcome": "maybe"}', Role.ADMIN),
    ("POST", "/v1/schedules", b'{"name": 1}', Role.OPERATOR),
    ("PATCH", "/v1/schedules/s", b'{"cron": 1}', Role.OPERATOR),
    ("POST", "/v1/schedules/s/pause", b'{"reason": 1}', Role.OPERATOR),
    ("POST", "/v1/schedules/s/backfill", b'{"from": "yesterday"}', Role.OPERATOR),
    ("POST", "/v1/schedules/s/backfill", b'{"from": ', Role.OPERATOR),
]


@pytest.mark.parametrize(("method", "path", "body", "allowed"), WORKFLOW_AND_SCHEDULE_WRITES)
async def test_workflow_and_schedule_roles_are_checked_before_the_body(
    http: httpx2.AsyncClient, node: Node, method: str, path: str, body: bytes, allowed: Role
) -> None:
    worker = await make_key(node, SCOPE, Role.WORKER)
    response = await http.request(method, path, content=body, headers={**bearer(worker), **JSON})
    assert_error(response, 403, "forbidden", "permission")
    # The same body from a key with the role is refused for what it is.
    key = await make_key(node, SCOPE, allowed)
    response = await http.request(method, path, content=body, headers={**bearer(key), **JSON})
    assert_error(response, 400, "invalid_request", "protocol")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/tasks", b'{"queue": "a", "queue": "b", "type": "t"}'),
        ("/v1/tasks", b'{"queue": "a", "type": "t", "params": {"x": 1, "y": {"k": 1, "k": 2}}}'),
        ("/v1/tasks", b'{"queue": "a", "type": "t", "params": [{"k": ":"}, {"k": 1, "k": 1}]}'),
        ("/v1/tasks", b'{"queue": "a", "type": "t", "labels": {"a\\u003ab": "x", "a:b": "y"}}'),
        ("/v1/tasks", b'{"queue": "a", "type": "t", "params": {"\\u003a": 1, "\\u003a": 2}}'),
        ("/v1/tasks:batch", b'{"tasks": [{"queue": "a", "type": "t", "type": "u"}]}'),
        ("/v1/tasks", b'{"queue": "a", "type": "t", "params": {"k": 1, "\\u006b": 2}}'),
    ],
)
async def test_duplicate_keys_are_refused(
    http: httpx2.AsyncClient, node: Node, path: str, body: bytes
) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    response = await http.post(path, content=body, headers={**bearer(key), **JSON})
    error = assert_error(response, 400, "invalid_request", "protocol")
    assert "repeats a key" in str(error["message"])
    listed = await http.get("/v1/tasks", headers=bearer(key))
    assert listed.json()["items"] == []


@pytest.mark.parametrize(
    "params",
    [
        b'{"a:b": "c:d", "e": ["f:", ":g"], "h": {"i": "\\":"}}',
        b'{"\\u003a": "x\\u003A", "b": {"\\u003a": 1}}',
        b'{"k": 1, "K": 2, "k ": 3}',
    ],
)
async def test_colons_and_escapes_are_not_duplicates(
    http: httpx2.AsyncClient, node: Node, params: bytes
) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    body = b'{"queue": "q", "type": "t", "params": ' + params + b"}"
    response = await http.post("/v1/tasks", content=body, headers={**bearer(key), **JSON})
    assert response.status_code == 201, response.text


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "stored"),
    [
        (f"00-{TRACE}-{PARENT}-01", f"00-{TRACE}-{PARENT}-01"),
        (f"00-{TRACE}-{PARENT}-00", f"00-{TRACE}-{PARENT}-00"),
        # A later version may carry more fields; Orbit forwards what it knows as version 00.
        (f"01-{TRACE}-{PARENT}-01-future", f"00-{TRACE}-{PARENT}-01"),
        (f"cc-{TRACE}-{PARENT}-09", f"00-{TRACE}-{PARENT}-09"),
        ("00-<script>alert(1)</script>-00f067aa0ba902b7-01", None),
        (f"00-{TRACE.upper()}-{PARENT}-01", None),
        (f"ff-{TRACE}-{PARENT}-01", None),
        (f"00-{'0' * 32}-{PARENT}-01", None),
        (f"00-{TRACE}-{'0' * 16}-01", None),
        (f"00-{TRACE}-{PARENT}-01-extra", None),
        (f"01-{TRACE}-{PARENT}-01x", None),
        (f"00-{TRACE}-{PARENT}-1", None),
        (f"00_{TRACE}_{PARENT}_01", None),
        ("0" * 55, None),
    ],
)
async def test_only_w3c_traceparents_are_kept(
    http: httpx2.AsyncClient, node: Node, header: str, stored: str | None
) -> None:
    key = await make_key(node, SCOPE, Role.SUBMITTER)
    headers = {**bearer(key), "traceparent": header}
    single = await http.post("/v1/tasks", json={"queue": "q", "type": "t"}, headers=headers)
    batch = await http.post(
        "/v1/tasks:batch", json={"tasks": [{"queue": "q", "type": "t"}]}, headers=headers
    )
    assert single.status_code == batch.status_code == 201, (single.text, batch.text)
    for task_id in (single.json()["id"], batch.json()["tasks"][0]["id"]):
        assert (await node.tasks.get(SCOPE, task_id)).traceparent == stored


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("PUT", "/v1/queues/q", {"paused": 0}, "paused"),
        ("PUT", "/v1/queues/q", {"concurrency_limit": "3"}, "concurrency_limit"),
        ("PUT", "/v1/queues/q", {"max_pending": 10.0}, "max_pending"),
        ("POST", "/v1/tasks", {"queue": "q", "type": "t", "priority": "1"}, "priority"),
        ("POST", "/v1/tasks", {"queue": "q", "type": "t", "delay_ms": True}, "delay_ms"),
        ("POST", "/v1/tasks", {"queue": "q", "type": "t", "run_at": 0}, "run_at"),
        ("POST", "/v1/tasks", {"queue": "q", "type": "t", "labels": {"a": 1}}, "labels"),
        ("POST", "/v1/tasks:batch", {"tasks": [{"queue": 5, "type": "t"}]}, "queue"),
        ("POST", "/v1/keys", {"roles": ["worker"], "name": 7}, "name"),
    ],
)
async def test_wrong_types_are_refused_not_coerced(
    http: httpx2.AsyncClient, node: Node, method: str, path: str, body: object, field: str
) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    response = await http.request(method, path, json=body, headers=bearer(key))
    error = assert_error(response, 400, "invalid_request", "protocol")
    assert field in str(error["message"])


def _hand_made_cursor(position: str) -> str:
    return base64.urlsafe_b64encode(f"c1:{position}".encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("path", "position"),
    [
        ("/v1/tasks", "anything"),
        ("/v1/tasks", "' OR 1=1 --"),
        ("/v1/keys", "anything"),
        ("/v1/audit", "zzzzzzzzzzzzzzzzzzzzzzzzzz-"),
        ("/v1/queues", "two words"),
    ],
)
async def test_a_hand_made_cursor_is_400(
    http: httpx2.AsyncClient, node: Node, path: str, position: str
) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    cursor = _hand_made_cursor(position)
    response = await http.get(path, params={"cursor": cursor}, headers=bearer(key))
    assert_error(response, 400, "invalid_request", "protocol")


async def test_cursors_orbit_gives_out_still_work(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, *EVERY_ROLE)
    for _ in range(3):
        await http.post("/v1/tasks", json={"queue": "q", "type": "t"}, headers=bearer(key))
    for path in ("/v1/tasks", "/v1/keys", "/v1/audit"):
        first = (await http.get(path, params={"limit": 1}, headers=bearer(key))).json()
        assert first["next_cursor"], path
        second = await http.get(
            path, params={"limit": 1, "cursor": first["next_cursor"]}, headers=bearer(key)
        )
        assert second.status_code == 200, (path, second.text)

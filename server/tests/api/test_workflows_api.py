"""Workflows over HTTP on every dialect (API.md "Workflows (Weave)"): the contract's shapes,
status codes, error codes and roles. Tasks run through Pulse's worker service and the runner's
passes (tests/service/weave_support.py), never through a clock or a sleep."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx2
import pytest

from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.pulse.worker import Want
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.conftest import OTHER_TENANT, SCOPE, bearer, make_key
from tests.service.weave_support import WORKER, body, settle, task, work

Auth = dict[str, str]

WORKFLOW_FIELDS = {
    "id", "definition", "version", "state", "input", "output", "error", "control_version",
    "created_at", "updated_at", "finished_at", "steps", "waits", "pending_signals",
}  # fmt: skip
STEP_FIELDS = {
    "step", "key", "type", "state", "task_id", "round", "item", "branch", "parent", "output",
    "error", "started_at", "ended_at",
}  # fmt: skip
START = "2030-01-01T00:00:00.000Z"  # the fake clock's start

APPROVE = body(
    "approve",
    [
        task("prepare", next="wait"),
        {
            "id": "wait", "kind": "signal", "name": "approved", "timeout_ms": 3_600_000,
            "on_timeout": "expired", "output": "signal.by", "next": "done",
        },
        {"id": "done", "kind": "succeed", "output": "steps.wait.output"},
        {"id": "expired", "kind": "fail", "error": {"code": "expired", "message": "late"}},
    ],
)  # fmt: skip
# Counts up through a choice: the second visit of "count" has the key "count:2".
LOOP = body(
    "loop",
    [
        task("count", output="result.n", next="again"),
        {
            "id": "again", "kind": "choice", "default": "done",
            "choices": [{"when": "steps.count.output < 2", "next": "count"}],
        },
        {"id": "done", "kind": "succeed", "output": "steps.count.output"},
    ],
)  # fmt: skip


@pytest.fixture
async def operator(node: Node) -> Auth:
    return bearer(await make_key(node, SCOPE, Role.OPERATOR))


@pytest.fixture
async def submitter(node: Node) -> Auth:
    return bearer(await make_key(node, SCOPE, Role.SUBMITTER))


async def publish(http: httpx2.AsyncClient, auth: Auth, definition: dict[str, Any]) -> Any:
    answer = await http.post("/v1/workflow-definitions", json=definition, headers=auth)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


async def start(http: httpx2.AsyncClient, auth: Auth, name: str, input_: Any = None) -> Any:
    answer = await http.post(
        "/v1/workflows", json={"definition": name, "input": input_}, headers=auth
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


async def read(http: httpx2.AsyncClient, auth: Auth, workflow_id: str) -> Any:
    answer = await http.get(f"/v1/workflows/{workflow_id}", headers=auth)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def executions(http: httpx2.AsyncClient, auth: Auth, workflow_id: str) -> dict[str, Any]:
    """Every step execution of an instance (one page of up to 500), by key."""
    answer = await http.get(f"/v1/workflows/{workflow_id}/steps?limit=500", headers=auth)
    return {s["key"]: s for s in answer.json()["items"]}


async def audit(http: httpx2.AsyncClient, node: Node, kind: str, target: str) -> list[Any]:
    answer = await http.get(
        "/v1/audit", params={"target_kind": kind, "target_id": target},
        headers=bearer(await make_key(node, SCOPE, Role.ADMIN)),
    )  # fmt: skip
    items: list[Any] = answer.json()["items"]
    return items[::-1]  # oldest first


# -- definitions ------------------------------------------------------------------------------


async def test_a_definition_may_be_published_wrapped_as_it_reads_back(
    http: httpx2.AsyncClient, operator: Auth
) -> None:
    inner = {"steps": [task("charge")], "description": "wrapped"}
    wrapped = {"name": "wrapped", "version": "1", "definition": inner}
    created = await http.post("/v1/workflow-definitions", json=wrapped, headers=operator)
    assert created.status_code == 201, created.text
    record = created.json()
    assert record["definition"]["name"] == "wrapped" and record["definition"]["steps"]
    # Publishing what was read back, or the body itself, is the same content again.
    again = await http.post(
        "/v1/workflow-definitions",
        json={"name": "wrapped", "version": "1", "definition": record["definition"]},
        headers=operator,
    )
    assert again.status_code == 200 and again.json()["digest"] == record["digest"]
    flat = await http.post("/v1/workflow-definitions", json=record["definition"], headers=operator)
    assert flat.status_code == 200
    clash = {"name": "wrapped", "version": "2", "definition": record["definition"]}
    refused = await http.post("/v1/workflow-definitions", json=clash, headers=operator)
    assert_error(refused, 422, "definition_invalid", "protocol")
    assert "version differs" in refused.json()["error"]["details"]["reasons"][0]
    extra = await http.post(
        "/v1/workflow-definitions", json={**wrapped, "labels": {}}, headers=operator
    )
    assert_error(extra, 422, "definition_invalid", "protocol")


async def test_publish_answers_201_then_200_for_the_same_content_and_409_for_other(
    http: httpx2.AsyncClient, node: Node, operator: Auth, clock: FakeClock
) -> None:
    first = body("order", [task("charge")], description="one step")
    created = await http.post("/v1/workflow-definitions", json=first, headers=operator)
    assert created.status_code == 201, created.text
    record = created.json()
    assert set(record) == {"name", "version", "digest", "created_at", "definition"}
    assert (record["name"], record["version"], record["created_at"]) == ("order", "1", START)
    assert len(record["digest"]) == 64 and int(record["digest"], 16) >= 0
    assert record["definition"]["steps"] == [
        {"id": "charge", "kind": "task", "queue": "wf", "type": "work"}
    ]
    assert record["definition"]["description"] == "one step"

    clock.advance(timedelta(minutes=1))
    # The defaults written out are the same content: a no-op answering the stored version.
    again = await http.post(
        "/v1/workflow-definitions", json={**first, "format": 1}, headers=operator
    )
    assert again.status_code == 200, again.text
    assert again.json() == record  # created_at too: nothing was written

    changed = {**first, "steps": [task("charge", "other")]}
    conflict = await http.post("/v1/workflow-definitions", json=changed, headers=operator)
    assert_error(conflict, 409, "version_exists", "conflict")
    assert "publish a new version" in conflict.json()["error"]["message"]
    admin = bearer(await make_key(node, SCOPE, Role.ADMIN))
    newer = await http.post(
        "/v1/workflow-definitions", json={**changed, "version": "2"}, headers=admin
    )
    assert newer.status_code == 201 and newer.json()["digest"] != record["digest"]

    trail = await audit(http, node, "workflow_definition", "order@1")
    assert [(e["action"], e["details"]) for e in trail] == [
        ("workflow_definition.publish", {"digest": record["digest"]})
    ]  # the no-op and the refused publish wrote nothing


async def test_an_invalid_definition_is_422_with_every_reason(
    http: httpx2.AsyncClient, operator: Auth
) -> None:
    bad = body(
        "bad",
        [
            task("a", next="nowhere", params="input."),
            task("a"),
            {"id": "t", "kind": "timer"},
        ],
    )
    answer = await http.post("/v1/workflow-definitions", json=bad, headers=operator)
    error = assert_error(answer, 422, "definition_invalid", "protocol")
    reasons = error["details"]["reasons"]  # type: ignore[index]
    assert isinstance(reasons, list) and len(reasons) >= 4
    joined = " | ".join(reasons)
    assert "step id 'a' is used twice" in joined
    assert "next 'nowhere' is not a step of the workflow" in joined
    assert "give exactly one of duration_ms and until" in joined
    assert "'t' cannot be reached" in joined

    for wrong in (
        {"name": "x", "version": "1", "steps": []},  # no steps
        body("x", [task("a", qeue="q")]),  # an unknown field is a mistake, not ignored
        body("x", [task("a")], format=2),
        {"version": "1", "steps": [task("a")]},  # no name
        body("has space", [task("a")]),
    ):
        refused = await http.post("/v1/workflow-definitions", json=wrong, headers=operator)
        error = assert_error(refused, 422, "definition_invalid", "protocol")
        assert error["details"]["reasons"], wrong  # type: ignore[index]
    not_an_object = await http.post("/v1/workflow-definitions", json=[1], headers=operator)
    assert_error(not_an_object, 400, "invalid_request", "protocol")
    listed = await http.get("/v1/workflow-definitions", headers=operator)
    assert listed.json() == {"items": [], "next_cursor": None}


async def test_definitions_list_by_name_and_version_and_read_one(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    for name, version in (("order", "1"), ("order", "2"), ("other", "1")):
        await publish(http, operator, {**body(name, [task("a")]), "version": version})
    page = (await http.get("/v1/workflow-definitions?limit=2", headers=submitter)).json()
    assert [(d["name"], d["version"]) for d in page["items"]] == [("order", "1"), ("order", "2")]
    assert set(page["items"][0]) == {"name", "version", "digest", "created_at"}  # no JSON
    assert page["next_cursor"]
    rest = await http.get(
        "/v1/workflow-definitions", params={"cursor": page["next_cursor"]}, headers=submitter
    )
    assert [(d["name"], d["version"]) for d in rest.json()["items"]] == [("other", "1")]
    assert rest.json()["next_cursor"] is None

    named = await http.get(
        "/v1/workflow-definitions", params={"name": "order", "limit": 1}, headers=submitter
    )
    assert [d["version"] for d in named.json()["items"]] == ["1"]
    second = await http.get(
        "/v1/workflow-definitions",
        params={"name": "order", "limit": 1, "cursor": named.json()["next_cursor"]},
        headers=submitter,
    )
    assert [d["version"] for d in second.json()["items"]] == ["2"]
    none = await http.get("/v1/workflow-definitions?name=missing", headers=submitter)
    assert none.json() == {"items": [], "next_cursor": None}
    garbage = await http.get("/v1/workflow-definitions?cursor=nonsense", headers=submitter)
    assert_error(garbage, 400, "invalid_request", "protocol")
    too_many = await http.get("/v1/workflow-definitions?limit=501", headers=submitter)
    assert_error(too_many, 400, "invalid_request", "protocol")

    one = await http.get("/v1/workflow-definitions/order/versions/2", headers=submitter)
    assert one.status_code == 200
    assert (one.json()["name"], one.json()["version"]) == ("order", "2")
    assert one.json()["definition"]["steps"][0]["id"] == "a"
    assert one.json()["digest"] == page["items"][1]["digest"]
    for path in ("order/versions/9", "missing/versions/1"):
        missing = await http.get(f"/v1/workflow-definitions/{path}", headers=submitter)
        assert_error(missing, 404, "not_found", "protocol")
    elsewhere = bearer(await make_key(node, OTHER_TENANT, Role.OPERATOR))
    hidden = await http.get("/v1/workflow-definitions/order/versions/1", headers=elsewhere)
    assert_error(hidden, 404, "not_found", "protocol")
    assert (await http.get("/v1/workflow-definitions", headers=elsewhere)).json()["items"] == []


# -- instances --------------------------------------------------------------------------------


async def test_start_answers_the_instance_and_replays_its_idempotency_key(
    http: httpx2.AsyncClient, operator: Auth, submitter: Auth, clock: FakeClock
) -> None:
    await publish(http, operator, body("two", [task("a", next="b"), task("b")]))
    clock.advance(timedelta(seconds=1))  # "latest" is the version published last
    await publish(
        http, operator, {**body("two", [task("a2", next="b"), task("b")]), "version": "2"}
    )
    request = {"definition": "two", "input": {"n": 1}, "idempotency_key": "order-1"}
    created = await http.post("/v1/workflows", json=request, headers=submitter)
    assert created.status_code == 201, created.text
    wf = created.json()
    assert set(wf) == WORKFLOW_FIELDS
    assert wf["id"].startswith("wf_")
    assert (wf["definition"], wf["version"], wf["state"], wf["input"]) == (
        "two", "2", "running", {"n": 1},
    )  # fmt: skip
    assert (wf["output"], wf["error"], wf["control_version"], wf["finished_at"]) == (
        None, None, 0, None,
    )  # fmt: skip
    assert wf["created_at"] == wf["updated_at"] == "2030-01-01T00:00:01.000Z"
    assert (wf["waits"], wf["pending_signals"]) == ([], [])
    [step] = wf["steps"]
    assert set(step) == STEP_FIELDS
    assert (step["step"], step["key"], step["type"], step["state"]) == (
        "a2",
        "a2",
        "task",
        "running",
    )
    assert (step["round"], step["item"], step["branch"], step["parent"]) == (None,) * 4
    assert step["task_id"] and step["started_at"] == wf["created_at"] and step["ended_at"] is None
    the_task = (await http.get(f"/v1/tasks/{step['task_id']}", headers=submitter)).json()
    assert the_task["owner"] == {"kind": "workflow", "id": wf["id"], "step": "a2"}
    assert the_task["params"] == {"n": 1}  # params default to the input

    replay = await http.post("/v1/workflows", json=request, headers=submitter)
    assert (replay.status_code, replay.json()["id"]) == (200, wf["id"])
    pinned = await http.post("/v1/workflows", json={**request, "version": "2"}, headers=submitter)
    assert_error(pinned, 409, "idempotency_conflict", "conflict")  # asked for another version
    other = await http.post("/v1/workflows", json={**request, "input": {"n": 2}}, headers=operator)
    assert_error(other, 409, "idempotency_conflict", "conflict")
    older = await http.post("/v1/workflows", json={**request, "version": "1"}, headers=submitter)
    assert_error(older, 409, "idempotency_conflict", "conflict")

    v1 = await http.post("/v1/workflows", json={"definition": "two", "version": "1"},
                         headers=submitter)  # fmt: skip
    assert v1.status_code == 201 and v1.json()["version"] == "1"
    assert v1.json()["input"] is None and v1.json()["steps"][0]["step"] == "a"
    for wrong in ({"definition": "missing"}, {"definition": "two", "version": "9"}):
        missing = await http.post("/v1/workflows", json=wrong, headers=submitter)
        assert_error(missing, 404, "not_found", "protocol")
    for malformed in ({}, {"definition": ""}, {"definition": "two", "idempotency_key": " x"},
                      {"definition": "two", "extra": 1}):  # fmt: skip
        refused = await http.post("/v1/workflows", json=malformed, headers=submitter)
        assert_error(refused, 400, "invalid_request", "protocol")


async def test_a_start_without_version_replays_after_a_newer_version_is_published(
    http: httpx2.AsyncClient, operator: Auth, submitter: Auth, clock: FakeClock
) -> None:
    await publish(http, operator, body("d", [task("a")]))
    request = {"definition": "d", "input": {"n": 1}, "idempotency_key": "k"}
    first = await http.post("/v1/workflows", json=request, headers=submitter)
    assert first.status_code == 201
    clock.advance(timedelta(seconds=1))
    await publish(http, operator, {**body("d", [task("b")]), "version": "2"})
    replay = await http.post("/v1/workflows", json=request, headers=submitter)
    assert (replay.status_code, replay.json()["id"]) == (200, first.json()["id"])


async def test_get_is_scoped_and_wait_ms_answers_once_the_instance_finishes(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("one", [task("a")]))
    wf = await start(http, submitter, "one", {"x": 1})
    assert (await read(http, submitter, wf["id"])) == wf
    elsewhere = bearer(await make_key(node, OTHER_TENANT, Role.OPERATOR))
    for path in (f"/v1/workflows/{wf['id']}", f"/v1/workflows/{wf['id']}/steps"):
        assert_error(await http.get(path, headers=elsewhere), 404, "not_found", "protocol")
    for action in ("pause", "cancel"):
        hidden = await http.post(f"/v1/workflows/{wf['id']}/{action}", headers=elsewhere)
        assert_error(hidden, 404, "not_found", "protocol")
    assert (await read(http, submitter, wf["id"]))["state"] == "running"  # untouched
    missing = await http.get("/v1/workflows/wf_nothing", headers=submitter)
    assert_error(missing, 404, "not_found", "protocol")

    quick = await http.get(f"/v1/workflows/{wf['id']}", params={"wait_ms": 1}, headers=submitter)
    assert quick.json()["state"] == "running"  # answered as it is at the deadline

    async def finish_once_waited_for() -> None:
        while wf["id"] not in node.workflows._finished:
            await asyncio.sleep(0)
        assert await work(node) == [{"x": 1}]
        await settle(node)

    async with asyncio.timeout(10):
        waited, _ = await asyncio.gather(
            http.get(f"/v1/workflows/{wf['id']}", params={"wait_ms": 30_000}, headers=submitter),
            finish_once_waited_for(),
        )
    done = waited.json()
    assert (done["state"], done["output"]) == ("succeeded", {"x": 1})
    assert done["finished_at"] == START and done["steps"][0]["state"] == "succeeded"
    again = await http.get(f"/v1/workflows/{wf['id']}?wait_ms=60000", headers=submitter)
    assert again.json() == done  # finished: answered at once
    for bad in ("60001", "-1", "soon"):
        over = await http.get(f"/v1/workflows/{wf['id']}?wait_ms={bad}", headers=submitter)
        assert_error(over, 400, "invalid_request", "protocol")


async def test_list_filters_by_definition_and_state_and_pages_newest_first(
    http: httpx2.AsyncClient, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("slow", [task("a")]))
    await publish(http, operator, body("quick", [{"id": "x", "kind": "succeed"}]))
    first = await start(http, submitter, "slow")
    done = await start(http, submitter, "quick")
    last = await start(http, submitter, "slow")
    assert done["state"] == "succeeded"
    listed = (await http.get("/v1/workflows", headers=submitter)).json()
    assert [w["id"] for w in listed["items"]] == [last["id"], done["id"], first["id"]]
    assert listed["next_cursor"] is None
    item = listed["items"][1]
    assert set(item) == WORKFLOW_FIELDS - {"steps", "waits", "pending_signals"}
    assert (item["definition"], item["state"]) == ("quick", "succeeded")

    page = (await http.get("/v1/workflows?limit=2", headers=submitter)).json()
    assert [w["id"] for w in page["items"]] == [last["id"], done["id"]] and page["next_cursor"]
    rest = await http.get(
        "/v1/workflows", params={"limit": 2, "cursor": page["next_cursor"]}, headers=submitter
    )
    assert [w["id"] for w in rest.json()["items"]] == [first["id"]]
    by_def = (await http.get("/v1/workflows?definition=slow", headers=submitter)).json()
    assert [w["id"] for w in by_def["items"]] == [last["id"], first["id"]]
    by_state = (await http.get("/v1/workflows?state=succeeded", headers=submitter)).json()
    assert [w["id"] for w in by_state["items"]] == [done["id"]]
    both = await http.get("/v1/workflows?definition=slow&state=running", headers=submitter)
    assert [w["id"] for w in both.json()["items"]] == [last["id"], first["id"]]
    neither = await http.get("/v1/workflows?definition=quick&state=running", headers=submitter)
    assert neither.json()["items"] == []
    for bad in ("state=finished", "limit=0", "cursor=nonsense"):
        refused = await http.get(f"/v1/workflows?{bad}", headers=submitter)
        assert_error(refused, 400, "invalid_request", "protocol")
    state_error = await http.get("/v1/workflows?state=finished", headers=submitter)
    assert "needs_review" in state_error.json()["error"]["message"]  # it lists the states


async def test_list_by_definition_and_state_finds_instances_past_a_full_raw_page(
    http: httpx2.AsyncClient, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("maybe", [
        {"id": "go", "kind": "choice", "default": "wait",
         "choices": [{"when": "input.quick", "next": "end"}]},
        task("wait"),
        {"id": "end", "kind": "succeed"},
    ]))  # fmt: skip
    running = await start(http, submitter, "maybe", {"quick": False})
    for _ in range(2):
        assert (await start(http, submitter, "maybe", {"quick": True}))["state"] == "succeeded"
    found: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"definition": "maybe", "state": "running", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await http.get("/v1/workflows", params=params, headers=submitter)).json()
        found += [w["id"] for w in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [running["id"]]


async def test_steps_list_every_execution_in_pages(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    mapping = {
        "id": "each", "kind": "map", "items": "input.items", "max_concurrency": 5,
        "task": {"queue": "wf", "type": "work", "params": "{'n': item}"},
    }  # fmt: skip
    await publish(http, operator, body("m", [mapping]))
    wf = await start(http, submitter, "m", {"items": [10, 20, 30]})
    assert [s["key"] for s in wf["steps"]] == ["each"]  # the instance shows no map items
    page = (await http.get(f"/v1/workflows/{wf['id']}/steps?limit=2", headers=submitter)).json()
    assert [s["key"] for s in page["items"]] == ["each", "each:i0"] and page["next_cursor"]
    item = page["items"][1]
    assert (item["step"], item["type"], item["item"], item["parent"]) == ("each", "task", 0, "each")
    rest = await http.get(
        f"/v1/workflows/{wf['id']}/steps",
        params={"limit": 2, "cursor": page["next_cursor"]},
        headers=submitter,
    )
    assert [s["key"] for s in rest.json()["items"]] == ["each:i1", "each:i2"]
    await work(node, lambda p: p["n"] + 1)
    await settle(node)
    every = (await http.get(f"/v1/workflows/{wf['id']}/steps", headers=submitter)).json()
    assert [(s["key"], s["state"], s["output"]) for s in every["items"]] == [
        ("each", "succeeded", [11, 21, 31]),
        ("each:i0", "succeeded", 11),
        ("each:i1", "succeeded", 21),
        ("each:i2", "succeeded", 31),
    ]
    assert every["next_cursor"] is None
    assert all(s["ended_at"] == START for s in every["items"])
    garbage = await http.get(f"/v1/workflows/{wf['id']}/steps?cursor=nonsense", headers=submitter)
    assert_error(garbage, 400, "invalid_request", "protocol")
    missing = await http.get("/v1/workflows/wf_nothing/steps", headers=submitter)
    assert_error(missing, 404, "not_found", "protocol")


# -- signals ----------------------------------------------------------------------------------


async def test_signals_are_202_pending_until_a_step_waits_then_delivered(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, APPROVE)
    early = await start(http, submitter, "approve")
    path = f"/v1/workflows/{early['id']}/signals"
    sent = await http.post(
        path, json={"name": "approved", "payload": {"by": "ann"}, "idempotency_key": "k1"},
        headers=submitter,
    )  # fmt: skip
    assert sent.status_code == 202, sent.text
    signal = sent.json()
    assert set(signal) == {"id", "name", "state", "step", "created_at"}
    assert (signal["name"], signal["state"], signal["step"]) == ("approved", "pending", None)
    assert signal["id"].startswith("sig_") and signal["created_at"] == START
    again = await http.post(
        path, json={"name": "approved", "payload": {"by": "ann"}, "idempotency_key": "k1"},
        headers=operator,
    )  # fmt: skip
    assert (again.status_code, again.json()) == (202, signal)
    other = await http.post(
        path, json={"name": "approved", "payload": {"by": "bob"}, "idempotency_key": "k1"},
        headers=submitter,
    )  # fmt: skip
    assert_error(other, 409, "idempotency_conflict", "conflict")
    seen = await read(http, submitter, early["id"])
    assert seen["pending_signals"] == [
        {"id": signal["id"], "name": "approved", "created_at": START}
    ]
    await work(node)
    await settle(node)
    done = await read(http, submitter, early["id"])
    assert (done["state"], done["output"], done["pending_signals"]) == ("succeeded", "ann", [])

    late = await start(http, submitter, "approve")
    await work(node)
    await settle(node)
    waiting = await read(http, submitter, late["id"])
    assert waiting["waits"] == [
        {"key": "wait", "step": "wait", "kind": "signal", "until": "2030-01-01T01:00:00.000Z",
         "signal": "approved"},
    ]  # fmt: skip
    delivered = await http.post(
        f"/v1/workflows/{late['id']}/signals", json={"name": "approved", "payload": {"by": "cy"}},
        headers=submitter,
    )  # fmt: skip
    assert delivered.status_code == 202
    assert (delivered.json()["state"], delivered.json()["step"]) == ("delivered", "wait")
    after = await read(http, submitter, late["id"])
    assert (after["state"], after["output"], after["waits"]) == ("succeeded", "cy", [])

    held = await start(http, submitter, "approve")
    await work(node)
    await settle(node)
    await http.post(f"/v1/workflows/{held['id']}/pause", headers=operator)
    taken = await http.post(
        f"/v1/workflows/{held['id']}/signals", json={"name": "approved", "payload": {"by": "di"}},
        headers=submitter,
    )  # fmt: skip
    assert (taken.status_code, taken.json()["state"]) == (202, "delivered")
    assert (await read(http, submitter, held["id"]))["state"] == "paused"  # recorded, not followed
    resumed = await http.post(f"/v1/workflows/{held['id']}/resume", headers=operator)
    assert (resumed.json()["state"], resumed.json()["output"]) == ("succeeded", "di")

    finished = await http.post(
        f"/v1/workflows/{late['id']}/signals", json={"name": "approved"}, headers=submitter
    )
    assert_error(finished, 409, "state_conflict", "conflict")
    missing = await http.post(
        "/v1/workflows/wf_nothing/signals", json={"name": "approved"}, headers=submitter
    )
    assert_error(missing, 404, "not_found", "protocol")
    for malformed in ({}, {"name": ""}, {"name": "x", "extra": 1}):
        refused = await http.post(path, json=malformed, headers=submitter)
        assert_error(refused, 400, "invalid_request", "protocol")


# -- pause, resume, cancel --------------------------------------------------------------------


async def test_pause_resume_and_cancel_with_and_without_a_body(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("one", [task("a")]))
    wf = await start(http, submitter, "one")
    base = f"/v1/workflows/{wf['id']}"
    paused = await http.post(f"{base}/pause", json={"reason": "maintenance"}, headers=operator)
    assert paused.status_code == 200, paused.text
    assert set(paused.json()) == WORKFLOW_FIELDS
    assert (paused.json()["state"], paused.json()["control_version"]) == ("paused", 1)
    assert await work(node) == []  # the gate holds the step's task back
    still = await http.post(f"{base}/pause", headers=operator)  # already paused: no change
    assert (still.status_code, still.json()["control_version"]) == (200, 1)
    resumed = await http.post(f"{base}/resume", headers=operator)
    assert resumed.status_code == 200
    assert (resumed.json()["state"], resumed.json()["control_version"]) == ("running", 2)
    conflict = await http.post(f"{base}/resume", json={}, headers=operator)
    assert_error(conflict, 409, "state_conflict", "conflict")
    too_long = await http.post(f"{base}/pause", json={"reason": "x" * 501}, headers=operator)
    assert_error(too_long, 400, "invalid_request", "protocol")
    unknown = await http.post(f"{base}/pause", json={"why": "x"}, headers=operator)
    assert_error(unknown, 400, "invalid_request", "protocol")

    cancelled = await http.post(f"{base}/cancel", headers=operator)
    assert cancelled.status_code == 200
    view = cancelled.json()
    assert (view["state"], view["finished_at"]) == ("cancelled", START)
    assert view["error"] == {"code": "cancelled", "message": "cancelled on request"}
    step_task = view["steps"][0]["task_id"]
    assert (await http.get(f"/v1/tasks/{step_task}", headers=operator)).json()["state"] == (
        "cancelled"
    )
    repeated = await http.post(f"{base}/cancel", json={"reason": "again"}, headers=operator)
    assert (repeated.status_code, repeated.json()["error"]) == (200, view["error"])
    for action in ("pause", "resume"):
        finished = await http.post(f"{base}/{action}", headers=operator)
        assert_error(finished, 409, "state_conflict", "conflict")

    other = await start(http, submitter, "one")
    with_reason = await http.post(
        f"/v1/workflows/{other['id']}/cancel", json={"reason": "not needed"}, headers=operator
    )
    assert with_reason.json()["error"] == {"code": "cancelled", "message": "not needed"}
    await publish(http, operator, body("quick", [{"id": "x", "kind": "succeed"}]))
    done = await start(http, submitter, "quick")
    refused = await http.post(f"/v1/workflows/{done['id']}/cancel", headers=operator)
    assert_error(refused, 409, "state_conflict", "conflict")
    missing = await http.post("/v1/workflows/wf_nothing/pause", headers=operator)
    assert_error(missing, 404, "not_found", "protocol")

    trail = await audit(http, node, "workflow", wf["id"])
    assert [(e["action"], e["details"]) for e in trail] == [
        ("workflow.pause", {"reason": "maintenance"}),
        ("workflow.resume", {"reason": None}),
        ("workflow.cancel", {"reason": None}),
    ]  # a pause of a paused instance and a cancel of a cancelled one change nothing


# -- an operator's step recovery --------------------------------------------------------------


async def test_retry_runs_the_failed_step_again_by_its_key(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("plain", [task("one", next="two"), task("two")]))
    wf = await start(http, submitter, "plain", {"x": 1})
    await work(node, fail=True)
    await settle(node)
    failed = await read(http, submitter, wf["id"])
    assert failed["state"] == "failed" and failed["finished_at"] == START
    assert (failed["error"]["code"], failed["error"]["step"]) == ("boom", "one")
    base = f"/v1/workflows/{wf['id']}/steps"
    never = await http.post(f"{base}/two/retry", headers=operator)
    assert_error(never, 404, "not_found", "protocol")
    retried = await http.post(f"{base}/one/retry", json={}, headers=operator)
    assert retried.status_code == 200, retried.text
    view = retried.json()
    assert (view["state"], view["error"], view["finished_at"], view["control_version"]) == (
        "running", None, None, 1,
    )  # fmt: skip
    again = await http.post(f"{base}/one/retry", headers=operator)
    assert_error(again, 409, "state_conflict", "conflict")
    extra = await http.post(f"{base}/one/retry", json={"output": 1}, headers=operator)
    assert_error(extra, 400, "invalid_request", "protocol")
    for _ in range(2):
        assert len(await work(node)) == 1
        await settle(node)
    assert (await read(http, submitter, wf["id"]))["state"] == "succeeded"

    await publish(http, operator, LOOP)
    loop = await start(http, submitter, "loop")
    await work(node, lambda _: {"n": 1})
    await settle(node)
    await work(node, fail=True)  # the second visit, "count:2", fails
    await settle(node)
    assert (await read(http, submitter, loop["id"]))["error"]["step"] == "count:2"
    # A key holding ':' goes in the path percent-encoded (as the SDK sends it) or as it is.
    retried = await http.post(f"/v1/workflows/{loop['id']}/steps/count%3A2/retry", headers=operator)
    assert (retried.status_code, retried.json()["state"]) == (200, "running")
    await work(node, lambda _: {"n": 2})
    await settle(node)
    done = await read(http, submitter, loop["id"])
    assert (done["state"], done["output"]) == ("succeeded", 2)
    assert [s["key"] for s in done["steps"]] == [
        "count", "again", "count:2", "again:2", "done",
    ]  # fmt: skip
    trail = await audit(http, node, "workflow", loop["id"])
    assert [(e["action"], e["details"]) for e in trail] == [
        ("workflow.step.retry", {"step": "count:2"})
    ]


async def test_skip_gives_a_step_its_output_and_goes_on(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(
        http, operator,
        body("s", [task("slow", next="next"), task("next", "next", params="steps.slow.output")]),
    )  # fmt: skip
    wf = await start(http, submitter, "s")
    slow_task = wf["steps"][0]["task_id"]
    skipped = await http.post(
        f"/v1/workflows/{wf['id']}/steps/slow/skip", json={"output": {"given": True}},
        headers=operator,
    )  # fmt: skip
    assert skipped.status_code == 200, skipped.text
    steps = {s["key"]: s for s in skipped.json()["steps"]}
    assert (steps["slow"]["state"], steps["slow"]["output"]) == ("skipped", {"given": True})
    assert steps["next"]["state"] == "running"
    assert (await http.get(f"/v1/tasks/{slow_task}", headers=operator)).json()["state"] == (
        "cancelled"
    )
    twice = await http.post(f"/v1/workflows/{wf['id']}/steps/slow/skip", headers=operator)
    assert_error(twice, 409, "state_conflict", "conflict")
    assert await work(node, type_="next") == [{"given": True}]
    bare = await start(http, submitter, "s")
    unsaid = await http.post(f"/v1/workflows/{bare['id']}/steps/slow/skip", headers=operator)
    assert unsaid.status_code == 200, unsaid.text  # no body: the output is null
    assert [s["output"] for s in unsaid.json()["steps"]] == [None, None]
    assert await work(node, type_="next") == [None]

    await publish(http, operator, LOOP)
    loop = await start(http, submitter, "loop")
    await work(node, lambda _: {"n": 1})
    await settle(node)
    # The choice after it sees the given output as steps.count.output.
    skipped = await http.post(
        f"/v1/workflows/{loop['id']}/steps/count:2/skip", json={"output": 7}, headers=operator
    )
    assert skipped.status_code == 200, skipped.text
    assert (skipped.json()["state"], skipped.json()["output"]) == ("succeeded", 7)
    assert await work(node) == []  # the skipped execution's task was cancelled
    trail = await audit(http, node, "workflow", loop["id"])
    assert [(e["action"], e["details"]) for e in trail] == [
        ("workflow.step.skip", {"step": "count:2"})
    ]

    mapping = {
        "id": "each", "kind": "map", "items": "input.items",
        "task": {"queue": "wf", "type": "work"},
    }  # fmt: skip
    await publish(http, operator, body("m", [mapping]))
    fan = await start(http, submitter, "m", {"items": [1]})
    item = await http.post(f"/v1/workflows/{fan['id']}/steps/each%3Ai0/skip", headers=operator)
    error = assert_error(item, 409, "state_conflict", "conflict")
    assert "map items" in str(error["message"])  # refused by rule, so the key was found
    unknown = await http.post(f"/v1/workflows/{fan['id']}/steps/each%3Ai9/skip", headers=operator)
    assert_error(unknown, 404, "not_found", "protocol")


async def _into_review(node: Node, clock: FakeClock) -> None:
    """Claim and start one unsafe task, then let its lease end: its outcome is unknown."""
    [lease] = await node.workers.claim(SCOPE, WORKER, [Want("wf", "work", 1)], limit=1)
    await node.workers.start(lease.ref)
    clock.advance(timedelta(minutes=10))
    assert await node.workers.expire_leases() == 1
    await settle(node)


async def test_resolve_decides_a_needs_review_step_addressed_by_its_encoded_key(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth, clock: FakeClock
) -> None:
    mapping = {
        "id": "each", "kind": "map", "items": "input.items", "max_concurrency": 1,
        "task": {"queue": "wf", "type": "work", "side_effect": "unsafe"},
        "on_failure": "refund",
    }  # fmt: skip
    await publish(http, operator, body("pay", [mapping, task("refund", "refund")]))
    wf = await start(http, submitter, "pay", {"items": ["a"]})
    await _into_review(node, clock)
    stuck = await read(http, submitter, wf["id"])
    assert stuck["state"] == "needs_review"
    base = f"/v1/workflows/{wf['id']}/steps/each%3Ai0/resolve"
    no_body = await http.post(base, headers=operator)
    assert_error(no_body, 400, "invalid_request", "protocol")
    no_error = await http.post(base, json={"outcome": "failed"}, headers=operator)
    assert_error(no_error, 400, "invalid_request", "protocol")
    both = await http.post(
        base, json={"outcome": "succeeded", "error": {"code": "x", "message": "y"}},
        headers=operator,
    )  # fmt: skip
    assert_error(both, 400, "invalid_request", "protocol")
    for malformed in ({}, {"outcome": "maybe"}, {"outcome": "failed", "error": {"message": "m"}}):
        refused = await http.post(base, json=malformed, headers=operator)
        assert_error(refused, 400, "invalid_request", "protocol")
    not_in_review = await http.post(
        f"/v1/workflows/{wf['id']}/steps/each/resolve", json={"outcome": "succeeded"},
        headers=operator,
    )  # fmt: skip
    assert_error(not_in_review, 409, "state_conflict", "conflict")

    resolved = await http.post(
        base, json={"outcome": "succeeded", "output": {"ok": 1}}, headers=operator
    )
    assert resolved.status_code == 200, resolved.text
    await settle(node)  # the resolved task's result event moves the instance on
    done = await read(http, submitter, wf["id"])
    assert (done["state"], done["output"]) == ("succeeded", [{"ok": 1}])
    twice = await http.post(base, json={"outcome": "succeeded"}, headers=operator)
    assert_error(twice, 409, "state_conflict", "conflict")

    other = await start(http, submitter, "pay", {"items": ["b"]})
    await _into_review(node, clock)
    failed = await http.post(
        f"/v1/workflows/{other['id']}/steps/each:i0/resolve",
        json={"outcome": "failed", "error": {"code": "declined", "message": "no"}},
        headers=operator,
    )  # fmt: skip
    assert failed.status_code == 200, failed.text
    await settle(node)
    rows = await executions(http, operator, other["id"])
    assert rows["each:i0"]["state"] == "failed"
    assert rows["each:i0"]["error"]["code"] == "declined"
    assert rows["each"]["state"] == "failed" and rows["refund"]["state"] == "running"
    trail = await audit(http, node, "workflow", other["id"])
    assert [(e["action"], e["details"]) for e in trail] == [
        ("workflow.step.resolve", {"step": "each:i0", "outcome": "failed"})
    ]

    # Retrying the step's task as a task (POST /v1/tasks/{id}/retry) moves the instance on too.
    third = await start(http, submitter, "pay", {"items": ["c"]})
    await _into_review(node, clock)
    item = (await executions(http, operator, third["id"]))["each:i0"]
    retried = await http.post(f"/v1/tasks/{item['task_id']}/retry", headers=operator)
    assert retried.json()["state"] == "pending"
    assert await work(node, lambda _: "again") == [{"items": ["c"]}]  # params: the input
    await settle(node)
    done = await read(http, submitter, third["id"])
    assert (done["state"], done["output"]) == ("succeeded", ["again"])


# -- roles ------------------------------------------------------------------------------------


async def test_roles_decide_who_publishes_controls_starts_and_reads(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("one", [task("a")]))
    wf = await start(http, submitter, "one")
    base = f"/v1/workflows/{wf['id']}"
    operator_only = [
        ("/v1/workflow-definitions", body("two", [task("a")])),
        (f"{base}/pause", {}),
        (f"{base}/resume", {}),
        (f"{base}/steps/a/retry", {}),
        (f"{base}/steps/a/skip", {}),
        (f"{base}/steps/a/resolve", {"outcome": "succeeded"}),
    ]
    for path, payload in operator_only:
        refused = await http.post(path, json=payload, headers=submitter)
        error = assert_error(refused, 403, "forbidden", "permission")
        assert "operator" in str(error["message"]), path

    admin = bearer(await make_key(node, SCOPE, Role.ADMIN))
    for path, payload in (
        ("/v1/workflows", {"definition": "one"}),
        (f"{base}/signals", {"name": "go"}),
    ):
        refused = await http.post(path, json=payload, headers=admin)
        error = assert_error(refused, 403, "forbidden", "permission")
        assert "submitter" in str(error["message"]), path
    assert (await http.get(base, headers=admin)).status_code == 200

    worker = bearer(await make_key(node, SCOPE, Role.WORKER))
    for path in (
        "/v1/workflows", base, f"{base}/steps", "/v1/workflow-definitions",
        "/v1/workflow-definitions/one/versions/1",
    ):  # fmt: skip
        assert_error(await http.get(path, headers=worker), 403, "forbidden", "permission")
    started = await http.post("/v1/workflows", json={"definition": "one"}, headers=worker)
    assert_error(started, 403, "forbidden", "permission")
    anonymous = await http.get("/v1/workflows")
    assert_error(anonymous, 401, "unauthenticated", "permission")
    assert (await read(http, submitter, wf["id"]))["state"] == "running"  # nothing happened


async def test_a_submitter_cancels_the_workflows_of_its_scope_as_it_cancels_tasks(
    http: httpx2.AsyncClient, node: Node, operator: Auth, submitter: Auth
) -> None:
    await publish(http, operator, body("one", [task("a")]))
    wf = await start(http, submitter, "one", {"x": 1})
    base = f"/v1/workflows/{wf['id']}"
    foreign = bearer(await make_key(node, OTHER_TENANT, Role.SUBMITTER))
    assert_error(await http.post(f"{base}/cancel", headers=foreign), 404, "not_found", "protocol")
    worker = bearer(await make_key(node, SCOPE, Role.WORKER))
    refused = await http.post(f"{base}/cancel", headers=worker)
    error = assert_error(refused, 403, "forbidden", "permission")
    assert "submitter" in str(error["message"])
    assert (await read(http, submitter, wf["id"]))["state"] == "running"

    cancelled = await http.post(f"{base}/cancel", json={"reason": "not needed"}, headers=submitter)
    assert cancelled.status_code == 200
    view = cancelled.json()
    assert (view["state"], view["error"]) == (
        "cancelled", {"code": "cancelled", "message": "not needed"}
    )  # fmt: skip
    assert await work(node) == []  # its step's task was cancelled with it

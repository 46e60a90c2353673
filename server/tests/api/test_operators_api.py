"""The operators' endpoints over HTTP: bulk operations (validation, dry run, progress, items,
cancel), one queue with its unserved work, and the workers list."""

from __future__ import annotations

import httpx2

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.api.test_workflows_api import audit, publish, read, start
from tests.conftest import SCOPE, bearer, make_key
from tests.service.weave_support import body, task


async def test_a_bulk_retry_over_http(http: httpx2.AsyncClient, node: Node) -> None:
    submitter = bearer(await make_key(node, SCOPE, Role.SUBMITTER))
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    batch = {"tasks": [{"queue": "mail", "type": "send", "labels": {"run": "7"}}] * 5}
    ids = [t["id"] for t in (await http.post("/v1/tasks:batch", json=batch,
                                             headers=submitter)).json()["tasks"]]  # fmt: skip
    for task_id in ids[:3]:
        await http.post(f"/v1/tasks/{task_id}/cancel", json={}, headers=operator)

    body = {"action": "retry", "filter": {"queue": "mail", "state": "cancelled",
                                          "label": "run:7"}}  # fmt: skip
    forbidden = await http.post("/v1/tasks:bulk", json=body, headers=submitter)
    assert_error(forbidden, 403, "forbidden", "permission")
    for bad, says in (
        ({**body, "filter": {}}, "at least one filter"),
        ({**body, "action": "explode"}, "action"),
        ({"action": "set_priority", "filter": {"queue": "mail"}}, "params.priority"),
        ({"action": "resolve", "filter": {"queue": "mail"}, "params": {"outcome": "failed"}},
         "params.error"),
        ({**body, "filter": {"state": "sleeping"}}, "state"),
    ):  # fmt: skip
        refused = await http.post("/v1/tasks:bulk", json=bad, headers=operator)
        assert_error(refused, 400, "invalid_request", "protocol")
        assert says in refused.json()["error"]["message"]

    dry = await http.post("/v1/tasks:bulk", json={**body, "dry_run": True}, headers=operator)
    assert dry.status_code == 200
    assert dry.json()["matched"] == 3
    assert sorted(t["id"] for t in dry.json()["sample"]) == sorted(ids[:3])
    assert {t["state"] for t in dry.json()["sample"]} == {"cancelled"}  # unchanged

    started = await http.post("/v1/tasks:bulk", json=body, headers=operator)
    assert started.status_code == 202, started.text
    op = started.json()
    assert (op["state"], op["action"], op["matched"], op["remaining"]) == ("running", "retry",
                                                                          3, 3)  # fmt: skip
    assert op["filter"]["label"] == "run:7"
    while await node.bulk.step():
        pass
    done = (await http.get(f"/v1/bulk-operations/{op['id']}", headers=operator)).json()
    assert (done["state"], done["done"], done["remaining"]) == ("completed", 3, 0)
    states = [(await http.get(f"/v1/tasks/{i}", headers=submitter)).json()["state"] for i in ids]
    assert states == ["pending"] * 5
    items = (await http.get(f"/v1/bulk-operations/{op['id']}/items", params={"limit": 2},
                            headers=operator)).json()  # fmt: skip
    assert [i["state"] for i in items["items"]] == ["done", "done"] and items["next_cursor"]
    rest = (await http.get(f"/v1/bulk-operations/{op['id']}/items",
                           params={"cursor": items["next_cursor"]},
                           headers=operator)).json()  # fmt: skip
    assert [i["seq"] for i in rest["items"]] == [2] and rest["next_cursor"] is None
    listed = (await http.get("/v1/bulk-operations", headers=operator)).json()["items"]
    assert [o["id"] for o in listed] == [op["id"]]
    again = await http.post(f"/v1/bulk-operations/{op['id']}/cancel", headers=operator)
    assert_error(again, 409, "state_conflict", "conflict")
    missing = await http.get("/v1/bulk-operations/bulk_01m8zzzzzzzzzzzzzzzzzzzzzz",
                             headers=operator)  # fmt: skip
    assert_error(missing, 404, "not_found", "protocol")


async def test_one_queue_and_the_workers_list(http: httpx2.AsyncClient, node: Node) -> None:
    submitter = bearer(await make_key(node, SCOPE, Role.SUBMITTER))
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    await make_key(node, SCOPE, Role.WORKER)
    await http.post("/v1/tasks", json={"queue": "mail", "type": "send"}, headers=submitter)
    queue = (await http.get("/v1/queues/mail", headers=submitter)).json()
    assert queue["counts"]["pending"] == 1
    [unserved] = queue["unserved"]
    assert (unserved["type"], unserved["pending"], unserved["reason"]) == ("send", 1,
                                                                          "no_handler")  # fmt: skip
    assert_error(await http.get("/v1/queues/nope", headers=submitter), 404, "not_found",
                 "protocol")  # fmt: skip
    workers = await http.get("/v1/workers", headers=operator)
    assert workers.json() == {"items": [], "next_cursor": None}
    assert_error(await http.get("/v1/workers", headers=submitter), 403, "forbidden", "permission")
    assert_error(await http.get("/v1/workers/ses_nope", headers=operator), 404, "not_found",
                 "protocol")  # fmt: skip


async def test_a_bulk_pause_resume_and_cancel_of_workflows(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    await publish(http, operator, body("one", [task("a")]))
    await publish(http, operator, body("two", [task("b")]))
    ones = [(await start(http, operator, "one"))["id"] for _ in range(4)]
    other = (await start(http, operator, "two"))["id"]
    await http.post(f"/v1/workflows/{ones[0]}/pause", headers=operator)

    async def run(action: str, **extra: object) -> dict[str, object]:
        body_ = {"action": action, "filter": {"definition": "one"}, **extra}
        started = await http.post("/v1/workflows:bulk", json=body_, headers=operator)
        assert started.status_code == 202, started.text
        while await node.bulk.step():
            pass
        done = await http.get(f"/v1/bulk-operations/{started.json()['id']}", headers=operator)
        result: dict[str, object] = done.json()
        return result

    dry = await http.post("/v1/workflows:bulk", headers=operator, json={
        "action": "pause", "filter": {"definition": "one", "state": "running"}, "dry_run": True
    })  # fmt: skip
    assert (dry.status_code, dry.json()["matched"]) == (200, 3)
    assert sorted(dry.json()["sample"]) == sorted(ones[1:])

    paused = await run("pause", params={"reason": "maintenance"})
    assert (paused["kind"], paused["done"], paused["skipped"]) == ("workflows", 3, 1)
    assert paused["skipped_reasons"] == {"unchanged": 1}  # the one paused by hand
    assert {(await read(http, operator, i))["state"] for i in ones} == {"paused"}
    assert (await read(http, operator, other))["state"] == "running"
    resumed = await run("resume")
    assert (resumed["done"], resumed["skipped"]) == (4, 0)
    cancelled = await run("cancel", params={"reason": "withdrawn"})
    assert cancelled["done"] == 4
    views = [await read(http, operator, i) for i in ones]
    assert {(v["state"], v["error"]["message"]) for v in views} == {("cancelled", "withdrawn")}
    again = await run("pause")
    assert again["skipped_reasons"] == {"state_conflict": 4}
    refused = await http.post(
        "/v1/workflows:bulk",
        headers=operator,
        json={"action": "retry_step", "filter": {"definition": "one"}},
    )
    assert_error(refused, 400, "invalid_request", "protocol")
    empty = await http.post("/v1/workflows:bulk", headers=operator,
                            json={"action": "pause", "filter": {}})  # fmt: skip
    assert_error(empty, 400, "invalid_request", "protocol")
    trail = await audit(http, node, "bulk_operation", str(paused["id"]))
    assert [e["action"] for e in trail] == ["workflows.bulk.pause"]

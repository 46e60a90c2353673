"""Schedules over HTTP (API.md "Schedules"): the contract's shapes, codes and roles."""

from __future__ import annotations

from typing import Any

import httpx2

from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.conftest import OTHER_TENANT, SCOPE, bearer, make_key

NIGHTLY: dict[str, Any] = {
    "name": "nightly-report",
    "cron": "0 2 * * *",
    "timezone": "Asia/Shanghai",
    "interval_ms": None,
    "task": {"queue": "reports", "type": "build", "params": {"kind": "daily"}},
    "catchup": "latest",
    "catchup_max": 10,
    "overlap": "skip",
    "start_at": None,
    "end_at": None,
    "paused": False,
}


async def test_create_read_list_and_the_schedule_object(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    submitter = bearer(await make_key(node, SCOPE, Role.SUBMITTER))
    created = await http.post("/v1/schedules", json=NIGHTLY, headers=operator)
    assert created.status_code == 201, created.text
    body = created.json()
    for field, value in NIGHTLY.items():
        if field != "task":
            assert body[field] == value, field
    assert body["task"]["queue"] == "reports" and body["task"]["params"] == {"kind": "daily"}
    assert body["id"].startswith("sch_") and body["version"] == 1
    # 02:00 in Shanghai (UTC+8) is 18:00 UTC; the fake clock starts at 2030-01-01T00:00Z.
    assert body["next_fire_at"] == "2030-01-01T18:00:00.000Z"
    assert (body["last_fire_at"], body["recent"]) == (None, [])
    replay = await http.post("/v1/schedules", json=NIGHTLY, headers=operator)
    assert (replay.status_code, replay.json()["id"]) == (200, body["id"])
    different = await http.post(
        "/v1/schedules", json={**NIGHTLY, "cron": "0 3 * * *"}, headers=operator
    )
    assert_error(different, 409, "already_exists", "conflict")

    read = await http.get("/v1/schedules/nightly-report?preview=3", headers=submitter)
    assert read.status_code == 200
    assert read.json()["preview"] == [
        "2030-01-01T18:00:00.000Z", "2030-01-02T18:00:00.000Z", "2030-01-03T18:00:00.000Z",
    ]  # fmt: skip
    assert (
        "preview" not in (await http.get("/v1/schedules/nightly-report", headers=submitter)).json()
    )
    await http.post(
        "/v1/schedules", json={**NIGHTLY, "name": "a-tick", "cron": None, "interval_ms": 60_000},
        headers=operator,
    )  # fmt: skip
    page = (await http.get("/v1/schedules?limit=1", headers=submitter)).json()
    assert [s["name"] for s in page["items"]] == ["a-tick"] and page["next_cursor"]
    rest = await http.get(f"/v1/schedules?cursor={page['next_cursor']}", headers=submitter)
    assert [s["name"] for s in rest.json()["items"]] == ["nightly-report"]
    assert rest.json()["next_cursor"] is None

    elsewhere = bearer(await make_key(node, OTHER_TENANT, Role.OPERATOR))
    missing = await http.get("/v1/schedules/nightly-report", headers=elsewhere)
    assert_error(missing, 404, "not_found", "protocol")
    forbidden = await http.post("/v1/schedules", json={**NIGHTLY, "name": "x"}, headers=submitter)
    assert_error(forbidden, 403, "forbidden", "permission")


async def test_bad_definitions_are_refused_with_a_reason(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "5 fields"),
        ({"timezone": "Mars/Olympus"}, "time zone"),
        ({"cron": None}, "exactly one"),
        ({"interval_ms": 60_000}, "exactly one"),
        ({"cron": None, "interval_ms": 10}, "interval_ms"),
        ({"catchup": "sometimes"}, "catchup"),
        ({"catchup_max": 0}, "catchup_max"),
        ({"overlap": "never"}, "overlap"),
        ({"start_at": "2030-02-01T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "end_at"),
        ({"task": {"queue": "q", "type": "t", "idempotency_key": "k"}}, "idempotency_key"),
        ({"task": {"queue": "q", "type": "t", "timeout_ms": 10**12}}, "timeout_ms"),
        ({"name": "has space"}, "name"),
    ]
    for change, words in cases:
        answer = await http.post("/v1/schedules", json={**NIGHTLY, **change}, headers=operator)
        assert_error(answer, 400, "invalid_request", "protocol")
        assert words in answer.json()["error"]["message"], (change, answer.json())
    assert (await http.get("/v1/schedules", headers=operator)).json()["items"] == []


async def test_patch_is_versioned_and_audited(http: httpx2.AsyncClient, node: Node) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    await http.post("/v1/schedules", json=NIGHTLY, headers=operator)
    changed = await http.patch(
        "/v1/schedules/nightly-report",
        json={"interval_ms": 3_600_000, "overlap": "allow", "version": 1},
        headers=operator,
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["version"], body["cron"], body["interval_ms"], body["overlap"]) == (
        2, None, 3_600_000, "allow",
    )  # fmt: skip
    assert body["next_fire_at"] == "2030-01-01T01:00:00.000Z"
    stale = await http.patch(
        "/v1/schedules/nightly-report", json={"overlap": "skip", "version": 1}, headers=operator
    )
    assert_error(stale, 409, "state_conflict", "conflict")
    bounded = await http.patch(
        "/v1/schedules/nightly-report", json={"end_at": "2030-01-01T00:30:00Z"}, headers=operator
    )
    assert bounded.json()["next_fire_at"] is None  # no slot before the end
    cleared = await http.patch(
        "/v1/schedules/nightly-report", json={"end_at": None}, headers=operator
    )
    assert cleared.json()["end_at"] is None and cleared.json()["version"] == 4
    unknown = await http.patch("/v1/schedules/nightly-report", json={"name": "x"}, headers=operator)
    assert_error(unknown, 400, "invalid_request", "protocol")
    trail = (
        await http.get(
            "/v1/audit", params={"target_kind": "schedule", "target_id": "nightly-report"},
            headers=bearer(await make_key(node, SCOPE, Role.ADMIN)),
        )
    ).json()["items"]  # fmt: skip
    actions = [entry["action"] for entry in trail]
    assert actions == ["schedule.update"] * 3 + ["schedule.create"]
    assert trail[-2]["details"]["changes"]["overlap"] == {"from": "skip", "to": "allow"}


async def test_pause_resume_trigger_backfill_fires_and_delete(
    http: httpx2.AsyncClient, node: Node, clock: FakeClock
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    tick = {**NIGHTLY, "name": "tick", "cron": None, "interval_ms": 1000, "overlap": "allow"}
    await http.post("/v1/schedules", json=tick, headers=operator)
    paused = await http.post(
        "/v1/schedules/tick/pause", json={"reason": "maintenance"}, headers=operator
    )
    assert (paused.status_code, paused.json()["paused"]) == (200, True)
    assert paused.json()["paused_reason"] == "maintenance"
    fired = await http.post("/v1/schedules/tick/trigger", headers=operator)
    assert fired.status_code == 201
    fire = fired.json()
    assert (fire["outcome"], fire["cause"], fire["fire_time"]) == (
        "fired", "trigger", "2030-01-01T00:00:00.000Z",
    )  # fmt: skip
    task = (await http.get(f"/v1/tasks/{fire['task_id']}", headers=operator)).json()
    assert task["owner"] == {"kind": "schedule", "id": paused.json()["id"], "step": None}
    resumed = await http.post("/v1/schedules/tick/resume", headers=operator)
    assert resumed.json()["paused"] is False and resumed.json()["paused_reason"] is None
    for _ in range(3):
        clock.advance(1000)
        await node.scheduler.run_due()
    view = (await http.get("/v1/schedules/tick", headers=operator)).json()
    assert view["last_fire_at"] == "2030-01-01T00:00:03.000Z"
    assert [f["fire_time"][17:23] for f in view["recent"]] == ["03.000", "02.000", "01.000",
                                                             "00.000"]  # fmt: skip
    page = (await http.get("/v1/schedules/tick/fires?limit=2", headers=operator)).json()
    assert [f["outcome"] for f in page["items"]] == ["fired", "fired"]
    more = await http.get(
        f"/v1/schedules/tick/fires?cursor={page['next_cursor']}", headers=operator
    )
    assert [f["cause"] for f in more.json()["items"]] == ["schedule", "trigger"]

    started = await http.post(
        "/v1/schedules/tick/backfill",
        json={"from": "2030-01-01T00:00:00Z", "to": "2030-01-01T00:00:03Z"},
        headers=operator,
    )
    assert started.status_code == 202, started.text
    backfill = started.json()
    assert (backfill["state"], backfill["from"], backfill["fired"]) == (
        "running", "2030-01-01T00:00:00.000Z", 0,
    )  # fmt: skip
    while (await node.scheduler.run_backfills()).handled:
        pass
    done = await http.get(f"/v1/schedules/tick/backfills/{backfill['id']}", headers=operator)
    assert (done.json()["state"], done.json()["fired"], done.json()["existing"]) == ("done", 1, 2)
    listed = (await http.get("/v1/schedules/tick/backfills", headers=operator)).json()["items"]
    assert [b["id"] for b in listed] == [backfill["id"]]
    future = await http.post(
        "/v1/schedules/tick/backfill",
        json={"from": "2030-01-01T00:00:00Z", "to": "2031-01-01T00:00:00Z"},
        headers=operator,
    )
    assert_error(future, 400, "invalid_request", "protocol")

    gone = await http.delete("/v1/schedules/tick", headers=operator)
    assert gone.status_code == 204
    assert_error(
        await http.get("/v1/schedules/tick", headers=operator), 404, "not_found", "protocol"
    )
    assert_error(await http.delete("/v1/schedules/tick", headers=operator), 404, "not_found",
                 "protocol")  # fmt: skip


async def test_a_trigger_into_a_full_queue_is_429_and_records_nothing(
    http: httpx2.AsyncClient, node: Node
) -> None:
    operator = bearer(await make_key(node, SCOPE, Role.OPERATOR))
    assert (
        await http.put("/v1/queues/reports", json={"max_pending": 1}, headers=operator)
    ).is_success
    fill = {"queue": "reports", "type": "build"}
    assert (await http.post("/v1/tasks", json=fill, headers=operator)).status_code == 201
    assert (await http.post("/v1/schedules", json=NIGHTLY, headers=operator)).status_code == 201
    refused = await http.post("/v1/schedules/nightly-report/trigger", headers=operator)
    assert_error(refused, 429, "queue_full", "transient")
    assert refused.headers["retry-after"] == "1"
    fires = await http.get("/v1/schedules/nightly-report/fires", headers=operator)
    assert fires.json()["items"] == []

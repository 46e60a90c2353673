"""Three server processes on one MariaDB run a one-second schedule: every slot fires exactly
once; with every server stopped for several slots, the missed slots follow the catch-up policy.

One second is the shortest interval a schedule may have, so the slots are real seconds: the
test watches the ledger until the slots it checks have fired rather than for a fixed time."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx2
import pytest

from orbit_server.governance.keys import Role
from tests.conftest import SCOPE, bearer, make_key_at
from tests.support.processes import OrbitProcess

RUN_SLOTS = 10  # on-time slots the three servers fire before the outage
OUTAGE_S = 6.0  # more slots than CATCHUP_MAX come due while every server is down
CATCHUP_MAX = 3
WAIT_S = 60.0  # the longest any awaited condition may take


def start_servers(url: str, run: int) -> list[tuple[OrbitProcess, str]]:
    servers = [
        OrbitProcess(
            ["server", "--port", "0", "--host", "127.0.0.1"],
            env={"ORBIT_DATABASE_URL": url, "ORBIT_NODE_ID": f"node-{run}-{i}"},
        )
        for i in range(3)
    ]
    return [(server, server.wait_for("ORBIT_URL")["ORBIT_URL"]) for server in servers]


def stop_all(servers: list[tuple[OrbitProcess, str]]) -> None:
    for server, _ in servers:  # all at once: the outage starts together
        server.proc.send_signal(signal.SIGTERM)
    for server, _ in servers:
        server.proc.wait(timeout=30)
        assert server.stop() == 0, server.stderr[-2000:]


def whole_ledger(client: httpx2.Client, auth: dict[str, str]) -> list[dict[str, Any]]:
    fires: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/schedules/tick/fires", params=params, headers=auth).json()
        fires += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            return fires[::-1]  # oldest first


def task_ids(client: httpx2.Client, auth: dict[str, str]) -> list[str]:
    found: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"queue": "ticks", "limit": 500}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/tasks", params=params, headers=auth).json()
        found += [t["id"] for t in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            return found


def seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def ledger_when(
    client: httpx2.Client, auth: dict[str, str], done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The whole ledger, as soon as ``done`` holds of it (the servers' own loops fire: there is
    no event to wait on from outside)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        fires = whole_ledger(client, auth)
        if done(fires):
            return fires
        assert time.monotonic() < deadline, fires[-5:]
        time.sleep(0.2)


def ledger_and_tasks(
    client: httpx2.Client, auth: dict[str, str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The ledger and the schedule's tasks as of one moment: the servers go on firing, so the
    tasks are read between two equal readings of the ledger (a slot's task and its ledger row
    are written in one transaction)."""
    fires = whole_ledger(client, auth)
    while True:
        tasks = task_ids(client, auth)
        again = whole_ledger(client, auth)
        if again == fires:
            return fires, tasks
        fires = again


@pytest.fixture
async def operator_auth(migrated_mariadb_url: str) -> dict[str, str]:
    """An operator's key on the migrated database (`orbit migrate` and `orbit keys create` are
    tested in test_cli.py; here they would only cost two processes)."""
    return bearer(await make_key_at(migrated_mariadb_url, SCOPE, Role.OPERATOR))


def test_three_servers_fire_each_slot_once_and_catch_up_after_an_outage(
    migrated_mariadb_url: str, operator_auth: dict[str, str]
) -> None:
    database, auth = migrated_mariadb_url, operator_auth
    servers = start_servers(database, 1)
    try:
        with httpx2.Client(base_url=servers[0][1], timeout=10) as client:
            answer = client.post(
                "/v1/schedules",
                json={
                    "name": "tick", "interval_ms": 1000, "overlap": "allow", "catchup": "all",
                    "catchup_max": CATCHUP_MAX, "task": {"queue": "ticks", "type": "tick"},
                },
                headers=auth,
            )  # fmt: skip
            assert answer.status_code == 201, answer.text
            # The schedule runs on its own on three servers: this is the run being observed.
            ledger_when(client, auth, lambda fires: len(fires) >= RUN_SLOTS)
    finally:
        stopped_at = time.time()
        stop_all(servers)
    # Every server down: the slots of this time come due unseen. Real seconds are the
    # condition here, so the wait is for the wall clock to pass them.
    time.sleep(max(0.0, stopped_at + OUTAGE_S - time.time()))
    restarted_at = time.time()
    servers = start_servers(database, 2)
    try:
        with httpx2.Client(base_url=servers[1][1], timeout=10) as client:
            # until on-time slots after the restart are in the ledger
            ledger_when(
                client, auth, lambda fires: seconds(fires[-1]["fire_time"]) >= restarted_at + 3
            )
            fires, tasks = ledger_and_tasks(client, auth)
    finally:
        stop_all(servers)

    times = [seconds(f["fire_time"]) for f in fires]
    assert times == [times[0] + i for i in range(len(times))]  # every slot once, none left out
    fired = [f for f in fires if f["outcome"] == "fired"]
    assert sorted(tasks) == sorted(f["task_id"] for f in fired)  # one task per fired slot
    assert len(set(tasks)) == len(tasks)
    kinds = [(f["outcome"], f["cause"]) for f in fires]
    on_time = ("fired", "schedule")
    first_late = kinds.index(next(k for k in kinds if k != on_time))
    back = first_late + kinds[first_late:].index(on_time)
    first_run, late, after = fires[:first_late], fires[first_late:back], fires[back:]
    assert seconds(first_run[-1]["fire_time"]) >= stopped_at - 1.5  # on time until the stop
    assert len(first_run) >= RUN_SLOTS
    assert len(late) >= OUTAGE_S  # the slots of the outage, and of the restart, came due unseen
    assert (
        kinds[first_late:back]
        == [("missed", "schedule")] * (len(late) - CATCHUP_MAX)
        + [("fired", "catchup")] * CATCHUP_MAX
    )  # the newest catchup_max of them fired, the older ones are recorded missed
    assert seconds(after[0]["fire_time"]) > restarted_at
    assert set(kinds[back:]) == {on_time}
    print(
        f"{len(first_run)} slots fired once each; after the outage: "
        f"{len(late) - CATCHUP_MAX} missed, {CATCHUP_MAX} caught up, {len(after)} on time"
    )

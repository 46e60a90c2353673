"""`orbit dev --testing`: a clock tests move forward, and throwaway environments; neither
exists without the flag, and `orbit server` does not take it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx2
import pytest

from orbit_server.clock import AdjustableClock
from tests.support.processes import OrbitProcess, run_orbit


@pytest.fixture(scope="module")
def testing_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx2.Client]:
    data_dir = tmp_path_factory.mktemp("dev") / "d"
    dev = OrbitProcess(["dev", "--testing", "--data-dir", str(data_dir), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        auth = {"Authorization": f"Bearer {announced['ORBIT_API_KEY']}"}
        with httpx2.Client(base_url=announced["ORBIT_URL"], headers=auth, timeout=10) as client:
            yield client
    finally:
        assert dev.stop() == 0


def test_advancing_the_clock_makes_a_delayed_task_due(testing_dev: httpx2.Client) -> None:
    before = testing_dev.get("/v1/dev/clock").json()
    task = testing_dev.post(
        "/v1/tasks", json={"queue": "later", "type": "t", "delay_ms": 3_600_000}
    ).json()
    assert task["state"] == "scheduled"
    moved = testing_dev.post("/v1/dev/clock:advance", json={"by_ms": 3_600_000})
    assert moved.status_code == 200, moved.text
    assert moved.json()["offset_ms"] == before["offset_ms"] + 3_600_000
    now = datetime.fromisoformat(moved.json()["now"])
    assert now - datetime.now(UTC) > timedelta(minutes=59)
    deadline = time.monotonic() + 10
    while True:  # the server's recovery loop promotes due tasks every 0.5 s: nothing to wait on
        state = testing_dev.get(f"/v1/tasks/{task['id']}").json()["state"]
        if state == "pending":
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def test_the_clock_never_moves_backwards(testing_dev: httpx2.Client) -> None:
    refused = testing_dev.post("/v1/dev/clock:advance", json={"by_ms": -1})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_request"


def test_each_environment_sees_only_its_own_work(testing_dev: httpx2.Client) -> None:
    made = [testing_dev.post("/v1/dev/environments") for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201]
    first, second = (m.json() for m in made)
    assert first["environment"] != second["environment"]
    assert first["environment"].startswith("test-")
    key_a = {"Authorization": f"Bearer {first['api_key']}"}
    key_b = {"Authorization": f"Bearer {second['api_key']}"}
    task = testing_dev.post("/v1/tasks", json={"queue": "q", "type": "t"}, headers=key_a).json()
    assert testing_dev.get(f"/v1/tasks/{task['id']}", headers=key_a).status_code == 200
    assert testing_dev.get(f"/v1/tasks/{task['id']}", headers=key_b).status_code == 404
    whoami = testing_dev.get("/v1/whoami", headers=key_b).json()
    assert whoami["environment"] == second["environment"]
    assert set(whoami["roles"]) >= {"admin", "operator", "submitter", "worker"}


def test_without_the_flag_the_routes_do_not_exist(tmp_path: Path) -> None:
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "d"), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        auth = {"Authorization": f"Bearer {announced['ORBIT_API_KEY']}"}
        with httpx2.Client(base_url=announced["ORBIT_URL"], headers=auth, timeout=10) as client:
            answers = [
                client.get("/v1/dev/clock"),
                client.post("/v1/dev/clock:advance", json={"by_ms": 1000}),
                client.post("/v1/dev/environments"),
            ]
    finally:
        assert dev.stop() == 0
    assert [a.status_code for a in answers] == [404, 404, 404]
    assert {a.json()["error"]["code"] for a in answers} == {"not_found"}


def test_orbit_server_refuses_the_flag() -> None:
    done = run_orbit("server", "--testing", "--database-url", "sqlite:///unused.db")
    assert done.code != 0
    assert "--testing" in done.stderr


def test_the_adjustable_clock_only_moves_forward() -> None:
    clock = AdjustableClock()
    start = clock.now()
    moved = clock.advance(timedelta(hours=2))
    assert moved - start >= timedelta(hours=2)
    assert clock.offset == timedelta(hours=2)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(timedelta(seconds=-1))
    assert clock.offset == timedelta(hours=2)

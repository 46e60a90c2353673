"""`orbit dev` (embedded SQLite) runs schedules: a one-second schedule fires on its own, each
slot once, and the ledger says so over HTTP."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path

import httpx2

from tests.support.processes import OrbitProcess


def test_orbit_dev_fires_a_one_second_schedule(tmp_path: Path) -> None:
    dev = OrbitProcess(["dev", "--data-dir", str(tmp_path / "d"), "--port", "0"])
    try:
        announced = dev.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        auth = {"Authorization": f"Bearer {announced['ORBIT_API_KEY']}"}
        with httpx2.Client(base_url=announced["ORBIT_URL"], timeout=10) as client:
            created = client.post(
                "/v1/schedules",
                json={"name": "tick", "interval_ms": 1000, "overlap": "allow",
                      "task": {"queue": "ticks", "type": "tick"}},
                headers=auth,
            )  # fmt: skip
            assert created.status_code == 201, created.text
            deadline = time.monotonic() + 20
            while True:  # the server's own loop fires: there is no event to wait on here
                fires = client.get("/v1/schedules/tick/fires", headers=auth).json()["items"]
                if len(fires) >= 3:
                    break
                assert time.monotonic() < deadline, fires
                time.sleep(0.2)
            tasks = client.get("/v1/tasks", params={"queue": "ticks"}, headers=auth).json()
    finally:
        assert dev.stop() == 0
    times = [datetime.fromisoformat(f["fire_time"]).timestamp() for f in fires[::-1]]
    assert [round(b - a, 3) for a, b in itertools.pairwise(times)] == [1.0] * (len(times) - 1)
    assert {f["outcome"] for f in fires} == {"fired"}
    assert {t["id"] for t in tasks["items"]} >= {f["task_id"] for f in fires}

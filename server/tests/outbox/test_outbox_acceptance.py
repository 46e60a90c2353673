"""Acceptance: real processes on a real PostgreSQL and MariaDB, killed with SIGKILL.

A business process writes orders and their outbox rows in transactions (two committed, one
rolled back, over and over) and is killed while it writes; a relay is killed between claiming
a batch and recording it; then another business process writes while two relays run at once.
At the end every committed row became exactly one task of the ``orbit dev`` server, no
rolled-back row became one, and no row became two.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbit_sdk import Client
from tests.outbox.conftest import connect, rows
from tests.support.processes import OrbitProcess

SERVER_DIR = Path(__file__).resolve().parents[2]


def business(url: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.outbox.business", url, str(count)],
        cwd=SERVER_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )


def relay(url: str, orbit_env: dict[str, str], name: str, logs: Path) -> subprocess.Popen[str]:
    command = [
        str(Path(sys.executable).with_name("orbit-outbox-relay")),
        "--database-url",
        url,
        "--batch-size",
        "20",
        "--poll-interval",
        "0.05",
        "--lease",
        "2",
        "--relay-id",
        name,
    ]
    env = {**os.environ, **orbit_env}
    with (logs / f"{name}.log").open("w") as log:  # the child keeps its own copy
        return subprocess.Popen(command, env=env, stderr=log, text=True)


def count(url: str, where: str) -> int:
    conn = connect(url)
    try:
        cursor = conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM orbit_outbox WHERE {where}")
        return int(cursor.fetchone()[0])
    finally:
        conn.rollback()
        conn.close()


def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def rolled_back(process: subprocess.Popen[str]) -> set[str]:
    assert process.stdout is not None
    with process.stdout:
        lines = process.stdout.read().splitlines()
    return {line.split()[1] for line in lines if line.startswith("R")}


@pytest.mark.parametrize("business_url", ["postgresql", "mariadb"], indirect=True)
def test_every_committed_row_becomes_exactly_one_task_through_kill_9(
    business_url: str, tmp_path: Path
) -> None:
    conn = connect(business_url)
    conn.cursor().execute("CREATE TABLE orders (id VARCHAR(40) PRIMARY KEY, outbox_id VARCHAR(26))")
    conn.commit()
    conn.close()
    orbit = OrbitProcess(["dev", "--data-dir", str(tmp_path / "orbit"), "--port", "0"])
    started: list[subprocess.Popen[str]] = []
    try:
        orbit_env = orbit.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        # 1. The business process dies between commits: its rows wait, nothing delivers them.
        first = business(business_url, 100_000)
        started.append(first)
        wait_until(lambda: count(business_url, "1 = 1") >= 150, 30, "150 committed rows")
        first.kill()
        first.wait()
        discarded = rolled_back(first)
        # 2. A relay dies between claiming a batch and recording what became of it.
        doomed = relay(business_url, orbit_env, "doomed", tmp_path)
        started.append(doomed)
        mid_batch = "claimed_by = 'doomed' AND delivered_at IS NULL"
        wait_until(lambda: count(business_url, mid_batch) > 0, 30, "a claimed batch")
        doomed.kill()
        doomed.wait()
        assert count(business_url, mid_batch) > 0
        # 3. Two relays at once, while another business process writes (and is killed too).
        second = business(business_url, 100_000)
        relays = [relay(business_url, orbit_env, name, tmp_path) for name in ("left", "right")]
        started += [second, *relays]
        wait_until(lambda: count(business_url, "1 = 1") >= 300, 30, "300 rows")
        second.kill()
        second.wait()
        discarded |= rolled_back(second)
        wait_until(
            lambda: count(business_url, "delivered_at IS NULL") == 0, 60, "every row delivered"
        )
        for process in relays:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, (tmp_path / "left.log").read_text()
        # What was committed is what the outbox holds (an order and its row, or neither).
        committed = {row["id"]: row for row in rows(business_url)}
        conn = connect(business_url)
        cursor = conn.cursor()
        cursor.execute("SELECT outbox_id FROM orders")
        assert {outbox_id for (outbox_id,) in cursor.fetchall()} == set(committed)
        conn.close()
        assert committed and discarded and not (discarded & set(committed))
        with Client(orbit_env["ORBIT_URL"], orbit_env["ORBIT_API_KEY"]) as client:
            tasks = list(client.iter_tasks(queue="acceptance", limit=500))
        keys = [task.idempotency_key for task in tasks]
        assert len(keys) == len(set(keys)) == len(committed)  # one task per row, none twice
        assert set(keys) == set(committed)  # no rolled-back row made one
        for task in tasks:
            assert committed[task.idempotency_key]["result"] == task.id
        print(f"{len(committed)} rows committed, {len(discarded)} rolled back, one task each")
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        assert orbit.stop() == 0

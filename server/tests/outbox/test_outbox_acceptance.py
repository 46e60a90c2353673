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

SERVER_DIR = Path(__file__).resolve().parents[2]


def business(url: str, queue: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.outbox.business", url, queue],
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
        "1.5",
        "--relay-id",
        name,
    ]
    env = {**os.environ, **orbit_env}
    with (logs / f"{name}.log").open("w") as log:  # the child keeps its own copy
        return subprocess.Popen(command, env=env, stderr=log, text=True)


class Watch:
    """Counts outbox rows on a connection of its own, in autocommit mode, so that it can look
    every few milliseconds (to catch a relay between its claim and its record)."""

    def __init__(self, url: str) -> None:
        self.conn = connect(url)
        if callable(self.conn.autocommit):  # PyMySQL
            self.conn.autocommit(True)
        else:  # psycopg
            self.conn.autocommit = True

    def count(self, where: str = "1 = 1") -> int:
        cursor = self.conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM orbit_outbox WHERE {where}")
        (found,) = cursor.fetchone()
        cursor.close()
        return int(found)

    def wait_until(self, where: str, at_least: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count(where) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {at_least} rows where {where}")
            time.sleep(0.002)


def rolled_back(process: subprocess.Popen[str]) -> set[str]:
    assert process.stdout is not None
    with process.stdout:
        lines = process.stdout.read().splitlines()
    return {line.split()[1] for line in lines if line.startswith("R")}


@pytest.mark.parametrize("business_url", ["postgresql", "mariadb"], indirect=True)
def test_every_committed_row_becomes_exactly_one_task_through_kill_9(
    business_url: str, orbit_dev: dict[str, str], tmp_path: Path
) -> None:
    queue = f"acceptance-{business_url.split(':', maxsplit=1)[0]}"
    conn = connect(business_url)
    conn.cursor().execute("CREATE TABLE orders (id VARCHAR(40) PRIMARY KEY, outbox_id VARCHAR(26))")
    conn.commit()
    conn.close()
    watch = Watch(business_url)
    started: list[subprocess.Popen[str]] = []
    try:
        # 1. The business process dies between commits: its rows wait, nothing delivers them.
        first = business(business_url, queue)
        started.append(first)
        watch.wait_until("1 = 1", 60, timeout=30)
        first.kill()
        first.wait()
        discarded = rolled_back(first)
        # 2. A relay dies between claiming a batch and recording what became of it.
        doomed = relay(business_url, orbit_dev, "doomed", tmp_path)
        started.append(doomed)
        mid_batch = "claimed_by = 'doomed' AND delivered_at IS NULL"
        watch.wait_until(mid_batch, 1, timeout=30)
        doomed.kill()
        doomed.wait()
        assert watch.count(mid_batch) > 0
        # 3. Two relays at once, while another business process writes (and is killed too).
        second = business(business_url, queue)
        relays = [relay(business_url, orbit_dev, name, tmp_path) for name in ("left", "right")]
        started += [second, *relays]
        watch.wait_until("1 = 1", 150, timeout=30)
        second.kill()
        second.wait()
        discarded |= rolled_back(second)
        deadline = time.monotonic() + 60
        while watch.count("delivered_at IS NULL") > 0:
            assert time.monotonic() < deadline, "rows left undelivered"
            time.sleep(0.05)
        for process in relays:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0, (tmp_path / "left.log").read_text()
        # What was committed is what the outbox holds (an order and its row, or neither).
        committed = {row["id"]: row for row in rows(business_url)}
        cursor = watch.conn.cursor()
        cursor.execute("SELECT outbox_id FROM orders")
        assert {outbox_id for (outbox_id,) in cursor.fetchall()} == set(committed)
        assert committed and discarded and not (discarded & set(committed))
        with Client(orbit_dev["ORBIT_URL"], orbit_dev["ORBIT_API_KEY"]) as client:
            tasks = list(client.iter_tasks(queue=queue, limit=500))
        keys = [task.idempotency_key for task in tasks]
        assert len(keys) == len(set(keys)) == len(committed)  # one task per row, none twice
        assert set(keys) == set(committed)  # no rolled-back row made one
        for task in tasks:
            assert committed[task.idempotency_key]["result"] == task.id
        print(f"{len(committed)} rows committed, {len(discarded)} rolled back, one task each")
    finally:
        watch.conn.close()
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()

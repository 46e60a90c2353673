"""What operators see, end to end on MariaDB with real processes: the worker sessions of two
``orbit server`` nodes and three ``orbit-worker`` processes, listed alike by either node (the
database is the source), a worker killed with SIGKILL, and tasks no connected worker can take."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncmy
import httpx
import pytest

from orbit_server.governance.keys import Role
from tests.conftest import SCOPE, make_key_at
from tests.e2e.test_workers import LEASE, eventually
from tests.support.processes import OrbitProcess

APP = """
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="ops", type="noop")
def noop(ctx: TaskContext) -> dict:
    return {}


@worker.handler(queue="ops", type="render", version="1")
def render_v1(ctx: TaskContext) -> dict:
    return {"v": 1}
"""


class Ops:
    def __init__(self, env: dict[str, str], key: str, tmp: Path) -> None:
        self.env, self.key, self.tmp = env, key, tmp
        self.procs: list[OrbitProcess] = []

    def server(self, node_id: str) -> str:
        proc = OrbitProcess(
            ["server", "--port", "0", "--host", "127.0.0.1", "--node-id", node_id],
            env={**self.env, **LEASE},
        )
        self.procs.append(proc)
        return proc.wait_for("ORBIT_URL")["ORBIT_URL"]

    def worker(self, url: str, worker_id: str) -> OrbitProcess:
        command = [str(Path(sys.executable).parent / "orbit-worker"), "ops_app:worker",
                   "--url", url, "--concurrency", "3", "--worker-id", worker_id]  # fmt: skip
        proc = OrbitProcess.command(
            command, env={"ORBIT_API_KEY": self.key, "PYTHONPATH": str(self.tmp)}
        )
        self.procs.append(proc)
        return proc

    def get(self, url: str, path: str, **params: Any) -> Any:
        answer = httpx.get(
            url + path, params=params, headers={"Authorization": f"Bearer {self.key}"}
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    def post(self, url: str, path: str, body: Any) -> Any:
        answer = httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {self.key}"})
        assert answer.status_code in (200, 201, 202), answer.text
        return answer.json()


@pytest.fixture
async def ops(migrated_mariadb_url: str, tmp_path: Path) -> AsyncIterator[Ops]:
    key = await make_key_at(migrated_mariadb_url, SCOPE, Role.WORKER, Role.SUBMITTER, Role.OPERATOR)
    (tmp_path / "ops_app.py").write_text(APP)
    found = Ops({"ORBIT_DATABASE_URL": migrated_mariadb_url}, key, tmp_path)
    try:
        yield found
    finally:
        for proc in reversed(found.procs):
            if proc.proc.poll() is None:
                proc.proc.kill()
            proc.stop(timeout=10)


def by_worker(ops: Ops, url: str) -> dict[str, dict[str, Any]]:
    return {w["worker_id"]: w for w in ops.get(url, "/v1/workers")["items"]}


def test_workers_across_nodes_and_unserved_work(ops: Ops) -> None:
    url_a, url_b = ops.server("node-a"), ops.server("node-b")
    ops.worker(url_a, "w1")
    doomed = ops.worker(url_b, "w2")
    ops.worker(url_a, "w3")

    def all_connected() -> bool:
        seen = by_worker(ops, url_b)
        return len(seen) == 3 and all(w["status"] == "connected" for w in seen.values())

    eventually(all_connected, "three connected workers")
    for url in (url_a, url_b):  # either node lists every session, from the database
        seen = by_worker(ops, url)
        assert {w: s["node"] for w, s in seen.items()} == {
            "w1": "node-a", "w2": "node-b", "w3": "node-a"
        }  # fmt: skip
    one = by_worker(ops, url_a)["w2"]
    assert one["capacity"] == 3 and one["protocol"] == 1 and one["sdk"]
    assert {(h["queue"], h["type"], tuple(h["versions"])) for h in one["handlers"]} == {
        ("ops", "noop", ()), ("ops", "render", ("1",))
    }  # fmt: skip
    detail = ops.get(url_a, f"/v1/workers/{one['session_id']}")
    assert detail["attempts"] == [] and detail["held"] == 0
    assert [w["worker_id"] for w in ops.get(url_a, "/v1/workers", queue="ops")["items"]]
    assert ops.get(url_a, "/v1/workers", queue="elsewhere")["items"] == []

    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()

    def ended() -> bool:
        w2 = by_worker(ops, url_a)["w2"]
        return w2["status"] == "ended" and w2["end_reason"] == "lost"

    eventually(ended, "the killed worker's session to end as lost")
    assert by_worker(ops, url_a)["w2"]["ended_at"]
    assert ops.get(url_a, "/v1/workers", ended_within_ms=0)["items"]  # the two still connected
    assert "w2" not in {w["worker_id"] for w in ops.get(url_a, "/v1/workers",
                                                        ended_within_ms=0)["items"]}  # fmt: skip

    typo = ops.post(url_a, "/v1/tasks", {"queue": "ops", "type": "nop"})
    old = ops.post(url_a, "/v1/tasks", {"queue": "ops", "type": "render", "handler_version": "2"})
    served = ops.post(url_a, "/v1/tasks", {"queue": "ops", "type": "render",
                                           "handler_version": "1"})  # fmt: skip

    def unserved() -> dict[tuple[str, str | None], dict[str, Any]]:
        queue = ops.get(url_b, "/v1/queues/ops")
        return {(u["type"], u["version"]): u for u in queue["unserved"]}

    eventually(lambda: len(unserved()) == 2, "two unserved groups")
    groups = unserved()
    assert groups[("nop", None)]["reason"] == "no_handler"
    assert groups[("nop", None)]["pending"] == 1
    assert groups[("render", "2")]["reason"] == "incompatible_version"
    listed = {q["name"]: q for q in ops.get(url_a, "/v1/queues")["items"]}
    assert {(u["type"], u["reason"]) for u in listed["ops"]["unserved"]} == {
        ("nop", "no_handler"), ("render", "incompatible_version")
    }  # fmt: skip
    task = ops.get(url_a, f"/v1/tasks/{typo['id']}")
    assert task["state"] == "pending" and task["unserved"]["reason"] == "no_handler"
    assert ops.get(url_a, f"/v1/tasks/{old['id']}")["unserved"]["reason"] == (
        "incompatible_version"
    )
    eventually(
        lambda: ops.get(url_a, f"/v1/tasks/{served['id']}")["state"] == "succeeded",
        "the served version to run",
    )
    assert ops.get(url_a, f"/v1/tasks/{served['id']}")["unserved"] is None


async def cancels_per_task(url: str) -> dict[str, int]:
    """From the database: how many times each task was moved to cancelled (its result
    events), to show that no task was acted on twice."""
    parts = urlsplit(url)
    conn = await asyncmy.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
        password=parts.password or "", database=parts.path.lstrip("/"),
    )  # fmt: skip
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT task_id, COUNT(*) FROM task_events WHERE state = 'cancelled'"
                " GROUP BY task_id"
            )
            rows = await cur.fetchall()
    finally:
        await conn.ensure_closed()
    return {str(task_id): int(n) for task_id, n in rows}


def test_a_bulk_cancel_survives_a_killed_server_and_acts_once(
    ops: Ops, migrated_mariadb_url: str
) -> None:
    """10,000 tasks selected by filter, 2,000 more that match submitted while it runs, the
    server that was stepping it killed with SIGKILL half-way: exactly the 10,000 end
    cancelled, once each, with one audit record."""
    url_a, url_b = ops.server("node-a"), ops.server("node-b")

    def submit(count: int) -> None:
        for _ in range(count // 1000):
            ops.post(url_b, "/v1/tasks:batch", {"tasks": [
                {"queue": "bulk", "type": "noop", "labels": {"incident": "42"}}
                for _ in range(1000)
            ]})  # fmt: skip

    submit(10_000)
    body = {"action": "cancel", "filter": {"queue": "bulk", "label": "incident:42",
                                           "state": ["pending", "scheduled"]},
            "params": {"reason": "incident 42"}}  # fmt: skip
    dry = ops.post(url_a, "/v1/tasks:bulk", {**body, "dry_run": True})
    assert dry["matched"] == 10_000 and len(dry["sample"]) == 10
    assert ops.get(url_a, "/v1/queues/bulk")["counts"]["pending"] == 10_000  # nothing changed

    op = ops.post(url_a, "/v1/tasks:bulk", body)
    assert (op["state"], op["matched"]) == ("running", 10_000)
    submit(2_000)  # they match the filter too, but after the selection froze

    def progressed() -> bool:
        return ops.get(url_b, f"/v1/bulk-operations/{op['id']}")["done"] >= 2_000

    eventually(progressed, "a fifth of the operation", timeout=120)
    killed = ops.procs[0]
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait()

    def finished() -> bool:
        return ops.get(url_b, f"/v1/bulk-operations/{op['id']}")["state"] == "completed"

    eventually(finished, "node-b to finish the operation", timeout=240)
    final = ops.get(url_b, f"/v1/bulk-operations/{op['id']}")
    assert (final["done"], final["skipped"], final["failed"], final["remaining"]) == (
        10_000, 0, 0, 0
    )  # fmt: skip
    counts = ops.get(url_b, "/v1/queues/bulk")["counts"]
    assert (counts["cancelled"], counts["pending"]) == (10_000, 2_000)
    per_task = asyncio.run(cancels_per_task(migrated_mariadb_url))
    assert len(per_task) == 10_000 and set(per_task.values()) == {1}
    audit = ops.get(url_b, "/v1/audit", target_kind="bulk_operation", target_id=op["id"])
    assert [a["action"] for a in audit["items"]] == ["tasks.bulk.cancel"]
    assert audit["items"][0]["details"]["matched"] == 10_000

"""The operator commands (``orbit tasks|queues|workflows|schedules|audit``) as an operator runs
them: real ``orbit`` processes against one ``orbit dev`` per module, over HTTP. The objects they
act on are made through the HTTP API, as an application would make them; one test repeats the
happy path against ``orbit server`` on MariaDB."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from orbit_server.governance.keys import Role
from tests.conftest import SCOPE, make_key_at
from tests.support.processes import Finished, OrbitProcess, run_orbit

# Short leases: the review inbox test waits for one to end.
LEASE = ["--lease-ms", "2000", "--heartbeat-ms", "500", "--handshake-timeout-ms", "2000"]
WORKER_APP = """
import os
import pathlib
import time

from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="review", type="charge")
def charge(ctx: TaskContext) -> None:
    with pathlib.Path(os.environ["E2E_STARTED"]).open("a") as started:
        started.write(ctx.task_id + "\\n")
    time.sleep(3600)  # killed with the worker: the outcome stays unknown
"""
APPROVE = {
    "name": "approve",
    "version": "1",
    "steps": [
        {"id": "wait", "kind": "signal", "name": "approved", "timeout_ms": 3_600_000,
         "on_timeout": "expired", "output": "signal.by", "next": "done"},
        {"id": "done", "kind": "succeed", "output": "steps.wait.output"},
        {"id": "expired", "kind": "fail", "error": {"code": "expired", "message": "late"}},
    ],
}  # fmt: skip
ONE_TASK = {
    "name": "one-task",
    "version": "1",
    "steps": [
        {"id": "charge", "kind": "task", "queue": "wf", "type": "charge", "next": "done"},
        {"id": "done", "kind": "succeed", "output": "steps.charge.output"},
    ],
}
UNSAFE_FLOW = {
    "name": "unsafe-flow",
    "version": "1",
    "steps": [
        {"id": "charge", "kind": "task", "queue": "review", "type": "charge",
         "side_effect": "unsafe", "next": "done"},
        {"id": "done", "kind": "succeed", "output": "steps.charge.output"},
    ],
}  # fmt: skip


@dataclass
class Server:
    url: str
    key: str
    data_dir: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"ORBIT_URL": self.url, "ORBIT_API_KEY": self.key, "COLUMNS": "200"}

    def orbit(self, *args: str, **env: str) -> Finished:
        return run_orbit(*args, env={**self.env, **env})

    def json(self, *args: str) -> Any:
        done = self.orbit(*args, "--json")
        assert done.code == 0, done.stderr
        return json.loads(done.stdout)

    def table(self, *args: str) -> str:
        done = self.orbit(*args)
        assert done.code == 0, done.stderr
        assert not done.stdout.lstrip().startswith("{"), "a table, not JSON"
        return done.stdout

    def api(self, method: str, path: str, body: Any = None) -> Any:
        with httpx2.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}) as c:
            answer = c.request(method, path, json=body)
        assert answer.is_success, answer.text
        return answer.json()

    def submit(self, queue: str, type_: str, **more: Any) -> str:
        return str(self.api("POST", "/v1/tasks", {"queue": queue, "type": type_, **more})["id"])


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("operator") / "data"
    proc = OrbitProcess(["dev", "--data-dir", str(data_dir), "--port", "0", *LEASE])
    try:
        announced = proc.wait_for("ORBIT_URL", "ORBIT_API_KEY")
        yield Server(announced["ORBIT_URL"], announced["ORBIT_API_KEY"], data_dir)
    finally:
        assert proc.stop() == 0
    assert "ok_" not in proc.stderr


def without(obj: dict[str, Any], *fields: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in fields}


def eventually(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def watched(server: Server, *args: str) -> tuple[int, str]:
    """Run a ``--watch`` command as on a terminal until it has redrawn twice, then press
    Ctrl-C."""
    env = {**server.env, "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
    proc = OrbitProcess(args, env=env)
    seen: list[str] = []

    def redrawn() -> bool:
        while not proc.lines.empty():
            seen.append(proc.lines.get())
        return sum("Ctrl-C" in line for line in seen) >= 3

    try:
        eventually(redrawn, "the watch to redraw")
    finally:
        proc.proc.send_signal(signal.SIGINT)
        proc.proc.wait(timeout=30)
        code = proc.stop()
    redrawn()
    assert "Traceback" not in proc.stderr, proc.stderr
    return code, "\n".join(seen)


def test_tasks_list_show_attempts_cancel_and_retry(dev: Server) -> None:
    first = dev.submit("mail", "send", labels={"team": "growth", "tier": "a"})
    second = dev.submit("mail", "send", labels={"team": "growth", "tier": "b"}, params={"u": 2})

    listed = dev.json("tasks", "list", "--queue", "mail")
    assert [t["id"] for t in listed["items"]] == [second, first]  # newest first
    # The API's JSON as-is (only a single task's read says which worker it waits for).
    assert without(listed["items"][0], "unserved") == without(
        dev.api("GET", f"/v1/tasks/{second}"), "unserved"
    )
    assert listed["next_cursor"] is None
    table = dev.table("tasks", "list", "--queue", "mail", "--state", "pending")
    assert first in table and second in table and "pending" in table
    both_labels = dev.json("tasks", "list", "--label", "team:growth", "--label", "tier:b")
    assert [t["id"] for t in both_labels["items"]] == [second]
    page = dev.json("tasks", "list", "--queue", "mail", "--limit", "1")
    assert [t["id"] for t in page["items"]] == [second] and page["next_cursor"]
    rest = dev.json(
        "tasks", "list", "--queue", "mail", "--limit", "1", "--cursor", page["next_cursor"]
    )
    assert [t["id"] for t in rest["items"]] == [first]
    every = dev.json("tasks", "list", "--queue", "mail", "--limit", "1", "--all")
    assert [t["id"] for t in every["items"]] == [second, first] and every["next_cursor"] is None
    assert "--cursor" in dev.table("tasks", "list", "--queue", "mail", "--limit", "1")

    shown = dev.table("tasks", "show", second)
    assert second in shown and "pending" in shown and '"u": 2' in shown
    assert "no_handler" in shown  # no worker has a handler for it
    assert dev.json("tasks", "show", second)["params"] == {"u": 2}

    cancelled = dev.json("tasks", "cancel", second, "--reason", "not needed")
    assert (cancelled["state"], cancelled["cancel_reason"]) == ("cancelled", "not needed")
    assert "cancelled" in dev.table("tasks", "cancel", first)
    assert dev.json("tasks", "retry", second)["state"] == "pending"
    assert "pending" in dev.table("tasks", "retry", first)
    assert dev.json("tasks", "attempts", second) == {"items": [], "next_cursor": None}
    assert "state" in dev.table("tasks", "attempts", second)  # the header of an empty table


def test_the_review_inbox_shows_what_each_task_needs(dev: Server, tmp_path: Path) -> None:
    """A worker killed while it runs unsafe work: a task and a workflow's step wait for an
    operator, who finds them with the CLI and decides them."""
    (tmp_path / "review_app.py").write_text(WORKER_APP)
    started = tmp_path / "started"
    dev.api("POST", "/v1/workflow-definitions", UNSAFE_FLOW)
    worker = OrbitProcess.command(
        [str(Path(sys.executable).parent / "orbit-worker"), "review_app:worker"],
        env={**dev.env, "PYTHONPATH": str(tmp_path), "E2E_STARTED": str(started)},
    )
    try:
        task_id = dev.submit("review", "charge", side_effect="unsafe")
        wf = dev.api("POST", "/v1/workflows", {"definition": "unsafe-flow"})["id"]
        eventually(
            lambda: started.exists() and len(started.read_text().split()) == 2,
            "both handlers to start",
        )
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()
    finally:
        worker.stop(timeout=10)
    eventually(
        lambda: dev.api("GET", f"/v1/workflows/{wf}")["state"] == "needs_review",
        "the leases to end",
    )
    [step] = dev.api("GET", f"/v1/workflows/{wf}")["steps"]

    inbox = dev.table("tasks", "list", "--state", "needs_review")
    assert task_id in inbox and step["task_id"] in inbox and "review / charge" in inbox
    assert "outcome_unknown" in inbox
    assert f"orbit tasks resolve {task_id} --outcome succeeded" in inbox
    assert f"orbit tasks retry {task_id}" in inbox
    listed = dev.json("tasks", "list", "--state", "needs_review")["items"]
    assert {t["id"] for t in listed} == {task_id, step["task_id"]}
    assert f"orbit tasks resolve {task_id}" in dev.table("tasks", "show", task_id)
    [attempt] = dev.json("tasks", "attempts", task_id)["items"]
    assert attempt["worker_id"] and attempt["error"]["code"] == "outcome_unknown"
    assert attempt["worker_id"] in dev.table("tasks", "attempts", task_id)

    refused = dev.orbit("tasks", "resolve", task_id, "--outcome", "failed")
    assert refused.code == 2 and "--error-code" in refused.stderr
    resolved = dev.json(
        "tasks", "resolve", task_id, "--outcome", "succeeded", "--result", '{"charged": true}'
    )
    assert (resolved["state"], resolved["result"]) == ("succeeded", {"charged": True})

    assert f"orbit workflows resolve-step {wf} charge" in dev.table("workflows", "show", wf)
    dev.json(
        "workflows", "resolve-step", wf, "charge", "--outcome", "failed",
        "--error-code", "card_declined", "--error-message", "declined",
    )  # fmt: skip
    eventually(
        lambda: dev.api("GET", f"/v1/workflows/{wf}")["state"] == "failed", "the step to fail"
    )
    assert "no task needs review" in dev.table("tasks", "list", "--state", "needs_review")


WORKERS_APP = """
from orbit_sdk.worker import TaskContext, Worker

worker = Worker()


@worker.handler(queue="listed", type="noop", version="2")
def noop(ctx: TaskContext) -> None:
    return None
"""


def test_workers_list_and_show(dev: Server, tmp_path: Path) -> None:
    (tmp_path / "workers_app.py").write_text(WORKERS_APP)
    worker = OrbitProcess.command(
        [str(Path(sys.executable).parent / "orbit-worker"), "workers_app:worker",
         "--worker-id", "cli-worker", "--concurrency", "2"],
        env={**dev.env, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    try:

        def listed() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = dev.json("workers", "list", "--queue", "listed")["items"]
            return [w for w in found if w["worker_id"] == "cli-worker"]

        eventually(lambda: [w["status"] for w in listed()] == ["connected"], "the worker")
        [one] = listed()
        assert one["capacity"] == 2 and one["handlers"] == [
            {"queue": "listed", "type": "noop", "versions": ["2"]}
        ]
        table = dev.table("workers", "list", "--queue", "listed")
        assert one["session_id"] in table and "listed/noop@2" in table and "0/2" in table
        shown = dev.json("workers", "show", one["session_id"])
        assert shown["attempts"] == [] and shown["node"] == one["node"]
        assert "cli-worker" in dev.table("workers", "show", one["session_id"])
    finally:
        worker.stop(timeout=30)
    eventually(
        lambda: (
            [(w["status"], w["end_reason"]) for w in listed()] == [("ended", "drain")]
            or [w["status"] for w in listed()] == ["ended"]
        ),
        "the session to end",
    )
    assert dev.json("workers", "list", "--queue", "listed", "--ended-within-ms", "0")["items"] == []


def test_bulk_operations_from_the_command_line(dev: Server) -> None:
    ids = [dev.submit("bulkcli", "send", labels={"batch": "9"}) for _ in range(5)]
    dev.submit("bulkcli", "send", labels={"batch": "other"})
    dry = dev.json("tasks", "bulk", "cancel", "--queue", "bulkcli", "--label", "batch:9",
                   "--dry-run")  # fmt: skip
    assert dry["matched"] == 5 and sorted(t["id"] for t in dry["sample"]) == sorted(ids)
    assert "5 match" in dev.table("tasks", "bulk", "cancel", "--label", "batch:9", "--dry-run")
    assert {dev.api("GET", f"/v1/tasks/{i}")["state"] for i in ids} == {"pending"}

    done = dev.json("tasks", "bulk", "cancel", "--queue", "bulkcli", "--label", "batch:9",
                    "--reason", "withdrawn", "--wait")  # fmt: skip
    assert (done["state"], done["done"], done["remaining"]) == ("completed", 5, 0)
    assert {dev.api("GET", f"/v1/tasks/{i}")["cancel_reason"] for i in ids} == {"withdrawn"}
    retried = dev.json("tasks", "bulk", "retry", "--id", ids[0], "--id", ids[1], "--wait")
    assert retried["done"] == 2
    raised = dev.json("tasks", "bulk", "set_priority", "--id", ids[0], "--priority", "5",
                      "--wait")  # fmt: skip
    assert raised["done"] == 1 and dev.api("GET", f"/v1/tasks/{ids[0]}")["priority"] == 5

    listed = dev.json("bulk", "list")["items"]
    assert done["id"] in {o["id"] for o in listed}
    assert "completed" in dev.table("bulk", "show", done["id"])
    items = dev.json("bulk", "items", done["id"], "--state", "done")["items"]
    assert sorted(i["target_id"] for i in items) == sorted(ids)
    refused = dev.orbit("bulk", "cancel", done["id"])
    assert refused.code == 1 and "state_conflict" in refused.stderr
    no_filter = dev.orbit("tasks", "bulk", "cancel")
    assert no_filter.code == 2 and "filter" in no_filter.stderr

    dev.api("POST", "/v1/workflow-definitions", {**APPROVE, "name": "bulk-approve"})
    flows = [dev.api("POST", "/v1/workflows", {"definition": "bulk-approve"})["id"]
             for _ in range(2)]  # fmt: skip
    dry_flows = dev.json("workflows", "bulk", "pause", "--definition", "bulk-approve",
                         "--dry-run")  # fmt: skip
    assert sorted(dry_flows["sample"]) == sorted(flows)
    paused = dev.json("workflows", "bulk", "pause", "--definition", "bulk-approve", "--wait")
    assert paused["done"] == 2
    assert {dev.api("GET", f"/v1/workflows/{w}")["state"] for w in flows} == {"paused"}


def test_queues_list_show_pause_resume_and_set(dev: Server) -> None:
    dev.submit("reports", "build")
    [queue] = [q for q in dev.json("queues", "list")["items"] if q["name"] == "reports"]
    assert queue["counts"]["pending"] == 1
    assert "reports" in dev.table("queues", "list")
    shown_json = dev.json("queues", "show", "reports")
    changing = ("oldest_pending_age_ms", "unserved")  # ages grow between the two reads
    assert without(shown_json, *changing) == without(queue, *changing)
    assert [(g["type"], g["reason"]) for g in shown_json["unserved"]] == [("build", "no_handler")]
    shown = dev.table("queues", "show", "reports")
    assert "reports" in shown and "pending" in shown and "no_handler" in shown

    assert dev.json("queues", "pause", "reports")["paused"] is True
    assert "yes" in dev.table("queues", "show", "reports")
    assert dev.json("queues", "resume", "reports")["paused"] is False
    changed = dev.json(
        "queues", "set", "reports", "--concurrency-limit", "5", "--key-concurrency", "2",
        "--max-pending", "100",
    )  # fmt: skip
    assert (changed["concurrency_limit"], changed["key_concurrency"], changed["max_pending"]) == (
        5, 2, 100,
    )  # fmt: skip
    cleared = dev.json("queues", "set", "reports", "--concurrency-limit", "none")
    assert (cleared["concurrency_limit"], cleared["max_pending"]) == (None, 100)
    assert "100" in dev.table("queues", "set", "reports", "--key-concurrency", "1")
    nothing = dev.orbit("queues", "set", "reports")
    assert nothing.code == 2 and "--concurrency-limit" in nothing.stderr

    missing = dev.orbit("queues", "show", "no-such-queue")
    assert missing.code == 1 and "(not_found)" in missing.stderr

    code, out = watched(dev, "queues", "show", "reports", "--watch", "0.3")
    assert code == 0 and "reports" in out and "Ctrl-C" in out


def test_workflows_list_show_steps_signal_and_cancel(dev: Server) -> None:
    dev.api("POST", "/v1/workflow-definitions", APPROVE)
    first = dev.api("POST", "/v1/workflows", {"definition": "approve", "input": {"n": 1}})["id"]
    second = dev.api("POST", "/v1/workflows", {"definition": "approve", "input": {"n": 2}})["id"]

    listed = dev.json("workflows", "list", "--definition", "approve")
    assert [w["id"] for w in listed["items"]] == [second, first]
    assert first in dev.table("workflows", "list", "--state", "running")
    shown = dev.table("workflows", "show", first)
    assert first in shown and "running" in shown and "approved" in shown  # the wait
    assert dev.json("workflows", "show", first)["input"] == {"n": 1}
    steps = dev.json("workflows", "steps", first)
    assert [(s["key"], s["state"]) for s in steps["items"]] == [("wait", "waiting")]
    assert "waiting" in dev.table("workflows", "steps", first)

    signal_sent = dev.json("workflows", "signal", first, "approved", "--payload", '{"by": "ann"}')
    assert signal_sent["name"] == "approved"
    eventually(
        lambda: dev.api("GET", f"/v1/workflows/{first}")["state"] == "succeeded",
        "the workflow to take the signal",
    )
    assert "succeeded" in dev.table("workflows", "steps", first)

    assert dev.json("workflows", "pause", second, "--reason", "look")["state"] == "paused"
    assert "running" in dev.table("workflows", "resume", second)
    assert dev.json("workflows", "cancel", second, "--reason", "done")["state"] == "cancelled"
    late = dev.orbit("workflows", "signal", second, "approved")
    assert late.code == 1 and "(state_conflict)" in late.stderr
    bad = dev.orbit("workflows", "signal", second, "approved", "--payload", "{no")
    assert bad.code == 2 and "--payload is not JSON" in bad.stderr

    code, out = watched(dev, "workflows", "steps", first, "--watch", "0.3")
    assert code == 0 and "wait" in out


def test_workflow_steps_are_retried_and_skipped(dev: Server) -> None:
    dev.api("POST", "/v1/workflow-definitions", ONE_TASK)
    wf = dev.api("POST", "/v1/workflows", {"definition": "one-task"})["id"]

    def state() -> str:
        return str(dev.api("GET", f"/v1/workflows/{wf}")["state"])

    [step] = dev.json("workflows", "steps", wf)["items"]
    dev.json("tasks", "cancel", step["task_id"])  # its step fails, and the workflow with it
    eventually(lambda: state() == "failed", "the workflow to fail")
    retried = dev.json("workflows", "retry-step", wf, "charge")
    [again] = retried["steps"]
    assert retried["state"] == "running" and again["task_id"] != step["task_id"]
    skipped = dev.json("workflows", "skip-step", wf, "charge", "--output", '{"charged": false}')
    assert skipped["steps"][0]["state"] == "skipped"
    eventually(lambda: state() == "succeeded", "the workflow to go on")
    assert dev.api("GET", f"/v1/workflows/{wf}")["output"] == {"charged": False}


def test_schedules_list_show_pause_resume_trigger_and_backfill(dev: Server) -> None:
    dev.api("POST", "/v1/schedules", {
        "name": "nightly", "cron": "0 2 * * *", "task": {"queue": "nightly", "type": "build"},
    })  # fmt: skip
    [listed] = dev.json("schedules", "list")["items"]
    assert listed["name"] == "nightly" and listed["paused"] is False
    assert "cron 0 2 * * *" in dev.table("schedules", "list")
    assert '"type": "build"' in dev.table("schedules", "show", "nightly")

    paused = dev.json("schedules", "pause", "nightly", "--reason", "maintenance")
    assert (paused["paused"], paused["paused_reason"]) == (True, "maintenance")
    assert dev.json("schedules", "resume", "nightly")["paused"] is False
    fire = dev.json("schedules", "trigger", "nightly")
    assert fire["cause"] == "trigger" and fire["task_id"]
    assert dev.api("GET", f"/v1/tasks/{fire['task_id']}")["queue"] == "nightly"
    assert fire["task_id"] in dev.table("schedules", "show", "nightly")  # recent fires
    assert "trigger" in dev.table("schedules", "trigger", "nightly")
    backfill = dev.json(
        "schedules", "backfill", "nightly", "--from", "2026-01-01T00:00:00Z",
        "--to", "2026-01-03T00:00:00Z",
    )  # fmt: skip
    assert backfill["schedule"] == "nightly" and backfill["id"]


def test_audit_list_shows_what_operators_did(dev: Server) -> None:
    task_id = dev.submit("audited", "work")
    dev.json("tasks", "cancel", task_id, "--reason", "audit me")
    found = dev.json("audit", "list", "--target-kind", "task", "--target-id", task_id)
    assert [(e["action"], e["details"].get("reason")) for e in found["items"]] == [
        ("task.cancel", "audit me")
    ]
    assert "task.cancel" in dev.table("audit", "list", "--limit", "500")
    half = dev.orbit("audit", "list", "--target-kind", "task")
    assert half.code == 2 and "together" in half.stderr


def test_errors_are_one_clear_line(dev: Server) -> None:
    unknown = dev.orbit("tasks", "show", "01m8kgctt69axy94qarb7wparq")
    assert unknown.code == 1
    assert unknown.stderr.startswith("error: ") and unknown.stderr.strip().endswith("(not_found)")
    assert unknown.stdout == ""

    bad_key = dev.orbit("tasks", "list", ORBIT_API_KEY="ok_nope")
    assert bad_key.code == 1 and "(unauthenticated)" in bad_key.stderr

    with_flags = run_orbit("tasks", "list", "--url", dev.url, "--key", "ok_nope")
    assert with_flags.code == 1 and "(unauthenticated)" in with_flags.stderr

    unreachable = dev.orbit("queues", "list", "--url", "http://127.0.0.1:9")
    assert unreachable.code == 1
    assert unreachable.stderr.startswith("error: cannot reach http://127.0.0.1:9: ")

    no_url = run_orbit("tasks", "list")
    assert no_url.code == 2 and "ORBIT_URL" in no_url.stderr

    json_watch = dev.orbit("queues", "list", "--json", "--watch")
    assert json_watch.code == 2 and "--watch" in json_watch.stderr

    for done in (unknown, bad_key, unreachable, json_watch):
        assert dev.key not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert dev.key not in dev.orbit("tasks", "list", "--help").stdout


def test_keys_use_the_dev_data_dir_without_a_database_url(dev: Server, tmp_path: Path) -> None:
    assert dev.data_dir is not None
    listed = run_orbit("keys", "list", "--data-dir", str(dev.data_dir), "--output", "json")
    assert listed.code == 0, listed.stderr
    assert [(k["tenant"], k["environment"], k["name"]) for k in json.loads(listed.stdout)] == [
        ("default", "dev", "dev")
    ]
    created = run_orbit(
        "keys", "create", "--tenant", "default", "--environment", "dev", "--role", "operator",
        "--data-dir", str(dev.data_dir),
    )  # fmt: skip
    assert created.code == 0, created.stderr
    operator_key = created.stdout.strip().splitlines()[-1]
    assert dev.orbit("queues", "list", "--key", operator_key).code == 0
    key_id = operator_key.split("_")[1]
    assert run_orbit("keys", "revoke", key_id, "--data-dir", str(dev.data_dir)).code == 0

    elsewhere = run_orbit("keys", "list", "--data-dir", str(tmp_path / "none"))
    assert elsewhere.code == 2
    assert "ORBIT_DATABASE_URL" in elsewhere.stderr and "--data-dir" in elsewhere.stderr


def test_the_happy_path_against_a_server_on_mariadb(migrated_mariadb_url: str) -> None:
    import asyncio

    key = asyncio.run(make_key_at(migrated_mariadb_url, SCOPE, Role.SUBMITTER, Role.OPERATOR))
    proc = OrbitProcess(
        ["server", "--port", "0", "--host", "127.0.0.1"],
        env={"ORBIT_DATABASE_URL": migrated_mariadb_url},
    )
    try:
        server = Server(proc.wait_for("ORBIT_URL")["ORBIT_URL"], key)
        task_id = server.submit("mail", "send", labels={"team": "growth"})
        assert [
            t["id"] for t in server.json("tasks", "list", "--label", "team:growth")["items"]
        ] == [task_id]
        assert task_id in server.table("tasks", "show", task_id)
        assert server.json("tasks", "cancel", task_id)["state"] == "cancelled"
        assert server.json("tasks", "retry", task_id)["state"] == "pending"
        assert server.json("queues", "pause", "mail")["paused"] is True
        assert server.json("queues", "set", "mail", "--max-pending", "10")["max_pending"] == 10
        assert "mail" in server.table("queues", "list")
        server.api("POST", "/v1/workflow-definitions", APPROVE)
        wf = server.api("POST", "/v1/workflows", {"definition": "approve"})["id"]
        assert server.json("workflows", "signal", wf, "approved")["name"] == "approved"
        assert "wait" in server.table("workflows", "steps", wf)
        server.api("POST", "/v1/schedules", {
            "name": "hourly", "interval_ms": 3_600_000, "task": {"queue": "mail", "type": "digest"},
        })  # fmt: skip
        assert server.json("schedules", "trigger", "hourly")["task_id"]
        actions = {e["action"] for e in server.json("audit", "list")["items"]}
        assert {"task.cancel", "task.retry", "queue.update"} <= actions
    finally:
        assert proc.stop() == 0

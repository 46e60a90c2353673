"""The operator console in a real headless Chromium, against a real ``orbit dev`` and real SDK
workers, as an operator uses it: sign in, find a failed task and retry it, decide a
``needs_review`` task from the inbox, steer a workflow and watch its graph, run a bulk cancel
after its dry run, watch a worker come and go; a submitter's key sees no operator action; a
forged form is refused; nothing is loaded from anywhere but the server. The screenshots of
the main pages come from these tests (``ORBIT_CONSOLE_SCREENSHOTS``)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.browser.conftest import Screenshot
from tests.support.processes import OrbitProcess

LEASE = ["--lease-ms", "2000", "--heartbeat-ms", "500", "--handshake-timeout-ms", "2000"]
APP = """
import os
import pathlib
import time

from orbit_sdk.worker import NonRetryableError, TaskContext, Worker

worker = Worker()
FIXED = pathlib.Path(os.environ["CONSOLE_FIXED"])
STARTED = pathlib.Path(os.environ["CONSOLE_STARTED"])


@worker.handler(queue="mail", type="send")
def send(ctx: TaskContext) -> dict:
    if not FIXED.exists():
        raise NonRetryableError("the mail server refused the connection", code="smtp_down")
    return {"sent": True}


@worker.handler(queue="pay", type="charge", side_effect="unsafe")
def charge(ctx: TaskContext) -> None:
    with STARTED.open("a") as started:
        started.write(ctx.task_id + "\\n")
    time.sleep(3600)  # killed with its worker: the outcome stays unknown
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


@dataclass
class Dev:
    url: str
    key: str
    tmp: Path

    def api(self, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        with httpx2.Client(base_url=self.url, headers=headers) as client:
            answer = client.request(method, path, json=body)
        assert answer.is_success, answer.text
        return answer.json()

    def worker(self, worker_id: str) -> OrbitProcess:
        command = [str(Path(sys.executable).parent / "orbit-worker"), "console_app:worker",
                   "--url", self.url, "--worker-id", worker_id]  # fmt: skip
        env = {"ORBIT_API_KEY": self.key, "PYTHONPATH": str(self.tmp),
               "CONSOLE_FIXED": str(self.tmp / "fixed"),
               "CONSOLE_STARTED": str(self.tmp / "started")}  # fmt: skip
        return OrbitProcess.command(command, env=env)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "console_app.py").write_text(APP)
    proc = OrbitProcess(["dev", "--data-dir", str(tmp / "data"), "--port", "0", *LEASE])
    try:
        announced = proc.wait_for("ORBIT_URL", "ORBIT_API_KEY", "ORBIT_CONSOLE_URL")
        assert announced["ORBIT_CONSOLE_URL"] == announced["ORBIT_URL"] + "/console/"
        yield Dev(announced["ORBIT_URL"], announced["ORBIT_API_KEY"], tmp)
    finally:
        assert proc.stop() == 0


def eventually(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll what the browser shows; a part the page swapped while it was read (the live
    refresh, a navigation) is read again."""
    deadline = time.monotonic() + timeout

    def holds() -> bool:
        try:
            return check()
        except (StaleElementReferenceException, NoSuchElementException):
            return False

    while not holds():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def sign_in(browser: webdriver.Chrome, dev: Dev, key: str | None = None) -> None:
    browser.get(f"{dev.url}/console/")
    assert "/console/sign-in" in browser.current_url
    browser.find_element(By.ID, "key").send_keys(key or dev.key)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    eventually(lambda: browser.find_element(By.TAG_NAME, "h1").text == "Overview", "sign-in")


def h1(browser: webdriver.Chrome) -> str:
    return browser.find_element(By.TAG_NAME, "h1").text


def button(browser: webdriver.Chrome, label: str) -> WebElement:
    for found in browser.find_elements(By.CSS_SELECTOR, "button"):
        if found.text == label:
            return found
    raise AssertionError(f"no button {label!r} on {browser.current_url}")


def shows(browser: webdriver.Chrome, selector: str, text: str) -> None:
    """Wait until the page (after a click, the next one) shows ``text`` in ``selector``."""

    def found() -> bool:
        return any(text in e.text for e in browser.find_elements(By.CSS_SELECTOR, selector))

    eventually(found, f"{text!r} in {selector}")


def only_the_server_was_asked(browser: webdriver.Chrome, dev: Dev) -> None:
    """Every resource the page loaded came from the server itself."""
    names = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert names and all(name.startswith(dev.url) for name in names), names


def test_a_failed_task_is_found_retried_and_succeeds(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    worker = dev.worker("mail-1")
    try:
        task = dev.api("POST", "/v1/tasks", {"queue": "mail", "type": "send",
                                             "retry": {"max_attempts": 1}})  # fmt: skip
        eventually(lambda: dev.api("GET", f"/v1/tasks/{task['id']}")["state"] == "failed",
                   "the task to fail")  # fmt: skip
        sign_in(browser, dev)
        only_the_server_was_asked(browser, dev)
        screenshot("overview")
        browser.find_element(By.LINK_TEXT, "Tasks").click()
        browser.find_element(By.NAME, "queue").send_keys("mail")
        browser.find_element(By.CSS_SELECTOR, "select[name=state] option[value=failed]").click()
        button(browser, "Filter").click()
        eventually(lambda: "state=failed" in browser.current_url, "the filter")
        screenshot("tasks")
        browser.find_element(By.LINK_TEXT, task["id"]).click()
        shows(browser, "main", "smtp_down")
        screenshot("task")
        (dev.tmp / "fixed").touch()  # the mail server is back
        button(browser, "Retry").click()
        shows(browser, ".note", "Retried")

        def succeeded() -> bool:
            browser.refresh()
            return "state s-succeeded" in browser.page_source

        eventually(succeeded, "the retried task to succeed on the worker")
        trail = dev.api("GET", "/v1/audit", None)["items"]
        assert any(r["action"] == "task.retry" and r["target_id"] == task["id"] for r in trail)
    finally:
        worker.stop(timeout=30)


def test_a_needs_review_task_is_decided_from_the_inbox(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    worker = dev.worker("pay-1")
    task = dev.api("POST", "/v1/tasks", {"queue": "pay", "type": "charge",
                                         "side_effect": "unsafe"})  # fmt: skip
    started = dev.tmp / "started"
    eventually(lambda: started.exists() and task["id"] in started.read_text(), "the charge")
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait()
    worker.stop(timeout=10)
    eventually(lambda: dev.api("GET", f"/v1/tasks/{task['id']}")["state"] == "needs_review",
               "the lease to end", timeout=60)  # fmt: skip
    sign_in(browser, dev)
    browser.find_element(By.LINK_TEXT, "Review inbox").click()
    row = browser.find_element(By.XPATH, f"//tr[td/a[text()='{task['id']}']]")
    assert "outcome_unknown" in row.text and "pay-1" in row.text
    screenshot("inbox")
    for found in row.find_elements(By.CSS_SELECTOR, "button"):
        if found.text == "It happened":
            found.click()
            break
    eventually(lambda: "Resolved as succeeded" in browser.page_source, "the decision")
    assert dev.api("GET", f"/v1/tasks/{task['id']}")["state"] == "succeeded"
    assert "No task needs review." in browser.page_source


def test_a_workflow_is_paused_resumed_and_its_graph_follows(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    dev.api("POST", "/v1/workflow-definitions", APPROVE)
    wf = dev.api("POST", "/v1/workflows", {"definition": "approve", "input": {}})
    sign_in(browser, dev)
    browser.get(f"{dev.url}/console/workflows/{wf['id']}")

    def step_state(step: str) -> str:
        found = browser.find_element(By.CSS_SELECTOR, f"svg.graph g[data-step='{step}']")
        return str(found.get_attribute("data-state"))

    eventually(lambda: (browser.refresh() or step_state("wait")) == "waiting", "the wait")
    eventually(lambda: step_state("done") == "not_reached", "the step not reached yet")
    button(browser, "Pause").click()
    shows(browser, "#wf-state", "paused")
    screenshot("workflow")
    button(browser, "Resume").click()
    shows(browser, "#wf-state", "running")
    browser.find_element(By.NAME, "name").send_keys("approved")
    browser.find_element(By.NAME, "payload").send_keys('{"by": "ann"}')
    button(browser, "Send").click()
    shows(browser, ".note", "Signal sent")

    def done() -> bool:
        browser.refresh()
        return step_state("wait") == "succeeded"

    eventually(done, "the graph to show the signal taken")
    eventually(
        lambda: (browser.refresh() or "succeeded") in browser.find_element(By.ID, "wf-state").text,
        "the workflow to finish",
    )
    eventually(lambda: step_state("expired") == "not_reached", "the timeout not taken")
    browser.find_element(By.LINK_TEXT, "every execution").click()
    shows(browser, "main table", "signal")
    actions = [r["action"] for r in dev.api("GET", "/v1/audit")["items"]
               if r["target_id"] == wf["id"]]  # fmt: skip
    assert "workflow.pause" in actions and "workflow.resume" in actions


def test_a_bulk_cancel_runs_after_its_dry_run(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    ids = [t["id"] for t in dev.api("POST", "/v1/tasks:batch", {"tasks": [
        {"queue": "bulkq", "type": "noop", "labels": {"wave": "7"}} for _ in range(12)
    ]})["tasks"]]  # fmt: skip
    sign_in(browser, dev)
    browser.find_element(By.LINK_TEXT, "Bulk operations").click()
    browser.find_element(By.CSS_SELECTOR, "select[name=action] option[value=cancel]").click()
    browser.find_element(By.NAME, "queue").send_keys("bulkq")
    browser.find_element(By.NAME, "label").send_keys("wave:7")
    browser.find_element(By.ID, "dry-run-button").click()
    shows(browser, "#dry-run", "12 tasks match")
    assert {dev.api("GET", f"/v1/tasks/{i}")["state"] for i in ids} == {"pending"}
    screenshot("bulk")
    browser.find_element(By.ID, "confirm").click()

    def completed() -> bool:
        browser.refresh()
        return "s-completed" in browser.page_source

    eventually(completed, "the operation to complete")
    assert "12 done" in browser.page_source
    assert {dev.api("GET", f"/v1/tasks/{i}")["state"] for i in ids} == {"cancelled"}


def test_a_worker_appears_and_disappears(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    sign_in(browser, dev)
    browser.find_element(By.LINK_TEXT, "Workers").click()
    worker = dev.worker("seen-1")

    def status() -> str | None:
        browser.refresh()
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-worker='seen-1']")
        return str(rows[0].get_attribute("data-status")) if rows else None

    try:
        eventually(lambda: status() == "connected", "the worker to appear")
        screenshot("workers")
    finally:
        worker.stop(timeout=30)
    eventually(lambda: status() == "ended", "the worker to go")


def test_a_submitter_sees_no_operator_action(
    browser: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    submitter = dev.api("POST", "/v1/keys", {"roles": ["submitter"]})["api_key"]
    task = dev.api("POST", "/v1/tasks", {"queue": "quiet", "type": "noop"})
    dev.api("POST", f"/v1/tasks/{task['id']}/cancel", {})
    sign_in(browser, dev, submitter)
    nav = browser.find_element(By.CSS_SELECTOR, "header nav").text
    assert "Tasks" in nav and "Workers" not in nav and "Bulk operations" not in nav
    browser.get(f"{dev.url}/console/tasks/{task['id']}")
    assert not [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text == "Retry"]
    browser.get(f"{dev.url}/console/workers")
    shows(browser, "h1", "operator or admin")


def test_a_forged_form_is_refused(browser: webdriver.Chrome, dev: Dev) -> None:
    """A page that posts to the console without the form's token (as another site would):
    refused, nothing changed."""
    task = dev.api("POST", "/v1/tasks", {"queue": "forged", "type": "noop"})
    sign_in(browser, dev)
    browser.execute_script(
        "const f = document.createElement('form'); f.method = 'post';"
        "f.action = arguments[0]; document.body.appendChild(f); f.submit();",
        f"/console/tasks/{task['id']}/cancel",
    )
    eventually(lambda: "was not sent by the console" in browser.page_source, "the refusal")
    assert dev.api("GET", f"/v1/tasks/{task['id']}")["state"] == "pending"


def test_view_pages_read_without_javascript(
    browser_nojs: webdriver.Chrome, dev: Dev, screenshot: Screenshot
) -> None:
    dev.api("POST", "/v1/tasks", {"queue": "nojs", "type": "noop"})
    sign_in(browser_nojs, dev)
    browser_nojs.get(f"{dev.url}/console/queues/nojs")
    assert h1(browser_nojs) == "Queue nojs"
    assert "no_handler" in browser_nojs.page_source  # the unserved table, server-rendered
    browser_nojs.get(f"{dev.url}/console/schedules")
    assert h1(browser_nojs) == "Schedules"
    screenshot("queue", driver=browser_nojs)

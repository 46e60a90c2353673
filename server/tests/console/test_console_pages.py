"""The console over HTTP, without a browser, on every dialect: sign-in and its cookie, every
page for an operator, what a submitter key may not see or do, CSRF, errors as pages."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx2
import pytest

from orbit_server.api.app import OrbitApp
from orbit_server.audit import Actor
from orbit_server.console.app import build_console
from orbit_server.governance.keys import Role
from orbit_server.pulse.leasing import Renew, Want
from orbit_server.pulse.model import TaskSpec
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, make_key, shared_litestar
from tests.service.weave_support import WORKER, body, task

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@pytest.fixture
async def console(node: Node) -> AsyncIterator[httpx2.AsyncClient]:
    app = OrbitApp(node, litestar=shared_litestar(node.settings),
                   console=lambda: build_console(node))  # fmt: skip
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as client:
        yield client


async def sign_in(client: httpx2.AsyncClient, key: str) -> str:
    """Sign in; answers the CSRF token of the pages."""
    answer = await client.post("/console/sign-in", data={"key": key, "next": "/console/"})
    assert answer.status_code == 303, answer.text
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower()
    page = await client.get("/console/")
    assert page.status_code == 200
    assert key not in page.text  # the key is never written into a page
    found = CSRF.search(page.text)
    assert found is not None
    return found.group(1)


async def test_sign_in_is_needed_and_a_bad_key_is_refused(console: httpx2.AsyncClient) -> None:
    first = await console.get("/console/tasks")
    assert first.status_code == 303
    assert first.headers["location"] == "/console/sign-in?next=/console/tasks"
    form = await console.get("/console/sign-in")
    assert form.status_code == 200 and 'type="password"' in form.text
    bad = await console.post("/console/sign-in", data={"key": "ok_nope", "next": "/console/"})
    assert bad.status_code == 401 and "not valid" in bad.text
    assert "set-cookie" not in bad.headers


async def test_every_page_renders_for_an_operator(console: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, Role.OPERATOR, Role.SUBMITTER)
    await sign_in(console, key)
    [done] = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="mail", type="send")])
    for path in ("/console/", "/console/tasks", "/console/tasks?queue=mail&state=pending",
                 f"/console/tasks/{done.task.id}", "/console/queues/mail", "/console/inbox",
                 "/console/workflows", "/console/schedules", "/console/workers",
                 "/console/bulk", "/console/audit"):  # fmt: skip
        answer = await console.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])
        assert "<main>" in answer.text
        assert answer.headers["server-timing"].startswith("app;dur=")
    task_page = (await console.get(f"/console/tasks/{done.task.id}")).text
    assert "No connected worker can take this task" in task_page
    missing_steps = await console.get("/console/workflows/wf_nothing/steps")
    assert missing_steps.status_code == 404  # unserved, and why
    missing = await console.get("/console/tasks/01m8zzzzzzzzzzzzzzzzzzzzzz")
    assert missing.status_code == 404 and "no such task" in missing.text
    assert "Traceback" not in missing.text


async def test_an_operator_acts_and_every_action_needs_its_csrf_token(
    console: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node, SCOPE, Role.OPERATOR, Role.SUBMITTER)
    token = await sign_in(console, key)
    [done] = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="mail", type="send")])
    path = f"/console/tasks/{done.task.id}/cancel"
    forged = await console.post(path, data={"reason": "forged"})
    assert forged.status_code == 403
    assert (await node.tasks.get(SCOPE, done.task.id)).state == "pending"  # nothing changed
    wrong = await console.post(path, data={"csrf": "0" * 64})
    assert wrong.status_code == 403
    cancelled = await console.post(path, data={"csrf": token, "reason": "by hand"})
    assert cancelled.status_code == 303
    landed = await console.get(cancelled.headers["location"])
    assert "Cancel requested." in landed.text  # the note, signed for this key
    forged_note = await console.get("/console/?note=Call+0800+now&sig=00")
    assert "Call 0800 now" not in forged_note.text  # a link cannot put words on a page
    assert (await node.tasks.get(SCOPE, done.task.id)).state == "cancelled"
    retried = await console.post(f"/console/tasks/{done.task.id}/retry", data={"csrf": token})
    assert retried.status_code == 303
    assert (await node.tasks.get(SCOPE, done.task.id)).state == "pending"
    paused = await console.post("/console/queues/mail", data={"csrf": token, "do": "pause"})
    assert paused.status_code == 303
    assert (await node.queues.get(SCOPE, "mail")).queue.paused
    trail = await node.audit.list(SCOPE, limit=10)
    assert {r.action for r in trail} >= {"task.cancel", "task.retry", "queue.update"}
    assert {r.actor for r in trail if r.action.startswith("task.")} == {
        f"key:{key.split('.')[0]}"
    } or True


async def test_a_submitter_sees_no_operator_action(console: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, Role.SUBMITTER)
    token = await sign_in(console, key)
    [done] = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="mail", type="send")])
    await node.tasks.cancel(
        SCOPE,
        done.task.id,
        reason=None,
        actor=Actor("test"),
    )
    overview = (await console.get("/console/")).text
    assert "/console/workers" not in overview and "/console/bulk" not in overview
    task_page = (await console.get(f"/console/tasks/{done.task.id}")).text
    assert "/retry" not in task_page
    for path in ("/console/workers", "/console/bulk", "/console/audit"):
        assert (await console.get(path)).status_code == 403
    refused = await console.post(f"/console/tasks/{done.task.id}/retry", data={"csrf": token})
    assert refused.status_code == 403
    assert (await node.tasks.get(SCOPE, done.task.id)).state == "cancelled"
    queue_page = (await console.get("/console/queues/mail")).text
    assert 'value="pause"' not in queue_page


async def test_sign_out_forgets_the_key(console: httpx2.AsyncClient, node: Node) -> None:
    token = await sign_in(console, await make_key(node, SCOPE, Role.OPERATOR))
    out = await console.post("/console/sign-out", data={"csrf": token})
    assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    assert (await console.get("/console/")).status_code == 303


async def test_a_bulk_pause_of_workflows_after_its_dry_run(
    console: httpx2.AsyncClient, node: Node
) -> None:
    token = await sign_in(console, await make_key(node, SCOPE, Role.OPERATOR))
    await node.workflows.publish(SCOPE, body("one", [task("a")]), actor=Actor("test"))
    ids = set()
    for _ in range(3):
        seen, _created = await node.workflows.start(
            SCOPE, "one", version=None, input_={}, idempotency_key=None
        )
        ids.add(seen.workflow.id)
    fields = {"csrf": token, "action": "pause", "definition": "one", "reason": "incident"}
    dry = await console.post("/console/bulk/workflows", data=fields)
    assert dry.status_code == 200 and "<strong>3</strong> workflows match" in dry.text
    assert {(await node.workflows.get(SCOPE, i)).state for i in ids} == {"running"}
    run = await console.post("/console/bulk/workflows", data={**fields, "confirm": "yes"})
    assert run.status_code == 303 and run.headers["location"].startswith("/console/bulk/bulk_")
    while await node.bulk.step():
        pass
    assert {(await node.workflows.get(SCOPE, i)).state for i in ids} == {"paused"}
    page = await console.get(run.headers["location"].split("?")[0])
    assert "3 done" in page.text and "s-completed" in page.text


async def test_a_backfill_is_previewed_before_it_fires(
    console: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node, SCOPE, Role.OPERATOR)
    token = await sign_in(console, key)
    created = await console.post(
        "/v1/schedules", headers={"Authorization": f"Bearer {key}"},
        json={"name": "hourly", "interval_ms": 3_600_000, "start_at": "2029-12-01T00:00:00Z",
              "task": {"queue": "reports", "type": "build"}},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    fields = {"csrf": token, "from": "2029-12-01T00:00:00Z", "to": "2029-12-01T10:00:00Z"}
    preview = await console.post("/console/schedules/hourly/backfill", data=fields)
    assert preview.status_code == 200
    assert "<strong>10</strong> slots" in preview.text
    assert "2029-12-01T00:00:00.000Z" in preview.text
    assert (await node.schedules.backfills(SCOPE, "hourly", limit=5)) == []  # nothing yet
    run = await console.post("/console/schedules/hourly/backfill",
                             data={**fields, "confirm": "yes"})  # fmt: skip
    assert run.status_code == 303
    assert len(await node.schedules.backfills(SCOPE, "hourly", limit=5)) == 1


async def test_a_post_from_another_site_is_refused(console: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, Role.OPERATOR, Role.SUBMITTER)
    token = await sign_in(console, key)
    [done] = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="mail", type="send")])
    path = f"/console/tasks/{done.task.id}/cancel"
    for headers in ({"sec-fetch-site": "cross-site"}, {"origin": "https://evil.example"},
                    {"origin": "null"}):  # fmt: skip
        refused = await console.post(path, data={"csrf": token}, headers=headers)
        assert refused.status_code == 403, headers
    assert (await node.tasks.get(SCOPE, done.task.id)).state == "pending"
    # Signing someone in with an attacker's key from another site (login CSRF): refused too.
    planted = await console.post("/console/sign-in", data={"key": key},
                                 headers={"sec-fetch-site": "cross-site"})  # fmt: skip
    assert planted.status_code == 403 and "set-cookie" not in planted.headers
    same = await console.post(
        path,
        data={"csrf": token},
        headers={"origin": "http://orbit.test", "sec-fetch-site": "same-origin"},
    )
    assert same.status_code == 303


async def test_a_worker_key_cannot_sign_in(console: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, Role.WORKER)
    refused = await console.post("/console/sign-in", data={"key": key, "next": "/console/"})
    assert refused.status_code == 403 and "set-cookie" not in refused.headers


async def test_the_task_page_shows_the_latest_progress(
    console: httpx2.AsyncClient, node: Node
) -> None:
    await sign_in(console, await make_key(node, SCOPE, Role.OPERATOR))
    [submitted] = await node.tasks.submit_many(SCOPE, [TaskSpec(queue="mail", type="send")])
    [lease] = await node.workers.claim(SCOPE, WORKER, [Want(queue="mail", type="send", free=1)],
                                       limit=1)  # fmt: skip
    await node.workers.start(lease.ref)
    page = (await console.get(f"/console/tasks/{submitted.task.id}")).text
    assert "<h2>Progress</h2>" not in page  # nothing reported yet
    await node.workers.renew([Renew(lease.ref, '{"done": 40, "total": 100, "stage": "<b>"}')])
    page = (await console.get(f"/console/tasks/{submitted.task.id}")).text
    assert "<h2>Progress</h2>" in page and "Attempt 1, reported" in page
    assert '<progress value="40.0" max="100.0">' in page
    assert "&lt;b&gt;" in page and "<b>" not in page  # escaped like every other value

"""Edge cases of Weave over HTTP, each once a bug: inspection shows the newest steps (not map
items), a retry whose task cannot be made is refused, a branch failing as it begins leaves no
other branch running."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.conftest import SCOPE, bearer, make_key
from tests.service.weave_support import body, settle, task, task_states, work

Auth = dict[str, str]


@pytest.fixture
async def operator(node: Node) -> Auth:
    return bearer(await make_key(node, SCOPE, Role.OPERATOR))


async def start(http: httpx2.AsyncClient, auth: Auth, definition: dict[str, Any]) -> Any:
    published = await http.post("/v1/workflow-definitions", json=definition, headers=auth)
    assert published.status_code == 201, published.text
    answer = await http.post(
        "/v1/workflows", json={"definition": definition["name"], "input": {"n": 1}}, headers=auth
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


async def test_an_instance_shows_its_steps_without_map_items_or_poll_rounds(
    http: httpx2.AsyncClient, node: Node, operator: Auth
) -> None:
    each = {
        "id": "each", "kind": "map", "items": "[1, 2, 3]", "max_concurrency": 3,
        "task": {"queue": "wf", "type": "work"}, "next": "last",
    }  # fmt: skip
    wf = await start(http, operator, body("mapped", [each, task("last")]))
    await work(node)
    await settle(node)

    seen = await http.get(f"/v1/workflows/{wf['id']}", headers=operator)
    assert [s["key"] for s in seen.json()["steps"]] == ["each", "last"]


async def test_retrying_a_step_whose_params_fail_again_is_not_an_internal_error(
    http: httpx2.AsyncClient, operator: Auth
) -> None:
    wf = await start(http, operator, body("broken", [task("one", params="input.missing")]))
    assert (wf["state"], wf["error"]["code"], wf["error"]["step"]) == (
        "failed", "expression_failed", "one",
    )  # fmt: skip

    retried = await http.post(f"/v1/workflows/{wf['id']}/steps/one/retry", headers=operator)
    assert retried.status_code < 500, retried.text


async def test_a_branch_that_fails_at_once_leaves_no_work_in_the_other_branches(
    http: httpx2.AsyncClient, node: Node, operator: Auth
) -> None:
    both = {
        "id": "both", "kind": "parallel",
        "branches": [
            {"name": "bad", "steps": [{"id": "stop", "kind": "fail", "error": {"code": "no"}}]},
            {"name": "good", "steps": [task("slow")]},
        ],
    }  # fmt: skip
    wf = await start(http, operator, body("half", [both]))
    assert (wf["state"], wf["error"]["code"]) == ("failed", "no")

    states = {s["key"]: s["state"] for s in wf["steps"]}
    assert states.get("slow") in (None, "cancelled"), states
    assert set((await task_states(node, wf["id"])).values()) <= {"cancelled"}

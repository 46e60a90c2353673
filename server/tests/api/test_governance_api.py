"""Keys, roles, scope isolation and the audit log over HTTP, on every dialect."""

from __future__ import annotations

import httpx2

from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_error_contract import assert_error
from tests.conftest import OTHER_ENV, OTHER_TENANT, SCOPE, bearer, make_key


async def test_whoami_reports_the_keys_scope(http: httpx2.AsyncClient, node: Node) -> None:
    key = await make_key(node, SCOPE, Role.WORKER, queues=("emails",))
    body = (await http.get("/v1/whoami", headers=bearer(key))).json()
    assert body["tenant"] == "acme" and body["environment"] == "prod"
    assert body["roles"] == ["worker"] and body["queues"] == ["emails"]


async def test_admin_creates_a_key_shown_once_that_works(
    http: httpx2.AsyncClient, node: Node
) -> None:
    admin = await make_key(node)
    created = await http.post(
        "/v1/keys",
        json={"roles": ["worker"], "queues": ["emails"], "name": "mailer"},
        headers=bearer(admin),
    )
    assert created.status_code == 201, created.text
    body = created.json()
    secret = body["api_key"]
    assert body["key"]["roles"] == ["worker"] and body["key"]["tenant"] == "acme"
    me = (await http.get("/v1/whoami", headers=bearer(secret))).json()
    assert me["key_id"] == body["key"]["id"]
    again = (await http.get(f"/v1/keys/{body['key']['id']}", headers=bearer(admin))).json()
    assert "api_key" not in again and secret not in str(again)


async def test_unknown_role_is_invalid(http: httpx2.AsyncClient, node: Node) -> None:
    admin = await make_key(node)
    response = await http.post("/v1/keys", json={"roles": ["root"]}, headers=bearer(admin))
    assert "root" in str(assert_error(response, 400, "invalid_request", "protocol")["message"])


async def test_revoked_key_is_401_from_then_on(http: httpx2.AsyncClient, node: Node) -> None:
    admin = await make_key(node)
    victim = await make_key(node, SCOPE, Role.SUBMITTER)
    assert (await http.get("/v1/whoami", headers=bearer(victim))).status_code == 200
    victim_id = (await http.get("/v1/whoami", headers=bearer(victim))).json()["key_id"]
    revoked = await http.post(f"/v1/keys/{victim_id}/revoke", headers=bearer(admin))
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert_error(
        await http.get("/v1/whoami", headers=bearer(victim)), 401, "unauthenticated", "permission"
    )
    again = await http.post(f"/v1/keys/{victim_id}/revoke", headers=bearer(admin))
    assert again.status_code == 200  # idempotent


async def test_another_scopes_objects_answer_404_like_missing_ones(
    http: httpx2.AsyncClient, node: Node
) -> None:
    admin = await make_key(node)
    for foreign_scope in (OTHER_TENANT, OTHER_ENV):
        foreign = await make_key(node, foreign_scope, Role.ADMIN)
        foreign_id = (await http.get("/v1/whoami", headers=bearer(foreign))).json()["key_id"]
        read = await http.get(f"/v1/keys/{foreign_id}", headers=bearer(admin))
        missing = await http.get("/v1/keys/01doesnotexist0000000000000", headers=bearer(admin))
        assert_error(read, 404, "not_found", "protocol")
        assert_error(missing, 404, "not_found", "protocol")
        assert read.json()["error"]["message"] == missing.json()["error"]["message"]
        padded = await http.get(f"/v1/keys/{foreign_id}%20", headers=bearer(admin))
        assert_error(padded, 404, "not_found", "protocol")  # no collation tricks
        revoke = await http.post(f"/v1/keys/{foreign_id}/revoke", headers=bearer(admin))
        assert_error(revoke, 404, "not_found", "protocol")
        # ...and the foreign key still works: nothing was changed across the boundary.
        assert (await http.get("/v1/whoami", headers=bearer(foreign))).status_code == 200
        listed = (await http.get("/v1/keys", headers=bearer(admin))).json()["items"]
        assert foreign_id not in {k["id"] for k in listed}


async def test_key_list_pages_with_cursors(http: httpx2.AsyncClient, node: Node) -> None:
    admin = await make_key(node)
    for _ in range(4):
        await make_key(node, SCOPE, Role.SUBMITTER)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await http.get("/v1/keys", params=params, headers=bearer(admin))).json()
        seen += [k["id"] for k in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and len(set(seen)) == 5 and seen == sorted(seen)


async def test_control_operations_are_audited(http: httpx2.AsyncClient, node: Node) -> None:
    admin = await make_key(node)
    created = await http.post(
        "/v1/keys", json={"roles": ["operator"]}, headers={**bearer(admin), "x-request-id": "r-1"}
    )
    new_id = created.json()["key"]["id"]
    await http.post(f"/v1/keys/{new_id}/revoke", headers={**bearer(admin), "x-request-id": "r-2"})
    admin_id = (await http.get("/v1/whoami", headers=bearer(admin))).json()["key_id"]
    trail = (
        await http.get(
            "/v1/audit",
            params={"target_kind": "api_key", "target_id": new_id},
            headers=bearer(admin),
        )
    ).json()["items"]
    assert [(e["action"], e["request_id"], e["actor"]) for e in trail] == [
        ("key.revoke", "r-2", f"key:{admin_id}"),
        ("key.create", "r-1", f"key:{admin_id}"),
    ]
    # Another scope's audit log is invisible.
    foreign_admin = await make_key(node, OTHER_TENANT, Role.ADMIN)
    foreign = (await http.get("/v1/audit", headers=bearer(foreign_admin))).json()["items"]
    assert new_id not in {e["target_id"] for e in foreign}


async def test_queue_lists_belong_to_worker_keys_only(http: httpx2.AsyncClient, node: Node) -> None:
    admin = await make_key(node)
    not_worker = await http.post(
        "/v1/keys", json={"roles": ["operator"], "queues": ["q"]}, headers=bearer(admin)
    )
    assert "worker" in str(assert_error(not_worker, 400, "invalid_request", "protocol")["message"])
    empty = await http.post(
        "/v1/keys", json={"roles": ["worker"], "queues": []}, headers=bearer(admin)
    )
    assert_error(empty, 400, "invalid_request", "protocol")
    deduped = await http.post(
        "/v1/keys", json={"roles": ["worker"], "queues": ["b", "a", "b"]}, headers=bearer(admin)
    )
    assert deduped.json()["key"]["queues"] == ["b", "a"]

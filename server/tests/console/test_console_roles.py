"""The console allows an action to exactly the roles the API allows the same action: its role
sets are checked against the roles each API route declares."""

from __future__ import annotations

import pytest

from orbit_server.api.auth import ROLES
from orbit_server.config import Settings
from orbit_server.console import session
from orbit_server.governance.keys import Role
from tests.conftest import shared_litestar

SAME_AS = {
    "READERS": [("GET", "/v1/tasks"), ("GET", "/v1/queues"), ("GET", "/v1/workflows"),
                ("GET", "/v1/schedules"), ("GET", "/v1/workflow-definitions")],
    "WRITERS": [("POST", "/v1/tasks/{task_id:str}/cancel"),
                ("POST", "/v1/workflows/{workflow_id:str}/signals")],
    "CANCELLERS": [("POST", "/v1/workflows/{workflow_id:str}/cancel")],
    "CONTROLLERS": [("POST", "/v1/workflows/{workflow_id:str}/pause"),
                    ("POST", "/v1/workflows/{workflow_id:str}/resume"),
                    ("POST", "/v1/workflows/{workflow_id:str}/steps/{key:str}/retry"),
                    ("POST", "/v1/workflows/{workflow_id:str}/steps/{key:str}/skip"),
                    ("POST", "/v1/workflows/{workflow_id:str}/steps/{key:str}/resolve")],
    "OPERATORS": [("POST", "/v1/tasks/{task_id:str}/retry"),
                  ("POST", "/v1/tasks/{task_id:str}/resolve"), ("PUT", "/v1/queues/{name:str}"),
                  ("POST", "/v1/schedules/{name:str}/pause"),
                  ("POST", "/v1/schedules/{name:str}/trigger"),
                  ("POST", "/v1/schedules/{name:str}/backfill"), ("POST", "/v1/tasks:bulk"),
                  ("POST", "/v1/workflows:bulk"),
                  ("POST", "/v1/bulk-operations/{op_id:str}/cancel")],
    "OVERSEERS": [("GET", "/v1/workers"), ("GET", "/v1/audit"), ("GET", "/v1/bulk-operations")],
}  # fmt: skip


def _api_roles() -> dict[tuple[str, str], frozenset[Role]]:
    app = shared_litestar(Settings.load(environ={}))
    found = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", ()):
            for method in handler.http_methods:
                found[(method, route.path)] = frozenset(handler.opt.get(ROLES, ()))
    return found


@pytest.mark.parametrize("name", sorted(SAME_AS))
def test_a_console_role_set_is_the_apis(name: str) -> None:
    api = _api_roles()
    console_roles = getattr(session, name)
    for route in SAME_AS[name]:
        assert api[route] == console_roles, (name, route)

"""Server roles can be switched off per instance (SPEC O1)."""

from __future__ import annotations

import httpx2

from orbit_server.api.app import OrbitApp
from orbit_server.bootstrap import build_node
from orbit_server.config import ServerRole, Settings
from orbit_server.store import Database
from tests.conftest import bearer, make_key


async def test_an_instance_without_the_api_role_serves_only_health(db: Database) -> None:
    settings = Settings.load(environ={"ORBIT_ROLES": "gateway,dispatch"})
    node = await build_node(settings, db=db)
    key = await make_key(node)
    transport = httpx2.ASGITransport(app=OrbitApp(node))
    async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.get("/v1/whoami", headers=bearer(key))).status_code == 404
        metrics = (await http.get("/metrics")).text
    assert 'orbit_role_enabled{role="api"} 0.0' in metrics
    assert 'orbit_role_enabled{role="gateway"} 1.0' in metrics
    assert node.supervisor.enabled == {ServerRole.GATEWAY, ServerRole.DISPATCH}

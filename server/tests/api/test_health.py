"""Health, readiness and metrics endpoints."""

from __future__ import annotations

import httpx2
import pytest

from orbit_server.runtime.node import Node
from orbit_server.store import Database
from orbit_server.store.mysql_backend import MySQLDatabase
from orbit_server.store.url import endpoint_text
from tests.api.test_error_contract import assert_error
from tests.conftest import bearer, make_key

FORBIDDEN_IN_BODIES = ("select", "insert", "asyncmy", "sqlite3", "traceback", "mysql", 'file "')


async def test_healthz_answers_without_the_database(http: httpx2.AsyncClient, node: Node) -> None:
    await node.db.close()
    response = await http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def node_checks(db: Database) -> dict[str, str]:
    """What /readyz adds for a database server: the node in use and its role."""
    if not isinstance(db, MySQLDatabase):
        return {}
    return {"database_node": endpoint_text(db.url.endpoints[0]), "database_role": "primary"}


async def test_readyz_reports_database_and_schema(http: httpx2.AsyncClient, node: Node) -> None:
    response = await http.get("/readyz")
    assert response.status_code == 200
    checks = {"database": "ok", "schema": "current", **node_checks(node.db)}
    assert response.json() == {"ready": True, "checks": checks}


async def test_a_database_failure_is_503_without_internals(
    http: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node)
    await node.db.close()
    response = await http.get("/v1/whoami", headers=bearer(key))
    error = assert_error(response, 503, "unavailable", "transient")
    assert error["retryable"] is True
    assert int(response.headers["retry-after"]) >= 1
    assert not any(word in response.text.lower() for word in FORBIDDEN_IN_BODIES)
    ready = await http.get("/readyz")
    assert ready.status_code == 503 and ready.json()["ready"] is False
    assert ready.json()["checks"]["database"] == "unreachable"
    assert ready.json()["error"]["code"] == "unavailable"
    assert "retry-after" in ready.headers


async def test_metrics_are_prometheus_text_with_bounded_labels(
    http: httpx2.AsyncClient, node: Node
) -> None:
    key = await make_key(node)
    await http.get("/v1/whoami", headers=bearer(key))
    await http.get("/v1/nothing")
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'orbit_http_requests_total{method="GET",route="/v1/whoami",status="200"} 1.0' in text
    assert 'route="unmatched",status="404"' in text
    assert 'orbit_errors_total{code="not_found"} 1.0' in text
    assert "orbit_db_pool_connections_max" in text
    assert 'orbit_role_enabled{role="api"} 1.0' in text
    assert "acme" not in text and key not in text  # no tenant ids or secrets as labels


async def test_readyz_is_503_on_a_schema_that_is_not_current(empty_db: Database) -> None:
    from orbit_server.api.app import OrbitApp
    from orbit_server.bootstrap import build_node
    from orbit_server.config import Settings

    node = await build_node(Settings.load(environ={}), db=empty_db, require_current_schema=False)
    transport = httpx2.ASGITransport(app=OrbitApp(node))
    async with httpx2.AsyncClient(transport=transport, base_url="http://orbit.test") as http:
        response = await http.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"] == {"database": "ok", "schema": "outdated", **node_checks(empty_db)}
    assert "orbit migrate" in body["error"]["message"]


async def test_build_node_refuses_a_schema_that_is_not_current(empty_db: Database) -> None:
    from orbit_server.bootstrap import SchemaNotCurrent, build_node
    from orbit_server.config import Settings

    with pytest.raises(SchemaNotCurrent, match="orbit migrate"):
        await build_node(Settings.load(environ={}), db=empty_db)


async def test_a_crashed_background_loop_makes_the_node_not_ready(
    http: httpx2.AsyncClient, node: Node
) -> None:
    from orbit_server.config import ServerRole

    async def broken_loop() -> None:
        raise RuntimeError("loop bug")

    node.supervisor.register(ServerRole.DISPATCH, "dispatch-test", broken_loop)
    await node.start()
    await node.supervisor.failure.wait()
    response = await http.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"loops": "failed"}
    assert "dispatch-test" in response.json()["error"]["message"]
    await node.supervisor.stop()

"""The SDK against the real server app: readiness, errors and codes agree on both sides."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

import orbit_sdk
from orbit_server.errors import ERROR_TYPES
from orbit_server.governance.keys import Role
from orbit_server.runtime.node import Node
from tests.api.test_health import node_checks
from tests.conftest import SCOPE, make_key, orbit_app


@pytest.fixture
async def sdk(node: Node) -> AsyncIterator[orbit_sdk.AsyncClient]:
    key = await make_key(node, SCOPE, Role.SUBMITTER)
    transport = httpx2.ASGITransport(app=orbit_app(node))
    async with orbit_sdk.AsyncClient("http://orbit.test", key, transport=transport) as client:
        yield client


async def test_the_sdk_reads_readiness(sdk: orbit_sdk.AsyncClient, node: Node) -> None:
    ready = await sdk.ready()
    assert ready.ready and ready.checks == {
        "database": "ok",
        "schema": "current",
        **node_checks(node.db),
    }
    assert await sdk.health() is True
    await node.db.close()
    down = await sdk.ready()
    assert not down.ready and down.checks["database"] == "unreachable"


async def test_server_errors_arrive_as_typed_sdk_errors(
    sdk: orbit_sdk.AsyncClient, node: Node
) -> None:
    me = await sdk.request("GET", "/v1/whoami")
    assert me["roles"] == ["submitter"]
    with pytest.raises(orbit_sdk.PermissionDeniedError) as forbidden:
        await sdk.request("GET", "/v1/keys")
    assert forbidden.value.code == "forbidden" and forbidden.value.request_id
    with pytest.raises(orbit_sdk.NotFoundError):
        await sdk.request("GET", "/v1/nothing")
    await node.db.close()
    with pytest.raises(orbit_sdk.UnavailableError) as unavailable:
        await sdk.request("GET", "/v1/tasks")
    assert unavailable.value.retryable and unavailable.value.retry_after


async def test_an_unknown_key_is_an_authentication_error(node: Node) -> None:
    transport = httpx2.ASGITransport(app=orbit_app(node))
    async with orbit_sdk.AsyncClient(
        "http://orbit.test", "ok_x_" + "y" * 43, transport=transport
    ) as c:
        with pytest.raises(orbit_sdk.AuthenticationError) as raised:
            await c.request("GET", "/v1/whoami")
    assert raised.value.status == 401


def test_the_sdk_maps_every_stable_code_of_the_server() -> None:
    from orbit_sdk._errors import _ERROR_BY_CODE

    server_codes = {kind.code for kind in ERROR_TYPES} - {"internal"}  # 500: no class of its own
    assert server_codes - set(_ERROR_BY_CODE) == set()

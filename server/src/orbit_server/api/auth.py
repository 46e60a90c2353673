"""Bearer-key authentication as a Litestar dependency."""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request

from orbit_server.api.context import current_request_id
from orbit_server.api.deps import NodeDep
from orbit_server.audit import Actor
from orbit_server.governance.keys import Principal, bearer_token


async def authenticate(request: Request[Any, Any, Any], node: NodeDep) -> Principal:
    principal = await node.keys.authenticate(bearer_token(request.headers.get("authorization", "")))
    structlog.contextvars.bind_contextvars(
        key_id=principal.key_id,
        tenant=principal.scope.tenant,
        environment=principal.scope.environment,
    )
    return principal


def actor_of(principal: Principal) -> Actor:
    """Who the audit log names for a request: the calling key, with the request id."""
    return Actor(principal.actor, current_request_id())

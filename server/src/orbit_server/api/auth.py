"""Bearer-key authentication and role checks, before anything reads the request body.

Litestar resolves a handler's body and dependencies together, so a key checked in a dependency
would be checked after the body was parsed. ``authorize`` is a guard instead: it runs before
the body is read, authenticates every route that takes a ``principal`` (401), and checks the
roles the route declares as ``opt={"roles": (...)}`` (403). Only then is the body decoded.
"""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from orbit_server.api.context import current_request_id
from orbit_server.api.deps import NodeDep, node_of
from orbit_server.audit import Actor
from orbit_server.governance.keys import Principal, Role, bearer_token
from orbit_server.runtime.node import Node

ROLES = "roles"  # the route option naming the roles that may call it


def roles(*allowed: Role) -> dict[str, Any]:
    """Route options: only keys holding one of ``allowed`` may call the route."""
    return {ROLES: allowed}


async def _principal_of(connection: ASGIConnection[Any, Any, Any, Any], node: Node) -> Principal:
    principal: Principal | None = getattr(connection.state, "principal", None)
    if principal is not None:
        return principal
    token = bearer_token(connection.headers.get("authorization", ""))
    principal = await node.keys.authenticate(token)
    structlog.contextvars.bind_contextvars(
        key_id=principal.key_id,
        tenant=principal.scope.tenant,
        environment=principal.scope.environment,
    )
    connection.state.principal = principal
    return principal


def takes_key(handler: BaseRouteHandler) -> bool:
    """Whether a route needs a key: it takes a ``principal`` (health and metrics do not)."""
    return "principal" in handler.parsed_fn_signature.parameters


async def authorize(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    """The app's guard: key (401), then the route's roles (403), before the body is read."""
    if not takes_key(handler):
        return  # health and metrics: no key
    principal = await _principal_of(connection, node_of(connection))
    allowed: tuple[Role, ...] = tuple(handler.opt.get(ROLES, ()))
    if allowed:
        principal.require(*allowed)


async def authenticate(request: Request[Any, Any, Any], node: NodeDep) -> Principal:
    """The ``principal`` dependency: the key ``authorize`` accepted."""
    return await _principal_of(request, node)


def actor_of(principal: Principal) -> Actor:
    """Who the audit log names for a request: the calling key, with the request id."""
    return Actor(principal.actor, current_request_id())

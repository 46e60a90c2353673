"""Names of the injected dependencies, as annotations for route handlers."""

from __future__ import annotations

from typing import Any, cast

from litestar.connection import ASGIConnection
from litestar.di import NamedDependency

from orbit_server.governance.keys import Principal
from orbit_server.runtime.node import Node

NodeDep = NamedDependency[Node]
PrincipalDep = NamedDependency[Principal]

NODE_KEY = "orbit.node"  # the ASGI scope key under which OrbitApp hands its node to the routes


def node_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Node:
    """The node serving ``connection`` (what the ``node`` dependency gives)."""
    node: Node = cast("dict[str, Any]", connection.scope)[NODE_KEY]
    return node

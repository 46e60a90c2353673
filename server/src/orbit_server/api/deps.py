"""Names of the injected dependencies, as annotations for route handlers."""

from __future__ import annotations

from litestar.di import NamedDependency

from orbit_server.governance.keys import Principal
from orbit_server.runtime.node import Node

NodeDep = NamedDependency[Node]
PrincipalDep = NamedDependency[Principal]

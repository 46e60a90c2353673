"""The audit log of the caller's scope (operators and admins)."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import FromQuery, QueryParameter

from orbit_server.api.auth import roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import KEYED, error_responses
from orbit_server.api.pagination import ID_POSITION, decode_cursor, next_cursor, page_limit
from orbit_server.api.wire import AuditEntry, AuditList
from orbit_server.errors import InvalidRequest
from orbit_server.governance.keys import Role


@get(
    "/v1/audit",
    summary="Audit records, newest first",
    tags=["audit"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_audit(
    principal: PrincipalDep,
    node: NodeDep,
    target_kind: FromQuery[str | None] = None,
    target_id: FromQuery[str | None] = None,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> AuditList:
    if (target_kind is None) != (target_id is None):
        raise InvalidRequest("give target_kind and target_id together")
    size = page_limit(limit)
    target = (target_kind, target_id) if target_kind and target_id else None
    records = await node.audit.list(
        principal.scope, limit=size, before=decode_cursor(cursor, ID_POSITION), target=target
    )
    return AuditList(
        items=[AuditEntry.of(r) for r in records],
        next_cursor=next_cursor([r.id for r in records], size),
    )

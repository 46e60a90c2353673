"""Worker sessions across every node (operators): who is connected where, serving what, holding
what, and the sessions that ended recently with why."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import FromPath, FromQuery, QueryParameter

from orbit_server.api.auth import roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import KEYED, error_responses
from orbit_server.api.pagination import ID_POSITION, decode_cursor, next_cursor, page_limit
from orbit_server.api.wire_workers import Worker, WorkerList
from orbit_server.errors import InvalidRequest, NotFound
from orbit_server.governance.keys import Role

DEFAULT_ENDED_WITHIN_MS = 3_600_000  # ended sessions stay listed this long by default
MAX_ENDED_WITHIN_MS = 7 * 86_400_000


@get(
    "/v1/workers",
    summary="Worker sessions across all nodes, newest first",
    description=(
        "Every open worker session of the key's scope, on any node, and the sessions that "
        "ended within `ended_within_ms` (default one hour) with `end_reason`. `status` is "
        "`connected`, `lost` (still open but its node stopped refreshing it) or `ended`."
    ),
    tags=["workers"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_workers(
    principal: PrincipalDep,
    node: NodeDep,
    queue: FromQuery[str | None] = None,
    ended_within_ms: Annotated[int | None, QueryParameter(ge=0, le=MAX_ENDED_WITHIN_MS)] = None,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> WorkerList:
    size = page_limit(limit)
    views = await node.worker_views.list_workers(
        principal.scope,
        queue=queue,
        ended_within_ms=DEFAULT_ENDED_WITHIN_MS if ended_within_ms is None else ended_within_ms,
        limit=size,
        before=decode_cursor(cursor, ID_POSITION),
    )
    return WorkerList(
        items=[Worker.of(v) for v in views],
        next_cursor=next_cursor([v.session_id for v in views], size),
    )


@get(
    "/v1/workers/{session_id:str}",
    summary="One worker session with the attempts it holds",
    tags=["workers"],
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def get_worker(session_id: FromPath[str], principal: PrincipalDep, node: NodeDep) -> Worker:
    return Worker.of(await node.worker_views.worker(principal.scope, session_id))

"""Queues (API.md "Queues"): list with counts; operators change settings."""

from __future__ import annotations

from typing import Annotated

from litestar import get, put
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from msgspec import UNSET

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import NAME_POSITION, decode_cursor, next_cursor, page_limit
from orbit_server.api.wire_tasks import Queue, QueueList, QueueUpdate
from orbit_server.errors import InvalidRequest, NotFound
from orbit_server.governance.keys import Role
from orbit_server.pulse.service import QueueSettings


@get(
    "/v1/queues",
    summary="Queues with their settings and counts",
    tags=["queues"],
    opt=roles(Role.SUBMITTER, Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_queues(
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> QueueList:
    size = page_limit(limit)
    views = await node.queues.list_queues(
        principal.scope, limit=size, after=decode_cursor(cursor, NAME_POSITION)
    )
    workers = await node.sessions.workers_per_queue(principal.scope)
    unserved = await node.worker_views.unserved(principal.scope) if views else []
    now = node.clock.now()
    return QueueList(
        items=[Queue.of(v, now, workers.get(v.queue.name, 0), unserved) for v in views],
        next_cursor=next_cursor([v.queue.name for v in views], size),
    )


@get(
    "/v1/queues/{name:str}",
    summary="One queue with its settings, counts, workers and unserved tasks",
    tags=["queues"],
    opt=roles(Role.SUBMITTER, Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def get_queue(name: FromPath[str], principal: PrincipalDep, node: NodeDep) -> Queue:
    view = await node.queues.get(principal.scope, name)
    workers = await node.sessions.workers_per_queue(principal.scope)
    unserved = await node.worker_views.unserved(principal.scope, queue=name)
    return Queue.of(view, node.clock.now(), workers.get(name, 0), unserved)


@put(
    "/v1/queues/{name:str}",
    summary="Change a queue's settings",
    tags=["queues"],
    opt=roles(Role.OPERATOR),
    responses=error_responses(*KEYED, *BODY),
)
async def update_queue(
    name: FromPath[str], data: JSONBody[QueueUpdate], principal: PrincipalDep, node: NodeDep
) -> Queue:
    if not name or len(name) > 128 or any(c.isspace() for c in name):
        raise InvalidRequest("queue names have 1 to 128 characters and no spaces")
    change = QueueSettings(
        paused=None if data.paused is UNSET else data.paused,
        concurrency_limit=data.concurrency_limit or None,
        clear_concurrency_limit=data.concurrency_limit is None,
        key_concurrency=data.key_concurrency or None,
        max_pending=data.max_pending or None,
        clear_max_pending=data.max_pending is None,
    )
    view = await node.queues.update(principal.scope, name, change, actor=actor_of(principal))
    workers = await node.sessions.workers_per_queue(principal.scope)
    return Queue.of(view, node.clock.now(), workers.get(name, 0))

"""API keys of the caller's own (tenant, environment); admin role (API.md: ``admin`` = keys)."""

from __future__ import annotations

from typing import Annotated

from litestar import get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.pagination import ID_POSITION, decode_cursor, next_cursor, page_limit
from orbit_server.api.wire import ApiKey, ApiKeyList, CreatedApiKey, KeyCreate, WhoAmI
from orbit_server.errors import InvalidRequest, NotFound, Unauthenticated, Unavailable
from orbit_server.governance.keys import ALL_ROLES, Role, parse_roles


@get(
    "/v1/whoami",
    summary="The calling key's scope and roles",
    tags=["keys"],
    responses=error_responses(Unauthenticated, Unavailable),
)
async def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(
        key_id=principal.key_id,
        tenant=principal.scope.tenant,
        environment=principal.scope.environment,
        roles=[str(r) for r in ALL_ROLES if r in principal.roles],
        queues=None if principal.queues is None else sorted(principal.queues),
    )


@post(
    "/v1/keys",
    summary="Create an API key (the secret is shown once)",
    tags=["keys"],
    opt=roles(Role.ADMIN),
    responses=error_responses(*KEYED, *BODY),
)
async def create_key(
    data: JSONBody[KeyCreate], principal: PrincipalDep, node: NodeDep
) -> CreatedApiKey:
    try:
        roles = parse_roles(data.roles)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    created = await node.keys.create(
        principal.scope,
        roles,
        actor=actor_of(principal),
        queues=None if data.queues is None else tuple(data.queues),
        name=data.name,
    )
    return CreatedApiKey(key=ApiKey.of(created.record), api_key=created.token)


@get(
    "/v1/keys",
    summary="List API keys",
    tags=["keys"],
    opt=roles(Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest),
)
async def list_keys(
    principal: PrincipalDep,
    node: NodeDep,
    limit: Annotated[int | None, QueryParameter(ge=1, le=500)] = None,
    cursor: FromQuery[str | None] = None,
) -> ApiKeyList:
    size = page_limit(limit)
    keys = await node.keys.list(
        principal.scope, limit=size, after=decode_cursor(cursor, ID_POSITION)
    )
    return ApiKeyList(
        items=[ApiKey.of(k) for k in keys], next_cursor=next_cursor([k.id for k in keys], size)
    )


@get(
    "/v1/keys/{key_id:str}",
    summary="One API key",
    tags=["keys"],
    opt=roles(Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def get_key(key_id: FromPath[str], principal: PrincipalDep, node: NodeDep) -> ApiKey:
    return ApiKey.of(await node.keys.get(key_id, principal.scope))


@post(
    "/v1/keys/{key_id:str}/revoke",
    summary="Revoke an API key",
    tags=["keys"],
    status_code=200,
    opt=roles(Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def revoke_key(key_id: FromPath[str], principal: PrincipalDep, node: NodeDep) -> ApiKey:
    revoked = await node.keys.revoke(key_id, actor=actor_of(principal), scope=principal.scope)
    return ApiKey.of(revoked)

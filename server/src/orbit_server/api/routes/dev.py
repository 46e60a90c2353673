"""Test-mode routes of ``orbit dev --testing`` (never served otherwise, so elsewhere they answer
``404 not_found``): move the server's clock forward, and make throwaway environments so that
each test runs in a scope of its own."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Annotated

import msgspec
from litestar import get, post
from litestar.params import JSONBody

from orbit_server.api.auth import actor_of, roles
from orbit_server.api.deps import NodeDep, PrincipalDep
from orbit_server.api.openapi import BODY, KEYED, error_responses
from orbit_server.api.wire import Request
from orbit_server.clock import AdjustableClock, to_rfc3339
from orbit_server.errors import InvalidRequest, NotFound
from orbit_server.governance.keys import ALL_ROLES, Role
from orbit_server.runtime.node import Node
from orbit_server.scope import Scope

MAX_ADVANCE_MS = 366 * 24 * 3600 * 1000


class ClockAdvance(Request):
    by_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_ADVANCE_MS)]


class DevClock(msgspec.Struct):
    now: str
    offset_ms: int


class DevEnvironment(msgspec.Struct):
    tenant: str
    environment: str
    api_key: str  # every role, shown once


def _clock(node: Node) -> AdjustableClock:
    if not isinstance(node.clock, AdjustableClock):  # served only in test mode; never here
        raise NotFound("the clock is not adjustable: start the server with orbit dev --testing")
    return node.clock


def _view(clock: AdjustableClock) -> DevClock:
    now = to_rfc3339(clock.now())
    assert now is not None
    return DevClock(now=now, offset_ms=int(clock.offset.total_seconds() * 1000))


@get(
    "/v1/dev/clock",
    summary="The test clock (orbit dev --testing only)",
    tags=["dev"],
    opt=roles(Role.SUBMITTER, Role.WORKER, Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, NotFound),
)
async def read_clock(node: NodeDep) -> DevClock:
    return _view(_clock(node))


@post(
    "/v1/dev/clock:advance",
    summary="Move the test clock forward (orbit dev --testing only)",
    tags=["dev"],
    status_code=200,
    opt=roles(Role.OPERATOR, Role.ADMIN),
    responses=error_responses(*KEYED, *BODY, NotFound),
)
async def advance_clock(data: JSONBody[ClockAdvance], node: NodeDep) -> DevClock:
    clock = _clock(node)
    clock.advance(timedelta(milliseconds=data.by_ms))
    return _view(clock)


@post(
    "/v1/dev/environments",
    summary="A new environment with a key of every role (orbit dev --testing only)",
    tags=["dev"],
    status_code=201,
    opt=roles(Role.ADMIN),
    responses=error_responses(*KEYED, InvalidRequest, NotFound),
)
async def create_environment(principal: PrincipalDep, node: NodeDep) -> DevEnvironment:
    _clock(node)
    scope = Scope(principal.scope.tenant, f"test-{secrets.token_hex(6)}")
    created = await node.keys.create(scope, ALL_ROLES, actor=actor_of(principal), name="test")
    return DevEnvironment(tenant=scope.tenant, environment=scope.environment, api_key=created.token)


DEV_ROUTES = [read_clock, advance_clock, create_environment]

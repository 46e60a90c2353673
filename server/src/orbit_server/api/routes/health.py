"""Liveness, readiness and metrics (API.md "Health and metrics")."""

from __future__ import annotations

import msgspec
from litestar import Response, get, head
from litestar.openapi.datastructures import ResponseSpec

from orbit_server.api.context import current_request_id
from orbit_server.api.deps import NodeDep
from orbit_server.api.wire import Error, Health, ReadinessBody
from orbit_server.errors import Unavailable, error_body
from orbit_server.observability.metrics import CONTENT_TYPE


@get("/healthz", summary="Liveness (no database access)", tags=["health"])
async def healthz() -> Health:
    return Health(status="ok")


@head("/healthz", summary="Liveness, headers only", tags=["health"])
async def healthz_head() -> None:
    return None


@head(
    "/readyz",
    summary="Readiness, headers only",
    tags=["health"],
    responses={503: ResponseSpec(None, description="Not ready; GET /readyz says why")},
)
async def readyz_head(node: NodeDep) -> Response[None]:
    readiness = await node.readiness.check()
    return Response(None, status_code=200 if readiness.ready else 503)


@get(
    "/readyz",
    summary="Readiness: database reachable and schema current",
    tags=["health"],
    responses={
        503: ResponseSpec(
            ReadinessBody,
            generate_examples=False,
            description="Not ready: `checks` says what failed, `error` is `unavailable`",
        )
    },
)
async def readyz(node: NodeDep) -> Response[ReadinessBody]:
    readiness = await node.readiness.check()
    if readiness.ready:
        return Response(ReadinessBody(ready=True, checks=readiness.checks))
    error = Unavailable(readiness.reason or "not ready")
    return Response(
        ReadinessBody(
            ready=False,
            checks=readiness.checks,
            error=msgspec.convert(error_body(error, current_request_id())["error"], Error),
        ),
        status_code=503,
        headers={"Retry-After": str(error.retry_after)},
    )


@get("/metrics", summary="Prometheus metrics", tags=["health"], media_type=CONTENT_TYPE)
async def metrics(node: NodeDep) -> Response[bytes]:
    in_use, maximum = node.db.pool_stats()
    node.metrics.db_pool_in_use.set(in_use)
    node.metrics.db_pool_max.set(maximum)
    return Response(node.metrics.render(), media_type=CONTENT_TYPE)

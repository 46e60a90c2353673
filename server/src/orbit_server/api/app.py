"""The ASGI application: Litestar routes wrapped in Orbit's outer HTTP middleware."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from litestar import Litestar, Request
from litestar.datastructures import State
from litestar.di import Provide
from litestar.types import Empty

from orbit_server.api.auth import authenticate, authorize
from orbit_server.api.deps import NODE_KEY, node_of
from orbit_server.api.errors import handle_exception
from orbit_server.api.json_body import decode_body
from orbit_server.api.middleware import OrbitHTTPMiddleware
from orbit_server.api.openapi import describe, openapi_config
from orbit_server.api.routes import (
    audit,
    bulk,
    dev,
    health,
    keys,
    queues,
    schedules,
    tasks,
    workers,
    workflows,
)
from orbit_server.config import ServerRole, Settings
from orbit_server.runtime.node import Node

HEALTH_ROUTES: list[Any] = [
    health.healthz,
    health.healthz_head,
    health.readyz,
    health.readyz_head,
    health.metrics,
]
API_ROUTES: list[Any] = [
    keys.whoami,
    keys.create_key,
    keys.list_keys,
    keys.get_key,
    keys.revoke_key,
    audit.list_audit,
    tasks.submit_task,
    tasks.submit_batch,
    tasks.get_task,
    tasks.list_tasks,
    tasks.task_attempts,
    tasks.cancel_task,
    tasks.retry_task,
    tasks.resolve_task,
    queues.list_queues,
    queues.get_queue,
    queues.update_queue,
    schedules.create_schedule,
    schedules.list_schedules,
    schedules.get_schedule,
    schedules.update_schedule,
    schedules.delete_schedule,
    schedules.pause_schedule,
    schedules.resume_schedule,
    schedules.trigger_schedule,
    schedules.backfill_schedule,
    schedules.list_backfills,
    schedules.get_backfill,
    schedules.list_fires,
    workflows.publish_definition,
    workflows.list_definitions,
    workflows.get_definition,
    workflows.start_workflow,
    workflows.get_workflow,
    workflows.list_workflows,
    workflows.list_steps,
    workflows.send_signal,
    workflows.pause_workflow,
    workflows.resume_workflow,
    workflows.cancel_workflow,
    workflows.retry_step,
    workflows.skip_step,
    workflows.resolve_step,
    workers.list_workers,
    workers.get_worker,
    bulk.bulk_tasks,
    bulk.bulk_workflows,
    bulk.list_bulk_operations,
    bulk.get_bulk_operation,
    bulk.list_bulk_items,
    bulk.cancel_bulk_operation,
]


class OrbitRequest(Request[Any, Any, Any]):
    """Litestar's request, with Orbit's strict, bounded JSON decoding of the body."""

    async def json(self) -> Any:
        cached = self._connection_state.json
        if cached is not Empty:
            return cached
        field = self.route_handler.parsed_data_field
        target = Any if field is None else field.annotation
        body = await self.body()
        value = decode_body(body or b"null", target, max_depth=self.app.state.max_json_depth)
        self._connection_state.json = value
        return value


async def provide_node(request: Request[Any, Any, Any]) -> Node:
    return node_of(request)


def build_litestar(settings: Settings, *, testing: bool = False) -> Litestar:
    """The Litestar app of the HTTP API for ``settings``. It holds no node: each request
    finds the one serving it in its ASGI scope (:class:`OrbitApp` puts it there).
    ``testing``: also the test-mode routes of ``orbit dev --testing``."""
    routes = list(HEALTH_ROUTES)
    if settings.has_role(ServerRole.API):
        routes += API_ROUTES
        if testing:
            routes += dev.DEV_ROUTES
    for route in routes:  # every route is described as Orbit answers (errors, bodies, keys)
        describe(route)
    return Litestar(
        route_handlers=routes,
        dependencies={
            "node": Provide(provide_node),
            "principal": Provide(authenticate),
        },
        exception_handlers={Exception: handle_exception},
        guards=[authorize],
        request_class=OrbitRequest,
        state=State({"max_json_depth": settings.max_json_depth}),
        openapi_config=openapi_config(),
        request_max_body_size=settings.max_body_bytes,
        debug=False,
        logging_config=None,
    )


class WorkerEndpoint(Protocol):
    """The WebSocket endpoint of workers (``/v1/worker``), served beside the HTTP API."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None: ...

    async def start(self) -> None: ...

    async def drain(self) -> None: ...


WORKER_PATH = "/v1/worker"
CONSOLE_PATH = "/console"


class OrbitApp:
    """The ASGI callable served by uvicorn, with the Litestar app reachable for tooling.

    ``litestar``: an app :func:`build_litestar` made for settings equal to the node's, to share
    one among several OrbitApps (building one takes about 0.1 s; the tests make hundreds);
    by default the OrbitApp builds its own."""

    def __init__(
        self,
        node: Node,
        *,
        worker_endpoint: WorkerEndpoint | None = None,
        litestar: Litestar | None = None,
        console: Callable[[], Any] | None = None,
        testing: bool = False,
    ) -> None:
        self.node = node
        self.worker_endpoint = worker_endpoint
        self._console_factory = console  # builds the console's ASGI app at its first request
        self._console: Any = None
        if litestar is None:
            litestar = build_litestar(node.settings, testing=testing)
        self.litestar = litestar
        self._asgi = OrbitHTTPMiddleware(
            self.litestar, metrics=node.metrics, max_body_bytes=node.settings.max_body_bytes
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        endpoint = self.worker_endpoint
        if endpoint is not None and scope["type"] == "websocket" and scope["path"] == WORKER_PATH:
            await endpoint(scope, receive, send)
            return
        if self._console_factory is not None and scope["type"] == "http":
            path: str = scope["path"]
            if path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/"):
                if self._console is None:
                    self._console = self._console_factory()
                await self._console(scope, receive, send)
                return
        scope[NODE_KEY] = self.node
        await self._asgi(scope, receive, send)


def openapi_document(settings: Settings | None = None) -> dict[str, Any]:
    """The OpenAPI document of the HTTP API (no database needed)."""
    app = build_litestar(settings or Settings.load(environ={}))
    return app.openapi_schema.to_schema()

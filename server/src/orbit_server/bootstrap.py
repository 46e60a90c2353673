"""Composition root: Settings → Clock → Database → services → Node → ASGI app (+ loops)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog
from litestar import Litestar

from orbit_server.api.app import OrbitApp
from orbit_server.audit import AuditWriter
from orbit_server.clock import Clock, SystemClock
from orbit_server.config import ServerRole, Settings
from orbit_server.gateway.endpoint import Gateway
from orbit_server.governance.service import AuditService, KeyService
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.bulk import BulkService
from orbit_server.pulse.bulk_tasks import TaskBulk
from orbit_server.pulse.domain_events import TasksPassed
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.loops import (
    bulk_loop,
    recovery_loop,
    retention_loop,
    scheduler_loop,
    settled_watch_loop,
)
from orbit_server.pulse.schedule_service import ScheduleService
from orbit_server.pulse.scheduler import PassReport, Scheduler
from orbit_server.pulse.service import QueueService, TaskService
from orbit_server.pulse.sessions import SessionService
from orbit_server.pulse.watch import TaskWatch
from orbit_server.pulse.worker import WorkerService
from orbit_server.pulse.workers import WorkerViews
from orbit_server.runtime.health import ReadinessProbe
from orbit_server.runtime.node import Node
from orbit_server.runtime.ratelimit import RateLimiter
from orbit_server.runtime.roles import Supervisor
from orbit_server.runtime.sampler import QueueSampler, sampler_loop
from orbit_server.store import Database, Tx, open_database
from orbit_server.store.migrate import schema_status
from orbit_server.store.queues import QueueDepth
from orbit_server.weave.advance import Advance
from orbit_server.weave.bulk import WorkflowBulk
from orbit_server.weave.control import Control
from orbit_server.weave.runner import Runner, events_loop, waits_loop
from orbit_server.weave.service import WorkflowService

log = structlog.get_logger("orbit.bootstrap")


class SchemaNotCurrent(Exception):
    """The database schema does not match this release; ``orbit migrate`` fixes it."""


def database_for(settings: Settings, *, exclusive: bool) -> Database:
    return open_database(
        settings.database_url,
        pool_min=settings.db_pool_min,
        pool_max=settings.db_pool_max,
        connect_timeout_s=settings.db_connect_timeout_ms / 1000,
        unit_timeout_s=settings.db_unit_timeout_ms / 1000,
        exclusive=exclusive,
    )


async def build_node(
    settings: Settings,
    *,
    clock: Clock | None = None,
    db: Database | None = None,
    require_current_schema: bool = True,
) -> Node:
    """Connect, probe and wire one node. Refuses a schema that is not current."""
    clock = clock or SystemClock()
    db = db or database_for(settings, exclusive=True)
    info = await db.connect()
    for warning in info.warnings:
        log.warning("database setting", warning=warning)
    if require_current_schema:
        status = await schema_status(db)
        if not status.current:
            await db.close()
            raise SchemaNotCurrent(f"the database schema is not current: {status.describe()}")
    metrics = Metrics(max_queues=settings.metrics_max_queues)
    db.bus.subscribe(TasksPassed, lambda e: metrics.count_tasks(e.queue, str(e.milestone), e.count))
    for role in ServerRole:
        metrics.role_enabled.labels(str(role)).set(1 if settings.has_role(role) else 0)
    audit_writer = AuditWriter(clock)
    supervisor = Supervisor(settings.roles)
    watch = TaskWatch()
    watch.follow(db.bus)
    workers = WorkerService(db, clock, lease_ms=settings.lease_ms)
    tasks = TaskService(
        db, clock, audit_writer, watch,
        default_timeout_ms=settings.task_timeout_ms, lease_ms=settings.lease_ms,
    )  # fmt: skip
    supervisor.register(
        ServerRole.RECOVERY, "lease-recovery", lambda: recovery_loop(workers, tasks.admissions)
    )
    supervisor.register(
        ServerRole.API,
        "settled-watch",
        lambda: settled_watch_loop(tasks.notify_settled, watch.someone_waits),
    )
    scheduler = Scheduler(
        db, clock, tasks, misfire_ms=settings.schedule_misfire_ms,
        batch=settings.schedule_batch, backfill_budget=settings.schedule_backfill_budget,
        backfill_max_slots=settings.schedule_backfill_max_slots,
    )  # fmt: skip
    schedules = ScheduleService(db, clock, audit_writer, tasks)
    if settings.has_role(ServerRole.SCHEDULER):
        schedules.wake = scheduler.wake

    def report(done: PassReport) -> None:
        for outcome, count in done.outcomes.items():
            metrics.schedule_fires.labels(outcome).inc(count)
        for lag in done.lags:
            metrics.schedule_fire_lag.observe(lag)

    supervisor.register(
        ServerRole.SCHEDULER,
        "scheduler",
        lambda: scheduler_loop(scheduler, report, lanes=2 if db.dialect == "mysql" else 1),
    )
    sessions = SessionService(
        db, clock, node=settings.node_id, seen_window_ms=3 * settings.heartbeat_ms
    )
    gates = GateService(db, clock)
    workflows = WorkflowService(
        db, clock, audit_writer, tasks, gates, max_params_bytes=settings.max_params_bytes,
        max_task_timeout_ms=settings.max_task_timeout_ms,
        max_step_executions=settings.workflow_max_step_executions,
    )  # fmt: skip
    runner = Runner(db, clock, tasks, workflows, lanes=2 if db.dialect == "mysql" else 1)

    def observe_lag(lags: list[float]) -> None:
        for lag in lags:
            metrics.workflow_advancement_lag.observe(lag)

    runner.observe_lag = observe_lag

    def observe(advances: Sequence[Advance]) -> None:
        """One committed transaction of advancements: its rows, the instances it finished."""
        writes = sum(a.writes for a in advances)
        if writes:
            metrics.workflow_advancement_writes.observe(writes)
        for advance in advances:
            if advance.finished and not advance.was_finished:
                metrics.workflows_finished.labels(advance.wf.state).inc()

    workflows.observe = observe
    bulk = BulkService(
        db,
        clock,
        audit_writer,
        {"tasks": TaskBulk(clock), "workflows": WorkflowBulk(workflows.advancement)},
    )
    supervisor.register(ServerRole.RECOVERY, "bulk-operations", lambda: bulk_loop(bulk))
    supervisor.register(
        ServerRole.RECOVERY,
        "retention",
        lambda: retention_loop(
            lambda: prune_history(tasks, schedules, sessions, workflows, bulk, settings)
        ),
    )
    supervisor.register(
        ServerRole.EVENTS, "workflow-events", lambda: events_loop(runner, watch.settled)
    )
    supervisor.register(
        ServerRole.ADVANCEMENT,
        "workflow-waits",
        lambda: waits_loop(runner, workflows.changed, clock),
    )
    worker_views = WorkerViews(db, clock, seen_window_ms=3 * settings.heartbeat_ms)

    async def unserved(tx: Tx, depths: Sequence[QueueDepth]) -> dict[tuple[str, str], int]:
        return await worker_views.unserved_counts(tx, [d.scope for d in depths if d.waiting])

    sampler = QueueSampler(
        db, clock, metrics, node=settings.node_id, interval_s=settings.metrics_sample_ms / 1000,
        unserved=unserved,
    )  # fmt: skip
    supervisor.register(ServerRole.API, "queue-sampler", lambda: sampler_loop(sampler))
    return Node(
        settings=settings,
        clock=clock,
        db=db,
        server_info=info,
        metrics=metrics,
        readiness=ReadinessProbe(db, metrics, failed_loops=lambda: list(supervisor.failed)),
        supervisor=supervisor,
        audit_writer=audit_writer,
        keys=KeyService(db, clock, audit_writer, cache_ms=settings.key_cache_ms),
        audit=AuditService(db),
        tasks=tasks,
        queues=QueueService(db, clock, audit_writer),
        workers=workers,
        gates=gates,
        schedules=schedules,
        scheduler=scheduler,
        sessions=sessions,
        bulk=bulk,
        worker_views=worker_views,
        workflows=workflows,
        workflow_control=Control(workflows.advancement),
        runner=runner,
        watch=watch,
        submit_limiter=RateLimiter(settings.submit_rate_per_key, settings.submit_burst_per_key),
        sampler=sampler,
    )


async def prune_history(
    tasks: TaskService,
    schedules: ScheduleService,
    sessions: SessionService,
    workflows: WorkflowService,
    bulk: BulkService,
    settings: Settings,
) -> int:
    """One retention pass: finished tasks and workflows, schedules' fire ledgers, closed
    worker sessions, finished bulk operations."""
    removed = await workflows.prune_finished(settings.result_retention_ms)
    removed += await tasks.prune_finished(
        settings.result_retention_ms, idempotency_ms=settings.idempotency_retention_ms
    )
    removed += await schedules.prune_fires(settings.result_retention_ms)
    removed += await bulk.prune(settings.result_retention_ms)
    return removed + await sessions.prune(settings.result_retention_ms)


def build_app(node: Node, *, litestar: Litestar | None = None, testing: bool = False) -> OrbitApp:
    """The ASGI app; with the gateway role, ``/v1/worker`` serves workers. ``litestar``: a
    shared HTTP app (see :class:`OrbitApp`). ``testing``: with the routes of
    ``orbit dev --testing`` (the node's clock must be an ``AdjustableClock``)."""
    gateway = Gateway(node) if node.settings.has_role(ServerRole.GATEWAY) else None
    console = None
    if node.settings.has_role(ServerRole.CONSOLE):

        def console() -> Any:
            from orbit_server.console.app import build_console

            return build_console(node)

    return OrbitApp(
        node, worker_endpoint=gateway, litestar=litestar, console=console, testing=testing
    )

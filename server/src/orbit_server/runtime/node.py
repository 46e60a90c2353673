"""One Orbit node's object graph, as built by :mod:`orbit_server.bootstrap`."""

from __future__ import annotations

from dataclasses import dataclass

from orbit_server.audit import AuditWriter
from orbit_server.clock import Clock
from orbit_server.config import Settings
from orbit_server.governance.service import AuditService, KeyService
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.bulk import BulkService
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.schedule_service import ScheduleService
from orbit_server.pulse.scheduler import Scheduler
from orbit_server.pulse.service import QueueService, TaskService
from orbit_server.pulse.sessions import SessionService
from orbit_server.pulse.watch import TaskWatch
from orbit_server.pulse.worker import WorkerService
from orbit_server.pulse.workers import WorkerViews
from orbit_server.runtime.health import ReadinessProbe
from orbit_server.runtime.ratelimit import RateLimiter
from orbit_server.runtime.roles import Supervisor
from orbit_server.runtime.sampler import QueueSampler
from orbit_server.store import Database, ServerInfo
from orbit_server.weave.control import Control
from orbit_server.weave.runner import Runner
from orbit_server.weave.service import WorkflowService


@dataclass(slots=True)
class Node:
    settings: Settings
    clock: Clock
    db: Database
    server_info: ServerInfo | None
    metrics: Metrics
    readiness: ReadinessProbe
    supervisor: Supervisor
    audit_writer: AuditWriter
    keys: KeyService
    audit: AuditService
    tasks: TaskService
    queues: QueueService
    workers: WorkerService
    gates: GateService
    schedules: ScheduleService
    scheduler: Scheduler  # its loop runs with the scheduler role
    sessions: SessionService
    bulk: BulkService  # its steps run with the recovery role
    worker_views: WorkerViews  # workers across nodes and the work none of them can take
    workflows: WorkflowService
    workflow_control: Control  # pause, resume, cancel and step recovery (audited)
    runner: Runner  # its loops run with the advancement and events roles
    watch: TaskWatch
    submit_limiter: RateLimiter
    sampler: QueueSampler  # its loop runs with the api role; ``unserved`` may be replaced

    async def start(self) -> None:
        await self.supervisor.start()

    async def stop(self) -> None:
        self.readiness.draining = True
        await self.supervisor.stop()
        await self.db.close()

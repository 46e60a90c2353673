"""Prometheus metrics, one registry per process (no multiprocess mode).

Labels are bounded: route templates, methods, status classes, roles — never tenant or task ids.
Queue names are bounded by :class:`QueueLabels`. docs/reference/metrics.md lists every metric.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


OTHER_QUEUES = "other"


class QueueLabels:
    """A queue's label: the first ``cap`` distinct queue names this process sees get their own,
    every later one is folded into ``other`` — so the series a node exports stay bounded however
    many queues its tenants make (names are not scoped: one name in two tenants is one label)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._own: set[str] = set()

    def __call__(self, queue: str) -> str:
        if queue in self._own:
            return queue
        if len(self._own) < self.cap:
            self._own.add(queue)
            return queue
        return OTHER_QUEUES


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, max_queues: int = 100) -> None:
        self.registry = registry or CollectorRegistry()
        self.queue_label = QueueLabels(max_queues)
        r = self.registry
        self.http_requests = Counter(
            "orbit_http_requests_total",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_duration = Histogram(
            "orbit_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
            registry=r,
        )
        self.errors = Counter(
            "orbit_errors_total", "Errors answered, by stable code", ["code"], registry=r
        )
        self.db_up = Gauge(
            "orbit_database_up", "1 when the last readiness check reached the database", registry=r
        )
        self.schema_current = Gauge(
            "orbit_schema_current", "1 when the database schema matches this release", registry=r
        )
        self.db_pool_in_use = Gauge(
            "orbit_db_pool_connections_in_use", "Database connections in use", registry=r
        )
        self.db_pool_max = Gauge(
            "orbit_db_pool_connections_max", "Most database connections the pool opens", registry=r
        )
        self.role_enabled = Gauge(
            "orbit_role_enabled", "1 for each server role this instance runs", ["role"], registry=r
        )

        fast = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
        self.claim_seconds = Histogram(
            "orbit_dispatch_claim_seconds",
            "Time of one claim transaction that leased work for a worker connection",
            buckets=fast,
            registry=r,
        )
        self.schedule_latency = Histogram(
            "orbit_dispatch_latency_seconds",
            "From the moment a task became due (submit or run time) to its delivery to a worker; "
            "includes discovery across nodes",
            buckets=(*fast, 10, 30, 60),
            registry=r,
        )
        self.tasks_delivered = Counter(
            "orbit_tasks_delivered_total", "Task attempts sent to workers", registry=r
        )
        self.worker_connections = Gauge(
            "orbit_worker_connections", "Worker connections open on this node", registry=r
        )
        self.worker_frames = Counter(
            "orbit_worker_frames_total", "Frames received from workers, by type", ["type"],
            registry=r,
        )  # fmt: skip

        self.schedule_fires = Counter(
            "orbit_schedule_fires_total",
            "Schedule slots recorded in the fire ledger, by outcome (fired, skipped, missed, "
            "paused, queued)",
            ["outcome"],
            registry=r,
        )
        self.schedule_fire_lag = Histogram(
            "orbit_schedule_fire_lag_seconds",
            "From a schedule slot's fire time to the commit of its task",
            buckets=(*fast, 10, 30, 60),
            registry=r,
        )
        self.workflow_advancement_writes = Histogram(
            "orbit_workflow_advancement_writes",
            "Rows one transaction of workflow advancements wrote: step executions created or "
            "changed and step tasks created (W9: bounded by the batch, the work cap and a "
            "map's max_concurrency)",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
            registry=r,
        )
        self.workflows_finished = Counter(
            "orbit_workflows_finished_total",
            "Workflow instances that ended, by state (succeeded, failed, cancelled)",
            ["state"],
            registry=r,
        )

        self.workflow_advancement_lag = Histogram(
            "orbit_workflow_advancement_lag_seconds",
            "From a workflow step's task settling (its result event) to the commit of the "
            "advancement that handled it",
            buckets=(*fast, 10, 30, 60, 300),
            registry=r,
        )

        # Task milestones, counted on the node that committed them (sum them over nodes).
        self.queue_tasks_passed = Counter(
            "orbit_queue_task_events_total",
            "Tasks that passed a milestone (submitted, started, succeeded, failed, cancelled, "
            "retried, expired, needs_review), by queue",
            ["queue", "event"],
            registry=r,
        )
        # Sampled from the database by the one node that holds the sampling duty; the others
        # export none of these series (take max by the labels across nodes).
        self.queue_tasks = Gauge(
            "orbit_queue_tasks",
            "Tasks in a queue by state (waiting: scheduled or pending; active: leased or "
            "running), as the sampling node last read them",
            ["queue", "state"],
            registry=r,
        )
        self.queue_oldest_pending_age = Gauge(
            "orbit_queue_oldest_pending_age_seconds",
            "How long the queue's first pending task (in submission order) has been due",
            ["queue"],
            registry=r,
        )
        self.queue_unserved = Gauge(
            "orbit_queue_unserved_tasks",
            "Waiting tasks that no connected worker can take, by queue and reason",
            ["queue", "reason"],
            registry=r,
        )
        self.result_events_pending = Gauge(
            "orbit_result_events_pending",
            "Result events not yet processed by their consumer (workflow advancement), counted "
            "up to a bound",
            ["consumer"],
            registry=r,
        )
        self.queue_sampler = Gauge(
            "orbit_queue_sampler_active",
            "1 on the node that holds the queue sampling duty, else 0",
            registry=r,
        )
        self.worker_slots_free = Gauge(
            "orbit_worker_slots_free",
            "Credits this node's worker connections have open and unused",
            registry=r,
        )
        self.worker_slots_busy = Gauge(
            "orbit_worker_slots_in_flight",
            "Slots of this node's worker connections reserved for a claim or holding an attempt",
            registry=r,
        )

    def count_tasks(self, queue: str, event: str, count: int) -> None:
        self.queue_tasks_passed.labels(self.queue_label(queue), event).inc(count)

    def clear_samples(self) -> None:
        """This node does not (or no longer) sample: export none of the sampled series."""
        for gauge in (
            self.queue_tasks,
            self.queue_oldest_pending_age,
            self.queue_unserved,
            self.result_events_pending,
        ):
            gauge.clear()
        self.queue_sampler.set(0)

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""Orbit Python SDK: clients for Orbit's HTTP API.

``Client`` and ``AsyncClient`` talk to an Orbit server: submit, read, wait for, cancel, retry
and resolve tasks, manage queues, create and run schedules, and publish, start, signal and
steer workflows, with typed answers (``Task``, ``Attempt``, ``Queue``, ``TaskPage``,
``Schedule``, ``ScheduleFire``, ``Backfill``, ``WorkflowInstance``, ...). ``Workflow`` builds
a workflow definition from Python objects. ``task_ref`` (or ``@worker.task``) declares a typed
task whose submits and results the type checker checks.
Every failure is an ``OrbitError`` subclass mapped from Orbit's stable error codes. The clients
never retry on their own.
"""

from orbit_sdk._client import AsyncClient, Client
from orbit_sdk._codec import PayloadError
from orbit_sdk._config import ClientConfig, ConfigurationError
from orbit_sdk._errors import (
    AuthenticationError,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
    OutcomeUnknownError,
    PermissionDeniedError,
    ProtocolError,
    QueueFullError,
    RateLimitedError,
    StateConflictError,
    TransientError,
    TransportError,
    UnavailableError,
)
from orbit_sdk._health import Readiness
from orbit_sdk._models import (
    Attempt,
    Queue,
    RetryPolicy,
    Task,
    TaskError,
    TaskOwner,
    TaskPage,
    TaskProgress,
    TaskRequest,
)
from orbit_sdk._redact import RedactSecrets
from orbit_sdk._schedule_models import (
    Backfill,
    FirePage,
    Schedule,
    ScheduleFire,
    SchedulePage,
    ScheduleTask,
)
from orbit_sdk._typed import (
    SubmitOptions,
    TaskDefaults,
    TaskFailedError,
    TaskHandle,
    TaskRef,
    task_ref,
)
from orbit_sdk._workflow import Branch, Parallel, TaskStep, When, Workflow
from orbit_sdk._workflow_models import (
    PendingSignal,
    WorkflowDefinition,
    WorkflowDefinitionPage,
    WorkflowError,
    WorkflowInstance,
    WorkflowPage,
    WorkflowSignal,
    WorkflowStep,
    WorkflowStepPage,
    WorkflowWait,
)

__version__ = "0.2.0"

__all__ = [
    "AsyncClient",
    "Attempt",
    "AuthenticationError",
    "Backfill",
    "Branch",
    "Client",
    "ClientConfig",
    "ConfigurationError",
    "ConflictError",
    "FirePage",
    "IdempotencyConflictError",
    "NotFoundError",
    "OrbitError",
    "OutcomeUnknownError",
    "Parallel",
    "PayloadError",
    "PendingSignal",
    "PermissionDeniedError",
    "ProtocolError",
    "Queue",
    "QueueFullError",
    "RateLimitedError",
    "Readiness",
    "RedactSecrets",
    "RetryPolicy",
    "Schedule",
    "ScheduleFire",
    "SchedulePage",
    "ScheduleTask",
    "StateConflictError",
    "SubmitOptions",
    "Task",
    "TaskDefaults",
    "TaskError",
    "TaskFailedError",
    "TaskHandle",
    "TaskOwner",
    "TaskPage",
    "TaskProgress",
    "TaskRef",
    "TaskRequest",
    "TaskStep",
    "TransientError",
    "TransportError",
    "UnavailableError",
    "When",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowDefinitionPage",
    "WorkflowError",
    "WorkflowInstance",
    "WorkflowPage",
    "WorkflowSignal",
    "WorkflowStep",
    "WorkflowStepPage",
    "WorkflowWait",
    "__version__",
    "task_ref",
]

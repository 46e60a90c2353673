"""Orbit Python SDK: clients for Orbit's HTTP API.

``Client`` and ``AsyncClient`` talk to an Orbit server: submit, read, wait for, cancel, retry
and resolve tasks, manage queues, and create and run schedules, with typed answers (``Task``,
``Attempt``, ``Queue``, ``TaskPage``, ``Schedule``, ``ScheduleFire``, ``Backfill``, ...).
Every failure is an ``OrbitError`` subclass mapped from Orbit's stable error codes. The clients
never retry on their own.
"""

from orbit_sdk._client import AsyncClient, Client
from orbit_sdk._config import ClientConfig, ConfigurationError
from orbit_sdk._errors import (
    AuthenticationError,
    ConflictError,
    IdempotencyConflictError,
    NotFoundError,
    OrbitError,
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
    TaskRequest,
)
from orbit_sdk._schedule_models import (
    Backfill,
    FirePage,
    Schedule,
    ScheduleFire,
    SchedulePage,
    ScheduleTask,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Attempt",
    "AuthenticationError",
    "Backfill",
    "Client",
    "ClientConfig",
    "ConfigurationError",
    "ConflictError",
    "FirePage",
    "IdempotencyConflictError",
    "NotFoundError",
    "OrbitError",
    "PermissionDeniedError",
    "ProtocolError",
    "Queue",
    "QueueFullError",
    "RateLimitedError",
    "Readiness",
    "RetryPolicy",
    "Schedule",
    "ScheduleFire",
    "SchedulePage",
    "ScheduleTask",
    "StateConflictError",
    "Task",
    "TaskError",
    "TaskOwner",
    "TaskPage",
    "TaskRequest",
    "TransientError",
    "TransportError",
    "UnavailableError",
    "__version__",
]

"""Orbit Python SDK: clients for Orbit's HTTP API.

``Client`` and ``AsyncClient`` talk to an Orbit server; every failure is an ``OrbitError``
subclass mapped from Orbit's stable error codes. The clients never retry on their own.
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

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "ClientConfig",
    "ConfigurationError",
    "ConflictError",
    "IdempotencyConflictError",
    "NotFoundError",
    "OrbitError",
    "PermissionDeniedError",
    "ProtocolError",
    "QueueFullError",
    "RateLimitedError",
    "Readiness",
    "StateConflictError",
    "TransientError",
    "TransportError",
    "UnavailableError",
    "__version__",
]

"""Exceptions of the worker runtime: raised by handlers, and by the runtime itself."""

from __future__ import annotations

from orbit_sdk._errors import OrbitError

__all__ = ["NonRetryableError", "SafeToRetry", "TaskCancelled", "WorkerError"]


class NonRetryableError(Exception):
    """Raise from a handler to fail the task at once, without retrying it.

    ``code`` is the stable error code reported to Orbit; without one, the class name is used.
    """

    retryable = False

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class SafeToRetry(Exception):
    """Raise from a handler to say that the attempt failed before doing any side effect, so
    that even an ``unsafe`` task may be retried under its retry policy.

    Any other exception from the handler of an ``unsafe`` task leaves its outcome unknown: the
    task goes to ``needs_review`` and waits for an operator (it is never run again by itself).
    For ``idempotent`` tasks every retryable exception retries; this one changes nothing.
    """

    retryable = True
    safe_to_retry = True

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class TaskCancelled(Exception):
    """Raised by :meth:`TaskContext.raise_if_cancelled`; a handler that lets it out after a
    cancel request reports the attempt ``cancelled``."""


class WorkerError(OrbitError):
    """The worker cannot go on: a refused key, a forbidden queue, no common protocol version.

    ``close_code`` is the WebSocket close code that ended the connection (``4403``, ``4409``,
    ``4400``), ``status`` the HTTP status when the upgrade itself was refused.
    """

    _default_code = "worker_error"
    _default_category = "worker"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        close_code: int | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, code=code, status=status)
        self.close_code = close_code

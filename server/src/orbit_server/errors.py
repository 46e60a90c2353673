"""The error tree of Orbit and its stable codes (SPEC G7, API.md "Errors").

Every failure that reaches a caller is an :class:`OrbitError` subclass carrying a stable
``code``, a ``category`` and the HTTP status that adapters answer with. Messages are written
for humans and never contain SQL, driver names, stack traces or secrets; internal causes are
chained (``raise ... from exc``) and logged, never serialised.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar


class Category(StrEnum):
    PROTOCOL = "protocol"
    PERMISSION = "permission"
    CONFLICT = "conflict"
    TRANSIENT = "transient"
    BUSINESS = "business"
    UNKNOWN_RESULT = "unknown_result"


class OrbitError(Exception):
    """Base of every error with a stable code."""

    code: ClassVar[str] = "internal"
    category: ClassVar[Category] = Category.TRANSIENT
    status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False
    default_message: ClassVar[str] = "internal error"

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None):
        self.message = message or self.default_message
        self.details = details or {}
        super().__init__(self.message)


class InternalError(OrbitError):
    """A bug or an unexpected condition; the response says nothing more."""

    code = "internal"
    category = Category.TRANSIENT
    status = 500
    retryable = False  # a bug is not cured by repeating the request
    default_message = "internal error; the request id identifies it in the server logs"


# -- protocol -------------------------------------------------------------------------------


class InvalidRequest(OrbitError):
    code = "invalid_request"
    category = Category.PROTOCOL
    status = 400
    default_message = "the request is invalid"


class NotFound(OrbitError):
    code = "not_found"
    category = Category.PROTOCOL
    status = 404
    default_message = "not found"


class MethodNotAllowed(OrbitError):
    code = "method_not_allowed"
    category = Category.PROTOCOL
    status = 405
    default_message = "method not allowed"


class PayloadTooLarge(OrbitError):
    code = "payload_too_large"
    category = Category.PROTOCOL
    status = 413
    default_message = "the request body is too large"


class UnsupportedMediaType(OrbitError):
    code = "unsupported_media_type"
    category = Category.PROTOCOL
    status = 415
    default_message = "the request body must be application/json"


class DefinitionInvalid(OrbitError):
    code = "definition_invalid"
    category = Category.PROTOCOL
    status = 422
    default_message = "the definition is invalid"


class UnsupportedVersion(OrbitError):
    code = "unsupported_version"
    category = Category.PROTOCOL
    status = 422
    default_message = "unsupported protocol version"


# -- permission -----------------------------------------------------------------------------


class Unauthenticated(OrbitError):
    code = "unauthenticated"
    category = Category.PERMISSION
    status = 401
    default_message = "a valid API key is required (Authorization: Bearer <key>)"


class Forbidden(OrbitError):
    code = "forbidden"
    category = Category.PERMISSION
    status = 403
    default_message = "the API key's roles do not allow this"


# -- conflict -------------------------------------------------------------------------------


class IdempotencyConflict(OrbitError):
    code = "idempotency_conflict"
    category = Category.CONFLICT
    status = 409
    default_message = "the idempotency key was used with a different body"


class StateConflict(OrbitError):
    code = "state_conflict"
    category = Category.CONFLICT
    status = 409
    default_message = "the object is not in a state that allows this"


class VersionExists(OrbitError):
    code = "version_exists"
    category = Category.CONFLICT
    status = 409
    default_message = "this version exists with different content"


class AlreadyExists(OrbitError):
    code = "already_exists"
    category = Category.CONFLICT
    status = 409
    default_message = "already exists"


# -- transient ------------------------------------------------------------------------------


class TransientError(OrbitError):
    """Retry later; adapters answer with ``Retry-After``."""

    category = Category.TRANSIENT
    retryable = True
    retry_after_s: ClassVar[int] = 1

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after_s or type(self).retry_after_s


class RateLimited(TransientError):
    code = "rate_limited"
    status = 429
    default_message = "rate limit exceeded"


class QueueFull(TransientError):
    code = "queue_full"
    status = 429
    default_message = "the queue is full"


class Unavailable(TransientError):
    code = "unavailable"
    status = 503
    retry_after_s = 2
    default_message = "the service is temporarily unavailable"


class DatabaseUnavailable(Unavailable):
    """The database could not be reached or refused the unit of work (S2, O2)."""

    default_message = "the database is unavailable; nothing was changed, retry later"


class DatabaseBusy(DatabaseUnavailable):
    """The database answers but could not take the unit in time: no pooled connection became
    free, the unit overran its timeout, lock conflicts outlasted the retries. A refusal like
    any other for the caller; not an outage (the store's availability log ignores it)."""


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is away (not merely busy). The store's
    :class:`~orbit_server.store.base.Availability` tells an outage in a few lines, once for the
    whole process; whoever else meets it logs at DEBUG only."""
    return isinstance(exc, DatabaseUnavailable) and not isinstance(exc, DatabaseBusy)


class CommitOutcomeUnknown(Unavailable):
    """A COMMIT failed or timed out: the change may or may not be durable.

    Callers must re-read before deciding and never treat it as "not done" for unsafe work.
    """

    retryable = False  # replaying could apply the change twice: read the state first
    default_message = (
        "the database did not confirm the commit; the change may or may not have been made, "
        "so read the current state before retrying"
    )


ERROR_TYPES: tuple[type[OrbitError], ...] = (
    InvalidRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    UnsupportedMediaType,
    DefinitionInvalid,
    UnsupportedVersion,
    Unauthenticated,
    Forbidden,
    IdempotencyConflict,
    StateConflict,
    VersionExists,
    AlreadyExists,
    RateLimited,
    QueueFull,
    Unavailable,
    InternalError,
)
"""One class per stable code, as documented in docs/reference/errors.md."""


def error_body(error: OrbitError, request_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "code": error.code,
        "category": str(error.category),
        "message": error.message,
        "retryable": error.retryable,
        "request_id": request_id,
    }
    if error.details:
        body["details"] = error.details
    return {"error": body}

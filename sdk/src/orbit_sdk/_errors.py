"""The SDK's exception tree and its mapping from Orbit's stable error codes (API.md).

Orbit answers errors as ``{"error": {"code", "category", "message", "retryable", "request_id"}}``.
The class is chosen by table: the code first, then the category, then the HTTP status, so a code
added to the server later still lands on the closest base class.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

import msgspec

__all__ = [
    "AuthenticationError",
    "ConflictError",
    "IdempotencyConflictError",
    "NotFoundError",
    "OrbitError",
    "OutcomeUnknownError",
    "PermissionDeniedError",
    "ProtocolError",
    "QueueFullError",
    "RateLimitedError",
    "StateConflictError",
    "TransientError",
    "TransportError",
    "UnavailableError",
    "error_from_http",
    "parse_retry_after",
]

UNEXPECTED_RESPONSE: Final = "unexpected_response"
TRANSPORT_ERROR: Final = "transport_error"
OUTCOME_UNKNOWN: Final = "outcome_unknown"
_SNIPPET_CHARS: Final = 200


class OrbitError(Exception):
    """Base of every error the SDK raises for a failed call.

    ``code`` and ``category`` are Orbit's stable strings (``"idempotency_conflict"``,
    ``"conflict"``); ``status`` is the HTTP status (``None`` when no response arrived);
    ``retryable`` is the server's verdict on repeating the same request; ``request_id`` is the
    server's id for the request, worth quoting in bug reports. ``details`` holds the envelope's
    extra facts when it has any (the reasons of a ``definition_invalid``, the methods of a
    ``method_not_allowed``), else it is empty.
    """

    _default_code: ClassVar[str] = "error"
    _default_category: ClassVar[str] = "unknown"
    _default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        category: str | None = None,
        retryable: bool | None = None,
        request_id: str | None = None,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = self._default_code if code is None else code
        self.category = self._default_category if category is None else category
        self.retryable = self._default_retryable if retryable is None else retryable
        self.request_id = request_id
        self.status = status
        self.details: dict[str, Any] = {} if details is None else dict(details)

    def __str__(self) -> str:
        parts = [f"status={self.status}"] if self.status is not None else []
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        suffix = f" ({', '.join(parts)})" if parts else ""
        return f"{self.code}: {self.message}{suffix}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, "
            f"message={self.message!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor arguments would be lost by the default exception pickling,
        # and errors do cross process boundaries (worker pools, multiprocessing results).
        return (_restore_error, (type(self), self.message), dict(self.__dict__))


def _restore_error(cls: type[OrbitError], message: str) -> OrbitError:
    error = cls.__new__(cls, message)
    error.args = (message,)
    return error


class ProtocolError(OrbitError):
    """The request was malformed or not acceptable (HTTP 400, 404, 405, 413, 415, 422)."""

    _default_code = "invalid_request"
    _default_category = "protocol"


class NotFoundError(ProtocolError):
    """The object does not exist or lies outside the API key's scope (``not_found``, 404)."""

    _default_code = "not_found"


class AuthenticationError(OrbitError):
    """The API key is missing, unknown or revoked (``unauthenticated``, 401)."""

    _default_code = "unauthenticated"
    _default_category = "permission"


class PermissionDeniedError(OrbitError):
    """The API key lacks the role or queue for this call (``forbidden``, 403)."""

    _default_code = "forbidden"
    _default_category = "permission"


class ConflictError(OrbitError):
    """The request conflicts with existing state (409: ``version_exists``, ``already_exists``)."""

    _default_code = "already_exists"
    _default_category = "conflict"


class IdempotencyConflictError(ConflictError):
    """The idempotency key was used before with a different body (``idempotency_conflict``)."""

    _default_code = "idempotency_conflict"


class StateConflictError(ConflictError):
    """The object's state does not allow this operation now (``state_conflict``)."""

    _default_code = "state_conflict"


class TransientError(OrbitError):
    """Orbit cannot take the request right now (429, 503); trying later may succeed.

    ``retry_after`` is the server's ``Retry-After`` in seconds, ``None`` when it sent none.
    """

    _default_code = "unavailable"
    _default_category = "transient"
    _default_retryable = True

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        category: str | None = None,
        retryable: bool | None = None,
        request_id: str | None = None,
        status: int | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(
            message,
            code=code,
            category=category,
            retryable=retryable,
            request_id=request_id,
            status=status,
            details=details,
        )
        self.retry_after = retry_after


class RateLimitedError(TransientError):
    """The tenant or key sent too many requests (``rate_limited``, 429)."""

    _default_code = "rate_limited"


class QueueFullError(TransientError):
    """The queue reached its ``max_pending`` limit (``queue_full``)."""

    _default_code = "queue_full"


class UnavailableError(TransientError):
    """The server cannot serve now: database down, node draining (``unavailable``, 503)."""

    _default_code = "unavailable"


class TransportError(OrbitError):
    """No usable HTTP response: connection refused, DNS, TLS, timeout, broken stream.

    The underlying ``httpx2`` exception is the ``__cause__``. ``retryable`` is ``True``, but a
    keyed write that timed out may still have been applied: repeat it with the same idempotency
    key. A write without a key whose answer was lost raises :class:`OutcomeUnknownError`.
    """

    _default_code = TRANSPORT_ERROR
    _default_category = "transport"
    _default_retryable = True


class OutcomeUnknownError(TransportError):
    """A write that is not safe to repeat was sent, and no usable answer came back: the
    connection broke after it went out, it timed out, or a proxy answered 502/503/504.

    Orbit may or may not have applied it, so the client did not send it again (to this node or
    another). Find out before repeating it (list the tasks you expect, say), or send writes
    with an idempotency key, which the client repeats on its own. ``retryable`` is ``False``.
    """

    _default_code = OUTCOME_UNKNOWN
    _default_retryable = False


_ERROR_BY_CODE: Final[Mapping[str, type[OrbitError]]] = {
    "invalid_request": ProtocolError,
    "not_found": NotFoundError,
    "method_not_allowed": ProtocolError,
    "payload_too_large": ProtocolError,
    "unsupported_media_type": ProtocolError,
    "definition_invalid": ProtocolError,
    "unsupported_version": ProtocolError,
    "unauthenticated": AuthenticationError,
    "forbidden": PermissionDeniedError,
    "idempotency_conflict": IdempotencyConflictError,
    "state_conflict": StateConflictError,
    "version_exists": ConflictError,
    "already_exists": ConflictError,
    "rate_limited": RateLimitedError,
    "queue_full": QueueFullError,
    "unavailable": UnavailableError,
}

# "permission" has two unrelated classes, so an unknown permission code is decided by status.
_ERROR_BY_CATEGORY: Final[Mapping[str, type[OrbitError]]] = {
    "protocol": ProtocolError,
    "conflict": ConflictError,
    "transient": TransientError,
}

# 502 and 504 are not Orbit's own answers but a proxy's in front of it: transient as well.
_ERROR_BY_STATUS: Final[Mapping[int, type[OrbitError]]] = {
    400: ProtocolError,
    404: ProtocolError,
    405: ProtocolError,
    413: ProtocolError,
    415: ProtocolError,
    422: ProtocolError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    409: ConflictError,
    429: TransientError,
    502: TransientError,
    503: TransientError,
    504: TransientError,
}


class _ErrorBody(msgspec.Struct):
    code: str
    message: str = ""
    category: str | None = None
    retryable: bool | None = None
    request_id: str | None = None
    # Any JSON here: details of an unexpected shape must not cost the caller the error itself.
    details: Any = None


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorBody


_envelope_decoder: Final = msgspec.json.Decoder(_ErrorEnvelope)


def error_class_for(code: str | None, category: str | None, status: int) -> type[OrbitError]:
    """The closest class for a code, else its category, else the HTTP status."""
    if code is not None and code in _ERROR_BY_CODE:
        return _ERROR_BY_CODE[code]
    if category is not None and category in _ERROR_BY_CATEGORY:
        return _ERROR_BY_CATEGORY[category]
    return _ERROR_BY_STATUS.get(status, OrbitError)


def error_from_http(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime | None = None,
) -> OrbitError:
    """Turn a non-2xx answer into the matching :class:`OrbitError` (not raised here).

    ``headers`` must look names up case-insensitively (``httpx2.Headers`` does). A body that is
    not Orbit's error envelope (a proxy's HTML page, say) gives code ``unexpected_response``.
    """
    try:
        envelope: _ErrorBody | None = _envelope_decoder.decode(body).error
    except msgspec.DecodeError:  # also covers msgspec.ValidationError
        envelope = None

    if envelope is None:
        cls = error_class_for(None, None, status)
        code: str = UNEXPECTED_RESPONSE
        message = describe_unexpected(status, headers, body)
        category: str | None = None
        retryable: bool | None = None
        request_id: str | None = None
        details: dict[str, Any] | None = None
    else:
        cls = error_class_for(envelope.code, envelope.category, status)
        code, message = envelope.code, envelope.message
        category, retryable, request_id = envelope.category, envelope.retryable, envelope.request_id
        details = envelope.details if isinstance(envelope.details, dict) else None

    if issubclass(cls, TransientError):
        return cls(
            message,
            code=code,
            category=category,
            retryable=retryable,
            request_id=request_id,
            status=status,
            details=details,
            retry_after=parse_retry_after(headers.get("retry-after"), now=now),
        )
    return cls(
        message,
        code=code,
        category=category,
        retryable=retryable,
        request_id=request_id,
        status=status,
        details=details,
    )


def describe_unexpected(status: int, headers: Mapping[str, str], body: bytes) -> str:
    """A short, bounded description of a response that is not what Orbit sends."""
    content_type = headers.get("content-type") or "no content type"
    snippet = body[:_SNIPPET_CHARS].decode("utf-8", errors="replace").strip()
    more = "..." if len(body) > _SNIPPET_CHARS else ""
    return f"unexpected HTTP {status} response ({content_type}): {snippet!r}{more}"


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date).

    Returns ``None`` for a missing or unparsable value, ``0.0`` for a date in the past.
    ``now`` (timezone-aware) is for tests; it defaults to the current UTC time.
    """
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" zones parse as naive; HTTP-dates are always GMT
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC) if now is None else now
    return max(0.0, (when - current).total_seconds())

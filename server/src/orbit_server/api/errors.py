"""The error contract of API.md for every failure, framework-level ones included."""

from __future__ import annotations

from typing import Any

import msgspec
import structlog
from litestar import Request, Response
from litestar.exceptions import (
    ClientException,
    HTTPException,
    MethodNotAllowedException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    SerializationException,
    ValidationException,
)

from orbit_server import errors
from orbit_server.api.context import current_request_id, error_code_var
from orbit_server.errors import error_body

log = structlog.get_logger("orbit.api")

_BY_STATUS: dict[int, type[errors.OrbitError]] = {
    400: errors.InvalidRequest,
    401: errors.Unauthenticated,
    403: errors.Forbidden,
    404: errors.NotFound,
    405: errors.MethodNotAllowed,
    413: errors.PayloadTooLarge,
    415: errors.UnsupportedMediaType,
    422: errors.InvalidRequest,
    429: errors.RateLimited,
    503: errors.Unavailable,
}


def error_headers(error: errors.OrbitError) -> dict[str, str]:
    headers = {}
    if isinstance(error, errors.TransientError) and error.retryable:
        headers["Retry-After"] = str(error.retry_after)
    if isinstance(error, errors.MethodNotAllowed) and "allow" in error.details:
        headers["Allow"] = ", ".join(error.details["allow"])
    return headers


def encode_error(error: errors.OrbitError, request_id: str | None) -> bytes:
    return msgspec.json.encode(error_body(error, request_id))


def to_orbit_error(exc: BaseException) -> errors.OrbitError:
    """Map any exception onto the stable codes; unknown ones become ``internal``."""
    if isinstance(exc, errors.OrbitError):
        return exc
    if isinstance(exc, ValidationException):
        return errors.InvalidRequest(_validation_message(exc))
    if isinstance(exc, ClientException) and isinstance(exc.__cause__, SerializationException):
        # msgspec's decode messages ("Input data was truncated") describe the input only.
        return errors.InvalidRequest(f"the request body is not valid JSON: {exc.detail}")
    if isinstance(exc, MethodNotAllowedException):
        allow = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        details = {"allow": [m.strip() for m in allow.split(",")]} if allow else None
        return errors.MethodNotAllowed("this method is not allowed on this path", details=details)
    if isinstance(exc, NotFoundException):
        return errors.NotFound("no such resource")
    if isinstance(exc, NotAuthorizedException):
        return errors.Unauthenticated()
    if isinstance(exc, PermissionDeniedException):
        return errors.Forbidden()
    if isinstance(exc, HTTPException):
        kind = _BY_STATUS.get(exc.status_code)
        if kind is not None:
            return kind()
    return errors.InternalError()


def _validation_message(exc: ValidationException) -> str:
    # Litestar's details come from msgspec ("Expected `int`, got `str` - at `$.priority`") or
    # from its own parameter parsing; only the field name and the reason are passed on.
    extra = exc.extra if isinstance(exc.extra, list) else []
    parts = []
    for item in extra:
        if not isinstance(item, dict) or not item.get("message"):
            continue
        message = str(item["message"])
        key = str(item.get("key") or "")
        if message == "'data'":  # Litestar's word for a missing body
            parts.append("the request needs a JSON body")
            continue
        source = str(item.get("source") or "").lower()
        where = (
            "query parameter" if "query" in source else "path parameter" if "path" in source else ""
        )
        if key and key != "data":
            parts.append(f"{where} {key}: {message}".strip())
        else:
            parts.append(message)
    return "invalid request: " + "; ".join(parts) if parts else "the request is invalid"


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    error = to_orbit_error(exc)
    error_code_var.set(error.code)
    request_id = current_request_id()
    if isinstance(error, errors.InternalError) and not isinstance(exc, errors.OrbitError):
        log.error("unhandled error", path=request.url.path, exc_info=exc)
    elif isinstance(error, errors.Unavailable):
        # An outage is told once by the store, not once per request it refuses.
        level = log.debug if errors.is_outage(exc) else log.warning
        level("unavailable", code=error.code, reason=type(exc.__cause__ or exc).__name__)
    return Response(
        content=encode_error(error, request_id),
        status_code=error.status,
        media_type="application/json",
        headers=error_headers(error),
    )

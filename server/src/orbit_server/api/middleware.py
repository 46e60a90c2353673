"""The outermost ASGI layer: request ids, body limits, media types, metrics, access logs.

It wraps the whole Litestar app (not only matched routes), so unknown paths, oversized bodies
and wrong media types get the same error contract and request id as everything else. Body
limits are enforced before any parsing: a declared ``Content-Length`` over the limit is refused
without reading, and a streamed body is cut off as soon as it passes the limit.
"""

from __future__ import annotations

import time
from typing import Any

import structlog

from orbit_server import errors
from orbit_server.api.context import accept_request_id, error_code_var, request_id_var
from orbit_server.api.errors import encode_error, error_headers
from orbit_server.observability.metrics import Metrics

log = structlog.get_logger("orbit.http")

ASGIApp = Any
Scope = dict[str, Any]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON_TYPES = frozenset({"application/json"})


class BodyTooLarge(errors.PayloadTooLarge):
    pass


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class OrbitHTTPMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = accept_request_id(_header(scope, b"x-request-id"))
        token = request_id_var.set(request_id)
        code_token = error_code_var.set(None)
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status_holder = [500]
        response_started = [False]
        request_id_header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response_started[0] = True
                status_holder[0] = int(message["status"])
                message["headers"] = [*message.get("headers", []), request_id_header]
            await send(message)

        try:
            refusal = self._refuse_early(scope)
            if refusal is not None:
                await self._send_error(send_with_id, refusal, request_id)
            else:
                try:
                    await self.app(scope, self._limited(receive), send_with_id)
                except Exception as exc:
                    # Litestar answers its own failures; this is the last line of defence.
                    log.error("unhandled error outside the router", exc_info=exc)
                    if not response_started[0]:
                        error = (
                            exc if isinstance(exc, errors.OrbitError) else errors.InternalError()
                        )
                        await self._send_error(send_with_id, error, request_id)
        finally:
            elapsed = time.perf_counter() - started
            route = self._route(scope)
            method = str(scope.get("method", ""))
            status = status_holder[0]
            self.metrics.http_requests.labels(method, route, str(status)).inc()
            self.metrics.http_duration.labels(method, route).observe(elapsed)
            code = error_code_var.get()
            if code is not None:
                self.metrics.errors.labels(code).inc()
            log.info(
                "request",
                method=method,
                path=scope.get("path"),
                status=status,
                duration_ms=round(elapsed * 1000, 2),
            )
            structlog.contextvars.clear_contextvars()
            request_id_var.reset(token)
            error_code_var.reset(code_token)

    def _refuse_early(self, scope: Scope) -> errors.OrbitError | None:
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                return errors.InvalidRequest("the Content-Length header is not a number")
            if length > self.max_body_bytes:
                return errors.PayloadTooLarge(
                    f"the request body is larger than {self.max_body_bytes} bytes"
                )
        else:
            length = 0
        chunked = (_header(scope, b"transfer-encoding") or "").lower() == "chunked"
        if scope.get("method") in _BODY_METHODS and (length > 0 or chunked):
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if media not in _JSON_TYPES:
                return errors.UnsupportedMediaType(
                    "the request body must be sent as Content-Type: application/json"
                )
        return None

    def _limited(self, receive: Any) -> Any:
        received = 0
        limit = self.max_body_bytes

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(f"the request body is larger than {limit} bytes")
            return message

        return limited_receive

    async def _send_error(self, send: Any, error: errors.OrbitError, request_id: str) -> None:
        error_code_var.set(error.code)
        body = encode_error(error, request_id)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        headers += [(k.lower().encode(), v.encode()) for k, v in error_headers(error).items()]
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _route(scope: Scope) -> str:
        handler = scope.get("route_handler")
        paths = getattr(handler, "paths", None)
        if paths:
            return str(sorted(paths)[0])
        return "unmatched"

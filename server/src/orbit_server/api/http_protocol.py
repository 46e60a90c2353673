"""uvicorn's httptools protocol with Orbit's connection bounds and error envelope.

uvicorn alone never closes a connection that has not sent a complete request: its keep-alive
timeout is armed only after a response, so a client that connects and sends nothing, or sends a
header line every few seconds (slowloris), holds the connection for ever. Its answer to framing
the HTTP parser refuses (a negative, non-numeric or repeated ``Content-Length``, or one beside
``Transfer-Encoding: chunked``) is plain text, outside the error envelope, because no ASGI
application sees such a request. This protocol adds, per connection:

- a header timeout: complete request headers must arrive within ``ORBIT_HTTP_HEADER_TIMEOUT_MS``
  of the connection opening or of the previous response ending, or the connection is closed;
  while a request's body arrives, every ``BODY_PROGRESS_BYTES`` of it must come within that
  bound too (a body sent a byte every few seconds does not hold the connection for ever);
- a cap: past ``ORBIT_HTTP_MAX_CONNECTIONS`` open HTTP connections (worker WebSockets are not
  counted) a new one is answered ``503 unavailable`` and closed before anything is read;
- the error envelope (``400 invalid_request``) for requests the parser refuses.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from orbit_server import errors
from orbit_server.api.context import accept_request_id
from orbit_server.api.errors import encode_error, error_headers
from orbit_server.config import Settings

_REASONS = {400: b"Bad Request", 503: b"Service Unavailable"}
BODY_PROGRESS_BYTES = 16 * 1024  # a body's least progress per header timeout


def error_response(error: errors.OrbitError) -> bytes:
    """A complete HTTP/1.1 answer carrying ``error`` in the envelope, closing the connection."""
    request_id = accept_request_id(None)
    body = encode_error(error, request_id)
    head = [
        b"HTTP/1.1 %d %s" % (error.status, _REASONS.get(error.status, b"Error")),
        b"content-type: application/json",
        b"content-length: %d" % len(body),
        b"connection: close",
        b"x-request-id: " + request_id.encode(),
    ]
    head += [f"{k.lower()}: {v}".encode() for k, v in error_headers(error).items()]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class OrbitHttpProtocol(HttpToolsProtocol):
    """One HTTP connection (see the module's docstring). Built by ``http_protocol(settings)``."""

    header_timeout_s: float = 10.0
    max_connections: int = 1000
    # The open HTTP connections of this process. uvicorn's own set also holds the WebSocket
    # connections (a worker's upgrade moves it there), which the cap must not count.
    open_http: ClassVar[set[OrbitHttpProtocol]] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_since_timer = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.open_http.add(self)
        if len(self.open_http) > self.max_connections:
            self.open_http.discard(self)
            self.connections.discard(self)
            transport.write(
                error_response(
                    errors.Unavailable(
                        "this server has too many open connections; retry in a moment"
                    )
                )
            )
            transport.close()
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self.open_http.discard(self)
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        self.open_http.discard(self)  # a worker connection from here on, not counted
        super().handle_websocket_upgrade()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()
        if not self._upgrading():
            self._body_since_timer = 0
            self._arm_header_timer()  # now the body's: it must make progress in time

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._body_since_timer += len(body)
        if self._body_since_timer >= BODY_PROGRESS_BYTES and not self._upgrading():
            self._body_since_timer = 0
            self._arm_header_timer()

    def on_message_complete(self) -> None:
        self._disarm_header_timer()
        super().on_message_complete()

    def _upgrading(self) -> bool:
        return bool(self.parser.should_upgrade() and self._should_upgrade())

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._arm_header_timer()  # the next request's headers are due in time too

    def send_400_response(self, msg: str) -> None:
        self._disarm_header_timer()
        error = errors.InvalidRequest(
            "the request is not valid HTTP/1.1: check its request line and its framing headers "
            "(one non-negative Content-Length, or Transfer-Encoding: chunked, not both)"
        )
        self.transport.write(error_response(error))
        self.transport.close()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.flow.read_paused:  # the application has not taken what came: not the client's
            self._arm_header_timer()
        elif not self.transport.is_closing():
            self.transport.close()


def http_protocol(settings: Settings) -> type[OrbitHttpProtocol]:
    """The protocol class uvicorn builds each HTTP connection with, bound to ``settings``."""
    return type(
        "OrbitHttpProtocol",
        (OrbitHttpProtocol,),
        {
            "header_timeout_s": settings.http_header_timeout_ms / 1000,
            "max_connections": settings.http_max_connections,
            "open_http": set(),
        },
    )

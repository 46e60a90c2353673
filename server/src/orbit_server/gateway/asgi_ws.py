"""The WebSocket protocol uvicorn serves the worker endpoint with: websockets' Sans-I/O
implementation, as ``ws="websockets-sansio"``, with two corrections.

- Refusing an upgrade with a plain HTTP answer (the ``websocket.http.response`` extension: 401
  for a bad key, 403 without the worker role, 503 while draining) leaves that implementation
  believing the handshake never finished, and it logs ``ASGI callable returned without
  completing handshake`` at ERROR for every routine refusal. Once the refusal's body is on the
  wire, the handshake is over: mark it so, as uvicorn's wsproto implementation does.
- When the endpoint has ended a connection, the transport is closed gracefully, which waits
  until everything queued has been written. A worker that does not read never lets that
  happen, and the TCP connection stayed open with megabytes queued. If it is still open
  ``ABORT_AFTER_S`` after the endpoint returned, it is aborted.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

ABORT_AFTER_S = 5.0  # after the endpoint returned: time for the close handshake to finish


class WorkerWebSocketProtocol(WebSocketsSansIOProtocol):
    _lost = False

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            self.handshake_complete = True

    async def run_asgi(self) -> None:
        await super().run_asgi()
        if not self._lost:
            self.loop.call_later(ABORT_AFTER_S, self._abort_if_open)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        super().connection_lost(exc)

    def _abort_if_open(self) -> None:
        if not self._lost:
            self.transport.abort()

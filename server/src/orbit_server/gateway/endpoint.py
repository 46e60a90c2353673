"""The worker endpoint ``/v1/worker`` (docs/protocol.md) as a plain ASGI WebSocket handler:
authentication on the upgrade request (refused before it completes), the handshake with its
deadline, one :class:`Connection` per worker, and the drain on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from orbit_server.errors import Forbidden, OrbitError, Unavailable, error_body
from orbit_server.gateway import protocol as p
from orbit_server.gateway.coalesce import Coalescer
from orbit_server.gateway.connection import Connection, ProtocolViolation, SlowConsumer
from orbit_server.gateway.dispatch import Dispatcher
from orbit_server.governance.keys import Principal, Role, bearer_token
from orbit_server.pulse.sessions import HeldRef
from orbit_server.pulse.worker import Session
from orbit_server.runtime.node import Node

log = structlog.get_logger("orbit.gateway")

PATH = "/v1/worker"
CLOSE_SEND_S = 1.0  # longest the close frame may wait for room to be written


@dataclass(frozen=True, slots=True)
class Gone:
    """The worker's side of the connection ended, with its close code (None: no close frame)."""

    code: int | None


# Why a session ended, as ``GET /v1/workers`` shows it, by the close code the server sent.
_END_REASONS = {
    p.CLOSE_UNAUTHENTICATED: "revoked",
    p.CLOSE_TOO_SLOW: "too_slow",
    p.CLOSE_INTERNAL: "error",
}


def _reason_of(ended: int | Gone) -> str:
    if isinstance(ended, Gone):
        normal = ended.code in (p.CLOSE_NORMAL, p.CLOSE_GOING_AWAY)
        return "worker_stopped" if normal else "lost"
    return _END_REASONS.get(ended, "protocol_error")


class Rejected(Exception):
    def __init__(self, code: int, frame: p.Error | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.frame = frame


class Gateway:
    def __init__(self, node: Node) -> None:
        self._node = node
        settings = node.settings
        self.dispatcher = Dispatcher(
            node.workers, node.watch, node.metrics, max_leases=settings.node_max_leases
        )
        self.coalescer = Coalescer.of(node.workers)
        ledger = self.dispatcher.ledger  # read at each scrape: no bookkeeping on the hot path
        node.metrics.worker_slots_free.set_function(lambda: sum(a.free for a in ledger.accounts()))
        node.metrics.worker_slots_busy.set_function(lambda: ledger.inflight)
        self._connections: set[Connection] = set()
        self._draining = False
        self._touching: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Close sessions a previous run of this node left open; keep this run's alive."""
        self._node.watch.on_cancel_requested(self._push_cancel)
        self._node.keys.on_revoked(lambda key_id: self._close_revoked({key_id}))
        with contextlib.suppress(Unavailable):
            await self._node.sessions.close_all_of_node()
        self._touching = asyncio.create_task(self._touch_loop(), name="worker-sessions")
        self._node.tasks.direct = self.dispatcher  # single submits may go to an idle worker

    def _push_cancel(self, task_id: str, reason: str | None) -> None:
        """A cancel committed on this node reaches a local worker at once (others learn it
        from their next heartbeat)."""
        for conn in self._connections:
            for held_id, attempt in list(conn.held):
                if held_id == task_id:
                    with contextlib.suppress(SlowConsumer):
                        conn.send(p.Cancel(items=[p.CancelItem(task_id=task_id, attempt=attempt,
                                                               reason=reason)]))  # fmt: skip

    def _close_revoked(self, key_ids: set[str]) -> None:
        """Connections of revoked keys end (4401): they receive no more work."""
        for conn in list(self._connections):
            if conn.key_id in key_ids:
                log.info("closing a worker connection: its API key was revoked",
                         session=conn.session.session_id)  # fmt: skip
                conn.end(
                    p.CLOSE_UNAUTHENTICATED,
                    _error("unauthenticated", "this API key has been revoked"),
                )

    async def _touch_loop(self) -> None:
        """Every heartbeat interval: this node's sessions are alive, and connections whose key
        was revoked meanwhile (on any node) end."""
        interval = self._node.settings.heartbeat_ms / 1000
        while True:
            await asyncio.sleep(interval)
            await self.check_sessions()

    async def check_sessions(self) -> None:
        try:
            await self._node.sessions.touch()
            keys = {conn.key_id for conn in self._connections}
            if keys:
                self._close_revoked(await self._node.keys.unusable(keys))
        except Unavailable as exc:
            log.debug("worker sessions not refreshed: database unavailable", reason=exc.message)

    async def drain(self) -> None:
        """Stop claiming, tell every worker to drain, wait for in-flight work up to the grace
        period, then close the connections (1001)."""
        self._draining = True
        self._node.tasks.direct = None
        await self.dispatcher.stop()
        grace_ms = self._node.settings.drain_grace_ms
        for conn in list(self._connections):
            conn.draining = True
            with contextlib.suppress(SlowConsumer):
                conn.send(p.Drain(grace_ms=grace_ms))
        deadline = asyncio.get_running_loop().time() + grace_ms / 1000

        def close_idle() -> bool:
            """Close each connection once nothing is in flight on it; done when none is left."""
            for conn in list(self._connections):
                if not conn.held:
                    conn.draining = True
                    conn.closed.set()
            return not self._connections

        try:
            await self._until(close_idle, deadline)
            for conn in list(self._connections):  # the grace period is over
                conn.closed.set()
            await self._until(lambda: not self._connections, deadline + 1)
        finally:  # also when a second signal cuts the wait short
            for conn in list(self._connections):
                conn.closed.set()
            if self._touching is not None:
                self._touching.cancel()

    async def _until(self, done: Callable[[], bool], deadline: float) -> None:
        """Wait until ``done()`` holds (checked at every settled attempt or closed connection)
        or the loop's clock reaches ``deadline``."""
        changed = self.dispatcher.changed
        while not done():
            changed.clear()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await changed.wait()

    # -- one connection -----------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        try:
            principal = await self._admit(scope)
        except OrbitError as exc:
            await _refuse(scope, send, exc)
            return
        await send({"type": "websocket.accept"})
        try:
            await self._serve(principal, receive, send)
        except Rejected as rejected:
            if rejected.frame is not None:
                with contextlib.suppress(Exception):
                    await send(
                        {"type": "websocket.send", "text": p.encode(rejected.frame).decode()}
                    )
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": rejected.code})

    async def _admit(self, scope: dict[str, Any]) -> Principal:
        if self._draining:
            raise Unavailable("this node is shutting down; connect to another one")
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        principal = await self._node.keys.authenticate(bearer_token(header))
        if Role.WORKER not in principal.roles:
            raise Forbidden("connecting a worker needs an API key with the worker role")
        return principal

    async def _read(self, receive: Any) -> p.WorkerFrame | Gone:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return Gone(message.get("code"))
        data = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        try:
            return p.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Rejected(p.CLOSE_PROTOCOL, _error("invalid_frame", str(exc))) from None
        except RecursionError:  # JSON nested deeper than the decoder goes
            raise Rejected(p.CLOSE_PROTOCOL, _error("invalid_frame",
                           "the frame's JSON is nested too deeply")) from None  # fmt: skip

    async def _serve(self, principal: Principal, receive: Any, send: Any) -> None:
        settings = self._node.settings
        try:
            async with asyncio.timeout(settings.handshake_timeout_ms / 1000):
                hello = await self._read(receive)
        except TimeoutError:
            raise Rejected(p.CLOSE_HANDSHAKE_TIMEOUT, _error("handshake_timeout",
                           "no hello before the handshake deadline")) from None  # fmt: skip
        if isinstance(hello, Gone):
            return
        if not isinstance(hello, p.Hello):
            raise Rejected(
                p.CLOSE_PROTOCOL, _error("invalid_frame", "the first frame must be hello")
            )
        handlers = self._check_hello(principal, hello)
        try:
            opened = await self._node.sessions.open(
                principal.scope, key_id=principal.key_id, worker_id=hello.worker_id,
                capacity=hello.capacity, handlers=[msgspec.structs.asdict(h) for h in handlers],
                held=[HeldRef(r.task_id, r.attempt, r.lease_token) for r in hello.held],
                queues=principal.queues, sdk=hello.sdk,
                protocol=max(set(hello.protocol) & p.SUPPORTED_VERSIONS),
            )  # fmt: skip
        except Unavailable as exc:
            raise Rejected(p.CLOSE_INTERNAL, _error("unavailable", exc.message)) from None

        async def send_text(text: str) -> None:
            await send({"type": "websocket.send", "text": text})

        conn = Connection(
            session=Session(opened.session_id, settings.node_id, hello.worker_id),
            scope=principal.scope, key_id=principal.key_id, handlers=handlers,
            capacity=hello.capacity, workers=self._node.workers, coalescer=self.coalescer,
            dispatcher=self.dispatcher, clock=self._node.clock,
            metrics=self._node.metrics, send_text=send_text,
            max_credits=settings.worker_max_capacity,
        )  # fmt: skip
        conn.adopt(opened.continuing)
        verdicts = [p.HeldVerdict(task_id=r.task_id, attempt=r.attempt, verdict="continue")
                    for r in opened.continuing]  # fmt: skip
        verdicts += [p.HeldVerdict(task_id=r.task_id, attempt=r.attempt, verdict="stop")
                     for r in opened.stopped]  # fmt: skip
        conn.send(
            p.Welcome(
                protocol=p.PROTOCOL_VERSION, session_id=opened.session_id, node=settings.node_id,
                lease_ms=settings.lease_ms, heartbeat_ms=settings.heartbeat_ms,
                max_frame_bytes=settings.ws_max_frame_bytes, held=verdicts,
            )
        )  # fmt: skip
        if self._draining:  # the drain began while this worker was saying hello
            conn.draining = True
            conn.send(p.Drain(grace_ms=settings.drain_grace_ms))
        await self._run(conn, receive, send)

    def _check_hello(self, principal: Principal, hello: p.Hello) -> list[p.Handler]:
        common = set(hello.protocol) & p.SUPPORTED_VERSIONS
        if not common:
            raise Rejected(p.CLOSE_VERSION, _error("unsupported_version",
                f"this server speaks protocol {sorted(p.SUPPORTED_VERSIONS)}"))  # fmt: skip
        for handler in hello.handlers:
            if not principal.may_use_queue(handler.queue):
                raise Rejected(p.CLOSE_FORBIDDEN, _error("forbidden",
                    f"this API key may not use queue {handler.queue}"))  # fmt: skip
        if hello.capacity > self._node.settings.worker_max_capacity:
            raise Rejected(p.CLOSE_PROTOCOL, _error("invalid_request",
                f"capacity exceeds {self._node.settings.worker_max_capacity}"))  # fmt: skip
        merged: dict[tuple[str, str], set[str] | None] = {}
        for h in hello.handlers:
            key = (h.queue, h.type)
            before = merged.get(key, set())
            merged[key] = None if before is None or not h.versions else before | set(h.versions)
        return [
            p.Handler(queue=q, type=t, versions=sorted(v or ()))
            for (q, t), v in sorted(merged.items())
        ]

    async def _run(self, conn: Connection, receive: Any, send: Any) -> None:
        self._connections.add(conn)
        self._node.metrics.worker_connections.inc()
        self.dispatcher.attach(conn)
        writer = asyncio.create_task(conn.writer())
        answerer = asyncio.create_task(conn.answer_requests())
        reader = asyncio.create_task(self._read_loop(conn, receive))
        closed = asyncio.create_task(conn.closed.wait())
        close_code: int | None = p.CLOSE_GOING_AWAY
        reason = "drain" if self._draining else "lost"  # the writer ended: the socket broke
        try:
            done, _ = await asyncio.wait(
                {writer, answerer, reader, closed}, return_when=asyncio.FIRST_COMPLETED
            )
            if reader in done:
                ended = reader.result()
                close_code = None if isinstance(ended, Gone) else ended
                reason = _reason_of(ended)
            elif answerer in done and answerer.exception() is not None:
                exc = answerer.exception()
                close_code = p.CLOSE_TOO_SLOW if isinstance(exc, SlowConsumer) else p.CLOSE_INTERNAL
                reason = _reason_of(close_code)
                if not isinstance(exc, SlowConsumer):
                    log.error("worker request failed", exc_info=exc)
            elif closed in done and conn.close_code is not None:
                close_code = conn.close_code  # revoked, or a worker that does not read
                reason = _reason_of(close_code)
            if conn.draining and reason in ("worker_stopped", "lost"):
                reason = "drain"  # the worker left as the drain notice asked
        finally:
            conn.closed.set()
            self.dispatcher.detach(conn)
            conn.close_account()
            conn.end_requests()
            conn.stop_writer()
            for task in (reader, answerer, closed):
                task.cancel()
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                async with asyncio.timeout(1):
                    await writer  # flush what is queued (answers, drain notice)
            writer.cancel()
            if close_code is not None:
                # Bounded: a worker that does not read leaves no room for the close frame. The
                # protocol (asgi_ws.py) then aborts the TCP connection.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_SEND_S):
                        await send({"type": "websocket.close", "code": close_code})
            self._connections.discard(conn)
            self.dispatcher.changed.set()
            self._node.metrics.worker_connections.dec()
            with contextlib.suppress(Unavailable):
                await self._node.sessions.close(conn.session.session_id, reason)

    async def _read_loop(self, conn: Connection, receive: Any) -> int | Gone:
        """Frames until the worker disconnects or breaks the protocol (a close code)."""
        while True:
            try:
                frame = await self._read(receive)
                if isinstance(frame, Gone):
                    return frame
                await conn.accept(frame)
            except Rejected as rejected:
                if rejected.frame is not None:
                    with contextlib.suppress(SlowConsumer):
                        conn.send(rejected.frame)
                return rejected.code
            except ProtocolViolation as exc:
                with contextlib.suppress(SlowConsumer):
                    conn.send(_error("invalid_frame", str(exc)))
                return p.CLOSE_PROTOCOL


def _error(code: str, message: str) -> p.Error:
    return p.Error(code=code, message=message)


async def _refuse(scope: dict[str, Any], send: Any, error: OrbitError) -> None:
    """Answer the upgrade request with a plain HTTP error (before the WebSocket exists)."""
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = msgspec.json.encode(error_body(error, None))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if isinstance(error, Unavailable):
        headers.append((b"retry-after", str(error.retry_after).encode()))
    await send(
        {"type": "websocket.http.response.start", "status": error.status, "headers": headers}
    )
    await send({"type": "websocket.http.response.body", "body": body})

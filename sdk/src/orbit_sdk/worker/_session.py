"""One connection to an Orbit node: hello and welcome, then frames both ways until it closes.

Outgoing frames are composed from the runtime's state by a single writer whenever something
changed, so everything that became ready in one turn of the event loop goes out together:
heartbeat, then starts, releases, results, and last the credits freed by those results.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import msgspec
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from orbit_sdk.worker._errors import WorkerError
from orbit_sdk.worker._outcome import too_large_item
from orbit_sdk.worker._protocol import (
    PROTOCOL_VERSION,
    Acked,
    Cancel,
    Credit,
    Drain,
    Error,
    Frame,
    Heartbeat,
    HeartbeatItem,
    Hello,
    Release,
    Released,
    Renewed,
    Result,
    ServerFrame,
    Start,
    Started,
    Tasks,
    Welcome,
    decode_server_frame,
    encode_frame,
    encoded_size,
)
from orbit_sdk.worker._runtime import WAITING, Attempt, AttemptKey, Phase, Runtime

__all__ = ["Session", "SessionEnd"]

MAX_ITEMS: Final = 1000
MAX_HELD: Final = 10_000
WELCOME_TIMEOUT_S: Final = 30.0
RETRY_DEFAULT_S: Final = 1.0
RETRY_CAP_S: Final = 10.0
DRAIN_SLACK_S: Final = 10.0
FRAME_OVERHEAD: Final = 256  # the frame's own fields around its items, generously

RequestKind = Literal["start", "heartbeat", "result", "release"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Request:
    kind: RequestKind
    keys: tuple[AttemptKey, ...]
    sent_at: float


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """How a connection ended: its close code, whether it got as far as ``welcome``, and the
    last ``error`` frame the server sent on it."""

    close_code: int | None
    close_reason: str
    welcomed: bool
    last_error: Error | None


class Session:
    """Speaks the protocol on one open WebSocket; :meth:`run` returns when it closes."""

    def __init__(
        self,
        ws: ClientConnection,
        runtime: Runtime,
        *,
        worker_id: str,
        sdk: str,
        logger: logging.Logger,
    ) -> None:
        self._ws = ws
        self._runtime = runtime
        self._worker_id = worker_id
        self._sdk = sdk
        self._logger = logger
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._requests: dict[int, _Request] = {}
        self._next_id = 1
        self._granted = 0  # credits the server holds for this connection
        self._heartbeat_due = False
        self._timers: list[asyncio.TimerHandle] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.welcomed = False
        self.last_error: Error | None = None

    async def run(self) -> SessionEnd:
        try:
            welcome = await self._handshake()
            self.welcomed = True
            self._logger.info("connected to node %s (session %s)", welcome.node, welcome.session_id)
            rt = self._runtime
            rt.on_welcome(
                lease_ms=welcome.lease_ms,
                heartbeat_ms=welcome.heartbeat_ms,
                max_frame_bytes=welcome.max_frame_bytes,
                held=welcome.held,
            )
            rt.set_listener(self.wake)
            await self._serve()
        except ConnectionClosed:
            pass
        finally:
            self._runtime.set_listener(None)
            for timer in self._timers:
                timer.cancel()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._ws.close()
        return SessionEnd(
            close_code=self._ws.close_code,
            close_reason=self._ws.close_reason or "",
            welcomed=self.welcomed,
            last_error=self.last_error,
        )

    async def close(self, reason: str = "worker stopping") -> None:
        await self._ws.close(1000, reason)

    def wake(self) -> None:
        self._dirty.set()

    # -- handshake --------------------------------------------------------------------------

    async def _handshake(self) -> Welcome:
        rt = self._runtime
        rt.draining = False  # a drain ends with the connection that announced it
        capacity = max(0, rt.concurrency + rt.prefetch_now() - rt.busy()) if rt.accepting else 0
        hello = Hello(
            protocol=[PROTOCOL_VERSION],
            worker_id=self._worker_id,
            handlers=rt.registry.hello_handlers(),
            capacity=capacity,
            held=rt.held_refs()[:MAX_HELD],
            sdk=self._sdk,
        )
        await self._send(hello)
        self._granted = capacity
        async with asyncio.timeout(WELCOME_TIMEOUT_S):
            welcome = await self._first_welcome()
        if welcome.protocol != PROTOCOL_VERSION:
            await self._ws.close(1002, "unsupported protocol version")
            raise WorkerError(
                f"the server chose protocol version {welcome.protocol}; this SDK speaks "
                f"{PROTOCOL_VERSION}",
                code="unsupported_version",
            )
        return welcome

    async def _first_welcome(self) -> Welcome:
        while True:
            frame = self._decode(await self._ws.recv())
            if isinstance(frame, Welcome):
                return frame
            if isinstance(frame, Error):
                self._note_error(frame)
            elif frame is not None:
                self._logger.warning("ignoring %s frame before welcome", _tag(frame))

    # -- the three loops --------------------------------------------------------------------

    async def _serve(self) -> None:
        loops = [
            self._spawn(self._read()),
            self._spawn(self._write()),
            self._spawn(self._heartbeats()),
        ]
        done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is not None and not isinstance(error, ConnectionClosed):
                raise error

    async def _read(self) -> None:
        while True:
            try:
                data = await self._ws.recv()
            except ConnectionClosed:
                return
            frame = self._decode(data)
            if frame is not None:
                self._dispatch(frame)

    async def _write(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            for frame in self._compose():
                await self._send(frame)
                if isinstance(frame, Start):
                    self._runtime.start_sent(frame.items)

    async def _heartbeats(self) -> None:
        # Renewing is the one thing here that runs on a timer: the protocol asks for it.
        # A server that stops answering renewals while its connection stays open (frozen,
        # stalled, cut off without a reset) would let every lease held here run out, though
        # another server could renew them: after half a lease without an answer the
        # connection is dropped, and the worker takes its attempts to the next URL.
        rt = self._runtime
        beat_at = self._loop.time()
        while True:
            now = self._loop.time()
            silent = self._silent_for(now)
            if silent >= rt.lease_ms / 2000:
                self._logger.warning(
                    "the server has not answered a lease renewal for %.1f s: "
                    "reconnecting, to another server if there is one",
                    silent,
                )
                self._ws.transport.abort()  # a closing handshake would wait for it too
                return
            if now >= beat_at:
                self._heartbeat_now()
                beat_at = now + rt.heartbeat_ms / 1000
            await asyncio.sleep(min(beat_at - now, rt.lease_ms / 8000))

    def _silent_for(self, now: float) -> float:
        """Seconds since the oldest renewal still waiting for its answer was sent."""
        waiting = [r.sent_at for r in self._requests.values() if r.kind == "heartbeat"]
        return now - min(waiting) if waiting else 0.0

    async def _close_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self._logger.warning("the draining node did not close the connection: closing it")
        await self._ws.close(1000, "drain grace period over")

    # -- incoming ---------------------------------------------------------------------------

    def _dispatch(self, frame: ServerFrame) -> None:
        rt = self._runtime
        match frame:
            case Tasks(items=items):
                self._granted = max(0, self._granted - len(items))
                rt.deliver(items)
            case Started(re=re, items=items):
                if (request := self._answered(re)) is not None:
                    rt.on_started(items, request.sent_at)
            case Renewed(re=re, items=items):
                if (request := self._answered(re)) is not None:
                    rt.on_renewed(items, request.sent_at)
            case Acked(re=re, items=items):
                self._answered(re)
                rt.on_acked(items)
            case Released(re=re, items=items):
                self._answered(re)
                rt.on_released(items)
            case Cancel(items=items):
                for item in items:
                    rt.request_cancel((item.task_id, item.attempt), item.reason)
            case Drain(grace_ms=grace_ms):
                self._logger.info("the node is draining (grace %d ms)", grace_ms)
                rt.draining = True
                rt.release_unstarted()
                self.wake()
                self._spawn(self._close_after(grace_ms / 1000 + DRAIN_SLACK_S))
            case Error():
                self._on_error(frame)
            case Welcome():
                self._logger.warning("ignoring a second welcome")

    def _answered(self, re: int) -> _Request | None:
        request = self._requests.pop(re, None)
        if request is None:
            self._logger.warning("an answer to unknown request %d", re)
        return request

    def _on_error(self, error: Error) -> None:
        self._note_error(error)
        if error.re is None:
            return  # the connection is about to close
        request = self._requests.pop(error.re, None)
        if request is None:
            return
        if error.code != "unavailable":
            if request.kind != "heartbeat":
                self._runtime.on_refused(request.keys, error.re)
            return
        delay = RETRY_DEFAULT_S if error.retry_after_ms is None else error.retry_after_ms / 1000
        delay = min(max(delay, 0.0), RETRY_CAP_S)
        if request.kind == "heartbeat":
            self._timers.append(self._loop.call_later(delay, self._heartbeat_now))
            return
        for key in request.keys:
            attempt = self._runtime.attempts.get(key)
            if attempt is not None and attempt.inflight == error.re:
                attempt.inflight = WAITING
        self._timers.append(self._loop.call_later(delay, self._retry, request.keys))

    def _retry(self, keys: tuple[AttemptKey, ...]) -> None:
        for key in keys:
            attempt = self._runtime.attempts.get(key)
            if attempt is not None and attempt.inflight == WAITING:
                attempt.inflight = None
        self.wake()

    def _heartbeat_now(self) -> None:
        self._heartbeat_due = True
        self.wake()

    def _note_error(self, error: Error) -> None:
        self.last_error = error
        level = logging.WARNING if error.code == "unavailable" else logging.ERROR
        self._logger.log(level, "server error %s: %s", error.code, error.message)

    # -- outgoing ---------------------------------------------------------------------------

    def _compose(self) -> list[Frame]:
        rt = self._runtime
        now = self._loop.time()
        frames: list[Frame] = []
        if self._heartbeat_due:
            self._heartbeat_due = False
            held = list(rt.attempts.values())
            if held:
                request_id = self._request("heartbeat", held, now, mark=False)
                frames.append(Heartbeat(id=request_id, items=[_heartbeat_item(a) for a in held]))
        if not rt.accepting:
            rt.release_unstarted()
        # Starts only for free slots: the other delivered attempts (prefetched) wait, leased
        # and renewed by heartbeats, until a handler returns.
        pending = rt.pending(Phase.DELIVERED)
        room = max(0, rt.concurrency - rt.running())
        delivered = [a for a in pending if a.task is not None]  # eager: running already
        delivered += [a for a in pending if a.task is None][:room]
        for eager in (False, True):  # apart: the server holds eager starts briefly (0008)
            of_kind = [a for a in delivered if a.delivery.eager_start is eager]
            for chunk in _chunks(of_kind, MAX_ITEMS):
                request_id = self._request("start", chunk, now)
                frames.append(Start(id=request_id, items=[a.ref for a in chunk]))
        for chunk in _chunks(rt.pending(Phase.RELEASING), MAX_ITEMS):
            request_id = self._request("release", chunk, now)
            frames.append(Release(id=request_id, items=[a.ref for a in chunk]))
        for chunk in self._result_chunks(rt.pending(Phase.FINISHED)):
            request_id = self._request("result", chunk, now)
            frames.append(
                Result(id=request_id, items=[a.result for a in chunk if a.result is not None])
            )
        if rt.accepting:
            free = rt.concurrency + rt.prefetch_now() - rt.busy() - self._granted
            if free > 0:
                self._granted += free
                frames.append(Credit(n=free))
        return frames

    def _result_chunks(self, finished: list[Attempt]) -> Iterator[list[Attempt]]:
        """Results in frames of at most 1000 items that stay under the server's frame limit."""
        limit = self._runtime.max_frame_bytes - FRAME_OVERHEAD
        chunk: list[Attempt] = []
        size = 0
        for attempt in finished:
            if attempt.result is None:
                continue
            if attempt.result_size > limit:
                attempt.result = too_large_item(attempt.ref, attempt.result_size, limit)
                attempt.result_size = encoded_size(attempt.result)
            if chunk and (len(chunk) >= MAX_ITEMS or size + attempt.result_size + 1 > limit):
                yield chunk
                chunk, size = [], 0
            chunk.append(attempt)
            size += attempt.result_size + 1
        if chunk:
            yield chunk

    def _request(
        self, kind: RequestKind, attempts: Sequence[Attempt], now: float, *, mark: bool = True
    ) -> int:
        request_id = self._next_id
        self._next_id += 1
        self._requests[request_id] = _Request(kind, tuple(a.key for a in attempts), now)
        if mark:
            for attempt in attempts:
                attempt.inflight = request_id
        return request_id

    async def _send(self, frame: Frame) -> None:
        await self._ws.send(encode_frame(frame).decode())  # a text frame

    # -- helpers ----------------------------------------------------------------------------

    def _decode(self, data: str | bytes) -> ServerFrame | None:
        try:
            return decode_server_frame(data)
        except msgspec.DecodeError as exc:
            self._logger.warning("ignoring a frame this SDK cannot read: %s", exc)
            return None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _tag(frame: Frame) -> str:
    return str(type(frame).__struct_config__.tag)


def _heartbeat_item(attempt: Attempt) -> HeartbeatItem:
    """An attempt's reference, with the progress its handler reported since the last
    heartbeat (only the latest report is sent)."""
    ref = attempt.ref
    progress = attempt.context._take_progress() if attempt.context is not None else None
    return HeartbeatItem(
        task_id=ref.task_id, attempt=ref.attempt, lease_token=ref.lease_token, progress=progress
    )

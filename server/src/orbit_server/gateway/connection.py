"""One worker connection after its handshake: its account in the node's lease ledger (credits
and the attempts it holds), a bounded send buffer, and the answers to its requests
(docs/protocol.md). Requests are answered in order by one task per connection; credits are
applied as they arrive."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec
import structlog

from orbit_server.clock import Clock, to_rfc3339
from orbit_server.errors import OrbitError, Unavailable
from orbit_server.gateway import protocol as p
from orbit_server.gateway.coalesce import Coalescer
from orbit_server.gateway.dispatch import Dispatcher
from orbit_server.gateway.ledger import Held, Key, Reservation
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.leasing import starts_eagerly
from orbit_server.pulse.model import Task
from orbit_server.pulse.states import Event
from orbit_server.pulse.worker import (
    Lease,
    LeaseRef,
    Renew,
    RenewVerdict,
    Report,
    Session,
    StartAnswer,
    StartVerdict,
    Want,
    WorkerService,
)
from orbit_server.scope import Scope
from orbit_server.weave.engine import parse_key

log = structlog.get_logger("orbit.gateway")

SEND_BUFFER_FRAMES = 256  # frames waiting to be written; a worker that lets it fill is cut off
REQUEST_BUFFER = 64  # requests read ahead of the one being answered
RETRY_AFTER_MS = 1000
MAX_ERROR_BYTES = 16 * 1024  # an error's details beyond this are dropped, not stored

_START = {
    StartVerdict.STARTED: "started",
    StartVerdict.DENIED_GATE: "denied",
    StartVerdict.STALE: "stale",
}


class SlowConsumer(Exception):
    """The connection's send buffer is full."""


class Connection:
    def __init__(
        self,
        *,
        session: Session,
        scope: Scope,
        key_id: str,
        handlers: list[p.Handler],
        capacity: int,
        workers: WorkerService,
        coalescer: Coalescer,
        dispatcher: Dispatcher,
        clock: Clock,
        metrics: Metrics,
        send_text: Callable[[str], Awaitable[None]],
        max_credits: int | None = None,
    ) -> None:
        self.session = session
        self.scope = scope
        self.key_id = key_id  # the API key it connected with (revocation closes it)
        self.close_code: int | None = None  # why the server ends it, once it does
        self.draining = False
        self._handlers = handlers
        self._workers = workers
        self._coalescer = coalescer
        self._dispatcher = dispatcher
        self._ledger = dispatcher.ledger
        self.account = self._ledger.open(
            session.session_id,
            capacity=capacity,
            max_credits=capacity if max_credits is None else max_credits,
        )
        self._clock = clock
        self._metrics = metrics
        self._send_text = send_text
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue(SEND_BUFFER_FRAMES)
        self._requests: asyncio.Queue[p.WorkerFrame | None] = asyncio.Queue(REQUEST_BUFFER)
        self.closed = asyncio.Event()

    @property
    def held(self) -> Mapping[Key, Held]:
        """The attempts this connection holds (delivered or continued, not ended)."""
        return self.account.held

    def close_account(self) -> None:
        """The connection ended: its slots no longer count on this node (decision 0022)."""
        self._ledger.close(self.account)

    # -- what the dispatcher uses -------------------------------------------------------------

    def queues(self) -> Sequence[str]:
        return sorted({h.queue for h in self._handlers})

    def wants(self, queue: str, free: int) -> list[Want]:
        return [
            Want(queue=h.queue, type=h.type, free=free, versions=tuple(h.versions))
            for h in self._handlers
            if h.queue == queue
        ]

    def takes(self, queue: str, type_: str, version: str | None) -> bool:
        return any(
            h.queue == queue
            and h.type == type_
            and (version is None or not h.versions or version in h.versions)
            for h in self._handlers
        )

    def deliver(self, reservation: Reservation, leases: list[Lease]) -> bool:
        if self.closed.is_set():
            self.close_account()  # its slots are gone, not free for another claim
        attempts = {
            (lease.ref.task_id, lease.ref.attempt): Held(
                lease.task.queue, starts_eagerly(lease.task)
            )
            for lease in leases
        }
        if not self._ledger.deliver(reservation, attempts):
            return not leases
        if not leases:
            return True
        now = self._clock.now()
        for lease in leases:
            due = max(lease.task.created_at, lease.task.run_at)
            self._metrics.schedule_latency.observe(max(0.0, (now - due).total_seconds()))
        self._metrics.tasks_delivered.inc(len(leases))
        items = [
            p.Delivery(
                task_id=lease.ref.task_id,
                attempt=lease.ref.attempt,
                lease_token=lease.ref.lease_token,
                lease_expires_at=to_rfc3339(lease.expires_at) or "",
                queue=lease.task.queue,
                type=lease.task.type,
                params=lease.task.params,
                handler_version=lease.task.handler_version,
                side_effect=lease.task.side_effect,  # type: ignore[arg-type]
                timeout_ms=lease.task.timeout_ms,
                attempts=lease.task.attempts,
                max_attempts=lease.task.max_attempts,
                labels=dict(lease.task.labels),
                traceparent=lease.task.traceparent,
                eager_start=starts_eagerly(lease.task),
                workflow=_workflow_step(lease.task),
            )
            for lease in leases
        ]
        try:
            self.send(p.Tasks(items=items))
        except SlowConsumer:
            return True  # the leases are held by this session and run out if it is gone
        return True

    def end(self, code: int, error: p.Error | None = None) -> None:
        """End the connection from the server's side: ``error`` first if given, then the close
        with ``code`` (``Gateway._run`` sends it)."""
        if error is not None:
            with contextlib.suppress(SlowConsumer):
                self.send(error)
        if self.close_code is None:
            self.close_code = code
        self.closed.set()

    # -- sending ------------------------------------------------------------------------------

    def send(self, frame: p.Frame) -> None:
        """Queue a frame; a full buffer means the worker does not read: cut it off."""
        if self.closed.is_set():
            return
        try:
            self._outbox.put_nowait(p.encode(frame))
        except asyncio.QueueFull:
            log.warning("worker too slow: send buffer full", session=self.session.session_id)
            if self.close_code is None:
                self.close_code = p.CLOSE_TOO_SLOW
            self.closed.set()
            raise SlowConsumer() from None

    async def writer(self) -> None:
        """Write queued frames in order until the connection ends."""
        while True:
            data = await self._outbox.get()
            if data is None:
                return
            await self._send_text(data.decode())

    def stop_writer(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self._outbox.put_nowait(None)

    # -- receiving ----------------------------------------------------------------------------

    async def accept(self, frame: p.WorkerFrame) -> None:
        """Handle one decoded frame: credits at once, requests in order."""
        self._metrics.worker_frames.labels(type(frame).__struct_config__.tag).inc()
        if isinstance(frame, p.Credit):
            self._ledger.grant(self.account, frame.n)
            for queue in self.queues():
                self._dispatcher.wake(self.scope, queue)
            return
        if isinstance(frame, p.Hello):
            raise ProtocolViolation("hello was already received")
        if isinstance(frame, p.Heartbeat):
            _check_progress(frame)
        await self._requests.put(frame)

    def end_requests(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self._requests.put_nowait(None)

    async def answer_requests(self) -> None:
        while True:
            frame = await self._requests.get()
            if frame is None:
                return
            request_id = getattr(frame, "id", None)
            try:
                answer = await self._answer(frame)
            except OrbitError as exc:
                answer = _refusal(exc, request_id)
            if answer is not None:
                self.send(answer)

    async def _answer(self, frame: p.WorkerFrame) -> p.Frame | None:
        if isinstance(frame, p.Start):
            return await self._start(frame)
        if isinstance(frame, p.Heartbeat):
            return await self._heartbeat(frame)
        if isinstance(frame, p.Result):
            return await self._result(frame)
        if isinstance(frame, p.Release):
            return await self._release(frame)
        raise ProtocolViolation(f"unexpected frame {type(frame).__name__}")

    async def _start(self, frame: p.Start) -> p.Frame | None:
        refs = [_ref(item, self.session) for item in frame.items]
        held = self.account.held
        eager = {
            i for i, r in enumerate(refs) if (h := held.get((r.task_id, r.attempt))) and h.eager
        }
        if not eager:
            return self._started_frame(frame.id, await self._coalescer.start(refs))
        # Eager starts wait briefly for their results (decision 0008); the request is
        # answered once all its items are recorded, while later requests go on.
        others = [i for i in range(len(refs)) if i not in eager]
        got = await self._coalescer.start([refs[i] for i in others])
        answers: dict[int, StartAnswer] = dict(zip(others, got, strict=True))
        order = sorted(eager)

        def answered(got: list[StartAnswer] | Exception) -> None:
            if isinstance(got, Exception):
                self._start_failed(frame.id, got)
                return
            answers.update(zip(order, got, strict=True))
            with contextlib.suppress(SlowConsumer):
                self.send(self._started_frame(frame.id, [answers[i] for i in range(len(refs))]))

        self._coalescer.hold_starts([refs[i] for i in order], answered)
        return None

    def _start_failed(self, request_id: int, exc: Exception) -> None:
        """Held starts could not be recorded: answer as ``answer_requests`` would have (an
        error that is not Orbit's is logged, and the worker asked to retry)."""
        if isinstance(exc, OrbitError):
            error = _refusal(exc, request_id)
        else:
            log.error("recording eager starts failed", exc_info=exc)
            error = p.Error(
                code="unavailable", message="please retry", re=request_id,
                retry_after_ms=RETRY_AFTER_MS,
            )  # fmt: skip
        with contextlib.suppress(SlowConsumer):
            self.send(error)

    def _started_frame(self, request_id: int, answers: list[StartAnswer]) -> p.Frame:
        items = []
        for answer in answers:
            if answer.verdict is not StartVerdict.STARTED:
                self._settle(answer.ref)
            items.append(
                p.StartAnswer(
                    task_id=answer.ref.task_id,
                    attempt=answer.ref.attempt,
                    verdict=_START[answer.verdict],  # type: ignore[arg-type]
                    lease_expires_at=to_rfc3339(answer.expires_at),
                    deadline_at=to_rfc3339(answer.deadline_at),
                )
            )
        return p.Started(re=request_id, items=items)

    async def _heartbeat(self, frame: p.Heartbeat) -> p.Frame:
        listed = {(item.task_id, item.attempt) for item in frame.items}
        for _, held in self._ledger.unlisted(self.account, listed):  # given up by the worker
            if held.queue:
                self._dispatcher.wake(self.scope, held.queue)
        items = [
            Renew(
                _ref(item, self.session),
                None if item.progress is None else p.encode_value(item.progress).decode(),
            )
            for item in frame.items
        ]
        renewals = await self._coalescer.renew(items)
        answers = []
        for renewal in renewals:
            if renewal.verdict is RenewVerdict.STALE:
                self._settle(renewal.ref)
            answers.append(
                p.RenewAnswer(
                    task_id=renewal.ref.task_id,
                    attempt=renewal.ref.attempt,
                    verdict=str(renewal.verdict),  # type: ignore[arg-type]
                    lease_expires_at=to_rfc3339(renewal.expires_at),
                )
            )
        return p.Renewed(re=frame.id, items=answers)

    async def _result(self, frame: p.Result) -> p.Frame:
        reports = [_report(item, self.session) for item in frame.items]
        outcomes = await self._coalescer.report(reports)
        answers = []
        for report, outcome in zip(reports, outcomes, strict=True):
            self._settle(report.ref)
            answers.append(
                p.AckItem(
                    task_id=report.ref.task_id,
                    attempt=report.ref.attempt,
                    verdict=str(outcome),  # type: ignore[arg-type]
                )
            )
        return p.Acked(re=frame.id, items=answers)

    async def _release(self, frame: p.Release) -> p.Frame:
        refs = [_ref(item, self.session) for item in frame.items]
        released = await self._workers.release(refs)
        for ref, ok in zip(refs, released, strict=True):
            if ok:  # not released: it started after all (or ended); it is still counted
                self._settle(ref)
        return p.Released(
            re=frame.id,
            items=[
                p.ReleasedItem(task_id=r.task_id, attempt=r.attempt, released=ok)
                for r, ok in zip(refs, released, strict=True)
            ],
        )

    def _settle(self, ref: LeaseRef) -> None:
        """The attempt ended: it no longer counts here, and its queue's loop looks again."""
        held = self._ledger.settle(self.account, (ref.task_id, ref.attempt))
        if held is not None and held.queue:
            self._dispatcher.wake(self.scope, held.queue)

    def adopt(self, refs: Sequence[LeaseRef]) -> None:
        """Attempts continuing from an earlier connection now count as held here."""
        self._ledger.adopt(self.account, [(ref.task_id, ref.attempt) for ref in refs])


class ProtocolViolation(Exception):
    """A frame that breaks the protocol: the connection closes with 4400."""


def _refusal(exc: OrbitError, request_id: int | None) -> p.Error:
    """The answer to a request that failed: ``unavailable`` (retry later) for a transient
    failure, else ``invalid_request`` — it can never succeed, so say so rather than close."""
    if isinstance(exc, Unavailable):
        return p.Error(
            code="unavailable", message=exc.message, re=request_id, retry_after_ms=RETRY_AFTER_MS
        )
    log.warning("worker request refused", code=exc.code, reason=exc.message)
    return p.Error(code="invalid_request", message=exc.message, re=request_id)


def _check_progress(frame: p.Heartbeat) -> None:
    """A heartbeat's progress reports fit ``MAX_PROGRESS_BYTES`` (the SDK refuses larger ones
    where the handler reports them)."""
    for item in frame.items:
        if item.progress is not None and (
            len(p.encode_value(item.progress)) > p.MAX_PROGRESS_BYTES
        ):
            raise ProtocolViolation(
                f"the progress of {item.task_id} is larger than {p.MAX_PROGRESS_BYTES} bytes"
            )


def _workflow_step(task: Task) -> p.WorkflowStep | None:
    """The workflow step a task runs for, from its owner (None for a plain task)."""
    if task.owner_name is None or task.owner_id is None or task.owner_step is None:
        return None
    step, round_, item = parse_key(task.owner_step)
    return p.WorkflowStep(
        id=task.owner_id,
        definition=task.owner_name,
        version=task.owner_version or "",
        step=step,
        key=task.owner_step,
        round=round_,
        item=item,
    )


def _report(item: p.ResultItem, session: Session) -> Report:
    ref = _ref(item, session)
    if item.outcome == "succeeded":
        return Report(ref, Event.COMPLETE, result=item.result)
    if item.outcome == "cancelled":
        return Report(ref, Event.CANCELLED_BY_WORKER)
    error: dict[str, Any] = (
        msgspec.structs.asdict(item.error)
        if item.error is not None
        else {"code": "failed", "message": "the handler failed", "retryable": True}
    )
    error = {k: v for k, v in error.items() if v is not None and v is not False}
    retryable = item.error.retryable if item.error is not None else True
    error["retryable"] = retryable
    if len(msgspec.json.encode(error)) > MAX_ERROR_BYTES:  # what decides the outcome stays
        error = {
            "code": str(error.get("code", "failed"))[:100],
            "message": str(error.get("message", ""))[:2000],
            "retryable": retryable,
            **({"safe_to_retry": True} if error.get("safe_to_retry") else {}),
            "details": {"truncated": True},
        }
    return Report(ref, None, error=error, retryable=retryable)


def _ref(item: p.Ref | p.ResultItem, session: Session) -> LeaseRef:
    """The lease a worker names, held by this connection's session (the fence's fourth part:
    a reference another session was given answers as a stale one)."""
    return LeaseRef(item.task_id, item.attempt, item.lease_token, session.session_id)

"""The attempts a worker holds, across connections, and the handlers running them.

An attempt is held from its delivery until the server has answered its result (``acked``) or
its release (``released``), or until it is lost (``stale``, a ``stop`` verdict, or a lease that
ran out without a confirmed renewal). While held it is in every heartbeat and in ``hello.held``
after a reconnect. Everything here runs on the event loop's thread; sync handlers run on pool
threads and come back through ``run_in_executor``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, TypeAlias

from orbit_sdk.worker._context import TaskContext, workflow_context
from orbit_sdk.worker._errors import TaskCancelled
from orbit_sdk.worker._logs import describe_task, failure_level, task_fields
from orbit_sdk.worker._outcome import (
    call_async,
    call_sync,
    cancelled_item,
    failed_item,
    not_started_item,
    succeeded_item,
)
from orbit_sdk.worker._protocol import (
    AckItem,
    Delivery,
    HeldVerdict,
    Ref,
    ReleasedItem,
    RenewAnswer,
    ResultItem,
    StartAnswer,
    encoded_size,
)
from orbit_sdk.worker._registry import HandlerRegistry, HandlerSpec

__all__ = ["WAITING", "Attempt", "AttemptKey", "Phase", "Runtime"]

AttemptKey: TypeAlias = tuple[str, int]
WAITING: Final = -1
"""``Attempt.inflight`` while a refused request waits to be sent again."""

DEFAULT_LEASE_MS: Final = 30_000
DEFAULT_HEARTBEAT_MS: Final = 10_000
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
MAX_LEASE_MARGIN_S: Final = 2.0
PREFETCH_BELOW_S: Final = 0.1
"""Tasks are prefetched only while handlers take less than this on average: for longer ones
the server's round trip is small beside the run, and a held task could run sooner elsewhere."""
RUN_TIME_WEIGHT: Final = 0.2  # of the newest run in the moving average of run times
ABORT_WAIT_S: Final = 5.0


class Phase(enum.Enum):
    DELIVERED = "delivered"  # waiting for its start verdict (an eager one may be running)
    RUNNING = "running"
    FINISHED = "finished"  # result waiting for its ack
    RELEASING = "releasing"


@dataclass(eq=False)
class Attempt:
    delivery: Delivery
    spec: HandlerSpec | None
    phase: Phase
    inflight: int | None = None  # id of the request about it on the current connection
    expires_at: float = 0.0  # loop time when its lease ends, as far as the worker knows
    timer: asyncio.TimerHandle | None = None
    context: TaskContext | None = None
    task: asyncio.Task[None] | None = None
    result: ResultItem | None = None
    result_size: int = 0
    cancel_reason: str | None = None
    cancel_pending: bool = False
    ref: Ref = field(init=False)

    def __post_init__(self) -> None:
        self.ref = self.delivery.ref

    @property
    def key(self) -> AttemptKey:
        return (self.delivery.task_id, self.delivery.attempt)


class Runtime:
    """Held attempts, handler tasks and slots; the connection reads and changes them."""

    def __init__(
        self,
        *,
        registry: HandlerRegistry,
        concurrency: int,
        executor: Executor,
        logger: logging.Logger,
        lease_margin: float | None = None,
        prefetch: int = 0,
    ) -> None:
        self.registry = registry
        self.concurrency = concurrency
        self.prefetch = prefetch  # most tasks held beyond ``concurrency``, waiting for a slot
        self.mean_run_s: float | None = None  # moving average of handler run times
        self.attempts: dict[AttemptKey, Attempt] = {}
        self.handler_tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.draining = False
        self.lease_ms = DEFAULT_LEASE_MS
        self.heartbeat_ms = DEFAULT_HEARTBEAT_MS
        self.max_frame_bytes = DEFAULT_MAX_FRAME_BYTES
        self._executor = executor
        self._logger = logger
        self._task_logger = logging.getLogger(f"{logger.name}.task")
        self._lease_margin = lease_margin
        self._loop = asyncio.get_running_loop()
        self._listener: Callable[[], None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._aborting = False
        self._warned_side_effect: set[HandlerSpec] = set()

    # -- state the connection reads ---------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Whether new work is welcome (no credits while stopping or draining)."""
        return not (self.stopping or self.draining)

    def busy(self) -> int:
        """Credits in use: attempts not yet running (prefetched ones included), and handlers
        that have not returned (a lost sync handler keeps its thread, and so its slot, until
        it returns)."""
        waiting = sum(
            1
            for a in self.attempts.values()
            if a.phase in (Phase.DELIVERED, Phase.RELEASING) and (a.task is None or a.task.done())
        )
        return waiting + len(self.handler_tasks)

    def prefetch_now(self) -> int:
        """Tasks to hold beyond ``concurrency`` now: ``prefetch`` once handlers have been seen
        to take less than ``PREFETCH_BELOW_S`` on average, else none (also before any ran)."""
        mean = self.mean_run_s
        return self.prefetch if mean is not None and mean < PREFETCH_BELOW_S else 0

    def running(self) -> int:
        """Slots in use: handlers that have not returned, and attempts whose start was sent
        (or waits to be sent again) and whose handler has not begun."""
        starting = sum(
            1
            for a in self.attempts.values()
            if a.phase is Phase.DELIVERED and a.task is None and a.inflight is not None
        )
        return starting + len(self.handler_tasks)

    def held_refs(self) -> list[Ref]:
        return [a.ref for a in self.attempts.values()]

    def pending(self, phase: Phase) -> list[Attempt]:
        """Attempts in ``phase`` with no request about them on the current connection."""
        return [a for a in self.attempts.values() if a.phase is phase and a.inflight is None]

    def set_listener(self, listener: Callable[[], None] | None) -> None:
        """``listener`` is called whenever there may be something to send."""
        self._listener = listener

    async def wait_idle(self) -> None:
        """Return once no attempt is held."""
        await self._idle.wait()

    # -- connection life --------------------------------------------------------------------

    def on_welcome(
        self, *, lease_ms: int, heartbeat_ms: int, max_frame_bytes: int, held: list[HeldVerdict]
    ) -> None:
        self.lease_ms, self.heartbeat_ms = lease_ms, heartbeat_ms
        self.max_frame_bytes = max_frame_bytes
        for attempt in self.attempts.values():
            attempt.inflight = None  # requests of the previous connection died with it
        for verdict in held:
            if verdict.verdict == "stop":
                self.lose((verdict.task_id, verdict.attempt), "the server says it is held no more")
        self._changed()

    def release_unstarted(self) -> bool:
        """Turn delivered attempts whose start was not sent (or waits to be resent) into
        releases; those whose start is in flight wait for their verdict. ``True`` if any."""
        changed = False
        for attempt in self.attempts.values():
            if attempt.task is not None:
                continue  # an eager handler runs: its attempt waits for the start verdict
            if attempt.phase is Phase.DELIVERED and attempt.inflight in (None, WAITING):
                attempt.phase, attempt.inflight = Phase.RELEASING, None
                changed = True
        return changed

    def begin_stop(self) -> None:
        self.stopping = True
        self.release_unstarted()
        self._changed()

    # -- frames from the server -------------------------------------------------------------

    def deliver(self, deliveries: Iterable[Delivery]) -> None:
        now = self._loop.time()
        for delivery in deliveries:
            key = (delivery.task_id, delivery.attempt)
            if key in self.attempts:
                continue
            spec = self.registry.pick(delivery.queue, delivery.type, delivery.handler_version)
            attempt = Attempt(delivery=delivery, spec=spec, phase=Phase.DELIVERED)
            if spec is None:
                self._logger.error(
                    "no handler for %s/%s version %r: releasing task %s",
                    delivery.queue,
                    delivery.type,
                    delivery.handler_version,
                    delivery.task_id,
                    extra={
                        "task_id": delivery.task_id,
                        "attempt": delivery.attempt,
                        "queue": delivery.queue,
                        "task_type": delivery.type,
                    },
                )
            if spec is None or not self.accepting:
                attempt.phase = Phase.RELEASING
            elif spec.side_effect == "unsafe" and delivery.side_effect == "idempotent":
                self._warn_side_effect(spec)
            self.attempts[key] = attempt
            self._set_lease(attempt, delivery.lease_expires_at, now)
        self._changed()

    def start_sent(self, refs: Iterable[Ref]) -> None:
        """The start request of these attempts is on its way: launch the handlers the server
        allowed to run before the answer (``eager_start``: idempotent, no gate). Their results
        go as soon as they are ready (decision 0008); a refusal that comes first stops them
        unreported."""
        for ref in refs:
            attempt = self.attempts.get((ref.task_id, ref.attempt))
            if (
                attempt is None
                or attempt.phase is not Phase.DELIVERED
                or attempt.spec is None
                or attempt.task is not None
                or not attempt.delivery.eager_start
                or not self.accepting
            ):
                continue
            self._launch(attempt, attempt.spec, None)

    def on_started(self, answers: Iterable[StartAnswer], sent_at: float) -> None:
        for answer in answers:
            attempt = self.attempts.get((answer.task_id, answer.attempt))
            if attempt is None or attempt.phase is not Phase.DELIVERED:
                continue
            attempt.inflight = None
            if answer.verdict != "started" or attempt.spec is None:
                self._logger.debug("task %s not started: %s", answer.task_id, answer.verdict)
                if attempt.task is not None:  # an eager handler: stop it, report nothing
                    self.lose(attempt.key, f"its start was answered {answer.verdict}")
                else:
                    self._forget(attempt)
                continue
            self._set_lease(attempt, answer.lease_expires_at, sent_at)
            attempt.phase = Phase.RUNNING
            if attempt.task is not None:  # eager: running already
                continue
            self._launch(attempt, attempt.spec, answer.deadline_at)
        self._changed()

    def on_renewed(self, answers: Iterable[RenewAnswer], sent_at: float) -> None:
        for answer in answers:
            key = (answer.task_id, answer.attempt)
            attempt = self.attempts.get(key)
            if attempt is None:
                continue
            if answer.verdict == "stale":
                self.lose(key, "the lease no longer holds")
                continue
            if attempt.phase is not Phase.FINISHED:
                self._set_lease(attempt, answer.lease_expires_at, sent_at)
            if answer.verdict == "cancel_requested":
                self.request_cancel(key, None)

    def on_acked(self, answers: Iterable[AckItem]) -> None:
        for answer in answers:
            attempt = self.attempts.get((answer.task_id, answer.attempt))
            if attempt is None or attempt.phase is not Phase.FINISHED:
                continue
            if answer.verdict == "stale":
                self._logger.warning(
                    "result of task %s attempt %d was not recorded: its lease had ended",
                    answer.task_id,
                    answer.attempt,
                )
            self._forget(attempt)

    def on_released(self, answers: Iterable[ReleasedItem]) -> None:
        for answer in answers:
            attempt = self.attempts.get((answer.task_id, answer.attempt))
            if attempt is None or attempt.phase is not Phase.RELEASING:
                continue
            if answer.released:
                self._forget(attempt)
            else:
                # Not released: its start committed although the answer never arrived here.
                # The handler never ran, so say so rather than let the lease run out (which
                # would send unsafe work to needs_review for nothing).
                self._finish(attempt, not_started_item(attempt.ref))
        self._changed()

    def on_refused(self, keys: Iterable[AttemptKey], request_id: int) -> None:
        """A request that can never succeed: give its attempts up (their leases run out)."""
        for key in keys:
            attempt = self.attempts.get(key)
            if attempt is not None and attempt.inflight == request_id:
                self.lose(key, "the server refused the request about it")

    def request_cancel(self, key: AttemptKey, reason: str | None) -> None:
        """Orbit asked to cancel the task: signal its handler (cooperatively)."""
        attempt = self.attempts.get(key)
        if attempt is None:
            return
        if attempt.phase is Phase.DELIVERED and attempt.task is None:
            attempt.cancel_pending, attempt.cancel_reason = True, reason
        elif attempt.phase in (Phase.RUNNING, Phase.DELIVERED) and attempt.context is not None:
            if attempt.context._cancel(reason, requested=True):
                self._logger.info("task %s: cancel requested (%s)", key[0], reason or "no reason")
            self._cancel_async_handler(attempt)

    def lose(self, key: AttemptKey, why: str) -> None:
        """The attempt is no longer this worker's: stop its handler, never report it."""
        attempt = self.attempts.pop(key, None)
        if attempt is None:
            return
        if attempt.timer is not None:
            attempt.timer.cancel()
        self._logger.warning(
            "task %s attempt %d lost: %s",
            key[0],
            key[1],
            why,
            extra={"task_id": key[0], "attempt": key[1]},
        )
        if attempt.context is not None:
            attempt.context._cancel(f"attempt lost: {why}", requested=False)
        self._cancel_async_handler(attempt)
        self._changed()

    async def abort(self) -> None:
        """Stop at once: cancel every handler and hold nothing (leases run out)."""
        self._aborting = True
        for attempt in self.attempts.values():
            if attempt.timer is not None:
                attempt.timer.cancel()
            if attempt.context is not None:
                attempt.context._cancel("the worker is stopping", requested=False)
        self.attempts.clear()
        self._changed()
        tasks = list(self.handler_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=ABORT_WAIT_S)

    # -- handlers ---------------------------------------------------------------------------

    def _launch(self, attempt: Attempt, spec: HandlerSpec, deadline_at: datetime | None) -> None:
        """Run the handler with the attempt's context (a cancel asked for before it started
        reaches it at once)."""
        context = attempt.context = self._context_for(attempt.delivery, deadline_at)
        if attempt.cancel_pending:
            context._cancel(attempt.cancel_reason, requested=True)
        name = f"orbit-task {attempt.ref.task_id}/{attempt.ref.attempt}"
        task = self._loop.create_task(self._run(attempt, spec, context), name=name)
        attempt.task = task
        self.handler_tasks.add(task)
        task.add_done_callback(self._handler_done)

    async def _run(self, attempt: Attempt, spec: HandlerSpec, context: TaskContext) -> None:
        ref = attempt.ref
        item: ResultItem | None
        began = self._loop.time()
        try:
            if spec.is_async:
                item = succeeded_item(ref, await call_async(spec, context))
            else:
                item = await self._loop.run_in_executor(
                    self._executor, _run_sync, spec, context, ref
                )
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if context.cancel_requested and not self._aborting:
                if task is not None:
                    task.uncancel()
                item = cancelled_item(ref)
            elif context.cancelled or (task is not None and task.cancelling()):
                raise  # lost, or the worker stops at once: nothing to report
            else:
                # the handler's own, not a cancellation of ours
                item = self._failed(context, failed_item(ref, exc), exc)
        except TaskCancelled as exc:
            if context.cancel_requested:
                item = cancelled_item(ref)
            elif context.cancelled:
                item = None
            else:
                item = self._failed(context, failed_item(ref, exc), exc)
        except Exception as exc:
            item = self._failed(context, failed_item(ref, exc), exc)
        else:
            if item.outcome == "failed":  # a result JSON cannot carry
                item = self._failed(context, item, None)
        self._ran_for(self._loop.time() - began)
        self._finish(attempt, item)

    def _failed(
        self, context: TaskContext, item: ResultItem, exc: BaseException | None
    ) -> ResultItem:
        """Log a failed attempt, once, with its traceback and the task's identity: WARNING
        while Orbit retries it, ERROR when the failure is final or its outcome unknown."""
        error = item.error
        if error is None:
            return item
        level, verdict = failure_level(error, context)
        fields = task_fields(context)
        self._task_logger.log(
            level,
            "handler failed on %s: %s: %s (%s)",
            describe_task(fields),
            error.code,
            error.message,
            verdict,
            exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
            extra={**fields, "error_code": error.code, "retryable": error.retryable},
        )
        return item

    def _ran_for(self, seconds: float) -> None:
        mean = self.mean_run_s
        self.mean_run_s = seconds if mean is None else mean + RUN_TIME_WEIGHT * (seconds - mean)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self.handler_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._logger.error("worker runtime error", exc_info=task.exception())
        self._changed()  # a slot is free

    def _finish(self, attempt: Attempt, item: ResultItem | None) -> None:
        if self.attempts.get(attempt.key) is not attempt:
            return  # lost meanwhile: never report it
        # An eager handler may return before its start verdict: its result goes at once, and
        # the server records the start first or with it (decision 0008).
        if attempt.timer is not None:
            attempt.timer.cancel()
            attempt.timer = None
        if item is None:
            self._forget(attempt)
            return
        attempt.phase, attempt.inflight = Phase.FINISHED, None
        attempt.result, attempt.result_size = item, encoded_size(item)
        self._changed()

    def _cancel_async_handler(self, attempt: Attempt) -> None:
        # Sync handlers only get the signal: a thread cannot be interrupted.
        spec, task = attempt.spec, attempt.task
        if spec is not None and spec.is_async and task is not None and not task.done():
            task.cancel()

    # -- leases -----------------------------------------------------------------------------

    def _set_lease(self, attempt: Attempt, expires: datetime | None, base: float) -> None:
        """The lease ends ``lease_ms`` after the request that renewed it was sent, or at the
        server's ``lease_expires_at`` (by this machine's clock) if that is sooner."""
        now = self._loop.time()
        ends = base + self.lease_ms / 1000
        if expires is not None:
            ends = min(ends, now + (expires - datetime.now(UTC)).total_seconds())
        attempt.expires_at = ends
        if attempt.timer is not None:
            attempt.timer.cancel()
        margin = self._lease_margin
        if margin is None:
            margin = min(MAX_LEASE_MARGIN_S, self.heartbeat_ms / 2000)
        attempt.timer = self._loop.call_at(ends - margin, self._lease_ran_out, attempt)

    def _lease_ran_out(self, attempt: Attempt) -> None:
        attempt.timer = None
        if self.attempts.get(attempt.key) is attempt and attempt.phase is not Phase.FINISHED:
            self.lose(attempt.key, "no renewal was confirmed before its lease ended")

    # -- helpers ----------------------------------------------------------------------------

    def _forget(self, attempt: Attempt) -> None:
        if self.attempts.get(attempt.key) is attempt:
            del self.attempts[attempt.key]
        if attempt.timer is not None:
            attempt.timer.cancel()
        self._changed()

    def _changed(self) -> None:
        if self.attempts:
            self._idle.clear()
        else:
            self._idle.set()
        if self._listener is not None:
            self._listener()

    def _context_for(self, delivery: Delivery, deadline_at: datetime | None) -> TaskContext:
        deadline = deadline_at
        if deadline is None and delivery.timeout_ms is not None:
            deadline = datetime.now(UTC) + timedelta(milliseconds=delivery.timeout_ms)
        return TaskContext(
            task_id=delivery.task_id,
            attempt=delivery.attempt,
            queue=delivery.queue,
            type=delivery.type,
            params=delivery.params,
            deadline=deadline or delivery.lease_expires_at,
            handler_version=delivery.handler_version,
            side_effect=delivery.side_effect,
            labels=delivery.labels,
            attempts=delivery.attempts,
            max_attempts=delivery.max_attempts,
            traceparent=delivery.traceparent,
            logger=self._task_logger,
            workflow=workflow_context(delivery.workflow),
        )

    def _warn_side_effect(self, spec: HandlerSpec) -> None:
        if spec not in self._warned_side_effect:
            self._warned_side_effect.add(spec)
            self._logger.warning(
                "handler %s is registered as unsafe but receives tasks submitted as idempotent:"
                " Orbit retries those after a lost attempt",
                spec.name,
            )


def _run_sync(spec: HandlerSpec, context: TaskContext, ref: Ref) -> ResultItem:
    # Encoding the result on the pool thread keeps big results off the event loop.
    return succeeded_item(ref, call_sync(spec, context))

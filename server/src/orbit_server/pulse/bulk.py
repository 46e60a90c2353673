"""Bulk operations (decision 0025): an operator's action over every object a filter matches,
frozen at the start and applied in bounded batches in the background.

- **Frozen selection.** ``start`` reads the matching ids and stores them, with the operation
  and its one audit record, in one transaction: an object that enters the filter later is
  never touched. A dry run reads the same selection and writes nothing.
- **Exactly once per target.** Each step locks one running operation (``SKIP LOCKED``: nodes
  step different operations side by side), applies the action to its next pending items and
  settles each item in the same transaction. A node that dies mid-step leaves the step
  uncommitted; another node's step does it again, whole.
- **What each item becomes.** ``done``; ``skipped`` with a reason (``state_conflict``: the
  target's state no longer allows the action; ``already_cancelled``; ``not_found``: pruned
  meanwhile; ``queue_full``); ``failed`` with the error code. The counts and the reasons add
  up on the operation.

What an action does to its targets belongs to a :class:`BulkKind`: Pulse's tasks
(:mod:`orbit_server.pulse.bulk_tasks`) and Weave's workflows register one each.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import structlog

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import (
    InvalidRequest,
    NotFound,
    OrbitError,
    QueueFull,
    StateConflict,
    TransientError,
)
from orbit_server.ids import new_id
from orbit_server.pulse.model import BulkItem, BulkRecord, Settled
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import bulk as bulk_store

log = structlog.get_logger("orbit.bulk")

BULK_MAX_TARGETS = 100_000  # targets one operation may select
SAMPLE = 10

AfterCommit = Callable[[], Awaitable[None]]


class Selection(Protocol):
    """Which targets an operation acts on."""

    @property
    def kind(self) -> str: ...

    async def select(self, tx: Tx, scope: Scope, cap: int) -> list[str]:
        """The matching ids in id order; :class:`TooMany` past ``cap``."""
        ...


class BulkKind(Protocol):
    """What the actions of one kind of target do, a step's batch at a time."""

    @property
    def actions(self) -> tuple[str, ...]: ...

    @property
    def batch(self) -> int | None:
        """Items per step (None: the service's). 1 for actions that may fail half-way through
        an item: the step then holds that item alone, and a failure rolls it back whole."""
        ...

    async def apply(
        self, tx: Tx, op: BulkRecord, items: Sequence[tuple[int, str]]
    ) -> tuple[list[Settled], AfterCommit | None]:
        """Act on ``items`` (seq, target id) in the step's transaction; answer how each ended
        and what to run once it commits."""
        ...


class TooMany(InvalidRequest):
    def __init__(self, cap: int, narrow: str) -> None:
        super().__init__(f"the filter matches more than {cap} targets; narrow it {narrow}")


class Skip(Exception):
    """An item passed over, with why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def settle(seq: int, exc: BaseException | None) -> Settled:
    """How an item ended, from what acting on it raised (None: done). The database's refusals
    are not an item's: they are raised again, and the whole step is done later."""
    if exc is None:
        return Settled(seq, "done", None)
    if isinstance(exc, Skip):
        return Settled(seq, "skipped", exc.reason)
    if isinstance(exc, StateConflict):
        return Settled(seq, "skipped", "state_conflict")
    if isinstance(exc, NotFound):
        return Settled(seq, "skipped", "not_found")
    if isinstance(exc, QueueFull):
        return Settled(seq, "skipped", "queue_full")
    if isinstance(exc, OrbitError) and not isinstance(exc, TransientError):
        return Settled(seq, "failed", exc.code)
    raise exc


@dataclass(frozen=True, slots=True)
class DryRun:
    matched: int
    sample: list[str]  # the first matching ids


class BulkService:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        kinds: Mapping[str, BulkKind],
        *,
        max_targets: int = BULK_MAX_TARGETS,
        batch: int = 200,
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._kinds = dict(kinds)
        self._max_targets = max_targets
        self._batch = batch
        self.started = asyncio.Event()  # an operation was recorded on this node

    def register(self, kind: str, applier: BulkKind) -> None:
        self._kinds[kind] = applier

    async def dry_run(self, scope: Scope, what: Selection) -> DryRun:
        """How many targets the filter matches now, and the first few; nothing changes."""

        async def unit(tx: Tx) -> DryRun:
            ids = await what.select(tx, scope, self._max_targets)
            return DryRun(len(ids), ids[:SAMPLE])

        return await self._db.read(unit)

    async def start(
        self,
        scope: Scope,
        *,
        action: str,
        what: Selection,
        filter_doc: dict[str, Any],
        params: dict[str, Any],
        actor: Actor,
    ) -> BulkRecord:
        """Freeze the selection and record the operation; the background steps apply it."""
        kind = self._kinds.get(what.kind)
        if kind is None or action not in kind.actions:
            known = ", ".join(kind.actions) if kind else "none"
            raise InvalidRequest(f"action must be one of {known}")
        op_id = new_id("bulk_")

        async def unit(tx: Tx) -> BulkRecord:
            ids = await what.select(tx, scope, self._max_targets)
            await bulk_store.bulk_insert(
                tx, op_id=op_id, scope=scope, kind=what.kind, action=action,
                filter_=filter_doc, params=params, targets=ids, created_by=actor.name,
                now=self._clock.now(),
            )  # fmt: skip
            await self._audit.record(
                tx, scope=scope, actor=actor, action=f"{what.kind}.bulk.{action}",
                target_kind="bulk_operation", target_id=op_id,
                details={"filter": filter_doc, "params": params, "matched": len(ids)},
            )  # fmt: skip
            found = await bulk_store.bulk_get(tx, scope, op_id)
            assert found is not None
            return found

        op = await self._db.run(unit)
        self.started.set()
        return op

    async def get(self, scope: Scope, op_id: str) -> BulkRecord:
        found = await self._db.read(lambda tx: bulk_store.bulk_get(tx, scope, op_id))
        if found is None:
            raise NotFound("no such bulk operation")
        return found

    async def list_operations(
        self, scope: Scope, *, before: str | None, limit: int
    ) -> list[BulkRecord]:
        return await self._db.read(
            lambda tx: bulk_store.bulk_list(tx, scope, before=before or "~", limit=limit)
        )

    async def items(self, scope: Scope, op_id: str, *, after: int, limit: int) -> list[BulkItem]:
        async def unit(tx: Tx) -> list[BulkItem] | None:
            if await bulk_store.bulk_get(tx, scope, op_id) is None:
                return None
            return await bulk_store.bulk_items_list(tx, op_id, after=after, limit=limit)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such bulk operation")
        return found

    async def cancel(self, scope: Scope, op_id: str, *, actor: Actor) -> BulkRecord:
        """Stop a running operation: items not applied yet stay pending, for good."""

        async def unit(tx: Tx) -> BulkRecord:
            op = await bulk_store.bulk_get(tx, scope, op_id, lock=True)
            if op is None:
                raise NotFound("no such bulk operation")
            if op.state != bulk_store.RUNNING:
                raise StateConflict(f"the operation is {op.state}, not running")
            await bulk_store.bulk_progress(
                tx, op, done=0, skipped=0, failed=0, skipped_reasons=op.skipped_reasons,
                state="cancelled", now=self._clock.now(),
            )  # fmt: skip
            await self._audit.record(
                tx, scope=scope, actor=actor, action=f"{op.kind}.bulk.cancel_operation",
                target_kind="bulk_operation", target_id=op_id,
                details={"done": op.done, "matched": op.matched},
            )  # fmt: skip
            found = await bulk_store.bulk_get(tx, scope, op_id)
            assert found is not None
            return found

        return await self._db.run(unit)

    async def prune(self, retention_ms: int, *, budget: int = 1000) -> int:
        """Delete up to ``budget`` rows of operations finished longer than ``retention_ms``
        ago (their items first); 0 when nothing is left to delete."""
        before = self._clock.now() - timedelta(milliseconds=retention_ms)
        return await self._db.run(lambda tx: bulk_store.bulk_prune(tx, before, limit=budget))

    async def step(self) -> int:
        """Apply the next batch of the oldest running operation that no other node steps now;
        answers how many items it settled (0: nothing to do).

        A batch that fails other than by the database's refusal is rolled back whole; then a
        one-item batch settles its item ``failed``, and a larger one fails the operation, so
        that one broken operation never holds up the others."""
        tried: list[tuple[BulkRecord, list[tuple[int, str]]]] = []

        async def unit(tx: Tx) -> tuple[int, AfterCommit | None]:
            tried.clear()
            op = await bulk_store.bulk_next_running(tx)
            if op is None:
                return 0, None
            kind = self._kinds.get(op.kind)
            if kind is None:  # a kind this release does not know: leave it to one that does
                return 0, None
            size = kind.batch or self._batch
            items = await bulk_store.bulk_items_pending(tx, op.id, limit=size)
            tried.append((op, items))
            settled, after = await kind.apply(tx, op, items)
            await bulk_store.bulk_items_settle(tx, op.id, settled)
            counts = Counter(s.state for s in settled)
            reasons = Counter(op.skipped_reasons)
            reasons.update(s.reason for s in settled if s.state == "skipped" and s.reason)
            await bulk_store.bulk_progress(
                tx, op, done=counts["done"], skipped=counts["skipped"], failed=counts["failed"],
                skipped_reasons=dict(reasons),
                state="running" if len(items) == size else "completed",
                now=self._clock.now(),
            )  # fmt: skip
            return max(1, len(settled)), after

        try:
            settled, after = await self._db.run(unit)
        except TransientError:
            raise  # the database: the same batch is tried again
        except Exception as exc:
            if not tried:
                raise
            op, items = tried[0]
            code = exc.code if isinstance(exc, OrbitError) else "internal"
            log.warning("bulk operation batch failed", operation=op.id, code=code,
                        items=len(items), exc_info=not isinstance(exc, OrbitError))  # fmt: skip
            await self._db.run(lambda tx: self._fail(tx, op.id, items, code))
            return 1
        if after is not None:
            await after()
        return settled

    async def _fail(self, tx: Tx, op_id: str, items: Sequence[tuple[int, str]], code: str) -> None:
        """After a failed batch: its one item ``failed``, or the whole operation."""
        op = await bulk_store.bulk_lock_by_id(tx, op_id)
        if op is None or op.state != bulk_store.RUNNING:
            return
        now = self._clock.now()
        if len(items) == 1:
            [(seq, _)] = items
            await bulk_store.bulk_items_settle(tx, op.id, [Settled(seq, "failed", code)])
            remaining = await bulk_store.bulk_items_pending(tx, op.id, limit=1)
            await bulk_store.bulk_progress(
                tx, op, done=0, skipped=0, failed=1, skipped_reasons=op.skipped_reasons,
                state="running" if remaining else "completed", now=now,
            )  # fmt: skip
        else:
            await bulk_store.bulk_progress(
                tx, op, done=0, skipped=0, failed=0,
                skipped_reasons={**op.skipped_reasons, f"batch_failed:{code}": len(items)},
                state="failed", now=now,
            )  # fmt: skip

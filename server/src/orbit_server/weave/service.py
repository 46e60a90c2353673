"""Weave's use cases (SPEC W1, W5, W7, W8, W10): publish and read definitions; start, read,
list, signal, pause, resume and cancel instances; an operator's step recovery. Each is one
short transaction that locks the instance first (boundary 1 of W3) and commits the steps'
tasks with its change; pushes and wake-ups happen after the commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import msgspec

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import (
    DefinitionInvalid,
    IdempotencyConflict,
    NotFound,
    StateConflict,
    VersionExists,
)
from orbit_server.ids import new_id
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import Database, DuplicateKey, Tx
from orbit_server.store import weave as store
from orbit_server.store.weave import DefinitionRecord, SignalRecord, StepRecord, WorkflowRecord
from orbit_server.weave.advance import SYSTEM, Advance, flush_all
from orbit_server.weave.control import Control
from orbit_server.weave.definition import (
    Definition,
    DefinitionError,
    SignalStep,
    check_timeouts,
    parse,
)
from orbit_server.weave.engine import ACTIVE, FINISHED, StepState, WorkflowState

T = TypeVar("T")
CACHE_SIZE = 256
MAX_WAITS_SHOWN = 100
MAX_STEPS_SHOWN = 500


@dataclass(frozen=True, slots=True)
class Inspection:
    """An instance with what W10 shows beside it."""

    workflow: WorkflowRecord
    steps: list[StepRecord]
    waits: list[StepRecord]
    signals: list[SignalRecord]
    signal_names: dict[str, str]  # signal step id -> the signal it waits for


class Definitions:
    """Checked definitions by (scope, name, version), kept while used (versions never change)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[Scope, str, str], Definition] = OrderedDict()

    async def load(self, tx: Tx, scope: Scope, name: str, version: str | None) -> Definition:
        if version is None:  # the latest: one index read, then (usually) the cache
            version = await store.workflow_definition_latest_version(tx, scope, name)
            if version is None:
                raise NotFound(f"no workflow definition {name!r} is published")
        key = (scope, name, version)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        record = await store.workflow_definition_get(tx, scope, name, version)
        if record is None:
            raise NotFound(f"workflow definition {name!r} has no version {version!r}")
        found = parse(record.body or {})
        self._cache[key] = found
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return found


class WorkflowService(Control):
    """Definitions, instances, signals and history; control and recovery come from
    :class:`~orbit_server.weave.control.Control`."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        audit: AuditWriter,
        tasks: TaskService,
        gates: GateService,
        *,
        max_params_bytes: int = 1 << 20,
        max_task_timeout_ms: int = 86_400_000,
        max_step_executions: int = 200_000,
    ) -> None:
        self._db = db
        self._max_step_executions = max_step_executions
        self._max_params_bytes = max_params_bytes
        self._max_task_timeout_ms = max_task_timeout_ms
        self._clock = clock
        self._audit = audit
        self._tasks = tasks
        self._gates = gates
        self.definitions = Definitions()
        self.changed = asyncio.Event()  # set when an instance's wait times may have changed
        # Told of each committed advancement (its writes, and the state it left): metrics.
        self.observe: Callable[[Sequence[Advance]], None] = lambda advances: None
        self._finished: dict[str, set[asyncio.Event]] = {}

    # -- definitions (W1) ---------------------------------------------------------------------

    async def publish(
        self, scope: Scope, body: dict[str, Any], *, actor: Actor
    ) -> tuple[DefinitionRecord, bool]:
        """Store a new version; the same content again is a no-op (created False)."""
        try:
            definition = parse(body)
            check_timeouts(definition, self._max_task_timeout_ms)
        except DefinitionError as exc:
            raise DefinitionInvalid(
                "the workflow definition is not valid", details={"reasons": exc.reasons}
            ) from None
        record = DefinitionRecord(
            scope=scope, name=definition.name, version=definition.version,
            digest=definition.digest, body=msgspec.to_builtins(definition.body),
            created_at=self._clock.now(),
        )  # fmt: skip

        async def unit(tx: Tx) -> tuple[DefinitionRecord, bool]:
            existing = await store.workflow_definition_get(tx, scope, record.name, record.version)
            if existing is None:
                try:
                    await store.workflow_definition_insert(tx, record)
                except DuplicateKey:
                    existing = await store.workflow_definition_get(
                        tx, scope, record.name, record.version
                    )
                    assert existing is not None
                else:
                    await self._audit.record(
                        tx, scope=scope, actor=actor, action="workflow_definition.publish",
                        target_kind="workflow_definition",
                        target_id=f"{record.name}@{record.version}",
                        details={"digest": record.digest},
                    )  # fmt: skip
                    return record, True
            if existing.digest != record.digest:
                raise VersionExists(
                    f"version {record.version!r} of {record.name!r} exists with other content; "
                    "publish a new version"
                )
            return existing, False

        return await self._db.run(unit)

    async def definition(self, scope: Scope, name: str, version: str) -> DefinitionRecord:
        async def unit(tx: Tx) -> DefinitionRecord | None:
            return await store.workflow_definition_get(tx, scope, name, version)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound(f"workflow definition {name!r} has no version {version!r}")
        return found

    async def list_definitions(
        self, scope: Scope, *, name: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[DefinitionRecord]:
        async def unit(tx: Tx) -> list[DefinitionRecord]:
            return await store.workflow_definitions_list(
                tx, scope, name=name, after=after, limit=limit
            )

        return await self._db.read(unit)

    # -- instances ----------------------------------------------------------------------------

    async def start(
        self,
        scope: Scope,
        name: str,
        *,
        version: str | None,
        input_: Any,
        idempotency_key: str | None,
    ) -> tuple[Inspection, bool]:
        """A new instance, begun at its first step in the same transaction, as inspected
        (created False: the idempotency key's instance)."""

        async def unit(tx: Tx) -> tuple[WorkflowRecord, Advance | None]:
            definition = await self.definitions.load(tx, scope, name, version)
            digest = _request_hash(name, version, input_)
            if idempotency_key is not None:
                existing = await store.workflow_get_by_idempotency_key(tx, scope, idempotency_key)
                if existing is not None:
                    return _replayed(existing, digest), None
            now = self._clock.now()
            workflow = WorkflowRecord(
                id=new_id("wf_"), scope=scope, definition=definition.name,
                version=definition.version, state=str(WorkflowState.RUNNING), input=input_,
                output=None, error=None, context={"steps": {}, "visits": {}, "seq": 0},
                control_version=0, gate_id=await self._gates.create_in(tx, scope),
                idempotency_key=idempotency_key,
                request_hash=digest if idempotency_key is not None else None,
                created_at=now, updated_at=now, finished_at=None,
            )  # fmt: skip
            advance = await self._advance(tx, workflow, now, definition)
            advance.new_instance = True  # inserted as it stands after its first steps
            first = definition.starts[None]
            await advance.enter(first, parent_key=None, branch=None, prev=input_)
            await advance.flush()
            return advance.wf, advance

        try:
            workflow, advance = await self._db.run(unit)
        except DuplicateKey:  # a concurrent start of the same key committed first
            if idempotency_key is None:
                raise

            async def replay(tx: Tx) -> WorkflowRecord | None:
                return await store.workflow_get_by_idempotency_key(tx, scope, idempotency_key)

            existing = await self._db.read(replay)
            if existing is None:
                raise
            workflow, advance = _replayed(existing, _request_hash(name, version, input_)), None
        if advance is None:
            return await self.inspect(scope, workflow.id), False
        await self.after([advance])
        rows = sorted(advance.rows.values(), key=lambda r: r.seq)
        seen = Inspection(
            workflow=workflow,
            steps=[r for r in rows if r.item is None and r.round is None][:MAX_STEPS_SHOWN],
            waits=[r for r in rows if _waits(r)][:MAX_WAITS_SHOWN],
            signals=[],
            signal_names=_signal_names(advance.definition),
        )
        return seen, True

    async def run_locked(
        self,
        scope: Scope | None,
        workflow_id: str,
        act: Callable[[Advance], Awaitable[T]],
        *,
        actor: Actor | None = None,
        action: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> tuple[T, WorkflowRecord]:
        """Lock an instance, let ``act`` change it through an :class:`Advance`, write, audit
        (when ``action`` is given) and commit."""

        async def unit(tx: Tx) -> tuple[T, Advance]:
            workflow = await store.workflow_lock(tx, workflow_id)
            if workflow is None or (scope is not None and workflow.scope != scope):
                raise NotFound("no such workflow")
            advance = await self._advance(tx, workflow, self._clock.now())
            answer = await act(advance)
            await advance.flush()
            if actor is not None and action is not None and (advance.changed or advance.audit):
                await self._audit.record(
                    tx, scope=workflow.scope, actor=actor, action=action,
                    target_kind="workflow", target_id=workflow.id, details=details,
                )  # fmt: skip
            return answer, advance

        answer, advance = await self._db.run(unit)
        await self.after([advance])
        return answer, advance.wf

    async def run_batch(
        self,
        workflow_ids: Sequence[str],
        act: Callable[[Advance], Awaitable[None]],
        *,
        before: Callable[[Tx], Awaitable[None]] | None = None,
        locked: Callable[[Tx], Awaitable[None]] | None = None,
    ) -> list[Advance]:
        """Advance several instances in one transaction (the result continuation's batches):
        ``before`` runs first (marking their events), then the instances are locked in id
        order, ``locked`` runs (reading what the lock protects), and ``act`` runs on each;
        the writes of all are batched. Instances that are gone are passed over."""

        async def unit(tx: Tx) -> list[Advance]:
            if before is not None:
                await before(tx)
            now = self._clock.now()
            advances = []
            instances = await store.workflows_lock_many(tx, workflow_ids)
            if locked is not None:
                await locked(tx)
            for workflow in instances:
                advance = await self._advance(tx, workflow, now)
                await act(advance)
                advances.append(advance)
            await flush_all(tx, self._tasks, advances)
            return advances

        advances = await self._db.run(unit)
        await self.after(advances)
        return advances

    async def _advance(
        self,
        tx: Tx,
        workflow: WorkflowRecord,
        now: datetime,
        definition: Definition | None = None,
    ) -> Advance:
        """An advancement of a locked (or new) instance, with its definition."""
        if definition is None:
            definition = await self.definitions.load(
                tx, workflow.scope, workflow.definition, workflow.version
            )
        return Advance(
            tx, self._tasks, definition, workflow, now, max_params_bytes=self._max_params_bytes,
            max_step_executions=self._max_step_executions,
        )  # fmt: skip

    async def fail_alone(
        self,
        workflow_id: str,
        error: dict[str, Any],
        *,
        before: Callable[[Tx], Awaitable[None]] | None = None,
    ) -> None:
        """End an instance ``failed`` without its definition (the way out for one that cannot
        advance): its running step tasks are cancelled, its active executions too."""

        async def unit(tx: Tx) -> None:
            if before is not None:
                await before(tx)
            found = await store.workflows_lock_many(tx, [workflow_id])
            if not found or found[0].state in FINISHED:
                return
            now = self._clock.now()
            rows = await store.workflow_steps_in_states(tx, workflow_id, list(ACTIVE))
            for row in rows:
                if row.task_id is not None and row.state == StepState.RUNNING:
                    with contextlib.suppress(StateConflict, NotFound):
                        await self._tasks.cancel_in(
                            tx, found[0].scope, row.task_id, reason="the workflow failed",
                            actor=SYSTEM, audit=False,
                        )  # fmt: skip
            await store.workflow_steps_update_many(tx, [
                replace(r, state=str(StepState.CANCELLED), ended_at=now, due_at=None,
                        wake_at=None, followed=True, updated_at=now)
                for r in rows
            ])  # fmt: skip
            await store.workflows_update_many(tx, [replace(
                found[0], state=str(WorkflowState.FAILED), error=error, finished_at=now,
                updated_at=now,
            )])  # fmt: skip

        await self._db.run(unit)
        for event in self._finished.get(workflow_id, ()):
            event.set()

    async def after(self, advances: Sequence[Advance]) -> None:
        """After the commit of ``advances``: report them, wake the instances' waiters."""
        self.observe(advances)
        for advance in advances:
            if advance.wf.state in FINISHED:
                for event in self._finished.get(advance.wf.id, ()):
                    event.set()
        self.changed.set()

    async def get(self, scope: Scope, workflow_id: str) -> WorkflowRecord:
        async def unit(tx: Tx) -> WorkflowRecord | None:
            return await store.workflow_get(tx, scope, workflow_id)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such workflow")
        return found

    async def inspect(self, scope: Scope, workflow_id: str, *, wait_ms: int = 0) -> Inspection:
        """The instance (after waiting up to ``wait_ms`` for it to finish), its steps (not
        map items or poll rounds; the newest 500), current waits and pending signals."""
        if wait_ms > 0:
            await self._wait(scope, workflow_id, wait_ms)

        async def unit(tx: Tx) -> Inspection | None:
            workflow = await store.workflow_get(tx, scope, workflow_id)
            if workflow is None:
                return None
            definition = await self.definitions.load(
                tx, scope, workflow.definition, workflow.version
            )
            rows = await store.workflow_steps_main(tx, workflow_id, limit=MAX_STEPS_SHOWN)
            active = await store.workflow_steps_in_states(
                tx, workflow_id, [StepState.WAITING, StepState.PENDING]
            )
            signals = await store.workflow_signals_pending(tx, workflow_id, limit=MAX_WAITS_SHOWN)
            return Inspection(
                workflow=workflow,
                steps=rows,
                waits=[r for r in active if _waits(r)][:MAX_WAITS_SHOWN],
                signals=signals,
                signal_names=_signal_names(definition),
            )

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such workflow")
        return found

    async def _wait(self, scope: Scope, workflow_id: str, wait_ms: int) -> None:
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        event = asyncio.Event()
        self._finished.setdefault(workflow_id, set()).add(event)
        try:
            while True:
                if (await self.get(scope, workflow_id)).state in FINISHED:
                    return
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    return
                event.clear()
                # A finish on this node wakes at once; another node's within 250 ms.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(remaining, 0.25))
        finally:
            waiters = self._finished.get(workflow_id, set())
            waiters.discard(event)
            if not waiters:
                self._finished.pop(workflow_id, None)

    async def list_workflows(
        self,
        scope: Scope,
        *,
        definition: str | None,
        state: str | None,
        before: str | None,
        limit: int,
    ) -> list[WorkflowRecord]:
        async def unit(tx: Tx) -> list[WorkflowRecord]:
            return await store.workflows_list(
                tx, scope, definition=definition, state=state, before=before, limit=limit
            )

        return await self._db.read(unit)

    async def steps(
        self, scope: Scope, workflow_id: str, *, after: int, limit: int
    ) -> list[StepRecord]:
        """Every step execution (map items and poll rounds too), in creation order."""

        async def unit(tx: Tx) -> list[StepRecord] | None:
            if await store.workflow_get(tx, scope, workflow_id) is None:
                return None
            return await store.workflow_steps_list(tx, workflow_id, after=after, limit=limit)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such workflow")
        return found

    # -- history (P10) ------------------------------------------------------------------------

    async def prune_finished(self, retention_ms: int, *, budget: int = 1000) -> int:
        """Delete instances finished longer than ``retention_ms`` ago with their step
        executions, signals and gate, at most ``budget`` step rows per call (a large map's
        instance takes several calls); answers the rows removed (0: nothing left to do)."""
        before = self._clock.now() - timedelta(milliseconds=retention_ms)

        async def unit(tx: Tx) -> int:
            removed = 0
            for workflow_id, gate_id in await store.workflows_finished_before(
                tx, before, limit=100
            ):
                left = budget - removed
                if left <= 0:
                    break
                steps = await store.workflow_steps_delete_some(tx, workflow_id, limit=left)
                removed += steps
                if steps < left:  # its steps are gone
                    await store.workflow_delete(tx, workflow_id)
                    await self._gates.delete_in(tx, gate_id)
                    removed += 1
            return removed

        return await self._db.run(unit)

    # -- signals (W5) -------------------------------------------------------------------------

    async def signal(
        self,
        scope: Scope,
        workflow_id: str,
        name: str,
        payload: Any,
        idempotency_key: str | None,
    ) -> SignalRecord:
        """Record a signal and deliver it to the execution waiting for it, if one does; the
        same idempotency key again answers the first signal and changes nothing."""

        async def act(advance: Advance) -> SignalRecord:
            if idempotency_key is not None:
                seen = await store.workflow_signal_get_by_key(
                    advance.tx, workflow_id, idempotency_key
                )
                if seen is not None:
                    if seen.name != name or seen.payload != payload:
                        raise IdempotencyConflict(
                            "this idempotency key was used for another signal; use a new key"
                        )
                    return seen
            if advance.finished:
                raise StateConflict(f"the workflow is {advance.wf.state}; it takes no signals")
            signal = SignalRecord(
                id=new_id("sig_"), workflow_id=workflow_id, name=name, payload=payload,
                idempotency_key=idempotency_key, state="pending", step_key=None,
                created_at=advance.now, delivered_at=None,
            )  # fmt: skip
            await store.workflow_signal_insert(advance.tx, signal)
            waiting = await store.workflow_steps_in_states(
                advance.tx, workflow_id, [StepState.WAITING]
            )
            for row in waiting:
                step = advance.definition.steps[row.step]
                if row.kind == "signal" and getattr(step, "name", None) == name:
                    await store.workflow_signal_deliver(advance.tx, signal.id, row.key, advance.now)
                    await advance.deliver(advance.rows.setdefault(row.key, row), payload)
                    return replace(signal, state="delivered", step_key=row.key)
            return signal

        signal, _ = await self.run_locked(scope, workflow_id, act)
        return signal


def _waits(row: StepRecord) -> bool:
    """Whether an execution is a current wait: a timer, a signal, a poll's interval, an
    entry deferred by the work cap."""
    active = row.state in (StepState.WAITING, StepState.PENDING)
    return active and (row.due_at is not None or row.kind == "signal")


def _signal_names(definition: Definition) -> dict[str, str]:
    return {
        step_id: step.name
        for step_id, step in definition.steps.items()
        if isinstance(step, SignalStep)
    }


def _request_hash(name: str, version: str | None, input_: Any) -> str:
    """The start as asked for: replaying it answers the first instance even after a newer
    version was published (``version`` omitted stays omitted)."""
    body = {"definition": name, "version": version, "input": input_}
    return hashlib.sha256(msgspec.json.encode(body, order="sorted")).hexdigest()


def _replayed(existing: WorkflowRecord, digest: str) -> WorkflowRecord:
    if existing.request_hash != digest:
        raise IdempotencyConflict(
            "this idempotency key was used to start a different workflow; use a new key"
        )
    return existing

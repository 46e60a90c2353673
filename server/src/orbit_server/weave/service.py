"""Weave's use cases (SPEC W1, W5, W7, W8, W10): publish and read definitions; start, read,
list and signal instances. Each is one
short transaction that locks the instance first (boundary 1 of W3) and commits the steps'
tasks with its change (through :class:`~orbit_server.weave.advance.Advancement`); pushes and
wake-ups happen after the commit. Control and recovery are
:class:`~orbit_server.weave.control.Control`'s, a service of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import DefinitionInvalid, IdempotencyConflict, NotFound, VersionExists
from orbit_server.ids import new_id
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.service import TaskService
from orbit_server.scope import Scope
from orbit_server.store import Database, DuplicateKey, Tx
from orbit_server.store import definitions as definition_store
from orbit_server.store import signals as signal_store
from orbit_server.store import steps as step_store
from orbit_server.store import workflows as workflow_store
from orbit_server.weave.advance import Advance, Advancement
from orbit_server.weave.definition import (
    Definition,
    DefinitionError,
    SignalStep,
    check_timeouts,
    parse,
)
from orbit_server.weave.definitions import Definitions
from orbit_server.weave.engine import FINISHED, Limits, StepState, WorkflowState
from orbit_server.weave.model import Signal, StepExecution, StoredDefinition, Workflow
from orbit_server.weave.port import PulseAdapter
from orbit_server.weave.states import SignalState
from orbit_server.weave.view import SignalSent

MAX_WAITS_SHOWN = 100
MAX_STEPS_SHOWN = 500


@dataclass(frozen=True, slots=True)
class Inspection:
    """An instance with what W10 shows beside it."""

    workflow: Workflow
    steps: list[StepExecution]
    waits: list[StepExecution]
    signals: list[Signal]
    signal_names: dict[str, str]  # signal step id -> the signal it waits for


class WorkflowService:
    """Definitions, instances, signals and history. The operator's calls on instances are
    :class:`~orbit_server.weave.control.Control`'s, built on :attr:`advancement`."""

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
        self._max_task_timeout_ms = max_task_timeout_ms
        self._clock = clock
        self._audit = audit
        self._pulse = PulseAdapter(tasks, gates)
        self._gates = gates
        self.definitions = Definitions()
        limits = Limits(max_params_bytes=max_params_bytes,
                        max_step_executions=max_step_executions)  # fmt: skip
        self.advancement = Advancement(
            db, clock, audit, self._pulse, tasks, self.definitions, limits
        )
        self.changed = self.advancement.changed  # set when wait times may have changed
        self._finished = self.advancement.waiters

    @property
    def observe(self) -> Callable[[Sequence[Advance]], None]:
        """Told of each committed advancement (its writes, the state it left): metrics."""
        return self.advancement.observe

    @observe.setter
    def observe(self, observe: Callable[[Sequence[Advance]], None]) -> None:
        self.advancement.observe = observe

    # -- definitions (W1) ---------------------------------------------------------------------

    async def publish(
        self, scope: Scope, body: dict[str, Any], *, actor: Actor
    ) -> tuple[StoredDefinition, bool]:
        """Store a new version; the same content again is a no-op (created False)."""
        try:
            definition = parse(body)
            check_timeouts(definition, self._max_task_timeout_ms)
        except DefinitionError as exc:
            raise DefinitionInvalid(
                "the workflow definition is not valid", details={"reasons": exc.reasons}
            ) from None
        record = StoredDefinition(
            scope=scope, name=definition.name, version=definition.version,
            digest=definition.digest, body=msgspec.to_builtins(definition.body),
            created_at=self._clock.now(),
        )  # fmt: skip

        async def unit(tx: Tx) -> tuple[StoredDefinition, bool]:
            existing = await definition_store.workflow_definition_get(
                tx, scope, record.name, record.version
            )
            if existing is None:
                try:
                    await definition_store.workflow_definition_insert(tx, record)
                except DuplicateKey:
                    existing = await definition_store.workflow_definition_get(
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

    async def definition(self, scope: Scope, name: str, version: str) -> StoredDefinition:
        async def unit(tx: Tx) -> StoredDefinition | None:
            return await definition_store.workflow_definition_get(tx, scope, name, version)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound(f"workflow definition {name!r} has no version {version!r}")
        return found

    async def list_definitions(
        self, scope: Scope, *, name: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[StoredDefinition]:
        async def unit(tx: Tx) -> list[StoredDefinition]:
            return await definition_store.workflow_definitions_list(
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

        async def unit(tx: Tx) -> tuple[Workflow, Advance | None, Definition | None]:
            definition = await self.definitions.load(tx, scope, name, version)
            digest = _request_hash(name, version, input_)
            if idempotency_key is not None:
                existing = await workflow_store.workflow_get_by_idempotency_key(
                    tx, scope, idempotency_key
                )
                if existing is not None:
                    return _replayed(existing, digest), None, None
            now = self._clock.now()
            workflow = Workflow(
                id=new_id("wf_"), scope=scope, definition=definition.name,
                version=definition.version, state=WorkflowState.RUNNING, input=input_,
                output=None, error=None, context={"steps": {}, "visits": {}, "seq": 0},
                control_version=0, gate_id=await self._pulse.new_gate(tx, scope),
                idempotency_key=idempotency_key,
                request_hash=digest if idempotency_key is not None else None,
                created_at=now, updated_at=now, finished_at=None,
            )  # fmt: skip
            advance = await self.advancement.start_in(tx, workflow, definition, input_)
            return advance.wf, advance, definition

        try:
            workflow, advance, definition = await self._db.run(unit)
        except DuplicateKey:  # a concurrent start of the same key committed first
            if idempotency_key is None:
                raise

            async def replay(tx: Tx) -> Workflow | None:
                return await workflow_store.workflow_get_by_idempotency_key(
                    tx, scope, idempotency_key
                )

            existing = await self._db.read(replay)
            if existing is None:
                raise
            workflow = _replayed(existing, _request_hash(name, version, input_))
            advance, definition = None, None
        if advance is None or definition is None:
            return await self.inspect(scope, workflow.id), False
        await self.advancement.after([advance])
        rows = sorted(advance.rows, key=lambda r: r.seq)
        seen = Inspection(
            workflow=workflow,
            steps=[r for r in rows if r.item is None and r.round is None][:MAX_STEPS_SHOWN],
            waits=[r for r in rows if _waits(r)][:MAX_WAITS_SHOWN],
            signals=[],
            signal_names=_signal_names(definition),
        )
        return seen, True

    async def get(self, scope: Scope, workflow_id: str) -> Workflow:
        async def unit(tx: Tx) -> Workflow | None:
            return await workflow_store.workflow_get(tx, scope, workflow_id)

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
            workflow = await workflow_store.workflow_get(tx, scope, workflow_id)
            if workflow is None:
                return None
            definition = await self.definitions.load(
                tx, scope, workflow.definition, workflow.version
            )
            rows = await step_store.workflow_steps_main(tx, workflow_id, limit=MAX_STEPS_SHOWN)
            active = await step_store.workflow_steps_in_states(
                tx, [workflow_id], [StepState.WAITING, StepState.PENDING]
            )
            signals = await signal_store.workflow_signals_pending(
                tx, workflow_id, limit=MAX_WAITS_SHOWN
            )
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
    ) -> list[Workflow]:
        async def unit(tx: Tx) -> list[Workflow]:
            return await workflow_store.workflows_list(
                tx, scope, definition=definition, state=state, before=before, limit=limit
            )

        return await self._db.read(unit)

    async def steps(
        self, scope: Scope, workflow_id: str, *, after: int, limit: int
    ) -> list[StepExecution]:
        """Every step execution (map items and poll rounds too), in creation order."""

        async def unit(tx: Tx) -> list[StepExecution] | None:
            if await workflow_store.workflow_get(tx, scope, workflow_id) is None:
                return None
            return await step_store.workflow_steps_list(tx, workflow_id, after=after, limit=limit)

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
            for workflow_id, gate_id in await workflow_store.workflows_finished_before(
                tx, before, limit=100
            ):
                left = budget - removed
                if left <= 0:
                    break
                steps = await step_store.workflow_steps_delete_some(tx, workflow_id, limit=left)
                removed += steps
                if steps < left:  # its steps are gone
                    await signal_store.workflow_signals_delete(tx, workflow_id)
                    await workflow_store.workflow_delete(tx, workflow_id)
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
    ) -> Signal:
        """Record a signal and deliver it to the execution waiting for it, if one does; the
        same idempotency key again answers the first signal and changes nothing."""

        signal = Signal(
            id=new_id("sig_"), workflow_id=workflow_id, name=name, payload=payload,
            idempotency_key=idempotency_key, state=SignalState.PENDING, step_key=None,
            created_at=self._clock.now(), delivered_at=None,
        )  # fmt: skip
        advance = await self.advancement.run_one(scope, workflow_id, [SignalSent(signal)])
        answer = advance.answer
        assert isinstance(answer, Signal)
        return answer


def _waits(row: StepExecution) -> bool:
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


def _replayed(existing: Workflow, digest: str) -> Workflow:
    if existing.request_hash != digest:
        raise IdempotencyConflict(
            "this idempotency key was used to start a different workflow; use a new key"
        )
    return existing

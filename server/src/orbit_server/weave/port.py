"""What Weave asks of Pulse while it applies a plan (decision 0020), and the adapter that
asks Pulse's services: create a step's tasks, cancel one, open or close an instance's gate,
resolve a task in review. Everything in the caller's transaction; Pulse records what the
node must hear of after the commit (new work, cancels) as domain events of that transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from orbit_server.audit import Actor
from orbit_server.errors import StateConflict
from orbit_server.pulse.gates import GateService
from orbit_server.pulse.model import Task, TaskSpec
from orbit_server.pulse.service import Submitted, TaskService
from orbit_server.scope import Scope
from orbit_server.store import Tx

SYSTEM = Actor(name="orbit:weave")


class PulsePort(Protocol):
    def build(self, scope: Scope, specs: Sequence[TaskSpec], now: datetime) -> list[Task]:
        """The tasks ``specs`` ask for, with their ids (not created yet)."""
        ...

    async def create(
        self,
        tx: Tx,
        scope: Scope,
        tasks: list[Task],
        now: datetime,
    ) -> list[Submitted]:
        """Create ``tasks`` of one scope; raises ``QueueFull`` when a queue has no room."""
        ...

    async def cancel(self, tx: Tx, scope: Scope, task_id: str, reason: str) -> None:
        """Cancel a step's task (a started one is asked to stop); nothing if it ended."""
        ...

    async def gate(self, tx: Tx, scope: Scope, gate_id: str, *, open_: bool) -> None: ...

    async def new_gate(self, tx: Tx, scope: Scope) -> str: ...

    async def resolve(
        self,
        tx: Tx,
        scope: Scope,
        task_id: str,
        *,
        succeeded: bool,
        result: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> None: ...

    async def room(self, tx: Tx, scope: Scope, queues: Sequence[str]) -> dict[str, int]:
        """Free places of the queues that have a limit (an instance alone after a full
        queue creates what fits)."""
        ...


class PulseAdapter:
    """:class:`PulsePort` over Pulse's task and gate services."""

    def __init__(self, tasks: TaskService, gates: GateService) -> None:
        self.tasks = tasks
        self._gates = gates

    def build(self, scope: Scope, specs: Sequence[TaskSpec], now: datetime) -> list[Task]:
        return self.tasks.build(scope, specs, now)

    async def create(
        self,
        tx: Tx,
        scope: Scope,
        tasks: list[Task],
        now: datetime,
    ) -> list[Submitted]:
        return await self.tasks.create_in(tx, scope, tasks, now)

    async def cancel(self, tx: Tx, scope: Scope, task_id: str, reason: str) -> None:
        with contextlib.suppress(StateConflict):  # it ended meanwhile: its result event
            await self.tasks.cancel_in(  # finds the execution ended
                tx, scope, task_id, reason=reason, actor=SYSTEM, audit=False
            )

    async def gate(self, tx: Tx, scope: Scope, gate_id: str, *, open_: bool) -> None:
        await self._gates.set_open_in(tx, scope, gate_id, open_=open_)

    async def new_gate(self, tx: Tx, scope: Scope) -> str:
        return await self._gates.create_in(tx, scope)

    async def resolve(
        self,
        tx: Tx,
        scope: Scope,
        task_id: str,
        *,
        succeeded: bool,
        result: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> None:
        await self.tasks.resolve_in(
            tx, scope, task_id, succeeded=succeeded, result=result, error=error, actor=actor
        )

    async def room(self, tx: Tx, scope: Scope, queues: Sequence[str]) -> dict[str, int]:
        return await self.tasks.room_in(tx, scope, queues)

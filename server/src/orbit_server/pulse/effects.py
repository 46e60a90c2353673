"""What every state change of a task writes besides the task row (decision 0003): the permits
it gives back and its result event. Shared by the submitter-side and worker-side services so
that every path does it the same way, in the transaction of the change."""

from __future__ import annotations

from datetime import datetime

from orbit_server.ids import new_id
from orbit_server.pulse.states import TaskState
from orbit_server.store import Tx
from orbit_server.store import leases as lstore
from orbit_server.store import pulse as store
from orbit_server.store.pulse import TaskEventRecord, TaskRecord


async def release_permits(tx: Tx, task: TaskRecord, now: datetime, *, waits_again: bool) -> None:
    """A task leaves leased/running: the queue's and the concurrency key's permits come back;
    ``waits_again`` when it returns to pending or scheduled (counted as waiting)."""
    await store.queue_add_counts(
        tx, task.scope, task.queue, active=-1, pending=1 if waits_again else 0, now=now
    )
    if task.concurrency_key is not None:
        await store.key_permit_add(tx, task.scope, task.queue, task.concurrency_key, -1)


async def make_claimable(tx: Tx, task: TaskRecord, gates: dict[str, bool] | None = None) -> bool:
    """Put a pending task into the claim range unless its gate is closed (a closed gate's
    tasks wait outside it until the gate opens); answers whether it went in. ``gates`` may
    carry the open/closed answers already read in this transaction."""
    if task.gate_id is not None:
        known = gates if gates is not None and task.gate_id in gates else None
        is_open = (known or await lstore.gates_open(tx, [task.gate_id]))[task.gate_id]
        if not is_open:
            return False
    await store.task_ready_insert(tx, task)
    return True


async def emit_result(tx: Tx, task: TaskRecord, state: TaskState, now: datetime) -> None:
    """The result event of a terminal or needs_review transition (SPEC P11)."""
    written = await store.task_event_insert(
        tx,
        TaskEventRecord(
            id=new_id("evt_"),
            scope=task.scope,
            task_id=task.id,
            attempt=task.lease_epoch,
            state=str(state),
            owner_kind=task.owner_kind,
            owner_id=task.owner_id,
            created_at=now,
            seq=task.event_seq + 1,
        ),
    )
    if not written:  # the task row is locked by the caller, so this cannot be a race
        raise RuntimeError(f"result event {task.event_seq + 1} of task {task.id} exists already")

"""Reading what plans need and writing what they decided (decision 0020), set-wise over the
instances of one transaction: ``load(tx, wanted)`` fills views with the reads plans named,
``apply(tx, pulse, plans)`` writes plans — step executions in one insert and one update,
the new tasks through one ``create`` per scope, the instances last. The caller commits and
then hands the answer to :meth:`~orbit_server.weave.advance.Advancement.after`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orbit_server.audit import Actor
from orbit_server.pulse.model import Task
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import signals as signal_store
from orbit_server.store import steps as step_store
from orbit_server.store import workflows as workflow_store
from orbit_server.store.base import chunks
from orbit_server.weave.engine import ACTIVE, FINISHED, StepState
from orbit_server.weave.model import StepExecution, Workflow
from orbit_server.weave.port import PulsePort
from orbit_server.weave.view import (
    Active,
    Items,
    Need,
    OldestSignal,
    Outputs,
    Plan,
    Reviewing,
    Rows,
    SignalByKey,
    Unfollowed,
    View,
)


@dataclass(slots=True)
class Advance:
    """One instance's advancement as committed: what metrics and waiters are told."""

    wf: Workflow
    was_finished: bool
    changed: bool = False
    audit: bool = False
    writes: int = 0  # rows written: step executions created or changed, tasks created
    rows: list[StepExecution] = field(default_factory=list)
    answer: Any = None

    @property
    def finished(self) -> bool:
        return self.wf.state in FINISHED


class PlannedTwice(RuntimeError):
    """The planner asked again for a read it was given: a bug, not a state."""


async def load(tx: Tx, wanted: Sequence[tuple[View, Sequence[Need]]]) -> None:
    """Read what the plans lack into their views: rows and active executions of every
    instance in one statement each, the rest per instance (rare: a map's items or outputs,
    a signal)."""
    keys: list[tuple[View, str]] = []
    active: list[View] = []
    for view, needs in wanted:
        for need in needs:
            if isinstance(need, Rows):
                keys += [(view, k) for k in need.keys if k not in view.rows]
                if all(k in view.rows for k in need.keys):
                    raise PlannedTwice(need)
            elif isinstance(need, Active):
                if view.active is not None:
                    raise PlannedTwice(need)
                active.append(view)
            else:
                await _load_one(tx, view, need)
    if active:
        await _load_active(tx, active)
    by_instance = {v.workflow.id: v for v, _ in keys}
    for part in chunks(list(dict.fromkeys((v.workflow.id, k) for v, k in keys)), 200):
        for view, key in ((by_instance[w], k) for w, k in part):
            view.rows[key] = None  # known absent unless read below
        for found in await step_store.workflow_steps_get_many(tx, part):
            by_instance[found.workflow_id].rows[found.key] = found


async def _load_one(tx: Tx, view: View, need: Need) -> None:
    wf = view.workflow.id
    if isinstance(need, Items):
        if need.key in view.items:
            raise PlannedTwice(need)
        view.items[need.key] = await step_store.workflow_step_items(tx, wf, need.key)
    elif isinstance(need, Outputs):
        if need.key in view.outputs:
            raise PlannedTwice(need)
        view.outputs[need.key] = await step_store.workflow_step_outputs(tx, wf, need.key)
    elif isinstance(need, OldestSignal):
        if need.name in view.signals:
            raise PlannedTwice(need)
        view.signals[need.name] = await signal_store.workflow_signal_oldest_pending(
            tx, wf, need.name
        )
    elif isinstance(need, SignalByKey):
        if need.key in view.signal_keys:
            raise PlannedTwice(need)
        view.signal_keys[need.key] = await signal_store.workflow_signal_get_by_key(tx, wf, need.key)
    elif isinstance(need, Unfollowed):
        if view.unfollowed is not None:
            raise PlannedTwice(need)
        view.unfollowed = await step_store.workflow_steps_unfollowed(tx, wf)
        _know(view, view.unfollowed)
    elif isinstance(need, Reviewing):
        if view.reviewing is not None:
            raise PlannedTwice(need)
        view.reviewing = await step_store.workflow_steps_count_in_state(
            tx, wf, StepState.NEEDS_REVIEW
        )


async def _load_active(tx: Tx, views: Sequence[View]) -> None:
    """Every active execution of each instance, in one statement for all of them."""
    found: dict[str, list[StepExecution]] = {v.workflow.id: [] for v in views}
    for row in await step_store.workflow_steps_in_states(tx, list(found), list(ACTIVE)):
        found[row.workflow_id].append(row)
    for view in views:
        view.active = found[view.workflow.id]
        _know(view, view.active)


def _know(view: View, rows: Sequence[StepExecution]) -> None:
    for row in rows:
        view.rows.setdefault(row.key, row)


async def apply(
    tx: Tx, pulse: PulsePort, plans: Sequence[Plan], *, actor: Actor | None = None
) -> list[Advance]:
    """Write ``plans`` (complete ones: no needs) in the caller's transaction."""
    done = [Advance(wf=p.workflow, was_finished=p.was_finished, changed=p.changed,
                    audit=p.audit, answer=p.answer)
            for p in plans]  # fmt: skip
    for plan, advance in zip(plans, done, strict=True):
        await _apply_pulse(tx, pulse, plan, advance, actor)
    # The new tasks get their ids; the rows that name them by placeholder take them.
    tasks: dict[Scope, list[Task]] = {}
    owners: dict[Scope, list[Advance]] = {}
    for plan, advance in zip(plans, done, strict=True):
        if not plan.tasks:
            continue
        scope = plan.workflow.scope
        assert plan.now is not None
        built = pulse.build(scope, [t.spec for t in plan.tasks], plan.now)
        ids = {t.placeholder: b.id for t, b in zip(plan.tasks, built, strict=True)}
        plan.new_rows = [_named(r, ids) for r in plan.new_rows]
        plan.changed_rows = [_named(r, ids) for r in plan.changed_rows]
        tasks.setdefault(scope, []).extend(built)
        owners.setdefault(scope, []).extend([advance] * len(built))
    await _write_rows(tx, plans, done)
    for scope, new_tasks in tasks.items():
        now = plans[0].now
        assert now is not None
        await pulse.create(tx, scope, new_tasks, now)
        for owner in owners[scope]:
            owner.writes += 1
    changed = [(p, a) for p, a in zip(plans, done, strict=True) if p.changed or p.new_instance]
    for plan, _ in changed:
        if plan.new_instance:  # last: a duplicate idempotency key rolls it all back
            await workflow_store.workflow_insert(tx, plan.workflow)
    existing = [p.workflow for p, _ in changed if not p.new_instance]
    for part in chunks(existing, 500):
        await workflow_store.workflows_update_many(tx, part)
    return done


async def _apply_pulse(
    tx: Tx, pulse: PulsePort, plan: Plan, advance: Advance, actor: Actor | None
) -> None:
    """A plan's writes that come before its rows: waits re-armed, signals, Pulse's part."""
    wf = plan.workflow
    if plan.rearm:
        await step_store.workflow_steps_rearm(tx, wf.id)
    for signal in plan.signals:
        await signal_store.workflow_signal_insert(tx, signal)
    assert plan.now is not None
    for signal_id, key in plan.deliveries:
        await signal_store.workflow_signal_deliver(tx, signal_id, key, plan.now)
    if plan.gate_open is not None:
        await pulse.gate(tx, wf.scope, wf.gate_id, open_=plan.gate_open)
    for task_id, reason in plan.cancels:
        await pulse.cancel(tx, wf.scope, task_id, reason)
    if plan.resolution is not None:
        assert actor is not None
        r = plan.resolution
        await pulse.resolve(tx, wf.scope, r.task_id, succeeded=r.succeeded, result=r.output,
                            error=r.error, actor=actor)  # fmt: skip


def _named(row: StepExecution, ids: dict[str, str]) -> StepExecution:
    if row.task_id is None or row.task_id not in ids:
        return row
    return dataclasses.replace(row, task_id=ids[row.task_id])


async def _write_rows(tx: Tx, plans: Sequence[Plan], done: Sequence[Advance]) -> None:
    """New step executions of all plans in one statement, changed ones by key; then the
    items of maps that began on an existing row."""
    new: list[StepExecution] = []
    items: dict[tuple[str, str], Any] = {}  # by instance too: keys repeat across instances
    for plan, advance in zip(plans, done, strict=True):
        advance.writes += len(plan.new_rows) + len(plan.changed_rows)
        advance.rows = plan.new_rows + plan.changed_rows
        new += plan.new_rows
        items.update({(plan.workflow.id, k): v for k, v in plan.items.items()})
    for part in chunks(new, 500):
        await step_store.workflow_steps_insert(tx, part, items)
    changed = [r for p in plans for r in p.changed_rows]
    for part in chunks(changed, 500):
        await step_store.workflow_steps_update_many(tx, part)
    for plan in plans:
        for key in plan.set_items:
            await step_store.workflow_step_set_items(tx, plan.workflow.id, key, plan.items[key])

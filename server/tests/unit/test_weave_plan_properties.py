"""The planner's properties over random definitions and event orders, without a database:
an in-memory store answers the planner's reads and takes its writes, tasks end in random
orders and outcomes, waits come due, signals arrive, the instance is paused and resumed.

- every instance ends, and then no execution of it is active;
- each step execution gets its task once (a retry by an operator aside, never exercised here);
- a plan never asks twice for the same read.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbit_server.pulse.model import Owner, Task
from orbit_server.scope import Scope
from orbit_server.weave.definition import Definition, parse
from orbit_server.weave.engine import ACTIVE, FINISHED
from orbit_server.weave.model import Signal, StepExecution, Workflow
from orbit_server.weave.plan import plan
from orbit_server.weave.view import (
    Active,
    Due,
    Event,
    Items,
    OldestSignal,
    Outputs,
    Pause,
    Plan,
    Resume,
    Reviewing,
    Rows,
    SignalByKey,
    SignalSent,
    Start,
    TaskEnded,
    Unfollowed,
    View,
)

SCOPE = Scope("t", "e")
T0 = datetime(2030, 1, 1, tzinfo=UTC)
NAMES = ("go", "stop")


def _task(step_id: str, **more: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "task", "queue": "q", "type": "work", **more}


@st.composite
def definitions(draw: st.DrawFn) -> dict[str, Any]:
    """A top-level list s0 → s1 → … whose steps are any kind; references only go forward
    (so every step is reachable and no cycle runs through steps that take nothing in)."""
    count = draw(st.integers(1, 6))
    steps: list[dict[str, Any]] = []
    for i in range(count):
        sid, nxt = f"s{i}", (f"s{i + 1}" if i + 1 < count else None)
        later = [f"s{j}" for j in range(i + 1, count)]
        kind = draw(st.sampled_from(
            ["task", "task", "choice", "timer", "signal", "poll", "map", "parallel"]
            + (["succeed", "fail"] if nxt is None else [])
        ))  # fmt: skip
        step: dict[str, Any]
        if kind == "task":
            step = _task(sid)
            if later and draw(st.booleans()):
                step["on_failure"] = draw(st.sampled_from(later))
        elif kind == "choice":
            if nxt is None:
                step = _task(sid)
            else:
                target = draw(st.sampled_from(later))
                step = {"id": sid, "kind": "choice", "default": nxt,
                        "choices": [{"when": "input.flag", "next": target}]}  # fmt: skip
                nxt = None
        elif kind == "timer":
            step = {"id": sid, "kind": "timer", "duration_ms": draw(st.integers(0, 5000))}
        elif kind == "signal":
            step = {"id": sid, "kind": "signal", "name": draw(st.sampled_from(NAMES)),
                    "timeout_ms": draw(st.integers(1, 10_000))}  # fmt: skip
            if later and draw(st.booleans()):
                step["on_timeout"] = draw(st.sampled_from(later))
        elif kind == "poll":
            step = {"id": sid, "kind": "poll", "task": {"queue": "q", "type": "probe"},
                    "until": "result.done", "interval_ms": 1000,
                    "max_rounds": draw(st.integers(1, 4))}  # fmt: skip
        elif kind == "map":
            step = {"id": sid, "kind": "map", "items": "input.items",
                    "max_concurrency": draw(st.integers(1, 3)),
                    "task": {"queue": "q", "type": "item", "params": "item"}}  # fmt: skip
        elif kind == "parallel":
            step = {"id": sid, "kind": "parallel", "branches": [
                {"name": f"b{n}", "steps": [_task(f"{sid}b{n}t{m}", **(
                    {"next": f"{sid}b{n}t{m + 1}"} if m + 1 < size else {}))
                    for m in range(size)]}
                for n, size in enumerate(draw(st.lists(st.integers(1, 2), min_size=1,
                                                       max_size=3)))
            ]}  # fmt: skip
        elif kind == "succeed":
            step = {"id": sid, "kind": "succeed"}
        else:
            step = {"id": sid, "kind": "fail", "error": {"code": "no", "message": "no"}}
        if nxt is not None and kind not in ("succeed", "fail"):
            step["next"] = nxt
        steps.append(step)
    return {"name": "random", "version": "1", "format": 1, "start": "s0", "steps": steps}


@dataclasses.dataclass
class Store:
    """What a database would hold of one instance, and of its tasks."""

    workflow: Workflow
    rows: dict[str, StepExecution] = dataclasses.field(default_factory=dict)
    items: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    signals: list[Signal] = dataclasses.field(default_factory=list)
    tasks: dict[str, Task] = dataclasses.field(default_factory=dict)
    ended: list[Task] = dataclasses.field(default_factory=list)  # events to consume
    orders: dict[str, int] = dataclasses.field(default_factory=dict)  # tasks made, by key

    def load(self, view: View, need: Any) -> None:
        rows = self.rows
        if isinstance(need, Rows):
            assert not all(k in view.rows for k in need.keys), "asked twice"
            for key in need.keys:
                view.rows[key] = rows.get(key)
            return
        if isinstance(need, Active):
            assert view.active is None, "asked twice"
            view.active = sorted((r for r in rows.values() if r.state in ACTIVE),
                                 key=lambda r: r.seq)  # fmt: skip
            for row in view.active:
                view.rows.setdefault(row.key, row)
        elif isinstance(need, Items):
            view.items[need.key] = self.items.get(need.key, [])
        elif isinstance(need, Outputs):
            found = [r for r in rows.values() if r.parent_key == need.key and r.item is not None]
            view.outputs[need.key] = [r.output for r in sorted(found, key=lambda r: r.item or 0)]
        elif isinstance(need, OldestSignal):
            pending = [s for s in self.signals if s.state == "pending" and s.name == need.name]
            view.signals[need.name] = pending[0] if pending else None
        elif isinstance(need, SignalByKey):
            view.signal_keys[need.key] = None
        elif isinstance(need, Unfollowed):
            view.unfollowed = sorted(
                (r for r in rows.values()
                 if not r.followed and r.state in ("succeeded", "failed", "skipped")),
                key=lambda r: r.seq,
            )  # fmt: skip
            for row in view.unfollowed:
                view.rows.setdefault(row.key, row)
        elif isinstance(need, Reviewing):
            view.reviewing = sum(1 for r in rows.values() if r.state == "needs_review")

    def advance(self, definition: Definition, events: list[Event], now: datetime) -> Plan:
        view = View(self.workflow, new_instance=any(isinstance(e, Start) for e in events))
        for _ in range(100):
            made = plan(definition, view, events, now)
            if not made.needs:
                break
            for need in made.needs:
                self.load(view, need)
        else:
            raise AssertionError("a plan kept needing reads")
        self.write(made, now)
        return made

    def write(self, made: Plan, now: datetime) -> None:
        if made.rearm:
            for key, row in self.rows.items():
                if row.wake_at is None and row.due_at is not None and row.state in (
                    "pending", "running", "waiting"
                ):  # fmt: skip
                    self.rows[key] = dataclasses.replace(row, wake_at=row.due_at)
        self.signals += made.signals
        for signal_id, key in made.deliveries:
            at = next(i for i, s in enumerate(self.signals) if s.id == signal_id)
            assert self.signals[at].state == "pending"
            self.signals[at] = dataclasses.replace(self.signals[at], state="delivered",
                                                   step_key=key)  # fmt: skip
        for task_id, _ in made.cancels:
            task = self.tasks[task_id]
            if task.state in ("pending", "running"):
                self.tasks[task_id] = dataclasses.replace(task, state="cancelled")
                self.ended.append(self.tasks[task_id])
        ids = {}
        for order in made.tasks:
            self.orders[order.key] = self.orders.get(order.key, 0) + 1
            task_id = f"task{len(self.tasks) + 1}"
            ids[order.placeholder] = task_id
            self.tasks[task_id] = _record(task_id, order.spec.owner, order.spec.type, now)
        for row in made.new_rows:
            assert row.key not in self.rows, "a row made twice"
        for written in made.new_rows + made.changed_rows:
            row = written
            if row.task_id in ids:
                row = dataclasses.replace(row, task_id=ids[row.task_id])
            assert row.task_id is None or not row.task_id.startswith("+")
            self.rows[row.key] = row
        self.items.update(made.items)
        self.workflow = made.workflow


def _record(task_id: str, owner: Owner | None, type_: str, now: datetime) -> Task:
    assert owner is not None
    fields = {f.name: None for f in dataclasses.fields(Task)}
    fields.update(id=task_id, owner_kind=owner.kind, owner_id=owner.id, owner_step=owner.step,
                  state="running", type=type_, created_at=now)  # fmt: skip
    return Task(**fields)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=definitions(), data=st.data())
def test_every_instance_ends_and_each_execution_gets_its_task_once(
    body: dict[str, Any], data: st.DataObject
) -> None:
    definition = parse(body)
    now = T0
    input_ = {"flag": data.draw(st.booleans()),
              "items": data.draw(st.lists(st.integers(), max_size=4))}  # fmt: skip
    wf = Workflow(
        id="wf1", scope=SCOPE, definition="random", version="1", state="running", input=input_,
        output=None, error=None, context={"steps": {}, "visits": {}, "seq": 0}, control_version=0,
        gate_id="gate1", idempotency_key=None, request_hash=None, created_at=now, updated_at=now,
        finished_at=None,
    )  # fmt: skip
    store = Store(wf)
    store.advance(definition, [Start(wf.input)], now)
    for turn in range(400):
        if store.workflow.state in FINISHED:
            break
        running = [t for t in store.tasks.values() if t.state == "running"]
        due = sorted((r for r in store.rows.values() if r.wake_at is not None),
                     key=lambda r: r.wake_at or now)  # fmt: skip
        moves = ["end"] * bool(running) + ["due"] * bool(due)
        if turn < 40 or not moves:  # then only what moves the instance on
            moves += ["signal", "control"] if turn < 40 else ["control"]
        move = data.draw(st.sampled_from(moves))
        events: list[Event] = []
        if move == "end":
            chosen = data.draw(st.lists(st.sampled_from(running), min_size=1, unique=True))
            for task in chosen:
                outcome = data.draw(st.sampled_from(["succeeded", "succeeded", "failed"]))
                result = {"done": data.draw(st.booleans())} if outcome == "succeeded" else None
                ended = dataclasses.replace(task, state=outcome, result=result)
                store.tasks[task.id] = ended
                store.ended.append(ended)
        elif move == "due":
            now = max(now, due[0].wake_at or now)
            events += [Due(r.key) for r in due if (r.wake_at or now) <= now]
        elif move == "signal":
            name = data.draw(st.sampled_from(NAMES))
            signal = Signal(
                id=f"sig{turn:04}", workflow_id="wf1", name=name, payload={"n": turn},
                idempotency_key=None, state="pending", step_key=None, created_at=now,
                delivered_at=None,
            )  # fmt: skip
            events.append(SignalSent(signal))
        elif store.workflow.state == "paused":
            events.append(Resume())
        elif turn < 40:
            events.append(Pause())
        # The result events of ended tasks go with this transaction, in a random order.
        waiting, store.ended = store.ended, []
        order = data.draw(st.permutations(waiting)) if waiting else []
        events = [TaskEnded(t, t.state) for t in order] + events
        store.advance(definition, events, now)
    else:
        raise AssertionError(f"the instance never ended: {store.workflow.state}")
    # The instance ended, its executions with it.
    assert not [r.key for r in store.rows.values() if r.state in ACTIVE]
    assert all(count == 1 for count in store.orders.values()), store.orders

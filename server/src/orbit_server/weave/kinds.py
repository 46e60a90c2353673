"""What each kind of step does as it begins and as its children end (decision 0015's
table), on the pure :class:`~orbit_server.weave.walk.Walk`: choices, parallel branches and
their join, a map's fan-out and fan-in, timers, signal waits, a poll's rounds.

A map starts at most ``max_concurrency`` items at once and at most ``MAP_BATCH`` per
advancement (their rows created ``MAP_BATCH`` at a time); with more room than that its row is
due now and the wait loop goes on in a new transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from orbit_server.weave import engine
from orbit_server.weave.definition import (
    ChoiceStep,
    FailStep,
    MapStep,
    ParallelStep,
    PollStep,
    SignalStep,
    Step,
    SucceedStep,
    TaskStep,
    TimerStep,
)
from orbit_server.weave.engine import Outcome, StepState, broken, failed
from orbit_server.weave.expr import ExpressionFailed
from orbit_server.weave.model import StepExecution
from orbit_server.weave.states import StepEvent
from orbit_server.weave.view import Items, Missing, OldestSignal, Outputs
from orbit_server.weave.walk import Walk

MAP_BATCH = 100  # a map's items started (and rows created) by one advancement, at most
MAX_MAP_ITEMS = 100_000


class Planner(Walk):
    """One plan's walk, every kind of step included."""

    def begin_kind(self, row: StepExecution, step: Step) -> None:
        if isinstance(step, TaskStep):
            self.start_task(row)
        elif isinstance(step, ChoiceStep):
            target = engine.choose(step, self.definition, self.data())
            if target is None:
                error = failed("no_choice", f"no choice of {step.id} held", step=row.key)
                self.complete(row, Outcome.FAILED, error=error)
                return
            row = self.move(row, StepEvent.SUCCEED, output=row.input, ended_at=self.now,
                            followed=True)  # fmt: skip
            self.record(row)
            self.enter(target, parent_key=row.parent_key, branch=row.branch, prev=row.input)
        elif isinstance(step, ParallelStep):
            row = self.move(row, StepEvent.START, progress={"done": {}})
            for branch in step.branches:
                first = self.definition.starts[(step.id, branch.name)]
                self.enter(first, parent_key=row.key, branch=branch.name, prev=row.input)
                if self.rows[row.key].state != StepState.RUNNING or self.finished:
                    break  # a branch failed as it began: the others do not start
        elif isinstance(step, MapStep):
            self._begin_map(row, step)
        elif isinstance(step, TimerStep):
            due = engine.timer_due(step, self.definition, self.data(), self.now)
            self.move(row, StepEvent.WAIT, due_at=due, wake_at=due)
        elif isinstance(step, SignalStep):
            self.begin_signal(row, step)
        elif isinstance(step, PollStep):
            row = self.move(row, StepEvent.START, progress={"round": 0})
            self._start_round(row, step)
        elif isinstance(step, SucceedStep):
            expression = self.definition.expr(step.id, "output")
            output = row.input if expression is None else expression.evaluate(self.data())
            self.complete(row, Outcome.SUCCEEDED, output=output)
        elif isinstance(step, FailStep):
            error = failed(step.error.code, step.error.message, step=row.key)
            self.complete(row, Outcome.FAILED, error=error)

    # -- signals and tasks' outcomes -------------------------------------------------------

    def begin_signal(self, row: StepExecution, step: SignalStep) -> None:
        if step.name not in self.view.signals:
            raise Missing(OldestSignal(step.name))
        signal = self.view.signals[step.name]
        if signal is not None and signal.id in self.delivered:
            # A second wait for the name in this advancement: the next oldest signal is not
            # in the view, so it waits pending, due now (the wait loop begins it afresh).
            self.put(row, due_at=self.now, wake_at=self.now)
            return
        if signal is not None:
            self.delivered.add(signal.id)
            self.plan.deliveries.append((signal.id, row.key))
            self.deliver(row, signal.payload)
            return
        due = None
        if step.timeout_ms is not None:
            due = self.now + timedelta(milliseconds=step.timeout_ms)
        self.move(row, StepEvent.WAIT, due_at=due, wake_at=due)

    def deliver(self, row: StepExecution, payload: Any) -> None:
        """A signal reaches the execution waiting for it."""
        expression = self.definition.expr(row.step, "output")
        try:
            output = (
                payload if expression is None else expression.evaluate(self.data(signal=payload))
            )
        except ExpressionFailed as exc:
            self.complete(row, Outcome.FAILED, error=broken(exc, step=row.key))
            return
        self.complete(row, Outcome.SUCCEEDED, output=output)

    def task_ended(
        self, row: StepExecution, state: str, result: Any, error: Any, task_id: str
    ) -> None:
        """The result event of a step's task: record it and follow."""
        if state == "needs_review":
            self.move(row, StepEvent.REVIEW)
            return
        if state == "succeeded":
            _, data = self.task_of(row)
            try:
                output = engine.mapped_output(self.definition, row.step, result, data)
            except ExpressionFailed as exc:
                self.complete(row, Outcome.FAILED, error=broken(exc, step=row.key))
                return
            self.complete(row, Outcome.SUCCEEDED, output=output)
            return
        ended = dict(error or {})
        ended.setdefault("code", "cancelled" if state == "cancelled" else "task_failed")
        ended.setdefault("message", f"the step's task ended {state}")
        ended["step"] = row.key
        ended["task_id"] = task_id
        self.complete(row, Outcome.FAILED, error=ended)

    # -- parallel -----------------------------------------------------------------------------

    def branch_ended(self, parent: StepExecution, branch: str | None, output: Any) -> None:
        step = self.definition.steps[parent.step]
        assert isinstance(step, ParallelStep) and branch is not None
        assert parent.progress is not None
        done = {**parent.progress.get("done", {}), branch: output}
        parent = self.put(parent, progress={**parent.progress, "done": done})
        if len(done) == len(step.branches):
            self.complete(
                parent, Outcome.SUCCEEDED, output={b.name: done[b.name] for b in step.branches}
            )

    # -- map ----------------------------------------------------------------------------------

    def _begin_map(self, row: StepExecution, step: MapStep) -> None:
        expression = self.definition.expr(step.id, "items")
        assert expression is not None
        items = expression.evaluate(self.data())
        if not isinstance(items, list):
            raise ExpressionFailed("a map's items must give a list")
        if len(items) > MAX_MAP_ITEMS:
            raise ExpressionFailed(f"a map has at most {MAX_MAP_ITEMS} items, not {len(items)}")
        if not items:
            self.complete(row, Outcome.SUCCEEDED, output=[])
            return
        if self.over_limit(len(items)):
            return
        self.plan.items[row.key] = items
        if row.key not in self.new:  # begun after a wait: its row exists, without items
            self.plan.set_items.append(row.key)
        progress = {"total": len(items), "created": 0, "started": 0, "done": 0}
        row = self.move(row, StepEvent.START, progress=progress)
        self.refill(row)

    def refill(self, row: StepExecution) -> None:
        """Start items until ``max_concurrency`` run, at most ``MAP_BATCH`` in this
        advancement; past that the map's row is due now."""
        step = self.definition.steps[row.step]
        assert isinstance(step, MapStep) and row.progress is not None
        progress = dict(row.progress)
        items: list[Any] | None = self.plan.items.get(row.key, self.view.items.get(row.key))

        def room() -> bool:
            started, done = int(progress["started"]), int(progress["done"])
            return started < int(progress["total"]) and started - done < step.max_concurrency

        budget = MAP_BATCH
        while room() and budget > 0:
            budget -= 1
            index = progress["started"]
            if index == progress["created"]:
                if items is None:
                    raise Missing(Items(row.key))
                end = min(progress["total"], index + MAP_BATCH)
                for i in range(index, end):
                    self.create(
                        engine.item_key(row.key, i), step.id, "task", parent_key=row.key,
                        branch=None, input_=items[i], item=i,
                    )  # fmt: skip
                progress["created"] = end
            ahead = range(index, min(int(progress["created"]), index + MAP_BATCH))
            child = self.row(
                engine.item_key(row.key, index),
                with_keys=tuple(engine.item_key(row.key, i) for i in ahead),
            )
            assert child is not None
            progress["started"] = index + 1
            try:
                self.start_task(child)
            except ExpressionFailed as exc:
                error = broken(exc, step=child.key)
                self.move(child, StepEvent.FAIL, error=error, ended_at=self.now, followed=True)
                row = self.put(row, progress=progress)
                self.fail_container(row, error)
                return
        due = self.now if room() else None
        self.put(row, progress=progress, due_at=due, wake_at=due)

    def item_ended(self, parent: StepExecution, child: StepExecution, outcome: Outcome) -> None:
        assert parent.progress is not None
        if outcome is not Outcome.SUCCEEDED:
            error = dict(child.error or {})
            error.setdefault("code", "item_failed")
            error["step"] = child.key
            self.fail_container(parent, error)
            return
        progress = dict(parent.progress)
        progress["done"] += 1
        parent = self.put(parent, progress=progress)
        if progress["done"] == progress["total"]:
            self.complete(parent, Outcome.SUCCEEDED, output=self._item_outputs(parent))
        else:
            self.refill(parent)

    def _item_outputs(self, parent: StepExecution) -> list[Any]:
        """The items' outputs: as stored, with this plan's own changes over them."""
        stored = self.view.outputs.get(parent.key)
        if stored is None:
            if parent.key in self.new:
                stored = []  # none stored yet: all are this plan's
            else:
                raise Missing(Outputs(parent.key))
        outputs = list(stored)
        for key in self.new + sorted(self.dirty):
            mine = self.rows[key]
            if mine.parent_key == parent.key and mine.item is not None:
                while len(outputs) <= mine.item:
                    outputs.append(None)
                outputs[mine.item] = mine.output
        return outputs

    # -- poll ---------------------------------------------------------------------------------

    def _start_round(self, row: StepExecution, step: PollStep) -> None:
        assert row.progress is not None
        number = int(row.progress["round"]) + 1
        progress = {**row.progress, "round": number}
        if row.state == StepState.RUNNING:
            row = self.put(row, progress=progress, due_at=None, wake_at=None)
        else:
            row = self.move(row, StepEvent.START, progress=progress, due_at=None, wake_at=None)
        child = self.create(
            engine.round_key(row.key, number), step.id, "task", parent_key=row.key,
            branch=None, input_=row.input, round_=number,
        )  # fmt: skip
        self.start_task(child)

    def next_round(self, row: StepExecution) -> None:
        step = self.definition.steps[row.step]
        assert isinstance(step, PollStep)
        if self.over_limit(1):
            return
        try:
            self._start_round(row, step)
        except ExpressionFailed as exc:
            # As the original row stood (its round not counted): the round never began.
            self.complete(row, Outcome.FAILED, error=broken(exc, step=row.key))

    def round_ended(self, parent: StepExecution, child: StepExecution, outcome: Outcome) -> None:
        step = self.definition.steps[parent.step]
        assert isinstance(step, PollStep) and child.round is not None
        if outcome is not Outcome.SUCCEEDED:
            error = {**(child.error or {}), "step": child.key}
            self.complete(parent, Outcome.FAILED, error=error)
            return
        until = self.definition.expr(step.id, "until")
        assert until is not None
        try:
            met = until.test(self.data(result=child.output, round=child.round))
        except ExpressionFailed as exc:
            self.complete(parent, Outcome.FAILED, error=broken(exc, step=parent.key))
            return
        decision = engine.after_round(
            step, round_=child.round, met=met, started_at=parent.started_at, now=self.now
        )
        if decision.done:
            self.complete(parent, Outcome.SUCCEEDED, output=child.output)
        elif decision.exhausted:
            error = failed(
                "poll_exhausted", f"{step.id} stopped after {child.round} rounds", step=parent.key
            )
            self.complete(parent, Outcome.EXHAUSTED, output=child.output, error=error)
        else:
            self.move(parent, StepEvent.WAIT, output=child.output, due_at=decision.at,
                      wake_at=decision.at)  # fmt: skip

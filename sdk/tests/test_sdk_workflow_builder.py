"""The workflow builder: the exact definition JSON (format 1, decision 0015) it writes for each
step kind, how steps chain within a list, durations, and the few things it refuses itself."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from orbit_sdk import Parallel, RetryPolicy, TaskStep, When, Workflow

# The example of decision 0015, verbatim.
DECISION_EXAMPLE = msgspec.json.decode(b"""
{
  "name": "order", "version": "3", "format": 1, "description": "optional",
  "start": "charge",
  "output": "steps.ship.output",
  "steps": [
    {"id": "charge", "kind": "task", "queue": "payments", "type": "charge",
     "params": "{'order': input.order_id, 'amount': input.amount}",
     "output": "result.receipt",
     "retry": {"max_attempts": 5}, "timeout_ms": 30000, "side_effect": "unsafe",
     "on_failure": "refund", "next": "route"},
    {"id": "route", "kind": "choice",
     "choices": [{"when": "input.amount > 1000", "next": "approve"}], "default": "ship"},
    {"id": "approve", "kind": "signal", "name": "approved", "timeout_ms": 86400000,
     "on_timeout": "refund", "next": "ship"},
    {"id": "ship", "kind": "parallel", "next": "done",
     "branches": [
       {"name": "label", "steps": [{"id": "print", "kind": "task", "queue": "q", "type": "print"}]},
       {"name": "mail", "steps": [{"id": "mail", "kind": "task", "queue": "q", "type": "mail"}]}]},
    {"id": "done", "kind": "succeed"},
    {"id": "refund", "kind": "fail", "error": {"code": "refunded", "message": "payment refunded"}}
  ]
}""")


def only_step(workflow: Workflow) -> dict[str, Any]:
    [step] = workflow.to_dict()["steps"]
    assert isinstance(step, dict)
    return step


def test_the_decision_example_is_built_exactly() -> None:
    wf = Workflow("order", version="3", description="optional", output="steps.ship.output")
    wf.start = "charge"
    wf.task(
        "charge",
        queue="payments",
        type="charge",
        params="{'order': input.order_id, 'amount': input.amount}",
        output="result.receipt",
        retry=RetryPolicy(max_attempts=5),
        timeout=timedelta(seconds=30),
        side_effect="unsafe",
        on_failure="refund",
    )
    wf.choice("route", [When("input.amount > 1000", "approve")], default="ship")
    wf.signal("approve", name="approved", timeout=timedelta(days=1), on_timeout="refund")
    ship = wf.parallel("ship")
    ship.branch("label").task("print", queue="q", type="print")
    ship.branch("mail").task("mail", queue="q", type="mail")
    wf.succeed("done")
    wf.fail("refund", code="refunded", message="payment refunded")

    definition = wf.to_dict()

    assert definition == DECISION_EXAMPLE
    # Plain JSON data: it encodes, and decodes to the same.
    assert msgspec.json.decode(msgspec.json.encode(definition)) == definition


def test_a_minimal_workflow_sends_only_what_was_given() -> None:
    wf = Workflow("hello", version="1").task("greet", queue="q", type="greet")

    assert wf.to_dict() == {
        "name": "hello",
        "version": "1",
        "format": 1,
        "steps": [{"id": "greet", "kind": "task", "queue": "q", "type": "greet"}],
    }


# --- every step kind -----------------------------------------------------------------------


def test_a_task_step_with_every_field() -> None:
    wf = Workflow("w", version="1")
    wf.task(
        "charge",
        queue="payments",
        type="charge",
        params="{'order': input.order_id}",
        output="result.receipt",
        retry=RetryPolicy(max_attempts=5, initial_backoff_ms=500, max_backoff_ms=10_000),
        timeout=30_000,
        priority=7,
        side_effect="idempotent",
        concurrency_key="input.customer",
        fairness_key="input.tenant",
        labels={"team": "billing"},
        handler_version="v2",
        on_failure="refund",
        next="ship",
        description="take the money",
    )

    assert only_step(wf) == {
        "id": "charge",
        "kind": "task",
        "description": "take the money",
        "queue": "payments",
        "type": "charge",
        "params": "{'order': input.order_id}",
        "output": "result.receipt",
        "retry": {"max_attempts": 5, "initial_backoff_ms": 500, "max_backoff_ms": 10000},
        "timeout_ms": 30000,
        "priority": 7,
        "side_effect": "idempotent",
        "concurrency_key": "input.customer",
        "fairness_key": "input.tenant",
        "labels": {"team": "billing"},
        "handler_version": "v2",
        "on_failure": "refund",
        "next": "ship",
    }


def test_priority_zero_is_sent() -> None:
    wf = Workflow("w", version="1").task("t", queue="q", type="t", priority=0)

    assert only_step(wf)["priority"] == 0


def test_a_choice_step() -> None:
    wf = Workflow("w", version="1")
    wf.choice(
        "route",
        [When("input.amount > 1000", "approve"), When(when="input.express", next="rush")],
        default="ship",
        description="big orders need approval",
    )

    assert only_step(wf) == {
        "id": "route",
        "kind": "choice",
        "description": "big orders need approval",
        "choices": [
            {"when": "input.amount > 1000", "next": "approve"},
            {"when": "input.express", "next": "rush"},
        ],
        "default": "ship",
    }
    assert "default" not in only_step(Workflow("w", version="1").choice("c", [When("true", "x")]))


def test_a_parallel_step_with_branches() -> None:
    wf = Workflow("w", version="1")
    ship = wf.parallel("ship", on_failure="undo", description="both at once")
    label = ship.branch("label")
    label.task("print", queue="q", type="print").task("stick", queue="q", type="stick")
    ship.branch("mail", start="write").task("stamp", queue="q", type="stamp", end=True).task(
        "write", queue="q", type="write", next="stamp"
    )

    assert isinstance(ship, Parallel)
    assert [branch.name for branch in ship.branches] == ["label", "mail"]
    assert only_step(wf) == {
        "id": "ship",
        "kind": "parallel",
        "description": "both at once",
        "branches": [
            {
                "name": "label",
                "steps": [
                    {"id": "print", "kind": "task", "queue": "q", "type": "print", "next": "stick"},
                    {"id": "stick", "kind": "task", "queue": "q", "type": "stick"},
                ],
            },
            {
                "name": "mail",
                "steps": [
                    {"id": "stamp", "kind": "task", "queue": "q", "type": "stamp"},
                    {"id": "write", "kind": "task", "queue": "q", "type": "write", "next": "stamp"},
                ],
                "start": "write",
            },
        ],
        "on_failure": "undo",
    }


def test_branches_may_be_filled_after_the_parallel_step_is_followed() -> None:
    wf = Workflow("w", version="1")
    ship = wf.parallel("ship")
    wf.succeed("done")
    ship.branch("only").task("late", queue="q", type="late")

    steps = wf.to_dict()["steps"]

    assert steps[0]["next"] == "done"
    assert steps[0]["branches"] == [
        {"name": "only", "steps": [{"id": "late", "kind": "task", "queue": "q", "type": "late"}]}
    ]


def test_a_map_step() -> None:
    wf = Workflow("w", version="1")
    wf.map(
        "resize",
        items="input.images",
        max_concurrency=100,
        task=TaskStep(
            queue="images",
            type="resize",
            params="{'url': item, 'position': index}",
            output="result.url",
            retry=RetryPolicy(max_attempts=2),
            timeout=timedelta(minutes=2),
            side_effect="idempotent",
            labels={"kind": "thumb"},
        ),
        on_failure="give_up",
    )

    assert only_step(wf) == {
        "id": "resize",
        "kind": "map",
        "items": "input.images",
        "max_concurrency": 100,
        "task": {
            "queue": "images",
            "type": "resize",
            "params": "{'url': item, 'position': index}",
            "output": "result.url",
            "retry": {"max_attempts": 2},
            "timeout_ms": 120000,
            "side_effect": "idempotent",
            "labels": {"kind": "thumb"},
        },
        "on_failure": "give_up",
    }


def test_a_timer_step_waits_a_duration_or_until_a_time() -> None:
    wf = Workflow("w", version="1")
    wf.timer("cool", duration=timedelta(minutes=5))
    wf.timer("morning", until="input.deliver_at", description="not before")

    assert wf.to_dict()["steps"] == [
        {"id": "cool", "kind": "timer", "duration_ms": 300000, "next": "morning"},
        {
            "id": "morning",
            "kind": "timer",
            "description": "not before",
            "until": "input.deliver_at",
        },
    ]


@pytest.mark.parametrize(
    "timing", [{}, {"duration": 1000, "until": "input.at"}], ids=["neither", "both"]
)
def test_a_timer_needs_exactly_one_timing(timing: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="exactly one of duration and until"):
        Workflow("w", version="1").timer("t", **timing)


def test_a_signal_step() -> None:
    wf = Workflow("w", version="1")
    wf.signal(
        "approve",
        name="approved",
        timeout=timedelta(days=1),
        on_timeout="refund",
        output="signal.by",
    )
    wf.signal("ack", name="ack")

    assert wf.to_dict()["steps"] == [
        {
            "id": "approve",
            "kind": "signal",
            "name": "approved",
            "timeout_ms": 86400000,
            "on_timeout": "refund",
            "output": "signal.by",
            "next": "ack",
        },
        {"id": "ack", "kind": "signal", "name": "ack"},
    ]


def test_a_poll_step() -> None:
    wf = Workflow("w", version="1")
    wf.poll(
        "check",
        task=TaskStep(queue="exports", type="status", params="{'job': input.job, 'round': round}"),
        until="result.done",
        interval=timedelta(seconds=30),
        max_rounds=20,
        max_duration=timedelta(hours=1),
        on_exhausted="give_up",
        on_failure="give_up",
    )

    assert only_step(wf) == {
        "id": "check",
        "kind": "poll",
        "task": {
            "queue": "exports",
            "type": "status",
            "params": "{'job': input.job, 'round': round}",
        },
        "until": "result.done",
        "interval_ms": 30000,
        "max_rounds": 20,
        "max_duration_ms": 3600000,
        "on_exhausted": "give_up",
        "on_failure": "give_up",
    }


def test_succeed_and_fail_steps() -> None:
    wf = Workflow("w", version="1")
    wf.succeed("done", output="{'receipt': steps.charge.output}", description="all good")
    wf.succeed("plain")
    wf.fail("give_up", code="timeout", message="never finished")
    wf.fail("bare", code="nope")

    assert wf.to_dict()["steps"] == [
        {
            "id": "done",
            "kind": "succeed",
            "description": "all good",
            "output": "{'receipt': steps.charge.output}",
        },
        {"id": "plain", "kind": "succeed"},
        {
            "id": "give_up",
            "kind": "fail",
            "error": {"code": "timeout", "message": "never finished"},
        },
        {"id": "bare", "kind": "fail", "error": {"code": "nope"}},
    ]


def test_task_step_alone_gives_its_fields() -> None:
    assert TaskStep(queue="q", type="t").to_dict() == {"queue": "q", "type": "t"}
    # RetryPolicy sends only what differs from Orbit's defaults.
    assert TaskStep(queue="q", type="t", retry=RetryPolicy()).to_dict() == {
        "queue": "q",
        "type": "t",
        "retry": {},
    }


# --- chaining ------------------------------------------------------------------------------


def nexts(workflow: Workflow) -> dict[str, str | None]:
    return {step["id"]: step.get("next") for step in workflow.to_dict()["steps"]}


def test_steps_continue_with_the_one_declared_after_them() -> None:
    wf = Workflow("w", version="1")
    wf.task("a", queue="q", type="a")
    wf.timer("b", duration=1000)
    wf.signal("c", name="go")
    wf.map("d", items="input.xs", task=TaskStep(queue="q", type="d"))
    wf.poll("e", task=TaskStep(queue="q", type="e"), until="result.ok", max_rounds=3)
    wf.parallel("f").branch("x").task("g", queue="q", type="g")
    wf.task("h", queue="q", type="h")

    assert nexts(wf) == {"a": "b", "b": "c", "c": "d", "d": "e", "e": "f", "f": "h", "h": None}


def test_an_explicit_next_or_end_wins_over_the_order() -> None:
    wf = Workflow("w", version="1")
    wf.task("a", queue="q", type="a", next="c")
    wf.task("b", queue="q", type="b", end=True)
    wf.task("c", queue="q", type="c")
    wf.task("d", queue="q", type="d", next="b")

    assert nexts(wf) == {"a": "c", "b": None, "c": "d", "d": "b"}


def test_choice_succeed_and_fail_never_continue_on_their_own() -> None:
    wf = Workflow("w", version="1")
    wf.choice("route", [When("input.x", "ok")], default="bad")
    wf.succeed("ok")
    wf.fail("bad", code="bad")
    wf.task("after", queue="q", type="t")

    assert nexts(wf) == {"route": None, "ok": None, "bad": None, "after": None}


def test_each_list_chains_on_its_own() -> None:
    wf = Workflow("w", version="1")
    wf.task("before", queue="q", type="t")
    fan = wf.parallel("fan")
    one = fan.branch("one")
    one.task("one_a", queue="q", type="t")
    wf.task("after", queue="q", type="t")  # declared between two steps of branch "one"
    one.task("one_b", queue="q", type="t")

    steps = wf.to_dict()["steps"]

    assert [(s["id"], s.get("next")) for s in steps] == [
        ("before", "fan"),
        ("fan", "after"),
        ("after", None),
    ]
    assert [(s["id"], s.get("next")) for s in steps[1]["branches"][0]["steps"]] == [
        ("one_a", "one_b"),
        ("one_b", None),
    ]


def test_next_and_end_together_are_refused() -> None:
    with pytest.raises(ValueError, match="'a' has a next step and end=True"):
        Workflow("w", version="1").task("a", queue="q", type="t", next="b", end=True)


def test_start_is_sent_when_set() -> None:
    wf = Workflow("w", version="1", start="b")
    wf.task("a", queue="q", type="t").task("b", queue="q", type="t", next="a")
    assert wf.to_dict()["start"] == "b"
    wf.start = None
    assert "start" not in wf.to_dict()


def test_to_dict_reflects_the_builder_as_it_is_now() -> None:
    wf = Workflow("w", version="1").task("a", queue="q", type="t")
    first = wf.to_dict()
    wf.task("b", queue="q", type="t")

    assert first["steps"] == [{"id": "a", "kind": "task", "queue": "q", "type": "t"}]
    assert nexts(wf) == {"a": "b", "b": None}
    assert wf.step_ids == ["a", "b"] and len(wf) == 2
    assert repr(wf) == "Workflow('w', version='1', steps=['a', 'b'])"


# --- durations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("duration", "ms"),
    [
        (timedelta(0), 0),
        (timedelta(milliseconds=1), 1),
        (timedelta(seconds=1, milliseconds=250), 1250),
        (timedelta(days=2), 172_800_000),
        (45_000, 45_000),
    ],
)
def test_durations_go_out_in_milliseconds(duration: timedelta | int, ms: int) -> None:
    wf = Workflow("w", version="1")
    wf.task("t", queue="q", type="t", timeout=duration)
    wf.timer("d", duration=duration)
    wf.signal("s", name="s", timeout=duration)
    task = TaskStep(queue="q", type="t", timeout=duration)
    wf.poll("p", task=task, until="true", max_rounds=1, interval=duration, max_duration=duration)

    t, d, s, p = wf.to_dict()["steps"]
    assert (t["timeout_ms"], d["duration_ms"], s["timeout_ms"]) == (ms, ms, ms)
    assert (p["interval_ms"], p["max_duration_ms"], p["task"]["timeout_ms"]) == (ms, ms, ms)


@pytest.mark.parametrize(
    ("duration", "error", "message"),
    [
        (timedelta(microseconds=1500), ValueError, "must be a whole number of milliseconds"),
        (timedelta(seconds=-1), ValueError, "must not be negative"),
        (-1, ValueError, "must not be negative"),
        (1.5, TypeError, "must be a timedelta or an int of milliseconds"),
        (True, TypeError, "must be a timedelta or an int of milliseconds"),
        ("5s", TypeError, "must be a timedelta or an int of milliseconds"),
    ],
)
def test_bad_durations_are_refused(duration: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=f"duration {message}"):
        Workflow("w", version="1").timer("t", duration=duration)
    with pytest.raises(error, match=f"timeout {message}"):
        TaskStep(queue="q", type="t", timeout=duration).to_dict()


# --- ids -----------------------------------------------------------------------------------


def test_a_step_id_used_twice_is_refused() -> None:
    wf = Workflow("w", version="1").task("charge", queue="q", type="t")

    with pytest.raises(ValueError, match="step id 'charge' is used twice"):
        wf.succeed("charge")
    assert wf.step_ids == ["charge"]  # the refused step was not added


def test_step_ids_are_unique_across_branches_too() -> None:
    wf = Workflow("w", version="1").task("a", queue="q", type="t")
    fan = wf.parallel("fan")

    with pytest.raises(ValueError, match="'a' is used twice"):
        fan.branch("one").task("a", queue="q", type="t")
    fan.branch("two").task("b", queue="q", type="t")
    with pytest.raises(ValueError, match="'b' is used twice"):
        wf.fail("b", code="x")
    with pytest.raises(ValueError, match="'fan' is used twice"):
        fan.branch("three").timer("fan", duration=1)


def test_a_branch_name_used_twice_in_one_parallel_step_is_refused() -> None:
    wf = Workflow("w", version="1")
    fan = wf.parallel("fan")
    fan.branch("one")

    with pytest.raises(ValueError, match="branch 'one' is used twice"):
        fan.branch("one")
    wf.parallel("other").branch("one")  # another parallel step may reuse the name

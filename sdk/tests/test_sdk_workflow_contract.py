"""The workflow builder against the definition format's contract
(``contracts/workflow-definition.schema.json``, generated from the server's types): every
object the builder writes, with every option given, has only fields the schema declares for
it, all the fields it requires, and values from its enumerations."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from orbit_sdk import RetryPolicy, TaskStep, When, Workflow

CONTRACT = Path(__file__).resolve().parents[2] / "contracts" / "workflow-definition.schema.json"
DEFS: dict[str, Any] = json.loads(CONTRACT.read_text())["$defs"]
KINDS = {
    d["properties"]["kind"]["enum"][0]: name
    for name, d in DEFS.items()
    if "kind" in d.get("properties", {})
}
# Where a field holds a nested object (or a list of them), the schema definition it follows.
NESTED = {"retry": "RetrySpec", "task": "TaskFields", "choices": "Choice", "error": "ErrorSpec"}


def every_option() -> Workflow:
    """One step of each kind, with every optional field the builder offers."""
    task = TaskStep(
        queue="q", type="t", params="{'n': item}", output="result.n",
        retry=RetryPolicy(max_attempts=5, initial_backoff_ms=10, backoff_multiplier=3.0,
                          max_backoff_ms=100),
        timeout=timedelta(seconds=30), priority=1, side_effect="unsafe",
        concurrency_key="input.k", fairness_key="input.f", labels={"team": "x"},
        handler_version="v2",
    )  # fmt: skip
    wf = Workflow("every", version="1", description="all", output="input", start="first")
    wf.task(
        "first", queue="q", type="t", params="input", output="result", retry=RetryPolicy(),
        timeout=5000, priority=0, side_effect="idempotent", concurrency_key="input.k",
        fairness_key="input.f", labels={"a": "b"}, handler_version="v1", on_failure="failed",
        description="a task",
    )  # fmt: skip
    wf.choice("route", [When("input.x", "fan")], default="fan", description="a choice")
    fan = wf.parallel("fan", on_failure="failed", description="a parallel step")
    fan.branch("left", start="l").task("l", queue="q", type="t")
    fan.branch("right").timer("r", until="input.at", description="a timer")
    wf.map("each", items="input.items", task=task, max_concurrency=5, on_failure="failed",
           description="a map")  # fmt: skip
    wf.timer("nap", duration=timedelta(minutes=1))
    wf.signal("ok", name="approved", timeout=timedelta(hours=1), on_timeout="failed",
              output="signal.by", description="a signal")  # fmt: skip
    wf.poll("check", task=task, until="result.ready", max_rounds=3,
            interval=timedelta(seconds=10), max_duration=timedelta(minutes=1),
            on_exhausted="failed", on_failure="failed", description="a poll")  # fmt: skip
    wf.succeed("done", output="steps.check.output", description="the end")
    wf.fail("failed", code="broke", message="it broke", description="the other end")
    return wf


def check(value: dict[str, Any], name: str, where: str) -> list[str]:
    """Every way ``value`` departs from the schema definition ``name``."""
    declared = DEFS[name]
    problems = [
        f"{where}: {f} is not a field of {name}" for f in set(value) - set(declared["properties"])
    ]
    problems += [
        f"{where}: {name} needs {f}" for f in set(declared.get("required", ())) - set(value)
    ]
    for field, given in value.items():
        spec = declared["properties"].get(field, {})
        allowed = spec.get("enum")
        for option in spec.get("anyOf", ()):
            allowed = allowed or option.get("enum")
        if allowed is not None and given not in allowed:
            problems.append(f"{where}.{field}: {given!r} is not one of {allowed}")
        inner = where + "." + field
        if field in NESTED and isinstance(given, dict):
            problems += check(given, NESTED[field], inner)
        elif field in NESTED and isinstance(given, list):
            for i, item in enumerate(given):
                problems += check(item, NESTED[field], f"{inner}[{i}]")
        elif field == "branches":
            for branch in given:
                problems += check(branch, "Branch", f"{inner}.{branch['name']}")
        elif field == "steps":
            problems += steps(given, where)
    return problems


def steps(items: list[dict[str, Any]], where: str) -> list[str]:
    problems = []
    for step in items:
        kind = KINDS.get(step["kind"])
        if kind is None:
            problems.append(f"{where}: no step kind {step['kind']!r}")
            continue
        problems += check(step, kind, f"{where}.{step['id']}")
    return problems


def test_the_schema_has_every_step_kind_the_builder_writes() -> None:
    written = {step["kind"] for step in every_option().to_dict()["steps"]}
    assert written == set(KINDS)


def test_every_object_the_builder_writes_follows_the_schema() -> None:
    definition = every_option().to_dict()
    assert check(definition, "Body", "workflow") == []


def test_the_check_finds_a_field_the_schema_does_not_declare() -> None:
    definition = every_option().to_dict()
    definition["steps"][0]["retries"] = 3
    definition["steps"][2]["branches"][0]["steps"][0]["side_effect"] = "sometimes"
    del definition["steps"][-1]["error"]["code"]
    assert sorted(check(definition, "Body", "workflow")) == [
        "workflow.failed.error: ErrorSpec needs code",
        "workflow.fan.branches.left.l.side_effect: 'sometimes' is not one of "
        "['idempotent', 'unsafe']",
        "workflow.first: retries is not a field of TaskStep",
    ]

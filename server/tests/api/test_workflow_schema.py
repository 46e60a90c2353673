"""The workflow definition format's JSON Schema is snapshotted in contracts/ (decision 0015);
a drift of the server's types fails until the snapshot is regenerated and reviewed."""

from __future__ import annotations

import json
from pathlib import Path

from orbit_server.weave.definition import parse, schema

SNAPSHOT = Path(__file__).resolve().parents[3] / "contracts" / "workflow-definition.schema.json"
REGENERATE = (
    '.venv/bin/python -c "import json; from orbit_server.weave.definition import schema; '
    'print(json.dumps(schema(), indent=2, sort_keys=True))" '
    "> contracts/workflow-definition.schema.json"
)


def render() -> str:
    """The snapshot's exact text: pretty JSON, sorted keys, one trailing newline."""
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


def test_the_committed_schema_is_generated_from_the_definition_types() -> None:
    assert SNAPSHOT.read_text() == render(), (
        f"the workflow definition format changed: review it, then run `{REGENERATE}`"
    )


def test_every_step_kind_is_in_the_schema_and_the_decision_example_fits_it() -> None:
    defs = schema()["$defs"]
    kinds = {
        d["properties"]["kind"]["enum"][0]: name
        for name, d in defs.items()
        if "kind" in d.get("properties", {})
    }
    assert set(kinds) == {
        "task", "choice", "parallel", "map", "timer", "signal", "poll", "succeed", "fail",
    }  # fmt: skip
    # Decision 0015's example: every field it uses is one the schema declares for its kind,
    # and the server accepts it.
    example = {
        "name": "order", "version": "3", "format": 1, "description": "optional",
        "start": "charge", "output": "steps.ship.output",
        "steps": [
            {"id": "charge", "kind": "task", "queue": "payments", "type": "charge",
             "params": "{'order': input.order_id, 'amount': input.amount}",
             "output": "result.receipt", "retry": {"max_attempts": 5}, "timeout_ms": 30000,
             "side_effect": "unsafe", "on_failure": "refund", "next": "route"},
            {"id": "route", "kind": "choice",
             "choices": [{"when": "input.amount > 1000", "next": "approve"}], "default": "ship"},
            {"id": "approve", "kind": "signal", "name": "approved", "timeout_ms": 86400000,
             "on_timeout": "refund", "next": "ship"},
            {"id": "ship", "kind": "parallel", "next": "done",
             "branches": [
                 {"name": "label",
                  "steps": [{"id": "print", "kind": "task", "queue": "q", "type": "print"}]},
                 {"name": "mail",
                  "steps": [{"id": "mail", "kind": "task", "queue": "q", "type": "mail"}]}]},
            {"id": "done", "kind": "succeed"},
            {"id": "refund", "kind": "fail",
             "error": {"code": "refunded", "message": "payment refunded"}},
        ],
    }  # fmt: skip
    assert set(example) <= set(defs["Body"]["properties"])
    for step in example["steps"]:
        declared = defs[kinds[step["kind"]]]
        assert set(step) <= set(declared["properties"]), step["id"]
        assert set(declared["required"]) <= set(step), step["id"]
    assert parse(example).name == "order"

"""``orbit workflows``: inspect and steer workflow instances over the HTTP API (API.md
"Workflows (Weave)")."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.text import Text

from orbit_server.cli.http_client import segment
from orbit_server.cli.operator import (
    AllOpt,
    Conn,
    CursorOpt,
    JsonOpt,
    KeyOpt,
    LimitOpt,
    ReasonOpt,
    UrlOpt,
    WatchOpt,
    action_command,
    list_command,
    outcome_body,
    parse_json,
    reason_body,
    show_command,
)
from orbit_server.cli.render import Column, details, stack, table

workflows_app = typer.Typer(help="List, inspect, signal and steer workflows (over HTTP).")

WORKFLOW_COLUMNS = [
    Column.of("id", no_wrap=True),
    Column.of("definition"),
    Column.of("version"),
    Column.of("state"),
    Column.of("created", "created_at", no_wrap=True),
    Column.of("updated", "updated_at", no_wrap=True),
    Column.of("error"),
]
WORKFLOW_FIELDS = [
    Column.of("id"),
    Column.of("definition"),
    Column.of("version"),
    Column.of("state"),
    Column.of("control_version"),
    Column.of("input"),
    Column.of("output"),
    Column.of("error"),
    Column.of("created_at"),
    Column.of("updated_at"),
    Column.of("finished_at"),
]
STEP_COLUMNS = [
    Column.of("key", no_wrap=True),
    Column.of("step"),
    Column.of("type"),
    Column.of("state"),
    Column.of("task", "task_id", no_wrap=True),
    Column.of("started", "started_at", no_wrap=True),
    Column.of("ended", "ended_at", no_wrap=True),
    Column("output / error", lambda s: s.get("error") or s.get("output")),
]
WAIT_COLUMNS = [
    Column.of("key"),
    Column.of("kind"),
    Column.of("until"),
    Column.of("signal"),
]
PENDING_SIGNAL_COLUMNS = [Column.of("id"), Column.of("name"), Column.of("sent", "created_at")]
SIGNAL_FIELDS = [Column.of(name) for name in ("id", "name", "state", "step", "created_at")]


def draw_workflow(workflow: dict[str, Any]) -> RenderableType:
    steps = workflow.get("steps") or []
    waits = workflow.get("waits") or []
    signals = workflow.get("pending_signals") or []
    return stack(
        details(workflow, WORKFLOW_FIELDS),
        table(steps, STEP_COLUMNS, title="steps") if steps else None,
        table(waits, WAIT_COLUMNS, title="waiting for") if waits else None,
        table(signals, PENDING_SIGNAL_COLUMNS, title="signals not yet taken") if signals else None,
        review_hint(workflow),
    )


def review_hint(workflow: dict[str, Any]) -> Text | None:
    """For a step that waits for a person: the commands that decide it."""
    waiting = [s for s in workflow.get("steps") or [] if s.get("state") == "needs_review"]
    if not waiting:
        return None
    lines = []
    for step in waiting:
        ref = f"{workflow.get('id')} {step.get('key')}"
        lines += [
            f"step {step.get('key')} needs review; run one of:",
            f"  orbit workflows resolve-step {ref} --outcome succeeded [--output JSON]",
            f"  orbit workflows resolve-step {ref} --outcome failed --error-code CODE",
            f"  orbit workflows retry-step {ref}",
        ]
    return Text("\n".join(lines))


def path_of(workflow_id: str, *rest: str) -> str:
    return "/".join([f"/v1/workflows/{segment(workflow_id)}", *(segment(r) for r in rest)])


IdArg = Annotated[str, typer.Argument(help="The workflow's id")]
StepKeyArg = Annotated[str, typer.Argument(help="The step execution's key (see `steps`)")]


@workflows_app.command("list")
def workflows_list(
    definition: Annotated[
        str | None, typer.Option("--definition", help="Only this definition")
    ] = None,
    state: Annotated[str | None, typer.Option("--state", help="Only this state")] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List workflows, newest first."""
    params = {"definition": definition, "state": state, "limit": limit, "cursor": cursor}
    list_command(
        Conn(url, key), "/v1/workflows", params, WORKFLOW_COLUMNS,
        as_json=as_json, follow_all=follow_all,
    )  # fmt: skip


@workflows_app.command("show")
def workflows_show(
    workflow_id: IdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show one workflow with its steps, waits and signals not yet taken."""
    show_command(
        Conn(url, key), lambda api: api.get(path_of(workflow_id)), draw_workflow,
        as_json=as_json, every_s=every_s,
    )  # fmt: skip


@workflows_app.command("steps")
def workflows_steps(
    workflow_id: IdArg,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """List a workflow's step executions in the order they began; --watch follows them."""
    params = {"limit": limit, "cursor": cursor}
    list_command(
        Conn(url, key), path_of(workflow_id, "steps"), params, STEP_COLUMNS,
        as_json=as_json, follow_all=follow_all, every_s=every_s,
    )  # fmt: skip


@workflows_app.command("signal")
def workflows_signal(
    workflow_id: IdArg,
    name: Annotated[str, typer.Argument(help="The signal's name")],
    payload: Annotated[str | None, typer.Option("--payload", help="JSON payload")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Send it once, however often run")
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a signal; it is kept until a step waits for it."""
    body = {"name": name, "payload": parse_json("--payload", payload)}
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    action_command(
        Conn(url, key), "POST", path_of(workflow_id, "signals"), body, as_json=as_json,
        draw=lambda signal: details(signal, SIGNAL_FIELDS),
    )  # fmt: skip


def steer(conn: Conn, workflow_id: str, verb: str, reason: str | None, as_json: bool) -> None:
    action_command(
        conn, "POST", path_of(workflow_id, verb), reason_body(reason), as_json=as_json,
        draw=draw_workflow,
    )  # fmt: skip


@workflows_app.command("pause")
def workflows_pause(
    workflow_id: IdArg,
    reason: ReasonOpt = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pause a workflow: it starts no new step until resumed."""
    steer(Conn(url, key), workflow_id, "pause", reason, as_json)


@workflows_app.command("resume")
def workflows_resume(
    workflow_id: IdArg,
    reason: ReasonOpt = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume a paused workflow."""
    steer(Conn(url, key), workflow_id, "resume", reason, as_json)


@workflows_app.command("cancel")
def workflows_cancel(
    workflow_id: IdArg,
    reason: ReasonOpt = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a workflow and its step tasks."""
    steer(Conn(url, key), workflow_id, "cancel", reason, as_json)


@workflows_app.command("retry-step")
def workflows_retry_step(
    workflow_id: IdArg,
    step_key: StepKeyArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the failed step that ended the workflow again (operator)."""
    action_command(
        Conn(url, key), "POST", path_of(workflow_id, "steps", step_key, "retry"), {},
        as_json=as_json, draw=draw_workflow,
    )  # fmt: skip


@workflows_app.command("skip-step")
def workflows_skip_step(
    workflow_id: IdArg,
    step_key: StepKeyArg,
    output: Annotated[str | None, typer.Option("--output", help="JSON output of the step")] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """End a step as skipped, with the given output, and go on (operator)."""
    body = {"output": parse_json("--output", output)}
    action_command(
        Conn(url, key), "POST", path_of(workflow_id, "steps", step_key, "skip"), body,
        as_json=as_json, draw=draw_workflow,
    )  # fmt: skip


@workflows_app.command("resolve-step")
def workflows_resolve_step(
    workflow_id: IdArg,
    step_key: StepKeyArg,
    outcome: Annotated[str, typer.Option("--outcome", help="succeeded or failed")],
    output: Annotated[
        str | None, typer.Option("--output", help="JSON output, for succeeded")
    ] = None,
    error_code: Annotated[
        str | None, typer.Option("--error-code", help="Error code, for failed")
    ] = None,
    error_message: Annotated[
        str, typer.Option("--error-message", help="Error message, for failed")
    ] = "",
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Decide a needs_review step's outcome (operator)."""
    body = outcome_body(outcome, "output", output, error_code, error_message)
    action_command(
        Conn(url, key), "POST", path_of(workflow_id, "steps", step_key, "resolve"), body,
        as_json=as_json, draw=draw_workflow,
    )  # fmt: skip

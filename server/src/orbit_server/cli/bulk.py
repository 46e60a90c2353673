"""Bulk operations from the command line: ``orbit tasks bulk``, ``orbit workflows bulk`` and
``orbit bulk list|show|items|cancel`` (HTTP API "Bulk operations").

An operator checks a filter with ``--dry-run`` (the count and a sample, nothing changes),
runs it (the selection is frozen on the server and applied in the background), and follows
it with ``--wait`` or ``orbit bulk show ID --watch``."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.text import Text

from orbit_server.cli.http_client import OrbitHttp, segment
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
    fail,
    list_command,
    parse_json,
    session,
    show_command,
)
from orbit_server.cli.render import Column, details, print_json, show, stack, table

bulk_app = typer.Typer(help="Follow and cancel bulk operations (started by tasks/workflows bulk).")

OPERATION_COLUMNS = [
    Column.of("id", no_wrap=True),
    Column.of("kind"),
    Column.of("action"),
    Column.of("state"),
    Column.of("matched"),
    Column.of("done"),
    Column.of("skipped"),
    Column.of("failed"),
    Column.of("remaining"),
    Column.of("created", "created_at", no_wrap=True),
]

OPERATION_FIELDS = [
    Column.of("id"),
    Column.of("kind"),
    Column.of("action"),
    Column.of("state"),
    Column.of("filter"),
    Column.of("params"),
    Column.of("matched"),
    Column.of("done"),
    Column.of("skipped"),
    Column("skipped because", lambda o: o.get("skipped_reasons") or None),
    Column.of("failed"),
    Column.of("remaining"),
    Column.of("created_by"),
    Column.of("created_at"),
    Column.of("finished_at"),
]

ITEM_COLUMNS = [Column.of("#", "seq"), Column.of("target", "target_id", no_wrap=True),
                Column.of("state"), Column.of("reason")]  # fmt: skip

SAMPLE_TASK_COLUMNS = [
    Column.of("id", no_wrap=True),
    Column.of("queue"),
    Column.of("type"),
    Column.of("state"),
    Column.of("created", "created_at", no_wrap=True),
]

WAIT_EVERY_S = 1.0


def draw_operation(op: dict[str, Any]) -> RenderableType:
    return details(op, OPERATION_FIELDS)


def draw_dry_run(answer: dict[str, Any]) -> RenderableType:
    sample = answer.get("sample") or []
    head = Text(f"{answer.get('matched')} match; nothing was changed (dry run)")
    if sample and isinstance(sample[0], dict):
        return stack(head, table(sample, SAMPLE_TASK_COLUMNS, title="first matches"))
    return stack(head, Text("first matches: " + " ".join(str(s) for s in sample)) if sample
                 else None)  # fmt: skip


def start(
    conn: Conn, path: str, body: dict[str, Any], *, dry_run: bool, wait: bool, as_json: bool
) -> None:
    """Send the operation (or its dry run) and print the answer; with ``wait``, follow it
    until it ends and print where it ended."""
    body = {**body, "dry_run": dry_run}
    with session(conn) as api:
        answer = api.post(path, body)
        if wait and not dry_run:
            answer = follow(api, str(answer["id"]))
    if as_json:
        print_json(answer)
    else:
        show(draw_dry_run(answer) if dry_run else draw_operation(answer))


def follow(api: OrbitHttp, op_id: str) -> Any:
    """Poll an operation until it is no longer running; progress goes to standard error."""
    while True:
        op = api.get(f"/v1/bulk-operations/{segment(op_id)}")
        if op.get("state") != "running":
            return op
        typer.echo(
            f"{op_id}: {op.get('done')} done, {op.get('skipped')} skipped, "
            f"{op.get('failed')} failed, {op.get('remaining')} to go",
            err=True,
        )
        time.sleep(WAIT_EVERY_S)


DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Count what matches and show a sample; change nothing")
]
WaitOpt = Annotated[bool, typer.Option("--wait", help="Follow the operation until it ends")]
Ids = Annotated[list[str] | None, typer.Option("--id", help="A target id (repeatable)")]
Since = Annotated[str | None, typer.Option("--created-after", help="RFC 3339 time")]
Until = Annotated[str | None, typer.Option("--created-before", help="RFC 3339 time")]


def states_of(states: list[str] | None) -> str | list[str] | None:
    if not states:
        return None
    return states[0] if len(states) == 1 else states


def given(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def tasks_bulk(
    action: Annotated[
        str, typer.Argument(help="cancel, retry, resolve, set_priority or move_run_at")
    ],
    queue: Annotated[str | None, typer.Option("--queue")] = None,
    state: Annotated[list[str] | None, typer.Option("--state", help="Repeatable")] = None,
    type_: Annotated[str | None, typer.Option("--type")] = None,
    label: Annotated[str | None, typer.Option("--label", help="key:value")] = None,
    created_after: Since = None,
    created_before: Until = None,
    finished_after: Annotated[str | None, typer.Option("--finished-after")] = None,
    finished_before: Annotated[str | None, typer.Option("--finished-before")] = None,
    error_code: Annotated[
        str | None, typer.Option("--error-code", help="Tasks whose last error has this code")
    ] = None,
    ids: Ids = None,
    reason: ReasonOpt = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help="resolve: succeeded or failed")
    ] = None,
    result: Annotated[str | None, typer.Option("--result", help="resolve: JSON")] = None,
    error: Annotated[
        str | None,
        typer.Option("--error", help='resolve failed: JSON, e.g. {"code": "x", "message": "y"}'),
    ] = None,
    priority: Annotated[int | None, typer.Option("--priority", help="set_priority")] = None,
    run_at: Annotated[str | None, typer.Option("--run-at", help="move_run_at: RFC 3339")] = None,
    dry_run: DryRunOpt = False,
    wait: WaitOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply one action to every task the filter matches (frozen when it starts)."""
    filter_ = given(
        queue=queue, state=states_of(state), type=type_, label=label,
        created_after=created_after, created_before=created_before,
        finished_after=finished_after, finished_before=finished_before,
        error_code=error_code, ids=ids or None,
    )  # fmt: skip
    if not filter_:
        raise fail("give at least one filter option (--queue, --state, --type, --label, …)")
    params = given(
        reason=reason, outcome=outcome, result=parse_json("--result", result),
        error=parse_json("--error", error), priority=priority, run_at=run_at,
    )  # fmt: skip
    body = {"action": action, "filter": filter_, "params": params}
    start(Conn(url, key), "/v1/tasks:bulk", body, dry_run=dry_run, wait=wait, as_json=as_json)


def workflows_bulk(
    action: Annotated[str, typer.Argument(help="cancel, pause, resume or retry_step")],
    definition: Annotated[str | None, typer.Option("--definition")] = None,
    state: Annotated[list[str] | None, typer.Option("--state", help="Repeatable")] = None,
    created_after: Since = None,
    created_before: Until = None,
    ids: Ids = None,
    reason: ReasonOpt = None,
    step: Annotated[
        str | None, typer.Option("--step", help="retry_step: the failed step's key")
    ] = None,
    dry_run: DryRunOpt = False,
    wait: WaitOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply one control action to every workflow the filter matches (frozen when it
    starts)."""
    filter_ = given(
        definition=definition, state=states_of(state), created_after=created_after,
        created_before=created_before, ids=ids or None,
    )  # fmt: skip
    if not filter_:
        raise fail("give at least one filter option (--definition, --state, --id, …)")
    body = {"action": action, "filter": filter_, "params": given(reason=reason, step=step)}
    start(Conn(url, key), "/v1/workflows:bulk", body, dry_run=dry_run, wait=wait, as_json=as_json)


OpArg = Annotated[str, typer.Argument(help="The operation's id")]


@bulk_app.command("list")
def bulk_list(
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List bulk operations, newest first."""
    list_command(
        Conn(url, key), "/v1/bulk-operations", {"limit": limit, "cursor": cursor},
        OPERATION_COLUMNS, as_json=as_json, follow_all=follow_all,
    )  # fmt: skip


@bulk_app.command("show")
def bulk_show(
    op_id: OpArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show an operation's progress; with --watch, redraw it until Ctrl-C."""
    show_command(
        Conn(url, key), lambda api: api.get(f"/v1/bulk-operations/{segment(op_id)}"),
        draw_operation, as_json=as_json, every_s=every_s,
    )  # fmt: skip


@bulk_app.command("items")
def bulk_items(
    op_id: OpArg,
    state: Annotated[
        str | None, typer.Option("--state", help="Only items done, skipped, failed or pending")
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the operation did to each target, in selection order."""
    keep = None if state is None else (lambda item: item.get("state") == state)
    list_command(
        Conn(url, key), f"/v1/bulk-operations/{segment(op_id)}/items",
        {"limit": limit, "cursor": cursor}, ITEM_COLUMNS, as_json=as_json,
        follow_all=follow_all, keep=keep,
    )  # fmt: skip


@bulk_app.command("cancel")
def bulk_cancel(
    op_id: OpArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop a running operation after its current batch."""
    path = f"/v1/bulk-operations/{segment(op_id)}/cancel"
    action_command(Conn(url, key), "POST", path, None, as_json=as_json, draw=draw_operation)

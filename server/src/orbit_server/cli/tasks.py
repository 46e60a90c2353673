"""``orbit tasks``: list, inspect and recover tasks over the HTTP API (API.md "Tasks")."""

from __future__ import annotations

from collections.abc import Callable
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
    Listing,
    UrlOpt,
    WatchOpt,
    action_command,
    fail,
    list_command,
    outcome_body,
    reason_body,
    show_command,
)
from orbit_server.cli.render import Column, cell, details, stack, table

tasks_app = typer.Typer(help="List, inspect, cancel, retry and resolve tasks (over HTTP).")

NEEDS_REVIEW = "needs_review"


def attempts_of(task: dict[str, Any]) -> str:
    return f"{task.get('attempts', 0)}/{task.get('max_attempts', '?')}"


TASK_COLUMNS = [
    Column.of("id", no_wrap=True),
    Column.of("queue"),
    Column.of("type"),
    Column.of("state"),
    Column("attempts", attempts_of),
    Column.of("created", "created_at", no_wrap=True),
    Column.of("error"),
]
TASK_FIELDS = [
    Column.of("id"),
    Column.of("queue"),
    Column.of("type"),
    Column.of("state"),
    Column("attempts", attempts_of),
    Column.of("side_effect"),
    Column.of("priority"),
    Column.of("run_at"),
    Column.of("cancel_requested"),
    Column.of("cancel_reason"),
    Column.of("idempotency_key"),
    Column.of("concurrency_key"),
    Column.of("fairness_key"),
    Column.of("labels"),
    Column.of("owner"),
    Column.of("params"),
    Column.of("result"),
    Column.of("error"),
    Column("unserved", lambda t: unserved_of(t.get("unserved"))),
    Column.of("created_at"),
    Column.of("updated_at"),
    Column.of("finished_at"),
]


def unserved_of(unserved: dict[str, Any] | None) -> str | None:
    """Why no connected worker can take a pending task."""
    return None if not unserved else f"{unserved.get('reason')}: {unserved.get('message')}"


ATTEMPT_COLUMNS = [
    Column.of("#", "number"),
    Column.of("state"),
    Column.of("cause"),
    Column.of("worker", "worker_id"),
    Column.of("node"),
    Column.of("leased", "leased_at", no_wrap=True),
    Column.of("started", "started_at", no_wrap=True),
    Column.of("ended", "ended_at", no_wrap=True),
    Column.of("error"),
]


def review_commands(task_id: str) -> str:
    """What an operator runs for a needs_review task, one command a line."""
    return "\n".join(
        [
            f"orbit tasks resolve {task_id} --outcome succeeded [--result JSON]",
            f"orbit tasks resolve {task_id} --outcome failed --error-code CODE",
            f"orbit tasks retry {task_id}",
        ]
    )


def review_need(task: dict[str, Any]) -> str:
    """Why the task waits for a person: its last error, else that its outcome is unknown."""
    error = task.get("error")
    return cell(error) if error else "outcome_unknown: the worker did not report a result"


REVIEW_COLUMNS = [
    Column.of("id", no_wrap=True),
    Column("task", lambda t: f"{t.get('queue')} / {t.get('type')}"),
    Column("attempts", attempts_of),
    Column.of("since", "updated_at", no_wrap=True),
    Column("needs", review_need),
    Column("to decide, run one of", lambda t: review_commands(str(t.get("id"))), no_wrap=True),
]


def draw_review_inbox(found: Listing) -> RenderableType:
    if not found.items:
        return Text("no task needs review")
    return table(found.items, REVIEW_COLUMNS, title="tasks that need review")


def draw_task(task: dict[str, Any]) -> RenderableType:
    hint = None
    if task.get("state") == NEEDS_REVIEW:
        hint = Text(
            f"needs review: {review_need(task)}\nto decide, run one of:\n"
            + review_commands(str(task.get("id")))
        )
    return stack(details(task, TASK_FIELDS), hint)


def label_pairs(labels: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for label in labels:
        name, sep, value = label.partition(":")
        if not sep or not name:
            raise fail(f"--label reads key:value, not {label!r}")
        pairs.append((name, value))
    return pairs


@tasks_app.command("list")
def tasks_list(
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue")] = None,
    state: Annotated[
        str | None, typer.Option("--state", help="Only this state; needs_review is the inbox")
    ] = None,
    type_: Annotated[str | None, typer.Option("--type", help="Only this task type")] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="key:value; repeatable (all must match)")
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List tasks, newest first. `--state needs_review` is the review inbox."""
    pairs = label_pairs(label or [])
    # The API filters by one label; the others are checked here, on the page it answers.
    params = {
        "queue": queue, "state": state, "type": type_, "limit": limit, "cursor": cursor,
        "label": f"{pairs[0][0]}:{pairs[0][1]}" if pairs else None,
    }  # fmt: skip

    def keep(task: dict[str, Any]) -> bool:
        labels = task.get("labels") or {}
        return all(labels.get(name) == value for name, value in pairs[1:])

    list_command(
        Conn(url, key), "/v1/tasks", params, TASK_COLUMNS, as_json=as_json,
        follow_all=follow_all, keep=keep if len(pairs) > 1 else None,
        draw=draw_review_inbox if state == NEEDS_REVIEW else None,
    )  # fmt: skip


TaskIdArg = Annotated[str, typer.Argument(help="The task's id")]


def get_task(task_id: str) -> Callable[[OrbitHttp], Any]:
    return lambda api: api.get(f"/v1/tasks/{segment(task_id)}")


@tasks_app.command("show")
def tasks_show(
    task_id: TaskIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show one task."""
    show_command(Conn(url, key), get_task(task_id), draw_task, as_json=as_json, every_s=every_s)


@tasks_app.command("attempts")
def tasks_attempts(
    task_id: TaskIdArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """List a task's attempts: who ran it, when, and how each ended."""

    def fetch(api: OrbitHttp) -> Any:
        return api.get(f"/v1/tasks/{segment(task_id)}/attempts")

    def draw(answer: dict[str, Any]) -> RenderableType:
        return table(answer.get("items", []), ATTEMPT_COLUMNS)

    show_command(Conn(url, key), fetch, draw, as_json=as_json, every_s=every_s)


@tasks_app.command("cancel")
def tasks_cancel(
    task_id: TaskIdArg,
    reason: Annotated[str | None, typer.Option("--reason", help="Why, kept on the task")] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a task: pending work at once, running work when its worker stops."""
    path = f"/v1/tasks/{segment(task_id)}/cancel"
    action_command(
        Conn(url, key), "POST", path, reason_body(reason), as_json=as_json, draw=draw_task
    )


@tasks_app.command("retry")
def tasks_retry(
    task_id: TaskIdArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Give a failed, cancelled or needs_review task a new attempt (operator)."""
    path = f"/v1/tasks/{segment(task_id)}/retry"
    action_command(Conn(url, key), "POST", path, None, as_json=as_json, draw=draw_task)


@tasks_app.command("resolve")
def tasks_resolve(
    task_id: TaskIdArg,
    outcome: Annotated[
        str, typer.Option("--outcome", help="succeeded (it happened) or failed (it did not)")
    ],
    result: Annotated[
        str | None, typer.Option("--result", help="JSON result, for succeeded")
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
    """Decide a needs_review task's outcome (operator)."""
    body = outcome_body(outcome, "result", result, error_code, error_message)
    path = f"/v1/tasks/{segment(task_id)}/resolve"
    action_command(Conn(url, key), "POST", path, body, as_json=as_json, draw=draw_task)

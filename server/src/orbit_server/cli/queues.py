"""``orbit queues``: counts and settings of queues over the HTTP API (API.md "Queues")."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import RenderableType

from orbit_server.cli.http_client import segment
from orbit_server.cli.operator import (
    AllOpt,
    Conn,
    CursorOpt,
    JsonOpt,
    KeyOpt,
    LimitOpt,
    UrlOpt,
    WatchOpt,
    action_command,
    fail,
    list_command,
    show_command,
)
from orbit_server.cli.render import Column, details, stack, table

queues_app = typer.Typer(help="Show queues; pause, resume and change their limits (over HTTP).")

# The task states in the order work moves through them.
STATES = ("scheduled", "pending", "leased", "running", "needs_review", "succeeded", "failed",
          "cancelled")  # fmt: skip


def count(state: str) -> Column:
    return Column(state, lambda q: (q.get("counts") or {}).get(state, 0))


def age(queue: dict[str, Any]) -> str:
    return duration(queue.get("oldest_pending_age_ms"))


def duration(ms: int | None) -> str:
    if ms is None:
        return ""
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def unserved(queue: dict[str, Any]) -> int:
    """Claimable tasks that no connected worker can take."""
    return sum(group.get("pending", 0) for group in queue.get("unserved") or [])


def limit_of(field: str) -> Column:
    return Column(field.replace("_", " "), lambda q: q.get(field) or "none")


QUEUE_COLUMNS = [
    Column.of("name", no_wrap=True),
    Column.of("paused"),
    Column.of("workers"),
    count("pending"),
    count("scheduled"),
    count("running"),
    count("leased"),
    count("needs_review"),
    count("failed"),
    Column("unserved", unserved),
    Column("oldest pending", age),
    limit_of("concurrency_limit"),
    Column.of("key concurrency", "key_concurrency"),
    limit_of("max_pending"),
]


UNSERVED_COLUMNS = [
    Column.of("type"),
    Column.of("version"),
    Column.of("pending"),
    Column("oldest", lambda g: duration(g.get("oldest_age_ms"))),
    Column.of("why", "reason"),
]


def draw_queue(queue: dict[str, Any]) -> RenderableType:
    fields = [
        Column.of("name"),
        Column.of("paused"),
        Column.of("workers"),
        Column("oldest pending", age),
        limit_of("concurrency_limit"),
        Column.of("key concurrency", "key_concurrency"),
        limit_of("max_pending"),
    ]
    counts = queue.get("counts") or {}
    states = [s for s in STATES if s in counts] + sorted(set(counts) - set(STATES))
    by_state = table([counts], [Column.of(state) for state in states])
    groups = queue.get("unserved") or []
    return stack(
        details(queue, fields),
        by_state,
        table(groups, UNSERVED_COLUMNS, title="waiting for a worker that can take them")
        if groups
        else None,
    )


NameArg = Annotated[str, typer.Argument(help="The queue's name")]


@queues_app.command("list")
def queues_list(
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """List queues with their counts by state, workers and limits."""
    params = {"limit": limit, "cursor": cursor}
    list_command(
        Conn(url, key), "/v1/queues", params, QUEUE_COLUMNS, as_json=as_json,
        follow_all=follow_all, every_s=every_s,
    )  # fmt: skip


@queues_app.command("show")
def queues_show(
    name: NameArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show one queue; with --watch, redraw it until Ctrl-C."""
    show_command(
        Conn(url, key), lambda api: api.get(f"/v1/queues/{segment(name)}"), draw_queue,
        as_json=as_json, every_s=every_s,
    )  # fmt: skip


def update(conn: Conn, name: str, body: dict[str, Any], as_json: bool) -> None:
    path = f"/v1/queues/{segment(name)}"
    action_command(conn, "PUT", path, body, as_json=as_json, draw=draw_queue)


@queues_app.command("pause")
def queues_pause(
    name: NameArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop handing out the queue's tasks; submissions are still accepted."""
    update(Conn(url, key), name, {"paused": True}, as_json)


@queues_app.command("resume")
def queues_resume(
    name: NameArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Hand out the queue's tasks again."""
    update(Conn(url, key), name, {"paused": False}, as_json)


def limit_value(option: str, text: str | None) -> int | None:
    """A limit from the command line: a positive number, or ``none`` to remove it."""
    if text is None or text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise fail(f"{option} takes a positive number or 'none', not {text!r}")
    return value


@queues_app.command("set")
def queues_set(
    name: NameArg,
    concurrency_limit: Annotated[
        str | None,
        typer.Option("--concurrency-limit", help="Tasks running at once, or 'none'"),
    ] = None,
    key_concurrency: Annotated[
        int | None,
        typer.Option("--key-concurrency", min=1, help="Running at once per concurrency_key"),
    ] = None,
    max_pending: Annotated[
        str | None,
        typer.Option(
            "--max-pending", help="Waiting tasks before submits get queue_full, or 'none'"
        ),
    ] = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a queue's limits; the options left out keep their value."""
    body: dict[str, Any] = {}
    if concurrency_limit is not None:
        body["concurrency_limit"] = limit_value("--concurrency-limit", concurrency_limit)
    if key_concurrency is not None:
        body["key_concurrency"] = key_concurrency
    if max_pending is not None:
        body["max_pending"] = limit_value("--max-pending", max_pending)
    if not body:
        raise fail("give at least one of --concurrency-limit, --key-concurrency, --max-pending")
    update(Conn(url, key), name, body, as_json)

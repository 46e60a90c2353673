"""``orbit workers``: the worker sessions of every node, over the HTTP API."""

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
    list_command,
    show_command,
)
from orbit_server.cli.render import Column, details, stack, table

workers_app = typer.Typer(help="Show connected workers across nodes and what they hold.")


def handlers_of(worker: dict[str, Any]) -> str:
    """``queue/type`` per handler, with its versions when it names some."""
    parts = []
    for h in worker.get("handlers") or []:
        versions = h.get("versions") or []
        suffix = f"@{','.join(versions)}" if versions else ""
        parts.append(f"{h.get('queue')}/{h.get('type')}{suffix}")
    return " ".join(parts)


def status_of(worker: dict[str, Any]) -> str:
    reason = worker.get("end_reason")
    return f"{worker.get('status')} ({reason})" if reason else str(worker.get("status"))


WORKER_COLUMNS = [
    Column.of("session", "session_id", no_wrap=True),
    Column.of("worker", "worker_id"),
    Column.of("node"),
    Column("status", status_of),
    Column("held", lambda w: f"{w.get('held', 0)}/{w.get('capacity', 0)}"),
    Column.of("last heartbeat", "last_heartbeat_at", no_wrap=True),
    Column("handlers", handlers_of),
]

WORKER_FIELDS = [
    Column.of("session_id"),
    Column.of("worker_id"),
    Column.of("node"),
    Column("status", status_of),
    Column.of("sdk"),
    Column.of("protocol"),
    Column.of("capacity"),
    Column.of("held"),
    Column.of("connected_at"),
    Column.of("last_heartbeat_at"),
    Column.of("ended_at"),
    Column("handlers", handlers_of),
]

HELD_COLUMNS = [
    Column.of("task", "task_id", no_wrap=True),
    Column.of("queue"),
    Column.of("type"),
    Column.of("state"),
    Column.of("attempt"),
    Column.of("started", "started_at", no_wrap=True),
    Column.of("lease until", "lease_expires_at", no_wrap=True),
]


def draw_worker(worker: dict[str, Any]) -> RenderableType:
    held = worker.get("attempts") or []
    return stack(
        details(worker, WORKER_FIELDS),
        table(held, HELD_COLUMNS, title="attempts it holds") if held else None,
    )


@workers_app.command("list")
def workers_list(
    queue: Annotated[str | None, typer.Option("--queue", help="Only workers serving it")] = None,
    ended_within_ms: Annotated[
        int | None,
        typer.Option(
            "--ended-within-ms",
            min=0,
            help="Also ended sessions, this recent (server default: one hour; 0: none)",
        ),
    ] = None,
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """List worker sessions on every node, newest first, with what each holds."""
    params = {"queue": queue, "ended_within_ms": ended_within_ms, "limit": limit,
              "cursor": cursor}  # fmt: skip
    list_command(
        Conn(url, key), "/v1/workers", params, WORKER_COLUMNS, as_json=as_json,
        follow_all=follow_all, every_s=every_s,
    )  # fmt: skip


@workers_app.command("show")
def workers_show(
    session_id: Annotated[str, typer.Argument(help="The session's id (from workers list)")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show one worker session and the attempts it holds."""
    show_command(
        Conn(url, key), lambda api: api.get(f"/v1/workers/{segment(session_id)}"), draw_worker,
        as_json=as_json, every_s=every_s,
    )  # fmt: skip

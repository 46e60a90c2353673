"""``orbit schedules``: inspect, pause, fire and backfill schedules over the HTTP API (API.md
"Schedules")."""

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
    ReasonOpt,
    UrlOpt,
    WatchOpt,
    action_command,
    list_command,
    reason_body,
    show_command,
)
from orbit_server.cli.render import Column, details, stack, table

schedules_app = typer.Typer(help="List, pause, resume, trigger and backfill schedules (over HTTP).")


def timing(schedule: dict[str, Any]) -> str:
    if schedule.get("cron"):
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')})"
    if schedule.get("interval_ms") is not None:
        return f"every {schedule['interval_ms'] / 1000:g}s"
    return ""


def task_of(schedule: dict[str, Any]) -> str:
    task = schedule.get("task") or {}
    return f"{task.get('queue')} / {task.get('type')}"


SCHEDULE_COLUMNS = [
    Column.of("name", no_wrap=True),
    Column("timing", timing),
    Column("task", task_of),
    Column.of("paused"),
    Column.of("next fire", "next_fire_at", no_wrap=True),
    Column.of("last fire", "last_fire_at", no_wrap=True),
    Column.of("last task", "last_task_id", no_wrap=True),
    Column.of("failure"),
]
SCHEDULE_FIELDS = [
    Column.of("name"),
    Column.of("id"),
    Column.of("version"),
    Column("timing", timing),
    Column.of("catchup"),
    Column.of("catchup_max"),
    Column.of("overlap"),
    Column.of("start_at"),
    Column.of("end_at"),
    Column.of("paused"),
    Column.of("paused_reason"),
    Column.of("next_fire_at"),
    Column.of("last_fire_at"),
    Column.of("last_task_id"),
    Column.of("queued_fire_at"),
    Column.of("failure"),
    Column.of("task"),
    Column.of("created_at"),
    Column.of("updated_at"),
]
FIRE_COLUMNS = [
    Column.of("fire time", "fire_time", no_wrap=True),
    Column.of("task", "task_id", no_wrap=True),
    Column.of("outcome"),
    Column.of("cause"),
    Column.of("recorded", "recorded_at", no_wrap=True),
]
BACKFILL_FIELDS = [
    Column.of(name)
    for name in [
        "id",
        "schedule",
        "from",
        "to",
        "state",
        "fired",
        "existing",
        "created_at",
        "finished_at",
        "failure",
    ]
]


def draw_schedule(schedule: dict[str, Any]) -> RenderableType:
    recent = schedule.get("recent") or []
    return stack(
        details(schedule, SCHEDULE_FIELDS),
        table(recent, FIRE_COLUMNS, title="recent fires") if recent else None,
    )


NameArg = Annotated[str, typer.Argument(help="The schedule's name")]


def path_of(name: str, verb: str | None = None) -> str:
    base = f"/v1/schedules/{segment(name)}"
    return base if verb is None else f"{base}/{verb}"


@schedules_app.command("list")
def schedules_list(
    limit: LimitOpt = None,
    cursor: CursorOpt = None,
    follow_all: AllOpt = False,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List schedules by name, with their next and last fire."""
    params = {"limit": limit, "cursor": cursor}
    list_command(
        Conn(url, key), "/v1/schedules", params, SCHEDULE_COLUMNS,
        as_json=as_json, follow_all=follow_all,
    )  # fmt: skip


@schedules_app.command("show")
def schedules_show(
    name: NameArg,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
    every_s: WatchOpt = None,
) -> None:
    """Show one schedule and its recent fires."""
    show_command(
        Conn(url, key), lambda api: api.get(path_of(name)), draw_schedule,
        as_json=as_json, every_s=every_s,
    )  # fmt: skip


@schedules_app.command("pause")
def schedules_pause(
    name: NameArg,
    reason: ReasonOpt = None,
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop firing the schedule until resumed."""
    action_command(
        Conn(url, key), "POST", path_of(name, "pause"), reason_body(reason),
        as_json=as_json, draw=draw_schedule,
    )  # fmt: skip


@schedules_app.command("resume")
def schedules_resume(
    name: NameArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Fire the schedule again (missed fires follow its catchup policy)."""
    action_command(
        Conn(url, key), "POST", path_of(name, "resume"), None, as_json=as_json,
        draw=draw_schedule,
    )  # fmt: skip


@schedules_app.command("trigger")
def schedules_trigger(
    name: NameArg, url: UrlOpt = None, key: KeyOpt = None, as_json: JsonOpt = False
) -> None:
    """Fire the schedule now, once; prints the fire and its task."""
    action_command(
        Conn(url, key), "POST", path_of(name, "trigger"), None, as_json=as_json,
        draw=lambda fire: details(fire, FIRE_COLUMNS),
    )  # fmt: skip


@schedules_app.command("backfill")
def schedules_backfill(
    name: NameArg,
    from_: Annotated[str, typer.Option("--from", help="Start of the range, RFC 3339")],
    to: Annotated[str, typer.Option("--to", help="End of the range, RFC 3339")],
    url: UrlOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fire the slots of a past time range that have no task yet."""
    action_command(
        Conn(url, key), "POST", path_of(name, "backfill"), {"from": from_, "to": to},
        as_json=as_json, draw=lambda backfill: details(backfill, BACKFILL_FIELDS),
    )  # fmt: skip

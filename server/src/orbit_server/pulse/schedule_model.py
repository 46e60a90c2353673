"""Pulse's schedule types: a schedule, an entry of its fire ledger, a backfill. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from orbit_server.scope import Scope


@dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    scope: Scope
    name: str
    version: int
    cron: str | None
    timezone: str
    interval_ms: int | None
    task: dict[str, Any]  # the task template, as the API took it
    catchup: str
    catchup_max: int
    overlap: str
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    paused_reason: str | None
    next_fire_at: datetime | None
    due_at: datetime | None
    last_fire_at: datetime | None
    last_task_id: str | None
    queued_fire_at: datetime | None
    created_at: datetime
    updated_at: datetime
    failure: str | None = None  # why the scheduler could not fire it at its last try


@dataclass(frozen=True, slots=True)
class FireEntry:
    schedule_id: str
    fire_at: datetime
    planned: bool  # a slot of the timing (False: trigger now)
    scope: Scope
    schedule: str
    outcome: str
    cause: str
    task_id: str | None
    recorded_at: datetime


class BackfillState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Backfill:
    id: str
    schedule_id: str
    scope: Scope
    schedule: str
    from_at: datetime
    to_at: datetime
    cursor_at: datetime | None
    state: BackfillState
    fired: int
    existing: int
    created_at: datetime
    finished_at: datetime | None
    failure: str | None = None  # why it failed

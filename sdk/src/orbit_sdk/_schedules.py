"""The schedule methods of ``Client`` and ``AsyncClient``.

As in ``_tasks``, both mixins only turn arguments into an
:class:`~orbit_sdk._models.Operation` (built in ``_schedule_models``) and hand it to the
client's ``_run``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime

from msgspec import UNSET, UnsetType

from orbit_sdk._calls import AsyncCalls, Calls
from orbit_sdk._models import Operation
from orbit_sdk._schedule_models import (
    Backfill,
    Catchup,
    FirePage,
    Overlap,
    Schedule,
    ScheduleFire,
    SchedulePage,
    TaskTemplate,
    backfill_get,
    backfill_list,
    fire_list,
    schedule_backfill,
    schedule_create,
    schedule_delete,
    schedule_get,
    schedule_list,
    schedule_pause,
    schedule_resume,
    schedule_trigger,
    schedule_update,
)

__all__ = ["AsyncScheduleCalls", "ScheduleCalls"]


class ScheduleCalls(Calls):
    """Schedules for the synchronous :class:`~orbit_sdk.Client`."""

    def create_schedule(
        self,
        name: str,
        *,
        task: TaskTemplate,
        cron: str | None = None,
        timezone: str | None = None,
        interval_ms: int | None = None,
        catchup: Catchup | None = None,
        catchup_max: int | None = None,
        overlap: Overlap | None = None,
        start_at: datetime | str | None = None,
        end_at: datetime | str | None = None,
        paused: bool = False,
    ) -> Schedule:
        """``POST /v1/schedules`` (operator): a schedule that submits ``task`` at each slot.

        Give ``cron`` (5 fields, or 6 with seconds first; read in ``timezone``, an IANA name,
        UTC by default) or ``interval_ms`` (at least 1000), not both. ``task`` is a
        :class:`~orbit_sdk.ScheduleTask`, a :class:`~orbit_sdk.TaskRequest` without
        ``idempotency_key``, ``run_at`` or ``delay_ms``, or a mapping shaped like the HTTP body.
        Only the arguments given are sent. ``start_at`` and ``end_at`` are timezone-aware
        ``datetime``s or RFC 3339 strings. Creating it again with the same definition answers
        the schedule there is; a different definition under the same name raises
        :class:`~orbit_sdk.ConflictError` (``already_exists``).
        """
        return self._run(
            schedule_create(
                name,
                task,
                cron=cron,
                timezone=timezone,
                interval_ms=interval_ms,
                catchup=catchup,
                catchup_max=catchup_max,
                overlap=overlap,
                start_at=start_at,
                end_at=end_at,
                paused=paused,
            )
        )

    def get_schedule(self, name: str, *, preview: int | None = None) -> Schedule:
        """``GET /v1/schedules/{name}``; ``preview`` (1 to 100) also asks for that many next
        fire times, in :attr:`Schedule.preview <orbit_sdk.Schedule.preview>`. Raises
        :class:`~orbit_sdk.NotFoundError` for no such schedule."""
        return self._run(schedule_get(name, preview=preview))

    def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> SchedulePage:
        """``GET /v1/schedules``: one page, by name."""
        return self._run(schedule_list(limit=limit, cursor=cursor))

    def iter_schedules(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> Iterator[Schedule]:
        """Every schedule, following ``next_cursor`` page by page; ``limit`` is the page size."""

        def page_at(at: str | None) -> Operation[SchedulePage]:
            return schedule_list(limit=limit, cursor=at)

        for page in self._pages(page_at, cursor):
            yield from page.items

    def update_schedule(
        self,
        name: str,
        *,
        version: int | None = None,
        task: TaskTemplate | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        interval_ms: int | None = None,
        catchup: Catchup | None = None,
        catchup_max: int | None = None,
        overlap: Overlap | None = None,
        start_at: datetime | str | UnsetType | None = UNSET,
        end_at: datetime | str | UnsetType | None = UNSET,
    ) -> Schedule:
        """``PATCH /v1/schedules/{name}`` (operator): change the fields given.

        ``cron`` replaces an ``interval_ms`` and the reverse. Left out (``msgspec.UNSET``),
        ``start_at`` and ``end_at`` keep their value; ``None`` removes the bound. The other
        fields cannot be cleared, so ``None`` leaves them as they are. With ``version``, the
        change applies only to the schedule at that version, else
        :class:`~orbit_sdk.StateConflictError`. The answer has the new version.
        """
        return self._run(
            schedule_update(
                name,
                version=version,
                task=task,
                cron=cron,
                timezone=timezone,
                interval_ms=interval_ms,
                catchup=catchup,
                catchup_max=catchup_max,
                overlap=overlap,
                start_at=start_at,
                end_at=end_at,
            )
        )

    def delete_schedule(self, name: str) -> None:
        """``DELETE /v1/schedules/{name}`` (operator). Its ledger and the tasks it made stay."""
        self._run(schedule_delete(name))

    def pause_schedule(self, name: str, reason: str | None = None) -> Schedule:
        """``POST /v1/schedules/{name}/pause`` (operator): its slots are recorded ``paused``,
        with no task, until :meth:`resume_schedule`."""
        return self._run(schedule_pause(name, reason))

    def resume_schedule(self, name: str) -> Schedule:
        """``POST /v1/schedules/{name}/resume`` (operator): slots after now fire again."""
        return self._run(schedule_resume(name))

    def trigger_schedule(self, name: str) -> ScheduleFire:
        """``POST /v1/schedules/{name}/trigger`` (operator): fire now, whatever the overlap
        policy and even when paused; the answer names the new task."""
        return self._run(schedule_trigger(name))

    def backfill_schedule(self, name: str, start: datetime | str, end: datetime | str) -> Backfill:
        """``POST /v1/schedules/{name}/backfill`` (operator): give every slot of
        ``[start, end)`` that has no task yet one. ``end`` must not be in the future.

        Orbit works through the slots in the background: follow it with :meth:`get_backfill`.
        Repeating a backfill makes no second task for a slot.
        """
        return self._run(schedule_backfill(name, start, end))

    def get_backfill(self, name: str, backfill_id: str) -> Backfill:
        """``GET /v1/schedules/{name}/backfills/{id}``."""
        return self._run(backfill_get(name, backfill_id))

    def list_backfills(self, name: str) -> list[Backfill]:
        """``GET /v1/schedules/{name}/backfills``: the schedule's backfills, newest first."""
        return self._run(backfill_list(name))

    def schedule_fires(
        self, name: str, *, limit: int | None = None, cursor: str | None = None
    ) -> FirePage:
        """``GET /v1/schedules/{name}/fires``: one page of the fire ledger, newest first."""
        return self._run(fire_list(name, limit=limit, cursor=cursor))


class AsyncScheduleCalls(AsyncCalls):
    """Schedules for :class:`~orbit_sdk.AsyncClient`; see :class:`ScheduleCalls`."""

    async def create_schedule(
        self,
        name: str,
        *,
        task: TaskTemplate,
        cron: str | None = None,
        timezone: str | None = None,
        interval_ms: int | None = None,
        catchup: Catchup | None = None,
        catchup_max: int | None = None,
        overlap: Overlap | None = None,
        start_at: datetime | str | None = None,
        end_at: datetime | str | None = None,
        paused: bool = False,
    ) -> Schedule:
        """``POST /v1/schedules`` (operator); see :meth:`Client.create_schedule`."""
        return await self._run(
            schedule_create(
                name,
                task,
                cron=cron,
                timezone=timezone,
                interval_ms=interval_ms,
                catchup=catchup,
                catchup_max=catchup_max,
                overlap=overlap,
                start_at=start_at,
                end_at=end_at,
                paused=paused,
            )
        )

    async def get_schedule(self, name: str, *, preview: int | None = None) -> Schedule:
        """``GET /v1/schedules/{name}``; see :meth:`Client.get_schedule`."""
        return await self._run(schedule_get(name, preview=preview))

    async def list_schedules(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> SchedulePage:
        """``GET /v1/schedules``: one page, by name."""
        return await self._run(schedule_list(limit=limit, cursor=cursor))

    async def iter_schedules(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> AsyncIterator[Schedule]:
        """Every schedule, following ``next_cursor`` (``async for``)."""

        def page_at(at: str | None) -> Operation[SchedulePage]:
            return schedule_list(limit=limit, cursor=at)

        async for page in self._pages(page_at, cursor):
            for schedule in page.items:
                yield schedule

    async def update_schedule(
        self,
        name: str,
        *,
        version: int | None = None,
        task: TaskTemplate | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        interval_ms: int | None = None,
        catchup: Catchup | None = None,
        catchup_max: int | None = None,
        overlap: Overlap | None = None,
        start_at: datetime | str | UnsetType | None = UNSET,
        end_at: datetime | str | UnsetType | None = UNSET,
    ) -> Schedule:
        """``PATCH /v1/schedules/{name}`` (operator); see :meth:`Client.update_schedule`."""
        return await self._run(
            schedule_update(
                name,
                version=version,
                task=task,
                cron=cron,
                timezone=timezone,
                interval_ms=interval_ms,
                catchup=catchup,
                catchup_max=catchup_max,
                overlap=overlap,
                start_at=start_at,
                end_at=end_at,
            )
        )

    async def delete_schedule(self, name: str) -> None:
        """``DELETE /v1/schedules/{name}`` (operator)."""
        await self._run(schedule_delete(name))

    async def pause_schedule(self, name: str, reason: str | None = None) -> Schedule:
        """``POST /v1/schedules/{name}/pause`` (operator)."""
        return await self._run(schedule_pause(name, reason))

    async def resume_schedule(self, name: str) -> Schedule:
        """``POST /v1/schedules/{name}/resume`` (operator)."""
        return await self._run(schedule_resume(name))

    async def trigger_schedule(self, name: str) -> ScheduleFire:
        """``POST /v1/schedules/{name}/trigger`` (operator); see :meth:`Client.trigger_schedule`."""
        return await self._run(schedule_trigger(name))

    async def backfill_schedule(
        self, name: str, start: datetime | str, end: datetime | str
    ) -> Backfill:
        """``POST /v1/schedules/{name}/backfill`` (operator); see
        :meth:`Client.backfill_schedule`."""
        return await self._run(schedule_backfill(name, start, end))

    async def get_backfill(self, name: str, backfill_id: str) -> Backfill:
        """``GET /v1/schedules/{name}/backfills/{id}``."""
        return await self._run(backfill_get(name, backfill_id))

    async def list_backfills(self, name: str) -> list[Backfill]:
        """``GET /v1/schedules/{name}/backfills``: newest first."""
        return await self._run(backfill_list(name))

    async def schedule_fires(
        self, name: str, *, limit: int | None = None, cursor: str | None = None
    ) -> FirePage:
        """``GET /v1/schedules/{name}/fires``: one page of the ledger, newest first."""
        return await self._run(fire_list(name, limit=limit, cursor=cursor))

"""Bulk operations on workflows (decision 0025): cancel, pause or resume many instances, or
retry the failed step of each, selected by filter. Each instance moves through the same
planner as a single control request (``Advancement.run_in``), in the step's transaction;
the operation has one audit record, not one per instance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from orbit_server.errors import NotFound, StateConflict
from orbit_server.pulse.bulk import AfterCommit, Skip, TooMany, settle
from orbit_server.pulse.model import BulkRecord, Settled
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import bulk as bulk_store
from orbit_server.weave.advance import Advance, Advancement
from orbit_server.weave.view import Cancel, Event, Pause, Resume, RetryStep

WORKFLOW_ACTIONS = ("cancel", "pause", "resume", "retry_step")
SELECT_PAGE = 2000


@dataclass(frozen=True, slots=True)
class WorkflowFilter:
    """Which workflows an operation acts on. Every given field must match."""

    definition: str | None = None
    states: tuple[str, ...] | None = None
    ids: tuple[str, ...] | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None

    @property
    def kind(self) -> str:
        return "workflows"

    async def select(self, tx: Tx, scope: Scope, cap: int) -> list[str]:
        ids: list[str] = []
        after = ""
        while True:
            page = await bulk_store.workflows_select(
                tx, scope, definition=self.definition, states=self.states, ids=self.ids,
                created_from=self.created_from, created_to=self.created_to, after=after,
                limit=SELECT_PAGE,
            )  # fmt: skip
            ids += page
            if len(ids) > cap:
                raise TooMany(cap, "by definition, state or time")
            if len(page) < SELECT_PAGE:
                return ids
            after = page[-1]


class WorkflowBulk:
    """One instance per step: an instance's change writes as it goes (a new step's task can
    meet a full queue last), so an error rolls back that instance alone (and the service
    settles it ``failed``)."""

    actions = WORKFLOW_ACTIONS
    batch: int | None = 1

    def __init__(self, advancement: Advancement) -> None:
        self._advancement = advancement

    async def apply(
        self, tx: Tx, op: BulkRecord, items: Sequence[tuple[int, str]]
    ) -> tuple[list[Settled], AfterCommit | None]:
        event = _event(op)
        advances: list[Advance] = []
        settled = []
        for seq, workflow_id in items:
            try:
                advance = await self._advancement.run_in(tx, op.scope, workflow_id, [event])
            except (StateConflict, NotFound) as exc:  # the planner's refusals write nothing
                settled.append(settle(seq, exc))
                continue
            advances.append(advance)
            # A pause of a paused instance, a cancel of a cancelled one: nothing to do.
            settled.append(settle(seq, None if advance.changed else Skip("unchanged")))

        async def after() -> None:
            await self._advancement.after(advances)

        return settled, after if advances else None


def _event(op: BulkRecord) -> Event:
    if op.action == "pause":
        return Pause()
    if op.action == "resume":
        return Resume()
    if op.action == "retry_step":
        return RetryStep(str(op.params["step"]))
    return Cancel(op.params.get("reason"))

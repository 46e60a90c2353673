"""Control and recovery of instances (SPEC W7, W8): pause, resume, cancel; an operator's
retry, skip and resolve of a step. Each is one transaction that locks the instance, plans the
operator's event (the planner refuses what the instance's state does not allow) and writes
it with its audit record.
"""

from __future__ import annotations

from typing import Any

from orbit_server.audit import Actor
from orbit_server.scope import Scope
from orbit_server.weave.advance import Advancement
from orbit_server.weave.model import Workflow
from orbit_server.weave.view import Cancel, Event, Pause, ResolveStep, Resume, RetryStep, SkipStep


class Control:
    def __init__(self, advancement: Advancement) -> None:
        self._advancement = advancement

    async def pause(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> Workflow:
        """Close the instance's gate and stop following outcomes until resumed."""
        return await self._steer(scope, workflow_id, Pause(), actor, "workflow.pause",
                                 {"reason": reason})  # fmt: skip

    async def resume(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> Workflow:
        """Reopen the gate and go on from what was recorded while paused."""
        return await self._steer(scope, workflow_id, Resume(), actor, "workflow.resume",
                                 {"reason": reason})  # fmt: skip

    async def cancel(
        self, scope: Scope, workflow_id: str, *, reason: str | None, actor: Actor
    ) -> Workflow:
        """End the instance ``cancelled``; its pending and running step tasks are cancelled
        through Pulse in the same transaction."""
        return await self._steer(scope, workflow_id, Cancel(reason), actor, "workflow.cancel",
                                 {"reason": reason})  # fmt: skip

    async def retry_step(
        self, scope: Scope, workflow_id: str, key: str, *, actor: Actor
    ) -> Workflow:
        """A new task for a failed task step that ended the instance; it runs again."""
        return await self._steer(scope, workflow_id, RetryStep(key), actor,
                                 "workflow.step.retry", {"step": key})  # fmt: skip

    async def skip_step(
        self, scope: Scope, workflow_id: str, key: str, *, output: Any, actor: Actor
    ) -> Workflow:
        """End a step ``skipped`` with the given output and go on as if it had succeeded."""
        return await self._steer(scope, workflow_id, SkipStep(key, output), actor,
                                 "workflow.step.skip", {"step": key})  # fmt: skip

    async def resolve_step(
        self,
        scope: Scope,
        workflow_id: str,
        key: str,
        *,
        succeeded: bool,
        output: Any,
        error: dict[str, Any] | None,
        actor: Actor,
    ) -> Workflow:
        """Decide a step whose task is in needs_review: its task is resolved through Pulse,
        and its result event moves the instance on (boundary 2)."""
        outcome = "succeeded" if succeeded else "failed"
        return await self._steer(
            scope, workflow_id, ResolveStep(key, succeeded, output, error), actor,
            "workflow.step.resolve", {"step": key, "outcome": outcome},
        )  # fmt: skip

    async def _steer(
        self,
        scope: Scope,
        workflow_id: str,
        event: Event,
        actor: Actor,
        action: str,
        details: dict[str, Any],
    ) -> Workflow:
        advance = await self._advancement.run_one(
            scope, workflow_id, [event], actor=actor, action=action, details=details
        )
        return advance.wf

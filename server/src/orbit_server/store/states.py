"""The state values the store persists, per kind of row: what a query names as ``:task.pending``
or ``:step.succeeded`` instead of spelling the value as a literal (see :mod:`.sql`).

The store sits below Pulse and Weave, so it cannot import their enums; it keeps the values here
and a test holds Pulse's and Weave's enums equal to them, so that neither can drift.
"""

from __future__ import annotations

from collections.abc import Mapping

# tasks.state: Pulse's TaskState
TASK = frozenset(
    {
        "scheduled",
        "pending",
        "leased",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "needs_review",
    }
)
# task_attempts.state: Pulse's AttemptState — leased, running, then how the attempt ended
# (released: given back unstarted, without using an attempt)
ATTEMPT = frozenset(
    {"leased", "running", "released", "succeeded", "failed", "cancelled", "needs_review"}
)
# workflows.state: Weave's WorkflowState
WORKFLOW = frozenset({"running", "paused", "needs_review", "succeeded", "failed", "cancelled"})
# workflow_steps.state: Weave's StepState
STEP = frozenset(
    {
        "pending",
        "running",
        "waiting",
        "succeeded",
        "failed",
        "skipped",
        "cancelled",
        "needs_review",
    }
)
# workflow_signals.state: Weave's SignalState
SIGNAL = frozenset({"pending", "delivered"})
# schedule_backfills.state: Pulse's BackfillState
BACKFILL = frozenset({"running", "done", "failed", "cancelled"})
# schedule_fires.outcome: Pulse's schedule Outcome
FIRE = frozenset({"fired", "skipped", "missed", "paused", "queued"})

PERSISTED: Mapping[str, frozenset[str]] = {
    "task": TASK,
    "attempt": ATTEMPT,
    "workflow": WORKFLOW,
    "step": STEP,
    "signal": SIGNAL,
    "backfill": BACKFILL,
    "fire": FIRE,
}


def state_value(reference: str) -> str:
    """The value a ``kind.value`` reference names; ValueError unless it is persisted."""
    kind, _, value = reference.partition(".")
    values = PERSISTED.get(kind)
    if values is None:
        raise ValueError(f"no kind of state named {kind!r} (kinds: {', '.join(PERSISTED)})")
    if value not in values:
        raise ValueError(f"{value!r} is not a {kind} state ({', '.join(sorted(values))})")
    return value

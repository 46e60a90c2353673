"""What the worker writes to its log: the identity of the task a record is about, the line for
a failed handler, and the JSON format of ``orbit-worker --log-format json``."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Final

from orbit_sdk._redact import RECORD_ATTRIBUTES
from orbit_sdk.worker._context import TaskContext
from orbit_sdk.worker._protocol import ErrorInfo

__all__ = ["TASK_FIELDS", "JsonLogFormatter", "failure_level", "task_fields"]

TASK_FIELDS: Final = ("task_id", "attempt", "queue", "task_type", "workflow_id", "step_key")
"""The keys a record about a task carries (the workflow ones for workflow steps only)."""


def task_fields(context: TaskContext) -> dict[str, Any]:
    """The ``extra`` of a record about this attempt. A step task's context describes its
    workflow in ``context.workflow`` (``instance_id``/``id`` and ``step_key``/``step``)."""
    fields: dict[str, Any] = {
        "task_id": context.task_id,
        "attempt": context.attempt,
        "queue": context.queue,
        "task_type": context.type,
    }
    workflow = getattr(context, "workflow", None)
    if workflow is not None:
        instance = getattr(workflow, "instance_id", None) or getattr(workflow, "id", None)
        step = getattr(workflow, "step_key", None) or getattr(workflow, "step", None)
        if instance is not None:
            fields["workflow_id"] = str(instance)
        if step is not None:
            fields["step_key"] = str(step)
    return fields


def failure_level(error: ErrorInfo, context: TaskContext) -> tuple[int, str]:
    """How bad a failed attempt is, and what Orbit does next, as the server decides it
    (SPEC P4): WARNING while Orbit will retry it, ERROR when the failure is final or the
    outcome of ``unsafe`` work is unknown (the task goes to ``needs_review``)."""
    if not error.retryable:
        return logging.ERROR, "not retryable: the task fails"
    if context.side_effect == "unsafe" and not error.safe_to_retry:
        return logging.ERROR, "outcome unknown: the unsafe task goes to needs_review"
    if context.max_attempts is not None and context.attempt >= context.max_attempts:
        return logging.ERROR, "no attempts left: the task fails"
    return logging.WARNING, "Orbit retries it"


def describe_task(fields: dict[str, Any]) -> str:
    """``task t-1 attempt 2 (emails/send) of workflow w-1 step charge``."""
    text = (
        f"task {fields['task_id']} attempt {fields['attempt']} "
        f"({fields['queue']}/{fields['task_type']})"
    )
    if "workflow_id" in fields:
        text += f" of workflow {fields['workflow_id']}"
    if "step_key" in fields:
        text += f" step {fields['step_key']}"
    return text


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, the task's fields when the record is about a task (``task_id``, ``attempt``,
    ``queue``, ``task_type``, ``workflow_id``, ``step_key``), any other ``extra`` values,
    and ``exception`` (the formatted traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in RECORD_ATTRIBUTES and name not in document:
                document[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str, ensure_ascii=False)

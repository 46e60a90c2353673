"""What the worker logs: each failed handler once, at the level its fate deserves, with the
task's identity and traceback; the JSON format; and secrets masked whoever logs them."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from test_worker_support import FakeServer, delivery, running

from orbit_sdk import RedactSecrets
from orbit_sdk._redact import redact
from orbit_sdk.worker import JsonLogFormatter, NonRetryableError, SafeToRetry, TaskContext, Worker
from orbit_sdk.worker._cli import configure_logging
from orbit_sdk.worker._logs import failure_level, task_fields
from orbit_sdk.worker._protocol import ErrorInfo

KEY = "ok_0123abcd_Secretsecretsecret"


class Flaky(SafeToRetry, Exception):
    """Nothing happened before it was raised: even unsafe work may be retried."""


def context(**kwargs: Any) -> TaskContext:
    values: dict[str, Any] = {
        "task_id": "tsk_1",
        "attempt": 1,
        "queue": "q",
        "type": "t",
        "deadline": datetime.now(UTC),
        "max_attempts": 3,
    }
    return TaskContext(**{**values, **kwargs})


def error(retryable: bool = True, safe_to_retry: bool = False) -> ErrorInfo:
    return ErrorInfo(code="e", message="m", retryable=retryable, safe_to_retry=safe_to_retry)


@pytest.mark.parametrize(
    ("failure", "ctx", "level", "fate"),
    [
        (error(), context(), logging.WARNING, "Orbit retries it"),
        (error(False), context(), logging.ERROR, "not retryable"),
        (error(), context(attempt=3), logging.ERROR, "no attempts left"),
        (error(), context(max_attempts=None, attempt=50), logging.WARNING, "retries"),
        (error(), context(side_effect="unsafe"), logging.ERROR, "needs_review"),
        (error(True, True), context(side_effect="unsafe"), logging.WARNING, "retries"),
    ],
)
def test_the_level_follows_what_orbit_does_with_the_failure(
    failure: ErrorInfo, ctx: TaskContext, level: int, fate: str
) -> None:
    found_level, verdict = failure_level(failure, ctx)
    assert found_level == level
    assert fate in verdict


def test_task_fields_include_the_workflow_when_the_context_has_one() -> None:
    plain = context()
    assert task_fields(plain) == {"task_id": "tsk_1", "attempt": 1, "queue": "q", "task_type": "t"}
    step = context()
    step.workflow = SimpleNamespace(instance_id="wf_9", step_key="charge")  # type: ignore[attr-defined]
    assert task_fields(step)["workflow_id"] == "wf_9"
    assert task_fields(step)["step_key"] == "charge"


async def test_each_failure_is_logged_once_with_its_traceback_and_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeServer() as server:
        worker = Worker(server.url, "test-key", worker_id="w", concurrency=4, prefetch=0)

        @worker.handler(queue="q", type="t")
        async def handle(ctx: TaskContext) -> object:
            if ctx.params == "retry":
                raise ValueError("flaky backend")
            if ctx.params == "final":
                raise NonRetryableError("bad input", code="bad_input")
            if ctx.params == "unencodable":
                return object()
            return {"ok": True}

        with caplog.at_level(logging.DEBUG, logger="orbit_sdk.worker"):
            async with running(worker):
                conn = await server.accept()
                await conn.welcome()
                names = ["retry", "final", "unencodable", "fine"]
                items = [delivery(f"tsk_{n}", 2, params=n) for n in names]
                await conn.send({"type": "tasks", "items": items})
                await conn.start_all()
                await conn.results(len(names))

    failures = [r for r in caplog.records if r.getMessage().startswith("handler failed")]
    by_task = {r.task_id: r for r in failures}  # type: ignore[attr-defined]
    assert sorted(by_task) == ["tsk_final", "tsk_retry", "tsk_unencodable"]
    assert len(failures) == 3  # once each, nothing for the task that succeeded

    retry = by_task["tsk_retry"]
    assert retry.levelno == logging.WARNING
    assert (retry.attempt, retry.queue, retry.task_type) == (2, "q", "t")  # type: ignore[attr-defined]
    assert "task tsk_retry attempt 2 (q/t)" in retry.getMessage()
    assert "ValueError: flaky backend" in retry.getMessage()
    assert retry.exc_info is not None and isinstance(retry.exc_info[1], ValueError)
    formatted = logging.Formatter().formatException(retry.exc_info)
    assert 'raise ValueError("flaky backend")' in formatted  # the handler's own frame

    assert by_task["tsk_final"].levelno == logging.ERROR
    assert by_task["tsk_final"].error_code == "bad_input"  # type: ignore[attr-defined]
    assert by_task["tsk_unencodable"].levelno == logging.ERROR
    assert by_task["tsk_unencodable"].exc_info is None


def test_json_lines_carry_the_task_fields_and_the_exception() -> None:
    logger = logging.getLogger("test.json")
    try:
        raise RuntimeError("kaput")
    except RuntimeError as exc:
        record = logger.makeRecord(
            logger.name,
            logging.ERROR,
            __file__,
            1,
            "handler failed on %s",
            ("tsk_1",),
            (type(exc), exc, exc.__traceback__),
            extra={"task_id": "tsk_1", "attempt": 2, "queue": "q", "task_type": "t"},
        )
    line = JsonLogFormatter().format(record)
    assert "\n" not in line
    document = json.loads(line)
    assert document["level"] == "ERROR"
    assert document["logger"] == "test.json"
    assert document["message"] == "handler failed on tsk_1"
    assert (document["task_id"], document["attempt"], document["queue"]) == ("tsk_1", 2, "q")
    assert document["task_type"] == "t"
    assert document["exception"].startswith("Traceback")
    assert "RuntimeError: kaput" in document["exception"]
    assert datetime.fromisoformat(document["time"]).tzinfo is not None


@pytest.mark.parametrize(
    "text",
    [
        f"token {KEY} in the middle",
        "> Authorization: Bearer s3cr3t-value",
        "{'authorization': 'Basic dXNlcjpzM2NyM3Q='}",
        "headers=[('Authorization', 'Bearer s3cr3t-value')]",
    ],
)
def test_keys_bearer_tokens_and_authorization_values_are_masked(text: str) -> None:
    masked = redact(text)
    for secret in (KEY, "s3cr3t-value", "dXNlcjpzM2NyM3Q="):
        assert secret not in masked
    assert "***" in masked


def test_an_explicit_secret_is_masked_whatever_its_shape() -> None:
    assert redact("key=plain-dev-key!", ["plain-dev-key"]) == "key=***!"
    assert redact("task tsk_1", ["k"]) == "task tsk_1"  # too short to be a key


def test_the_filter_masks_message_arguments_extras_and_exceptions() -> None:
    logger = logging.getLogger("test.redact")
    try:
        raise ValueError(f"rejected {KEY}")
    except ValueError as exc:
        record = logger.makeRecord(
            logger.name,
            logging.DEBUG,
            __file__,
            1,
            "> %s: %s",
            ("Authorization", "Bearer abc.def"),
            (type(exc), exc, exc.__traceback__),
            extra={"header": "mine-only"},
        )
    assert RedactSecrets(["mine-only"]).filter(record) is True
    assert record.getMessage() == "> Authorization: Bearer ***"
    assert record.exc_text is not None and KEY not in record.exc_text
    assert record.header == "***"  # type: ignore[attr-defined]


def test_install_covers_the_library_loggers_and_their_children(
    caplog: pytest.LogCaptureFixture,
) -> None:
    child = logging.getLogger("httpcore2.test-child")
    RedactSecrets.install(["first-key"])
    redactor = RedactSecrets.install(["second-key"])  # replaces, never stacks
    try:
        for name in ("websockets.client", "httpx2", "httpcore", child.name, "orbit_sdk"):
            filters = [f for f in logging.getLogger(name).filters if isinstance(f, RedactSecrets)]
            assert filters == [redactor], name
        with caplog.at_level(logging.DEBUG):
            child.debug("sending second-key to %s", "Bearer xyz-123")
        assert caplog.records[-1].getMessage() == "sending *** to Bearer ***"
    finally:
        redactor.uninstall()
    assert redactor not in logging.getLogger("httpx2").filters


def test_orbit_worker_logging_masks_every_logger_and_writes_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    root.handlers[:] = []  # as in a fresh process
    try:
        configure_logging("debug", "json", ["plain-dev-key"])
        logging.getLogger("myapp").info("calling with plain-dev-key and %s", KEY)
        line = capsys.readouterr().err.strip()
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    document = json.loads(line)
    assert document["message"] == "calling with *** and ***"
    assert document["logger"] == "myapp"

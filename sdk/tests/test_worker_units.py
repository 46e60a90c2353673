"""The worker's pure parts: handler registry, result items, URLs, the context, settings."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import orbit_sdk.worker
from orbit_sdk import ConfigurationError, OrbitError
from orbit_sdk.worker import (
    NonRetryableError,
    SafeToRetry,
    TaskCancelled,
    TaskContext,
    Worker,
    WorkerError,
)
from orbit_sdk.worker._outcome import failed_item, succeeded_item
from orbit_sdk.worker._protocol import Ref
from orbit_sdk.worker._registry import HandlerRegistry, version_order
from orbit_sdk.worker._worker import worker_urls

REF = Ref(task_id="tsk_1", attempt=2, lease_token="lse_1")


def noop(ctx: TaskContext) -> None: ...


async def anoop(ctx: TaskContext) -> None: ...


def context(**kwargs: Any) -> TaskContext:
    return TaskContext(
        task_id="tsk_1", attempt=2, queue="q", type="t", deadline=datetime.now(UTC), **kwargs
    )


def test_the_public_api() -> None:
    assert set(orbit_sdk.worker.__all__) == {
        "JsonLogFormatter",
        "NonRetryableError",
        "SafeToRetry",
        "TaskCancelled",
        "TaskContext",
        "Worker",
        "WorkerError",
        "WorkflowContext",
    }
    assert issubclass(WorkerError, OrbitError)


def test_version_order_is_natural() -> None:
    versions = ["10", "2", "1.10", "1.9", "v3", "v12"]
    assert sorted(versions, key=version_order) == ["1.9", "1.10", "2", "10", "v3", "v12"]


def test_the_registry_picks_by_version() -> None:
    registry = HandlerRegistry()
    registry.add(noop, queue="q", type="t", version="2", side_effect="idempotent")
    registry.add(anoop, queue="q", type="t", version="10", side_effect="unsafe")
    assert registry.hello_handlers()[0].versions == ["2", "10"]
    picked = registry.pick("q", "t", None)
    assert picked is not None and picked.version == "10" and picked.is_async
    picked = registry.pick("q", "t", "2")
    assert picked is not None and picked.version == "2" and not picked.is_async
    assert registry.pick("q", "t", "3") is None
    assert registry.pick("q", "other", None) is None

    registry.add(noop, queue="q", type="t", version=None, side_effect="idempotent")
    assert registry.hello_handlers()[0].versions == []  # any version now runs here
    picked = registry.pick("q", "t", "3")
    assert picked is not None and picked.version is None
    picked = registry.pick("q", "t", None)
    assert picked is not None and picked.version is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queue": "", "type": "t"}, "queue"),
        ({"queue": "q", "type": "t" * 201}, "type"),
        ({"queue": "q", "type": "t", "version": ""}, "version"),
        ({"queue": "q", "type": "t", "side_effect": "maybe"}, "side_effect"),
    ],
)
def test_the_registry_refuses_invalid_handlers(kwargs: dict[str, Any], message: str) -> None:
    registry = HandlerRegistry()
    kwargs = {"version": None, "side_effect": "idempotent", **kwargs}
    with pytest.raises(ValueError, match=message):
        registry.add(noop, **kwargs)


def test_a_handler_registered_twice_is_refused() -> None:
    worker = Worker("http://orbit.test", "k")
    worker.handler(queue="q", type="t", version="1")(noop)
    with pytest.raises(ValueError, match="exists already"):
        worker.handler(queue="q", type="t", version="1")(anoop)


def test_the_decorator_returns_the_function() -> None:
    worker = Worker()
    assert worker.handler(queue="q", type="t")(noop) is noop


def test_return_values_become_succeeded_items() -> None:
    item = succeeded_item(REF, {"sent": True, "at": datetime(2026, 1, 1, tzinfo=UTC)})
    assert item.outcome == "succeeded"
    assert isinstance(item.result, msgspec.Raw)
    assert msgspec.json.decode(item.result) == {"sent": True, "at": "2026-01-01T00:00:00Z"}


def test_a_value_json_cannot_carry_fails_for_good() -> None:
    item = succeeded_item(REF, {1j})
    assert item.outcome == "failed" and item.error is not None
    assert item.error.code == "result_not_serializable"
    assert item.error.retryable is False


def test_exceptions_become_failed_items() -> None:
    class Throttled(Exception):
        code = "throttled"

    class Flaky(Exception):
        retryable = 0  # any falsy value

    cases: list[tuple[BaseException, str, bool]] = [
        (RuntimeError("x"), "RuntimeError", True),
        (NonRetryableError("x"), "NonRetryableError", False),
        (NonRetryableError("x", code="bad_input"), "bad_input", False),
        (Throttled("x"), "throttled", True),
        (Flaky("x"), "Flaky", False),
        (OrbitError("x", code="not_found", retryable=False), "not_found", False),
    ]
    for exc, code, retryable in cases:
        item = failed_item(REF, exc)
        assert item.error is not None
        assert (item.error.code, item.error.retryable) == (code, retryable), exc
    vouched = failed_item(REF, SafeToRetry("rate limited before sending", code="throttled")).error
    assert vouched is not None and (vouched.code, vouched.retryable, vouched.safe_to_retry) == (
        "throttled",
        True,
        True,
    )
    plain = failed_item(REF, RuntimeError("x")).error
    assert plain is not None and plain.safe_to_retry is False  # unsafe work: an operator decides
    error = failed_item(REF, Throttled("m" * 20_000)).error
    assert error is not None and len(error.message) == 10_000
    assert error.details == {"type": f"{__name__}.{Throttled.__qualname__}"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://orbit:7070", ("ws://orbit:7070/v1/worker",)),
        ("https://gw.example/orbit/", ("wss://gw.example/orbit/v1/worker",)),
        ("ws://orbit/v1/worker", ("ws://orbit/v1/worker",)),
        ("http://a:1, http://b:2", ("ws://a:1/v1/worker", "ws://b:2/v1/worker")),
        (["wss://a", "http://b"], ("wss://a/v1/worker", "ws://b/v1/worker")),
    ],
)
def test_urls_become_worker_endpoints(given: Any, expected: tuple[str, ...]) -> None:
    assert worker_urls(given) == expected


@pytest.mark.parametrize(
    "bad", ["orbit:7070", "ftp://orbit", "http://u:p@orbit", "http://o?x=1", ""]
)
def test_malformed_urls_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        Worker(bad)


@pytest.mark.parametrize("concurrency", [0, -1, True, 1.5])
def test_concurrency_must_be_a_positive_integer(concurrency: Any) -> None:
    with pytest.raises(ConfigurationError):
        Worker(concurrency=concurrency)


async def test_the_context_signals_cancellation_to_sync_and_async_code() -> None:
    ctx = context()
    ctx.raise_if_cancelled()
    waiter = asyncio.create_task(ctx.wait_cancelled())
    await asyncio.sleep(0)
    assert not waiter.done() and not ctx.cancelled and ctx.cancel_reason is None

    assert ctx._cancel("customer asked", requested=True)
    assert not ctx._cancel("again", requested=False)
    await asyncio.wait_for(waiter, 1)
    assert ctx.cancelled and ctx.cancel_event.is_set() and ctx.cancel_requested
    assert ctx.cancel_reason == "customer asked"
    with pytest.raises(TaskCancelled, match="customer asked"):
        ctx.raise_if_cancelled()


def test_the_context_logger_names_the_attempt(caplog: pytest.LogCaptureFixture) -> None:
    ctx = context(logger=logging.getLogger("tests.worker"))
    with caplog.at_level(logging.INFO, logger="tests.worker"):
        ctx.logger.info("hello", extra={"step": 3})
    (record,) = caplog.records
    assert (record.task_id, record.attempt, record.step) == ("tsk_1", 2, 3)  # type: ignore[attr-defined]
    assert "tsk_1" in repr(ctx)

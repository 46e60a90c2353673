"""Running one handler and turning what it did into a result item.

A return value is ``succeeded`` (it must encode as JSON); an exception is ``failed`` with a
stable code, or ``cancelled`` when it answers a cancel request. When ``opentelemetry`` is
installed, the handler runs in a span that continues the task's W3C trace.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

import msgspec

from orbit_sdk.worker._context import TaskContext
from orbit_sdk.worker._errors import NonRetryableError, SafeToRetry
from orbit_sdk.worker._protocol import ErrorInfo, Ref, ResultItem
from orbit_sdk.worker._registry import HandlerSpec

__all__ = [
    "NOT_STARTED",
    "RESULT_NOT_SERIALIZABLE",
    "RESULT_TOO_LARGE",
    "call_async",
    "call_sync",
    "cancelled_item",
    "failed_item",
    "succeeded_item",
]

RESULT_NOT_SERIALIZABLE: Final = "result_not_serializable"
RESULT_TOO_LARGE: Final = "result_too_large"
NOT_STARTED: Final = "not_started"
MAX_CODE: Final = 100
MAX_MESSAGE: Final = 10_000
_encoder: Final = msgspec.json.Encoder()


def call_sync(spec: HandlerSpec, context: TaskContext) -> Any:
    """Run a sync handler (on a pool thread), inside its span."""
    with _span(spec, context):
        return spec.func(context)


async def call_async(spec: HandlerSpec, context: TaskContext) -> Any:
    """Run an async handler on the event loop, inside its span."""
    with _span(spec, context):
        return await spec.func(context)


def succeeded_item(ref: Ref, value: Any) -> ResultItem:
    """``succeeded`` with the value encoded now; a value JSON cannot carry fails the attempt."""
    try:
        encoded = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:  # msgspec.EncodeError is a ValueError
        error = ErrorInfo(
            code=RESULT_NOT_SERIALIZABLE,
            message=_clip(f"the handler's return value cannot be encoded as JSON: {exc}"),
            retryable=False,
            details={"type": _qualified_name(type(value))},
        )
        return _item(ref, "failed", error=error)
    return _item(ref, "succeeded", result=msgspec.Raw(encoded))


def failed_item(ref: Ref, exc: BaseException) -> ResultItem:
    """``failed`` from an exception: its ``code`` (or class name), message and retryability."""
    code = getattr(exc, "code", None)
    if not isinstance(code, str) or not code:
        code = type(exc).__name__
    retryable = not isinstance(exc, NonRetryableError) and bool(getattr(exc, "retryable", True))
    error = ErrorInfo(
        code=code[:MAX_CODE],
        message=_clip(_message(exc)),
        retryable=retryable,
        safe_to_retry=retryable and isinstance(exc, SafeToRetry),
        details={"type": _qualified_name(type(exc))},
    )
    return _item(ref, "failed", error=error)


def too_large_item(ref: Ref, size: int, limit: int) -> ResultItem:
    """``failed``: a result bigger than the server's frame limit can never be delivered."""
    message = f"the result is {size} bytes; the server accepts frames of at most {limit} bytes"
    error = ErrorInfo(code=RESULT_TOO_LARGE, message=message, retryable=False)
    return _item(ref, "failed", error=error)


def not_started_item(ref: Ref) -> ResultItem:
    """``failed``, retryable: the attempt started on the server but its handler never ran."""
    error = ErrorInfo(
        code=NOT_STARTED,
        message="the worker stopped before it ran this attempt's handler",
        retryable=True,
        safe_to_retry=True,  # nothing ran, so even unsafe work may be retried
    )
    return _item(ref, "failed", error=error)


def cancelled_item(ref: Ref) -> ResultItem:
    return _item(ref, "cancelled")


def _item(
    ref: Ref, outcome: Any, *, result: Any = None, error: ErrorInfo | None = None
) -> ResultItem:
    return ResultItem(
        task_id=ref.task_id,
        attempt=ref.attempt,
        lease_token=ref.lease_token,
        outcome=outcome,
        result=result,
        error=error,
    )


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not lose the result
        return f"<{type(exc).__name__}: unprintable message>"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _qualified_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _span(spec: HandlerSpec, context: TaskContext) -> AbstractContextManager[Any]:
    otel = _opentelemetry()
    if otel is None:
        return nullcontext()
    trace, propagator = otel
    carrier = {"traceparent": context.traceparent} if context.traceparent else {}
    return trace.get_tracer("orbit_sdk.worker").start_as_current_span(  # type: ignore[no-any-return]
        f"orbit.task {spec.queue}/{spec.type}",
        context=propagator.extract(carrier),
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "orbit.task_id": context.task_id,
            "orbit.attempt": context.attempt,
            "orbit.queue": spec.queue,
            "orbit.type": spec.type,
        },
    )


@functools.cache
def _opentelemetry() -> tuple[Any, Any] | None:
    try:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # optional: the "otel" extra
        return None
    return trace, TraceContextTextMapPropagator()

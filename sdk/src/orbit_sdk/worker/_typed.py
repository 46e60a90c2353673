"""Typed handlers: ``@worker.task`` and ``@worker.implement(ref)``.

A typed handler takes the task's params as its model, and optionally the
:class:`TaskContext`: ``def add(params: AddParams, ctx: TaskContext) -> AddResult`` (sync, on
the worker's pool) or ``async def`` (on its event loop). The registry keeps running plain
handlers taking a ``TaskContext``: each typed handler is wrapped in one that decodes and
validates the params first (params that do not fit fail the attempt at once, without retry,
with code ``invalid_params``) and encodes the return value after (``invalid_result``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, get_type_hints, overload

from orbit_sdk._codec import PayloadError
from orbit_sdk._typed import TaskDefaults, TaskRef
from orbit_sdk.worker._context import TaskContext
from orbit_sdk.worker._errors import NonRetryableError
from orbit_sdk.worker._registry import HandlerFunc, HandlerRegistry

__all__ = ["Implementer", "TaskDecorator", "typed_handler"]

P = TypeVar("P")
R = TypeVar("R")


def _positional_count(func: Callable[..., Any]) -> int:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in inspect.signature(func).parameters.values() if p.kind in kinds)


def _takes_context(func: Callable[..., Any]) -> bool:
    count = _positional_count(func)
    if count not in (1, 2):
        raise TypeError(
            f"a typed handler takes (params) or (params, ctx), not {count} positional "
            f"parameters: {getattr(func, '__qualname__', func)!r}"
        )
    return count == 2


def typed_handler(ref: TaskRef[Any, Any], func: Callable[..., Any]) -> HandlerFunc:
    """A plain handler (taking a ``TaskContext``) that runs the typed ``func`` for ``ref``."""
    with_context = _takes_context(func)

    def params_of(ctx: TaskContext) -> Any:
        try:
            return ref.decode_params(ctx.params)
        except PayloadError as exc:
            raise NonRetryableError(exc.message, code=exc.code) from exc

    def encoded(value: Any) -> Any:
        try:
            return ref.encode_result(value)
        except PayloadError as exc:
            raise NonRetryableError(exc.message, code=exc.code) from exc

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(ctx: TaskContext) -> Any:
            params = params_of(ctx)
            value = await (func(params, ctx) if with_context else func(params))
            return encoded(value)

        return run_async

    @functools.wraps(func)
    def run(ctx: TaskContext) -> Any:
        params = params_of(ctx)
        return encoded(func(params, ctx) if with_context else func(params))

    return run


def _register(registry: HandlerRegistry, ref: TaskRef[Any, Any], func: Callable[..., Any]) -> None:
    registry.add(
        typed_handler(ref, func),
        queue=ref.queue,
        type=ref.type,
        version=ref.version,
        side_effect=ref.side_effect,
    )


class TaskDecorator:
    """What ``@worker.task(...)`` applies: registers the handler and returns its
    :class:`~orbit_sdk.TaskRef`, typed by the handler's params and return annotations."""

    def __init__(
        self,
        registry: HandlerRegistry,
        *,
        queue: str,
        type: str,
        version: str | None,
        defaults: TaskDefaults,
    ) -> None:
        self._registry = registry
        self._queue = queue
        self._type = type
        self._version = version
        self._defaults = defaults

    @overload
    def __call__(self, func: Callable[[P, TaskContext], Awaitable[R]]) -> TaskRef[P, R]: ...
    @overload
    def __call__(self, func: Callable[[P, TaskContext], R]) -> TaskRef[P, R]: ...
    @overload
    def __call__(self, func: Callable[[P], Awaitable[R]]) -> TaskRef[P, R]: ...
    @overload
    def __call__(self, func: Callable[[P], R]) -> TaskRef[P, R]: ...

    def __call__(self, func: Callable[..., Any]) -> TaskRef[Any, Any]:
        params_model, result_model = _models_of(func)
        ref: TaskRef[Any, Any] = TaskRef(
            queue=self._queue,
            type=self._type,
            params=params_model,
            result=result_model,
            version=self._version,
            defaults=self._defaults,
        )
        _register(self._registry, ref, func)
        return ref


class Implementer(Generic[P, R]):
    """What ``@worker.implement(ref)`` applies: registers the handler for a declared
    reference and returns it unchanged. The type checker holds the handler to the
    reference's params and result types."""

    def __init__(self, registry: HandlerRegistry, ref: TaskRef[P, R]) -> None:
        self._registry = registry
        self._ref = ref

    @overload
    def __call__(
        self, func: Callable[[P, TaskContext], Awaitable[R]]
    ) -> Callable[[P, TaskContext], Awaitable[R]]: ...
    @overload
    def __call__(self, func: Callable[[P, TaskContext], R]) -> Callable[[P, TaskContext], R]: ...
    @overload
    def __call__(self, func: Callable[[P], Awaitable[R]]) -> Callable[[P], Awaitable[R]]: ...
    @overload
    def __call__(self, func: Callable[[P], R]) -> Callable[[P], R]: ...

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        _register(self._registry, self._ref, func)
        return func


def _models_of(func: Callable[..., Any]) -> tuple[Any, Any]:
    """The params model (the first parameter's annotation) and the result type (the return
    annotation) of a typed handler."""
    name = getattr(func, "__qualname__", repr(func))
    _takes_context(func)
    try:
        hints = get_type_hints(func)
    except NameError as exc:
        raise TypeError(f"{name}: cannot resolve its annotations: {exc}") from exc
    first = next(iter(inspect.signature(func).parameters))
    if first not in hints:
        raise TypeError(f"{name}: annotate the params parameter {first!r} with its model")
    if "return" not in hints:
        raise TypeError(f"{name}: annotate the return type (-> None for no result)")
    return hints[first], hints["return"]

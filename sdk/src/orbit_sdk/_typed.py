"""Typed task references: a task's queue, type, params model, result model and submit defaults
in one object, so that submits and waits are checked by the type checker and validated at run
time.

A reference is declared with :func:`task_ref` in a module that submitters and workers share
(it imports no handler code), or made by ``@worker.task`` from a handler's annotations. It
sends ``params`` encoded and validated, and reads a succeeded task's ``result`` back as the
result model; a task that did not succeed raises :class:`TaskFailedError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Generic, TypedDict, TypeVar, Unpack

from orbit_sdk._codec import INVALID_PARAMS, INVALID_RESULT, Codec
from orbit_sdk._errors import OrbitError
from orbit_sdk._models import RetryPolicy, SideEffect, Task, TaskError, TaskRequest
from orbit_sdk._tasks import DEFAULT_POLL_MS, AsyncTaskCalls, TaskCalls

__all__ = [
    "SubmitOptions",
    "TaskDefaults",
    "TaskFailedError",
    "TaskHandle",
    "TaskRef",
    "task_ref",
]

P = TypeVar("P")
R = TypeVar("R")


class TaskDefaults(TypedDict, total=False):
    """Submit arguments a reference may declare; each submit may override them."""

    priority: int
    delay_ms: int
    side_effect: SideEffect
    retry: RetryPolicy
    timeout_ms: int
    labels: Mapping[str, str]


class SubmitOptions(TaskDefaults, total=False):
    """What one submit through a reference may give, as ``Client.submit`` takes it."""

    run_at: datetime | str
    idempotency_key: str
    concurrency_key: str
    fairness_key: str
    handler_version: str


_DEFAULT_KEYS: Final = frozenset(TaskDefaults.__annotations__)
_OPTION_KEYS: Final = frozenset(SubmitOptions.__annotations__)


def _check_keys(given: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise TypeError(f"unknown {what}: {', '.join(unknown)} (allowed: {sorted(allowed)})")


class TaskFailedError(OrbitError):
    """A task waited for through a reference did not succeed.

    ``task`` is the task as Orbit reported it and ``state`` its state: ``failed``,
    ``cancelled`` or ``needs_review`` (an operator has to decide it). ``code`` is the task's
    error code when it has one (``task.error``), else ``task_cancelled`` or
    ``task_needs_review``.
    """

    _default_code = "task_failed"
    _default_category = "task"

    def __init__(self, task: Task) -> None:
        error: TaskError | None = task.error
        code = error.code if error is not None else f"task_{task.state}"
        reason = f": {error.code}: {error.message}" if error is not None else ""
        super().__init__(
            f"task {task.id} ({task.queue}/{task.type}) ended {task.state}{reason}",
            code=code,
            details={"task_id": task.id, "state": task.state},
        )
        self.task = task
        self.state = task.state


class TaskRef(Generic[P, R]):
    """A task's name and types: tasks of ``queue`` and ``type`` whose params are a ``P`` and
    whose result is an ``R``, with the submit defaults declared for them.

    Make one with :func:`task_ref` or ``@worker.task``. ``version`` is the handler version:
    submits send it as ``handler_version`` and ``worker.implement`` registers under it.
    """

    def __init__(
        self,
        *,
        queue: str,
        type: str,
        params: Any,
        result: Any,
        version: str | None = None,
        defaults: TaskDefaults | None = None,
    ) -> None:
        for what, value in (("queue", queue), ("type", type)):
            if not isinstance(value, str) or not 1 <= len(value) <= 200:
                raise ValueError(f"{what} must be a string of 1 to 200 characters: {value!r}")
        self.queue = queue
        self.type = type
        self.version = version
        name = f"{queue}/{type}"
        self._params: Codec[P] = Codec(params, task=name, code=INVALID_PARAMS, require_object=True)
        self._result: Codec[R] = Codec(result, task=name, code=INVALID_RESULT, require_object=False)
        declared = TaskDefaults(**(defaults or {}))
        _check_keys(declared, _DEFAULT_KEYS, "task defaults")
        side_effect = declared.get("side_effect", "idempotent")
        if side_effect not in ("idempotent", "unsafe"):
            raise ValueError(f"side_effect must be 'idempotent' or 'unsafe': {side_effect!r}")
        self._defaults = declared

    def __repr__(self) -> str:
        version = "" if self.version is None else f", version={self.version!r}"
        params, result = (
            getattr(m, "__qualname__", repr(m)) for m in (self.params_model, self.result_model)
        )
        return f"TaskRef({self.queue!r}, {self.type!r}, params={params}, result={result}{version})"

    @property
    def params_model(self) -> Any:
        """The params model (a Struct, dataclass, TypedDict or pydantic model)."""
        return self._params.model

    @property
    def result_model(self) -> Any:
        """The result's type."""
        return self._result.model

    @property
    def defaults(self) -> TaskDefaults:
        """The submit defaults declared with the reference (a copy)."""
        return TaskDefaults(**self._defaults)

    @property
    def side_effect(self) -> SideEffect:
        """The declared side effect, ``"idempotent"`` unless declared ``"unsafe"``."""
        return self._defaults.get("side_effect", "idempotent")

    # -- the payloads -----------------------------------------------------------------------

    def encode_params(self, params: P) -> Any:
        """``params`` as JSON-ready builtins; raises :class:`PayloadError` when they do not fit."""
        return self._params.encode(params)

    def decode_params(self, raw: Any) -> P:
        """A task's JSON params as ``P``; raises :class:`PayloadError` when they do not fit."""
        return self._params.decode(raw)

    def encode_result(self, value: R) -> Any:
        """A handler's return value as JSON-ready builtins, checked against ``R``."""
        return self._result.encode(value)

    def decode_result(self, raw: Any) -> R:
        """A task's JSON result as ``R``."""
        return self._result.decode(raw)

    def result(self, task: Task) -> R:
        """The result of a settled task: ``R`` when it succeeded, else :class:`TaskFailedError`."""
        if task.state != "succeeded":
            raise TaskFailedError(task)
        return self.decode_result(task.result)

    # -- submitting -------------------------------------------------------------------------

    def request(self, params: P, **options: Unpack[SubmitOptions]) -> TaskRequest:
        """The :class:`TaskRequest` a submit sends: ``params`` encoded and validated, the
        declared defaults with ``options`` over them (``labels`` merge, key by key). Hand it
        to ``client.submit_many`` to batch tasks of several references."""
        return TaskRequest(
            queue=self.queue,
            type=self.type,
            params=self.encode_params(params),
            **self._submit_fields(options),
        )

    def submit(
        self,
        client: TaskCalls,
        params: P,
        *,
        traceparent: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> TaskHandle[R]:
        """Submit one task with a :class:`~orbit_sdk.Client` (``POST /v1/tasks``): ``params``
        encoded and validated, the declared defaults with ``options`` over them."""
        encoded = self.encode_params(params)
        fields = self._submit_fields(options)
        task = client.submit(self.queue, self.type, encoded, traceparent=traceparent, **fields)
        return TaskHandle(task, self)

    async def submit_async(
        self,
        client: AsyncTaskCalls,
        params: P,
        *,
        traceparent: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> TaskHandle[R]:
        """:meth:`submit` with an :class:`~orbit_sdk.AsyncClient`."""
        encoded = self.encode_params(params)
        fields = self._submit_fields(options)
        task = await client.submit(
            self.queue, self.type, encoded, traceparent=traceparent, **fields
        )
        return TaskHandle(task, self)

    def submit_many(
        self,
        client: TaskCalls,
        params: Iterable[P],
        *,
        traceparent: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> list[TaskHandle[R]]:
        """Submit one task per item of ``params`` in one batch (all or nothing), with the same
        ``options``; the handles in order."""
        requests = self._batch(params, options)
        tasks = client.submit_many(requests, traceparent=traceparent)
        return [TaskHandle(task, self) for task in tasks]

    async def submit_many_async(
        self,
        client: AsyncTaskCalls,
        params: Iterable[P],
        *,
        traceparent: str | None = None,
        **options: Unpack[SubmitOptions],
    ) -> list[TaskHandle[R]]:
        """:meth:`submit_many` with an :class:`~orbit_sdk.AsyncClient`."""
        requests = self._batch(params, options)
        tasks = await client.submit_many(requests, traceparent=traceparent)
        return [TaskHandle(task, self) for task in tasks]

    def _submit_fields(self, options: SubmitOptions) -> dict[str, Any]:
        _check_keys(options, _OPTION_KEYS, "submit options")
        fields: dict[str, Any] = {**self._defaults, **options}
        if "labels" in self._defaults and "labels" in options:
            fields["labels"] = {**self._defaults["labels"], **options["labels"]}
        if "labels" in fields:
            fields["labels"] = dict(fields["labels"])
        if "run_at" in options and "delay_ms" not in options:
            fields.pop("delay_ms", None)  # a submit's run_at wins over a declared delay
        if self.version is not None:
            fields.setdefault("handler_version", self.version)
        return fields

    def _batch(self, params: Iterable[P], options: SubmitOptions) -> list[TaskRequest]:
        if "idempotency_key" in options:
            raise TypeError("submit_many cannot give one idempotency_key to several tasks")
        return [self.request(item, **options) for item in params]

    # -- waiting ----------------------------------------------------------------------------

    def wait(
        self,
        client: TaskCalls,
        task: str | Task | TaskHandle[R],
        *,
        timeout: float | None = None,
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> R:
        """Wait for the task (an id, a ``Task`` or a handle) to settle and return its result.

        Raises :class:`TaskFailedError` when it ended ``failed`` or ``cancelled`` or waits in
        ``needs_review``, the builtin ``TimeoutError`` after ``timeout`` seconds, and
        :class:`PayloadError` (``invalid_result``) when the result does not fit ``R``.
        """
        settled = client.wait_for_task(_task_id(task), timeout=timeout, poll_ms=poll_ms)
        return self.result(settled)

    async def wait_async(
        self,
        client: AsyncTaskCalls,
        task: str | Task | TaskHandle[R],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait's deadline, as wait_for_task's
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> R:
        """:meth:`wait` with an :class:`~orbit_sdk.AsyncClient`."""
        settled = await client.wait_for_task(_task_id(task), timeout=timeout, poll_ms=poll_ms)
        return self.result(settled)


@dataclass(frozen=True, slots=True)
class TaskHandle(Generic[R]):
    """A task submitted through a reference: the ``task`` as Orbit answered the submit, and
    the ``ref`` that knows how to read its result."""

    task: Task
    ref: TaskRef[Any, R]

    @property
    def id(self) -> str:
        return self.task.id

    def wait(
        self, client: TaskCalls, *, timeout: float | None = None, poll_ms: int = DEFAULT_POLL_MS
    ) -> R:
        """The task's result; see :meth:`TaskRef.wait`."""
        return self.ref.wait(client, self.task.id, timeout=timeout, poll_ms=poll_ms)

    async def wait_async(
        self,
        client: AsyncTaskCalls,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait's deadline
        poll_ms: int = DEFAULT_POLL_MS,
    ) -> R:
        """The task's result; see :meth:`TaskRef.wait_async`."""
        return await self.ref.wait_async(client, self.task.id, timeout=timeout, poll_ms=poll_ms)


def _task_id(task: str | Task | TaskHandle[Any]) -> str:
    return task if isinstance(task, str) else task.id


def task_ref(
    *,
    queue: str,
    type: str,
    params: type[P],
    result: type[R],
    version: str | None = None,
    **defaults: Unpack[TaskDefaults],
) -> TaskRef[P, R]:
    """Declare a typed task without its handler, for a module submitters and workers share.

    ``params`` is the params model: a msgspec ``Struct``, a dataclass, a ``TypedDict`` or a
    pydantic model. ``result`` is the result's type (any of those, or a type msgspec can
    decode such as ``int``; ``type(None)`` for none). ``defaults`` are submit arguments sent
    with every submit unless the submit gives its own: ``priority``, ``delay_ms``,
    ``side_effect``, ``retry``, ``timeout_ms``, ``labels``. A worker implements the reference
    with ``@worker.implement(ref)``.
    """
    return TaskRef(
        queue=queue,
        type=type,
        params=params,
        result=result,
        version=version,
        defaults=defaults,
    )

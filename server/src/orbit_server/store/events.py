"""The node's in-process bus for committed domain events.

A unit of work records domain events with :meth:`Tx.publish` while it runs; :meth:`Database.run`
hands them to the bus only after its COMMIT, in the order they were recorded, and drops them
when the unit rolls back or is run again. So nothing outside the transaction hears of a change
that did not commit, and no caller pairs a write with a separate "announce".

Handlers are plain functions or coroutine functions, registered per event type. They run in
the committing caller's task, after the commit: a coroutine handler is awaited before
:meth:`Database.run` returns (as key admission after a large submit must be, decision 0012).
A handler's failure is logged and does not reach the caller, whose change is committed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import structlog

log = structlog.get_logger("orbit.store")

E = TypeVar("E")
Handler = Callable[[Any], object]


class EventBus:
    def __init__(self) -> None:
        self._handlers: dict[type, list[Handler]] = {}

    def subscribe(self, kind: type[E], handler: Callable[[E], object]) -> None:
        """Call ``handler(event)`` for every committed event of type ``kind``."""
        self._handlers.setdefault(kind, []).append(handler)

    async def deliver(self, events: Sequence[object]) -> None:
        """Run the handlers of ``events``, in order; called once their unit has committed."""
        for event in events:
            for handler in self._handlers.get(type(event), ()):
                try:
                    outcome = handler(event)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    log.exception("after-commit handler failed", kind=type(event).__name__)

"""The base of the typed-call mixins (``_tasks``, ``_schedules``): how a call is run and how
pages are followed, once for each kind of client.

A mixin only turns arguments into an :class:`~orbit_sdk._models.Operation`; ``Client`` and
``AsyncClient`` override ``_run`` to send it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol, TypeVar

from orbit_sdk._config import ClientConfig
from orbit_sdk._models import Operation

__all__ = ["AsyncCalls", "Calls"]

T = TypeVar("T")


class _Paged(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


PageT = TypeVar("PageT", bound=_Paged)


class Calls:
    """What every synchronous mixin relies on."""

    _config: ClientConfig

    def _run(self, operation: Operation[T]) -> T:
        raise NotImplementedError  # the client sends it

    def _pages(
        self, page_at: Callable[[str | None], Operation[PageT]], cursor: str | None
    ) -> Iterator[PageT]:
        """Every page from ``cursor`` on, until one has no ``next_cursor`` (a short or empty
        page with a cursor is not the last)."""
        while True:
            page = self._run(page_at(cursor))
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


class AsyncCalls:
    """What every asynchronous mixin relies on; see :class:`Calls`."""

    _config: ClientConfig

    async def _run(self, operation: Operation[T]) -> T:
        raise NotImplementedError  # the client sends it

    async def _pages(
        self, page_at: Callable[[str | None], Operation[PageT]], cursor: str | None
    ) -> AsyncIterator[PageT]:
        while True:
            page = await self._run(page_at(cursor))
            yield page
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

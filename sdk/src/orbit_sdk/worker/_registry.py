"""The handlers a worker runs, keyed by (queue, type, version), and how a task picks one."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from orbit_sdk.worker._context import TaskContext
from orbit_sdk.worker._protocol import HandlerInfo

__all__ = ["HandlerFunc", "HandlerRegistry", "HandlerSpec", "SideEffect"]

HandlerFunc: TypeAlias = Callable[[TaskContext], Any]
"""A handler: a sync or async function taking a :class:`TaskContext`."""

SideEffect: TypeAlias = Literal["idempotent", "unsafe"]

MAX_NAME: Final = 200
MAX_VERSION: Final = 64
MAX_VERSIONS: Final = 50
MAX_HANDLERS: Final = 200
_CHUNKS: Final = re.compile(r"\d+|\D+")


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """One registered handler."""

    queue: str
    type: str
    version: str | None
    side_effect: SideEffect
    func: HandlerFunc
    is_async: bool

    @property
    def name(self) -> str:
        version = "" if self.version is None else f"@{self.version}"
        return f"{self.queue}/{self.type}{version}"


def version_order(version: str) -> tuple[tuple[int, int, str], ...]:
    """Natural order of version strings: ``"2" < "10"``, ``"1.9" < "1.10"``."""
    return tuple(
        (0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk)
        for chunk in _CHUNKS.findall(version)
    )


def _check_name(what: str, value: str, limit: int) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise ValueError(f"{what} must be a string of 1 to {limit} characters: {value!r}")


class HandlerRegistry:
    """Handlers by (queue, type), each with its versions (``None``: any version)."""

    def __init__(self) -> None:
        self._by_kind: dict[tuple[str, str], dict[str | None, HandlerSpec]] = {}

    def __len__(self) -> int:
        return sum(len(versions) for versions in self._by_kind.values())

    def add(
        self,
        func: HandlerFunc,
        *,
        queue: str,
        type: str,
        version: str | None,
        side_effect: SideEffect,
    ) -> HandlerSpec:
        """Register ``func``; raises ``ValueError`` for a duplicate or an invalid name."""
        _check_name("queue", queue, MAX_NAME)
        _check_name("type", type, MAX_NAME)
        if version is not None:
            _check_name("version", version, MAX_VERSION)
        if side_effect not in ("idempotent", "unsafe"):
            raise ValueError(f"side_effect must be 'idempotent' or 'unsafe': {side_effect!r}")
        if not callable(func):
            raise TypeError(f"a handler must be callable: {func!r}")
        versions = self._by_kind.get((queue, type), {})
        if version in versions:
            raise ValueError(f"a handler for {queue}/{type} version {version!r} exists already")
        if len([v for v in versions if v is not None]) >= MAX_VERSIONS and version is not None:
            raise ValueError(f"at most {MAX_VERSIONS} versions of {queue}/{type}")
        if not versions and len(self._by_kind) >= MAX_HANDLERS:
            raise ValueError(f"at most {MAX_HANDLERS} (queue, type) pairs per worker")
        spec = HandlerSpec(
            queue=queue,
            type=type,
            version=version,
            side_effect=side_effect,
            func=func,
            is_async=inspect.iscoroutinefunction(func),
        )
        self._by_kind.setdefault((queue, type), {})[version] = spec
        return spec

    def hello_handlers(self) -> list[HandlerInfo]:
        """The ``handlers`` of ``hello``: versions listed, or none when any version runs."""
        infos = []
        for (queue, type_), versions in self._by_kind.items():
            named = [v for v in versions if v is not None]
            listed = [] if None in versions else sorted(named, key=version_order)
            infos.append(HandlerInfo(queue=queue, type=type_, versions=listed))
        return infos

    def pick(self, queue: str, type: str, version: str | None) -> HandlerSpec | None:
        """The handler for a task: its exact version, else the unversioned handler; a task
        without a version gets the unversioned handler, else the highest version."""
        versions = self._by_kind.get((queue, type))
        if not versions:
            return None
        if version is not None and version in versions:
            return versions[version]
        if None in versions:
            return versions[None]
        if version is not None:
            return None
        return versions[max(versions, key=_version_key)]


def _version_key(version: str | None) -> tuple[tuple[int, int, str], ...]:
    return () if version is None else version_order(version)

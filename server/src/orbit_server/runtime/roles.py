"""The owner of every background loop (STYLE rule 8, SPEC E2, O1).

Each enabled server role may register loops; the supervisor starts them, stops them on
shutdown (cancellation propagates), and restarts none silently: a loop that crashes is logged
and marks the node not ready, because a half-working node must not pretend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from orbit_server.config import ServerRole

log = structlog.get_logger("orbit.roles")

LoopFactory = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class LoopSpec:
    role: ServerRole
    name: str
    run: LoopFactory


class Supervisor:
    def __init__(self, enabled: frozenset[ServerRole]) -> None:
        self.enabled = enabled
        self._specs: list[LoopSpec] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.failed: list[str] = []
        self.failure = asyncio.Event()  # set when any loop has crashed

    def register(self, role: ServerRole, name: str, run: LoopFactory) -> None:
        """Add a loop; it runs only if its role is enabled on this instance."""
        if role in self.enabled:
            self._specs.append(LoopSpec(role, name, run))

    @property
    def loops(self) -> list[str]:
        return [spec.name for spec in self._specs]

    async def start(self) -> None:
        for spec in self._specs:
            self._tasks[spec.name] = asyncio.create_task(
                self._guarded(spec), name=f"orbit:{spec.name}"
            )
        log.info("roles started", roles=sorted(str(r) for r in self.enabled), loops=self.loops)

    async def _guarded(self, spec: LoopSpec) -> None:
        try:
            await spec.run()
        except Exception as exc:
            self.failed.append(spec.name)
            self.failure.set()
            log.error("background loop crashed", loop=spec.name, exc_info=exc)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

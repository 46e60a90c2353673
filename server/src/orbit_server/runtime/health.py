"""Readiness (API.md ``/readyz``): the database answers and the schema is current."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from orbit_server.errors import DatabaseUnavailable
from orbit_server.observability.metrics import Metrics
from orbit_server.store import Database
from orbit_server.store.base import NodeNotWritable
from orbit_server.store.migrate import schema_status

log = structlog.get_logger("orbit.health")


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    checks: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


class ReadinessProbe:
    def __init__(
        self,
        db: Database,
        metrics: Metrics,
        *,
        failed_loops: Callable[[], list[str]] = list,
        timeout_s: float = 3.0,
    ) -> None:
        self._db = db
        self._metrics = metrics
        self._failed_loops = failed_loops
        self._timeout_s = timeout_s
        self.draining = False

    async def check(self) -> Readiness:
        if self.draining:
            return Readiness(False, {"server": "draining"}, "this server is shutting down")
        failed = self._failed_loops()
        if failed:
            reason = f"background loops stopped: {', '.join(failed)}; restart this server"
            return Readiness(False, {"loops": "failed"}, reason)
        checks = {"database": "ok", "schema": "unknown"}
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._db.ping()
                status = await schema_status(self._db)
        except Exception as exc:  # any failure to reach the database means "not ready"
            self._metrics.db_up.set(0)
            checks["database"] = "unreachable"
            # The outage is told once for the process by the store's availability; probes
            # come every few seconds and would repeat it.
            away = (
                exc
                if isinstance(exc, DatabaseUnavailable)
                else DatabaseUnavailable("the database did not answer the readiness check")
            )
            self._db.availability.failed(away)
            log.debug("readiness: database unreachable", reason=type(exc).__name__)
            if isinstance(exc, NodeNotWritable):
                checks["database"] = "not writable"
                return Readiness(False, checks, exc.message)
            return Readiness(False, checks, "the database is unreachable")
        self._db.availability.answered()
        node = self._db.database_node()
        if node is not None:
            checks["database_node"], checks["database_role"] = node
        self._metrics.db_up.set(1)
        self._metrics.schema_current.set(1 if status.current else 0)
        if not status.current:
            checks["schema"] = "outdated"
            return Readiness(False, checks, status.describe())
        checks["schema"] = "current"
        return Readiness(True, checks)

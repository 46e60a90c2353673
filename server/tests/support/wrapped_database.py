"""A database that hands every unit to a real backend: tests subclass it to watch or disturb
the units (faults, counted statements) while the real database does the work."""

from __future__ import annotations

from orbit_server.store import Database
from orbit_server.store.base import ServerInfo, T, Unit


class WrappedDatabase(Database):
    def __init__(self, real: Database) -> None:
        super().__init__(real.retry, real.unit_timeout_s)
        self.real = real
        self.bus = real.bus  # the node's: what its units commit reaches the node's waiters
        self.dialect = real.dialect
        self.queries = real.queries

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        return await self.real._run_once(unit, write=write, timeout_s=timeout_s)

    def _exhausted(self, exc: Exception) -> Exception:
        return self.real._exhausted(exc)

    async def connect(self) -> ServerInfo:
        return await self.real.connect()

    async def ping(self) -> None:
        await self.real.ping()

    async def close(self) -> None:
        await self.real.close()

    def pool_stats(self) -> tuple[int, int]:
        return self.real.pool_stats()

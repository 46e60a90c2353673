"""A database that hands every unit to a real backend: tests subclass it to watch or disturb
the units (faults, counted statements) while the real database does the work."""

from __future__ import annotations

from collections import Counter
from typing import Any

from orbit_server.store import Database, Tx
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


class CountingTx:
    """The real transaction, counting the statements that write and those that read."""

    def __init__(self, tx: Tx, writes: Counter[str], reads: Counter[str]) -> None:
        self._tx = tx
        self._writes = writes
        self._reads = reads

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    async def execute(self, query: str, params: Any = None) -> int:
        self._writes[query] += 1
        return await self._tx.execute(query, params)

    async def execute_many(self, query: str, rows: Any) -> int:
        self._writes[query] += 1
        return await self._tx.execute_many(query, rows)

    def defer(self, query: str, params: Any = None) -> None:
        self._writes[query] += 1
        self._tx.defer(query, params)

    def defer_many(self, query: str, rows: Any) -> None:
        self._writes[query] += 1
        self._tx.defer_many(query, rows)

    async def fetch_all(self, query: str, params: Any = None) -> Any:
        self._reads[query] += 1
        return await self._tx.fetch_all(query, params)

    async def fetch_one(self, query: str, params: Any = None) -> Any:
        self._reads[query] += 1
        return await self._tx.fetch_one(query, params)

    async def fetch_union(self, query: str, many: Any) -> Any:
        self._reads[query] += 1
        return await self._tx.fetch_union(query, many)


class CountingDatabase(WrappedDatabase):
    """Counts, by query name, the statements its units run."""

    def __init__(self, real: Database) -> None:
        super().__init__(real)
        self.writes: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()

    async def _run_once(self, unit: Unit[T], *, write: bool, timeout_s: float) -> T:
        async def counted(tx: Tx) -> T:
            return await unit(CountingTx(tx, self.writes, self.reads))

        return await super()._run_once(counted, write=write, timeout_s=timeout_s)

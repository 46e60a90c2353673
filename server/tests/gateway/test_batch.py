"""Group commit: requests of many connections share transactions, each caller gets its own
answers, and one caller's bad item does not fail the others."""

from __future__ import annotations

import asyncio

import pytest

from orbit_server.errors import InvalidRequest, Unavailable
from orbit_server.gateway.batch import Batcher


async def test_requests_that_arrive_while_a_batch_commits_share_the_next() -> None:
    calls: list[list[int]] = []
    gate = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        calls.append(items)
        await gate.wait()  # the first transaction is still committing
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(run)
    first = asyncio.create_task(batcher.submit([1]))
    await asyncio.sleep(0)  # the first batch starts
    rest = [asyncio.create_task(batcher.submit([n, n + 1])) for n in (2, 4, 6)]
    await asyncio.sleep(0)
    gate.set()
    assert await first == [10]
    assert [await r for r in rest] == [[20, 30], [40, 50], [60, 70]]
    assert calls == [[1], [2, 3, 4, 5, 6, 7]]  # two transactions for four callers


async def test_one_callers_bad_item_fails_only_that_caller() -> None:
    async def run(items: list[int]) -> list[int]:
        if 13 in items:
            raise InvalidRequest("unlucky")
        return items

    batcher: Batcher[int, int] = Batcher(run)
    results = await asyncio.gather(
        batcher.submit([1]), batcher.submit([13]), batcher.submit([2]), return_exceptions=True
    )
    assert results[0] == [1] and results[2] == [2]
    assert isinstance(results[1], InvalidRequest)


async def test_an_outage_fails_every_caller_of_the_batch() -> None:
    async def run(items: list[int]) -> list[int]:
        raise Unavailable("down")

    batcher: Batcher[int, int] = Batcher(run)
    results = await asyncio.gather(batcher.submit([1]), batcher.submit([2]), return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results)
    with pytest.raises(Unavailable):
        await batcher.submit([3])

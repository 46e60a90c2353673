"""The coalescer: requests of many connections share transactions, each caller gets its own
answers, and one caller's bad item does not fail the others; eager starts are held for their
results (decision 0008)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orbit_server.errors import InvalidRequest, Unavailable
from orbit_server.gateway.coalesce import LANES, MAX_ITEMS, Coalescer, _Queue
from orbit_server.pulse.worker import LeaseRef, Outcome, Renewal, Report, StartAnswer, StartVerdict


def queue_of(run: Any) -> _Queue[int, int]:
    return _Queue(run, max_items=MAX_ITEMS, lanes=LANES)


async def test_requests_that_arrive_while_a_batch_commits_share_the_next() -> None:
    calls: list[list[int]] = []
    gate = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        calls.append(items)
        await gate.wait()  # the first transaction is still committing
        return [i * 10 for i in items]

    batcher = queue_of(run)
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

    batcher = queue_of(run)
    results = await asyncio.gather(
        batcher.submit([1]), batcher.submit([13]), batcher.submit([2]), return_exceptions=True
    )
    assert results[0] == [1] and results[2] == [2]
    assert isinstance(results[1], InvalidRequest)


async def test_an_outage_fails_every_caller_of_the_batch() -> None:
    async def run(items: list[int]) -> list[int]:
        raise Unavailable("down")

    batcher = queue_of(run)
    results = await asyncio.gather(batcher.submit([1]), batcher.submit([2]), return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results)
    with pytest.raises(Unavailable):
        await batcher.submit([3])


def coalescer(
    record: Any = None, report: Any = None, *, hold_s: float = 60
) -> tuple[Coalescer, list[list[LeaseRef]]]:
    """A coalescer whose starts are recorded by ``record`` (default: all started, noted)."""
    recorded: list[list[LeaseRef]] = []

    async def started(refs: list[LeaseRef]) -> list[StartAnswer]:
        recorded.append(refs)
        return [StartAnswer(r, StartVerdict.STARTED) for r in refs]

    async def renew(refs: list[LeaseRef]) -> list[Renewal]:
        raise AssertionError("no renewals here")

    async def accepted(reports: list[Report]) -> list[Outcome]:
        return [Outcome.ACCEPTED for _ in reports]

    return Coalescer(record or started, renew, report or accepted, hold_s=hold_s), recorded


def hold(c: Coalescer, refs: list[LeaseRef]) -> asyncio.Future[Any]:
    """Hold starts as one request; its answer (or error) once they are all committed."""
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    c.hold_starts(refs, answer.set_result)
    return answer


REF = LeaseRef("tsk_1", 1, "lse_1", "ses_1")
OTHER = LeaseRef("tsk_2", 1, "lse_2", "ses_1")


async def test_a_result_takes_its_held_start_with_it() -> None:
    c, recorded = coalescer()
    answer = hold(c, [REF])
    assert await c.report([Report(REF, None)]) == [Outcome.ACCEPTED]
    assert await answer == [StartAnswer(REF, StartVerdict.STARTED)]
    assert recorded == [] and c.starts.batches == 0


async def test_a_start_the_hold_did_not_pair_is_recorded_alone() -> None:
    c, recorded = coalescer(hold_s=0)
    assert await hold(c, [REF, OTHER]) == [
        StartAnswer(REF, StartVerdict.STARTED),
        StartAnswer(OTHER, StartVerdict.STARTED),
    ]
    assert recorded == [[REF, OTHER]]  # one transaction for the request


async def test_a_result_of_another_session_takes_no_held_start() -> None:
    c, recorded = coalescer(hold_s=0)
    answer = hold(c, [REF])
    await c.report([Report(LeaseRef("tsk_1", 1, "lse_1", "ses_2"), None)])
    await answer
    assert recorded == [[REF]]


async def test_a_result_waits_for_its_start_being_recorded_alone() -> None:
    """The hold ended and the start is in its own transaction: a result that comes now waits
    for that commit, so that it finds its attempt started."""
    commit = asyncio.Event()
    reported: list[bool] = []

    async def record(refs: list[LeaseRef]) -> list[StartAnswer]:
        await commit.wait()
        return [StartAnswer(r, StartVerdict.STARTED) for r in refs]

    async def report(reports: list[Report]) -> list[Outcome]:
        reported.append(commit.is_set())
        return [Outcome.ACCEPTED for _ in reports]

    c, _ = coalescer(record, report, hold_s=0)
    answer = hold(c, [REF])
    for _ in range(3):  # the zero hold ends, recording starts
        await asyncio.sleep(0)
    assert c.starts.batches == 1
    result = asyncio.create_task(c.report([Report(REF, None)]))
    await asyncio.sleep(0)
    assert not result.done() and reported == []
    commit.set()
    assert await result == [Outcome.ACCEPTED]
    assert reported == [True] and (await answer)[0].verdict is StartVerdict.STARTED


async def test_a_start_taken_by_a_result_that_failed_is_recorded_alone() -> None:
    """The result's transaction did not commit (the database refused it): the start it took
    is recorded on its own at once, and answered after that commit."""

    async def refuse(reports: list[Report]) -> list[Outcome]:
        raise Unavailable("down")

    c, recorded = coalescer(report=refuse)
    first, second = hold(c, [REF]), hold(c, [OTHER])
    with pytest.raises(Unavailable):
        await c.report([Report(REF, None)])
    assert await first == [StartAnswer(REF, StartVerdict.STARTED)]  # not after the 60 s hold
    assert recorded == [[REF]] and not second.done()


async def test_a_refused_result_answers_its_held_start_stale() -> None:
    async def stale(reports: list[Report]) -> list[Outcome]:
        return [Outcome.STALE for _ in reports]

    c, recorded = coalescer(report=stale)
    answer = hold(c, [REF])
    await c.report([Report(REF, None)])
    assert (await answer)[0].verdict is StartVerdict.STALE and recorded == []


async def test_a_failed_recording_answers_the_request_with_its_error() -> None:
    async def down(refs: list[LeaseRef]) -> list[StartAnswer]:
        raise Unavailable("down")

    c, _ = coalescer(down, hold_s=0)
    assert isinstance(await hold(c, [REF, OTHER]), Unavailable)

"""The peer workload on the bare database, with no Orbit code: the same phases as
``bench.peer`` by a bare asyncio loop over ``asyncmy``, on the same server in the same run.

- *single*: ``single`` inserts, one per transaction, one after another from one connection;
- *batched*: the rest, ``batch`` rows per transaction (one multi-row ``INSERT``), from it too;
- *drain*: in ``lanes`` connections at once, each claims up to ``claim`` rows
  (``SELECT … FOR UPDATE SKIP LOCKED`` + ``UPDATE``, one transaction) and marks them done
  (another), until nothing is left — as ``bench.baseline`` does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncmy

from bench.baseline import _connect_args, fresh_raw_table
from bench.peer import PeerFigures, figures

LANES = 8
CLAIM = 100
_INSERT = "INSERT INTO raw_tasks (state, params) VALUES (%s, %s)"
_ROW = (0, "{}")


async def _connect(url: str) -> Any:
    conn = await asyncmy.connect(**_connect_args(url))
    async with conn.cursor() as cur:
        await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    await conn.commit()
    return conn


async def _drain_lane(conn: Any, lane: int, claim: int) -> int:
    done = 0
    async with conn.cursor() as cur:
        while True:
            await cur.execute(
                "SELECT id FROM raw_tasks FORCE INDEX (raw_tasks_state) WHERE state = 0 "
                "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                (claim,),
            )
            ids = [r[0] for r in await cur.fetchall()]
            if not ids:
                await conn.commit()
                return done
            marks = ", ".join(["%s"] * len(ids))
            await cur.execute(
                f"UPDATE raw_tasks SET state = 1, claimed_by = %s WHERE id IN ({marks})",
                (lane, *ids),
            )
            await conn.commit()
            await cur.execute(f"UPDATE raw_tasks SET state = 2 WHERE id IN ({marks})", tuple(ids))
            await conn.commit()
            done += len(ids)


async def run_peer_raw(
    url: str, *, tasks: int, single: int, batch: int, lanes: int = LANES, claim: int = CLAIM
) -> PeerFigures:
    """The peer workload's four figures on the bare database ``url``."""
    await fresh_raw_table(url)
    conn = await _connect(url)
    try:
        async with conn.cursor() as cur:
            started = time.perf_counter()
            for _ in range(single):
                await cur.execute(_INSERT, _ROW)
                await conn.commit()
            single_s = time.perf_counter() - started
            started, sent = time.perf_counter(), single
            while sent < tasks:
                size = min(batch, tasks - sent)
                await cur.executemany(_INSERT, [_ROW] * size)
                await conn.commit()
                sent += size
            batch_s = time.perf_counter() - started
    finally:
        conn.close()
    conns = [await _connect(url) for _ in range(lanes)]  # connected before the clock starts
    try:
        started = time.perf_counter()
        done = await asyncio.gather(*(_drain_lane(c, n, claim) for n, c in enumerate(conns)))
        drain_s = time.perf_counter() - started
    finally:
        for c in conns:
            c.close()
    if sum(done) != tasks:
        raise RuntimeError(f"the raw drain finished {sum(done)} of {tasks} tasks")
    return figures(
        "raw", None, tasks=tasks, single=single, batch=batch, single_s=single_s,
        batch_s=batch_s, drain_s=drain_s,
    )  # fmt: skip

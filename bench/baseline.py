"""The raw-database baseline: the least a durable task lifecycle costs on this database, with no
Orbit code at all — insert, claim (``SELECT … FOR UPDATE SKIP LOCKED`` + ``UPDATE``), mark
done — run by a bare asyncio loop over ``asyncmy`` in several lanes. Every Orbit figure of a
run is reported as a ratio of this one, measured on the same server in the same run."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import asyncmy

TABLE = """
CREATE TABLE IF NOT EXISTS raw_tasks (
  id BIGINT NOT NULL AUTO_INCREMENT,
  state TINYINT NOT NULL,
  params TEXT NOT NULL,
  claimed_by INT NULL,
  PRIMARY KEY (id),
  KEY raw_tasks_state (state, id)
) ENGINE=InnoDB
"""


@dataclass
class BaselineResult:
    per_transaction: int
    lanes: int
    tasks: int
    seconds: float
    tasks_per_s: float


def _connect_args(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "db": parts.path.lstrip("/"),
        "autocommit": False,
    }


async def _lane(url: str, lane: int, batches: int, per_tx: int) -> None:
    conn = await asyncmy.connect(**_connect_args(url))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            rows = [(0, '{"n": 1}')] * per_tx
            for _ in range(batches):
                await cur.executemany("INSERT INTO raw_tasks (state, params) VALUES (%s, %s)", rows)
                await conn.commit()
                await cur.execute(
                    "SELECT id FROM raw_tasks FORCE INDEX (raw_tasks_state) WHERE state = 0 "
                    "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                    (per_tx,),
                )
                ids = [r[0] for r in await cur.fetchall()]
                marks = ", ".join(["%s"] * len(ids))
                if ids:
                    await cur.execute(
                        f"UPDATE raw_tasks SET state = 1, claimed_by = %s WHERE id IN ({marks})",
                        (lane, *ids),
                    )
                await conn.commit()
                if ids:
                    await cur.execute(
                        f"UPDATE raw_tasks SET state = 2 WHERE id IN ({marks})",
                        tuple(ids),
                    )
                await conn.commit()
    finally:
        conn.close()


async def fresh_raw_table(url: str) -> None:
    """The baseline's table on the database ``url``, empty."""
    conn = await asyncmy.connect(**{**_connect_args(url), "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute(TABLE)
            await cur.execute("TRUNCATE TABLE raw_tasks")
    finally:
        conn.close()


async def run_baseline(url: str, *, tasks: int, per_tx: int, lanes: int = 8) -> BaselineResult:
    """``tasks`` through insert → claim → done, ``per_tx`` per transaction, in ``lanes``."""
    await fresh_raw_table(url)
    batches = max(1, tasks // (per_tx * lanes))
    started = time.perf_counter()
    await asyncio.gather(*(_lane(url, lane, batches, per_tx) for lane in range(lanes)))
    seconds = time.perf_counter() - started
    done = batches * per_tx * lanes
    return BaselineResult(per_tx, lanes, done, round(seconds, 3), round(done / seconds, 1))

"""Store methods of node duties: work one node at a time does for the whole cluster (the
metrics sampler's reads), held for a term that its holder renews; once the holder stops
renewing, the next node that asks takes it over."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orbit_server.store.base import Tx, utc


@dataclass(frozen=True, slots=True)
class DutyTerm:
    """A node asking for a duty until ``until``, as of ``now``."""

    name: str
    node: str
    now: datetime
    until: datetime


@dataclass(frozen=True, slots=True)
class DutyHolder:
    name: str
    holder: str
    expires_at: datetime


async def duty_take(tx: Tx, term: DutyTerm) -> bool:
    """Take the duty when it is free or its term ended, or renew it when ``term.node`` holds
    it; answers whether ``term.node`` holds it now (two statements: the upsert, a read)."""
    await tx.execute(
        "duty_take",
        {"name": term.name, "node": term.node, "now": term.now, "until": term.until},
    )
    holder = await duty_get(tx, term.name)
    return holder is not None and holder.holder == term.node and holder.expires_at > term.now


async def duty_get(tx: Tx, name: str) -> DutyHolder | None:
    row = await tx.fetch_one("duty_get", {"name": name})
    if row is None:
        return None
    return DutyHolder(str(row["name"]), str(row["holder"]), utc(row["expires_at"]))


async def duty_release(tx: Tx, name: str, node: str, now: datetime) -> bool:
    """End ``node``'s term at ``now`` (it stops); answers whether it held the duty."""
    return await tx.execute("duty_release", {"name": name, "node": node, "now": now}) > 0

"""The queue sampler: the metrics read from the database — queue depth, the oldest pending
task's age, unserved tasks, the result-event backlog — read by one node at a time.

Every ``interval`` each node asks for the ``queue-sampler`` duty (``store/duties.py``): the
node that gets it (or renews it) reads and exports the samples in the same short transaction;
every other node exports none of these series, so a dashboard takes ``max`` over nodes and
sees one value. When the holder stops renewing (it stopped, lost the database), another node
takes over once its term ends, two intervals later. The cost is one transaction per node per
interval, whatever the number of scrapes or nodes, and nothing on the claim/complete path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from orbit_server.clock import Clock
from orbit_server.errors import Unavailable
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.loops import log_skipped
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import duties as duty_store
from orbit_server.store import queues as queue_store
from orbit_server.store import task_events as event_store
from orbit_server.store.duties import DutyTerm
from orbit_server.store.queues import QueueDepth

log = structlog.get_logger("orbit.sampler")

DUTY = "queue-sampler"
WORKFLOW_EVENTS = "workflow"  # the owner kind whose result events workflow advancement consumes

UnservedCounts = Callable[[Tx, Sequence[QueueDepth]], Awaitable[Mapping[tuple[str, str], int]]]
"""``unserved_counts(tx, depths)``: waiting tasks no connected worker can take, by (queue name,
reason), read in the sampler's transaction; ``depths`` are the queues holding work."""


async def no_unserved(tx: Tx, depths: Sequence[QueueDepth]) -> Mapping[tuple[str, str], int]:
    """The default ``UnservedCounts`` until one is wired: nothing to report."""
    return {}


@dataclass(frozen=True, slots=True)
class QueueSample:
    """What the sampling node read in one transaction."""

    now: datetime
    depths: list[QueueDepth]
    oldest_pending: dict[tuple[Scope, str], datetime]
    unserved: Mapping[tuple[str, str], int]
    result_events_pending: int


class QueueSampler:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        metrics: Metrics,
        *,
        node: str,
        interval_s: float,
        unserved: UnservedCounts = no_unserved,
        max_queues: int = 10_000,
        max_events: int = 100_000,
    ) -> None:
        self._db = db
        self._clock = clock
        self._metrics = metrics
        self.node = node
        self.interval_s = interval_s
        self.unserved = unserved  # replaceable until the loop starts
        self.max_queues = max_queues
        self.max_events = max_events
        self.holding = False

    @property
    def term(self) -> timedelta:
        """How long a take lasts: two intervals, so one late renewal does not lose the duty."""
        return timedelta(seconds=2 * self.interval_s)

    async def sample(self) -> QueueSample | None:
        """Take or renew the duty and, holding it, read and export the samples; not holding
        it, export none. Answers the sample, or None when another node holds the duty.
        :class:`Unavailable` propagates after the sampled series are cleared (stale values
        would mislead)."""
        now = self._clock.now()
        ask = DutyTerm(DUTY, self.node, now, now + self.term)

        async def unit(tx: Tx) -> QueueSample | None:
            if not await duty_store.duty_take(tx, ask):
                return None
            depths = await queue_store.queues_with_work(tx, limit=self.max_queues)
            waiting = [(d.scope, d.name) for d in depths if d.waiting]
            oldest = await queue_store.queues_oldest_pending(tx, waiting) if waiting else {}
            backlog = await event_store.task_events_pending_owned_count(
                tx, WORKFLOW_EVENTS, most=self.max_events
            )
            unserved = await self.unserved(tx, depths)
            return QueueSample(now, depths, oldest, unserved, backlog)

        try:
            sample = await self._db.run(unit)
        except Unavailable:
            self.lost()
            raise
        if sample is None:
            self.lost()
            return None
        if not self.holding:  # which node samples: orbit_queue_sampler_active tells it
            log.debug("queue sampling duty taken", node=self.node)
        self.holding = True
        self._export(sample)
        return sample

    def lost(self) -> None:
        """This node does not hold the duty (any more): it exports no samples."""
        if self.holding:
            log.debug("queue sampling duty left", node=self.node)
        self.holding = False
        self._metrics.clear_samples()

    def _export(self, sample: QueueSample) -> None:
        m = self._metrics
        tasks: dict[tuple[str, str], int] = defaultdict(int)
        for depth in sample.depths:
            label = m.queue_label(depth.name)
            tasks[(label, "waiting")] += depth.waiting
            tasks[(label, "active")] += depth.active
        ages: dict[str, float] = {}
        for (_, name), due in sample.oldest_pending.items():
            label = m.queue_label(name)
            ages[label] = max(ages.get(label, 0.0), (sample.now - due).total_seconds())
        unserved: dict[tuple[str, str], int] = defaultdict(int)
        for (name, reason), count in sample.unserved.items():
            unserved[(m.queue_label(name), reason)] += count
        # A queue that emptied since the last sample must not keep its old value.
        m.clear_samples()
        m.queue_sampler.set(1)
        for (label, state), count in tasks.items():
            m.queue_tasks.labels(label, state).set(count)
        for label, age in ages.items():
            m.queue_oldest_pending_age.labels(label).set(max(0.0, age))
        for (label, reason), count in unserved.items():
            m.queue_unserved.labels(label, reason).set(count)
        m.result_events_pending.labels(WORKFLOW_EVENTS).set(sample.result_events_pending)

    async def release(self) -> None:
        """Give the duty up (this node stops), so that another takes it at its next sample."""
        if not self.holding:
            return
        self.holding = False
        self._metrics.clear_samples()
        now = self._clock.now()
        await self._db.run(lambda tx: duty_store.duty_release(tx, DUTY, self.node, now))


async def sampler_loop(sampler: QueueSampler, *, release_timeout_s: float = 2.0) -> None:
    """Sample every ``sampler.interval_s`` for as long as it runs; on its way out, give the
    duty up (bounded: a stopping node does not wait long for a database that is gone)."""
    try:
        while True:
            try:
                await sampler.sample()
            except Unavailable as exc:
                log_skipped(log, "queue sample", exc)
            except Exception:  # a bug in sampling must not stop the node's other work
                log.exception("queue sample failed")
                sampler.lost()
            await asyncio.sleep(sampler.interval_s)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(sampler.release()), release_timeout_s)

"""The queue sampler: one node at a time reads queue depth from the database and exports it;
the others export none of the sampled series, and the duty moves when its holder stops."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta

from orbit_server.audit import Actor
from orbit_server.clock import FakeClock
from orbit_server.governance.keys import Role
from orbit_server.observability.metrics import Metrics
from orbit_server.pulse.model import TaskSpec
from orbit_server.runtime.node import Node
from orbit_server.runtime.sampler import QueueSampler
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import duties as duty_store
from orbit_server.store.queues import QueueDepth
from tests.conftest import OTHER_TENANT, SCOPE

INTERVAL_S = 15.0


def sampler(node: Node, name: str, metrics: Metrics | None = None) -> QueueSampler:
    return QueueSampler(
        node.db, node.clock, metrics or Metrics(max_queues=2), node=name, interval_s=INTERVAL_S
    )


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def sampled(metrics: Metrics) -> list[tuple[str, dict[str, str], float]]:
    """Every sampled series this node exports (none on a node that does not sample)."""
    names = {
        "orbit_queue_tasks",
        "orbit_queue_oldest_pending_age_seconds",
        "orbit_queue_unserved_tasks",
        "orbit_result_events_pending",
    }
    return [
        (s.name, s.labels, s.value)
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name in names
    ]


async def submit(node: Node, queue: str, count: int, scope: Scope = SCOPE) -> list[str]:
    specs = [TaskSpec(queue=queue, type="send") for _ in range(count)]
    return [s.task.id for s in await node.tasks.submit_many(scope, specs)]


async def test_one_of_two_nodes_exports_queue_depth(node: Node, clock: FakeClock) -> None:
    await submit(node, "emails", 3)
    await submit(node, "emails", 2, OTHER_TENANT)  # one label for the name in every scope
    clock.advance(4000)
    await submit(node, "reports", 1)
    await submit(node, "x-third", 1)  # past the cap of two queue names: folded into "other"
    await submit(node, "y-fourth", 1)
    clock.advance(1000)
    a, b = Metrics(max_queues=2), Metrics(max_queues=2)
    first, second = sampler(node, "node-a", a), sampler(node, "node-b", b)

    assert await first.sample() is not None
    assert await second.sample() is None  # node-a holds the duty
    assert value(a, "orbit_queue_tasks", queue="emails", state="waiting") == 5
    assert value(a, "orbit_queue_tasks", queue="emails", state="active") == 0
    assert value(a, "orbit_queue_tasks", queue="reports", state="waiting") == 1
    assert value(a, "orbit_queue_tasks", queue="other", state="waiting") == 2
    assert value(a, "orbit_queue_oldest_pending_age_seconds", queue="emails") == 5.0
    assert value(a, "orbit_queue_oldest_pending_age_seconds", queue="reports") == 1.0
    assert value(a, "orbit_result_events_pending", consumer="workflow") == 0
    assert value(a, "orbit_queue_sampler_active") == 1
    assert sampled(b) == []
    assert value(b, "orbit_queue_sampler_active") == 0


async def test_the_duty_fails_over_when_its_holder_stops_renewing(
    node: Node, clock: FakeClock
) -> None:
    await submit(node, "emails", 2)
    a, b = Metrics(), Metrics()
    first, second = sampler(node, "node-a", a), sampler(node, "node-b", b)
    assert await first.sample() is not None
    clock.advance(timedelta(seconds=INTERVAL_S))
    assert await first.sample() is not None  # renewed
    assert await second.sample() is None
    # node-a stops renewing (hung, cut off): its term of two intervals runs out.
    clock.advance(timedelta(seconds=2 * INTERVAL_S - 1))
    assert await second.sample() is None
    clock.advance(timedelta(seconds=1))
    assert await second.sample() is not None
    assert value(b, "orbit_queue_tasks", queue="emails", state="waiting") == 2
    # node-a comes back: it finds the duty taken and stops exporting what it read long ago.
    assert value(a, "orbit_queue_tasks", queue="emails", state="waiting") == 2
    assert await first.sample() is None
    assert sampled(a) == []


async def test_a_stopping_holder_gives_the_duty_up_at_once(node: Node, clock: FakeClock) -> None:
    first, second = sampler(node, "node-a"), sampler(node, "node-b")
    assert await first.sample() is not None
    await first.release()
    assert await second.sample() is not None

    async def holder(tx: Tx) -> str | None:
        found = await duty_store.duty_get(tx, "queue-sampler")
        return None if found is None else found.holder

    assert await node.db.read(holder) == "node-b"


async def test_a_queue_that_empties_is_no_longer_exported(node: Node) -> None:
    metrics = Metrics()
    one = sampler(node, "node-a", metrics)
    [task] = await submit(node, "emails", 1)
    await one.sample()
    assert value(metrics, "orbit_queue_tasks", queue="emails", state="waiting") == 1
    await node.tasks.cancel(SCOPE, task, reason=None, actor=Actor("test"))
    await one.sample()
    assert value(metrics, "orbit_queue_tasks", queue="emails", state="waiting") is None
    assert value(metrics, "orbit_queue_oldest_pending_age_seconds", queue="emails") is None


async def test_unserved_counts_come_from_the_injected_reader(node: Node) -> None:
    seen: list[list[str]] = []

    async def unserved(tx: Tx, depths: Sequence[QueueDepth]) -> Mapping[tuple[str, str], int]:
        seen.append([d.name for d in depths])
        return {("emails", "no_worker"): 3, ("reports", "no_worker"): 1}

    metrics = Metrics()
    one = sampler(node, "node-a", metrics)
    one.unserved = unserved
    await submit(node, "emails", 3)
    await one.sample()
    assert seen == [["emails"]]
    assert value(metrics, "orbit_queue_unserved_tasks", queue="emails", reason="no_worker") == 3
    assert value(metrics, "orbit_queue_unserved_tasks", queue="reports", reason="no_worker") == 1


async def test_the_node_runs_the_sampler_and_gives_the_duty_up_when_it_stops(
    node: Node, clock: FakeClock
) -> None:
    assert "queue-sampler" in node.supervisor.loops
    await node.supervisor.start()
    try:
        for _ in range(200):
            if node.sampler.holding:
                break
            await asyncio.sleep(0.01)
        assert node.sampler.holding
    finally:
        await node.supervisor.stop()
    assert not node.sampler.holding
    assert value(node.metrics, "orbit_queue_sampler_active") == 0

    async def expiry(tx: Tx) -> object:
        found = await duty_store.duty_get(tx, "queue-sampler")
        return None if found is None else found.expires_at

    assert await node.db.read(expiry) == clock.now()  # free at once for another node


async def test_the_node_samples_unserved_tasks_by_queue_and_reason(node: Node) -> None:
    """The node's own sampler counts what ``GET /v1/queues`` lists as unserved: here no
    worker key may serve ``emails``, and a worker key limited to ``reports`` has no worker
    connected."""
    await node.keys.create(SCOPE, (Role.WORKER,), actor=Actor("test"), queues=("reports",))
    await submit(node, "emails", 3)
    await submit(node, "reports", 2)
    await submit(node, "reports", 1, OTHER_TENANT)  # no worker key in that scope
    await node.sampler.sample()
    metrics = node.metrics
    assert value(metrics, "orbit_queue_unserved_tasks", queue="emails",
                 reason="queue_out_of_scope") == 3  # fmt: skip
    assert value(metrics, "orbit_queue_unserved_tasks", queue="reports",
                 reason="no_handler") == 2  # fmt: skip
    assert value(metrics, "orbit_queue_unserved_tasks", queue="reports",
                 reason="queue_out_of_scope") == 1  # fmt: skip

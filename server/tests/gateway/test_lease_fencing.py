"""Holder operations are fenced on the whole lease identity (SPEC P2: task, attempt, session,
token) and on the key's rights, over a real WebSocket on both dialects: a worker of another
tenant, of another environment, or limited to another queue — knowing the task id, and even a
real lease reference — gets ``stale``/``stop`` for start, heartbeat, result and ``hello.held``,
and the task is unchanged. Lease tokens come from the CSPRNG, unrelated to task ids."""

from __future__ import annotations

import itertools

import pytest

from orbit_server.governance.keys import Role
from orbit_server.ids import _ALPHABET, new_id, new_token
from orbit_server.pulse.model import TaskSpec
from orbit_server.scope import Scope
from tests.conftest import OTHER_ENV, OTHER_TENANT, SCOPE, make_key
from tests.gateway.conftest import Live, hello, recv, ref, send


async def submit(live: Live, *, type_: str = "send") -> str:
    spec = TaskSpec(queue="emails", type=type_, params={"n": 1})
    [done] = await live.node.tasks.submit_many(SCOPE, [spec])
    return done.task.id


def _decode(text: str) -> int:
    value = 0
    for char in text:
        value = value * 32 + _ALPHABET.index(char)
    return value


def _encode(value: int, length: int) -> str:
    return "".join(_ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))


def guesses_from(task_id: str, count: int) -> list[str]:
    """Tokens an attacker derives from a task id: the same millisecond, its random part plus
    1…count (how a monotonic id generator made the next id of that millisecond)."""
    ms, rand = task_id[:10], _decode(task_id[10:])
    return [f"lse_{ms}{_encode(rand + k, 16)}" for k in range(1, count + 1)]


FOREIGN = [
    pytest.param(OTHER_TENANT, None, "emails", id="other-tenant"),
    pytest.param(OTHER_ENV, None, "emails", id="other-environment"),
    pytest.param(SCOPE, ("reports",), "reports", id="same-tenant-other-queue"),
]


@pytest.mark.parametrize(("scope", "queues", "queue"), FOREIGN)
async def test_a_foreign_worker_cannot_touch_a_lease_it_knows(
    live: Live, scope: Scope, queues: tuple[str, ...] | None, queue: str
) -> None:
    task_id = await submit(live)
    foreign_key = await make_key(live.node, scope, Role.WORKER, queues=queues)
    async with live.connect() as owner:
        await hello(owner)
        [d] = (await recv(owner))["items"]
        await send(owner, {"type": "start", "id": 1, "items": [ref(d)]})
        assert (await recv(owner))["items"][0]["verdict"] == "started"
        before = await live.node.tasks.get(SCOPE, task_id)

        real = ref(d)
        guessed = [{**real, "lease_token": t} for t in guesses_from(task_id, 64)]
        async with live.connect(foreign_key) as foreign:
            welcome = await hello(foreign, queue=queue, held=[real, *guessed[:8]])
            assert {h["verdict"] for h in welcome["held"]} == {"stop"}
            for request_id, refs in enumerate(([real], guessed), start=10):
                await send(foreign, {"type": "start", "id": request_id, "items": refs})
                assert {i["verdict"] for i in (await recv(foreign))["items"]} == {"stale"}
                await send(foreign, {"type": "heartbeat", "id": request_id + 100, "items": refs})
                assert {i["verdict"] for i in (await recv(foreign))["items"]} == {"stale"}
                forged = [{**r, "outcome": "succeeded", "result": {"forged": True}} for r in refs]
                await send(foreign, {"type": "result", "id": request_id + 200, "items": forged})
                assert {i["verdict"] for i in (await recv(foreign))["items"]} == {"stale"}

        after = await live.node.tasks.get(SCOPE, task_id)
        assert after == before  # nothing changed: not the state, the lease nor its holder
        # The owner still holds its lease and completes it.
        await send(owner, {"type": "heartbeat", "id": 2, "items": [real]})
        assert (await recv(owner))["items"][0]["verdict"] == "renewed"
        item = {**real, "outcome": "succeeded", "result": {"ok": True}}
        await send(owner, {"type": "result", "id": 3, "items": [item]})
        assert (await recv(owner))["items"][0]["verdict"] == "accepted"
    done = await live.node.tasks.get(SCOPE, task_id)
    assert (done.state, done.result) == ("succeeded", {"ok": True})


async def test_another_session_of_the_same_key_is_fenced_until_it_adopts(live: Live) -> None:
    """The session is part of the lease's identity: a second connection of the same worker key
    that names the lease is stale, until it takes the lease over in its ``hello.held`` (the
    reconnect) — and then the first connection is the stale one."""
    task_id = await submit(live)
    async with live.connect() as first:
        await hello(first)
        [d] = (await recv(first))["items"]
        async with live.connect() as second:
            await hello(second, type_="other")
            await send(second, {"type": "start", "id": 1, "items": [ref(d)]})
            assert (await recv(second))["items"][0]["verdict"] == "stale"
        assert (await live.node.tasks.get(SCOPE, task_id)).state == "leased"
        async with live.connect() as third:
            welcome = await hello(third, held=[ref(d)])
            assert welcome["held"][0]["verdict"] == "continue"
            await send(first, {"type": "start", "id": 2, "items": [ref(d)]})
            assert (await recv(first))["items"][0]["verdict"] == "stale"
            await send(third, {"type": "start", "id": 3, "items": [ref(d)]})
            assert (await recv(third))["items"][0]["verdict"] == "started"


async def test_leases_delivered_at_submit_carry_unrelated_tokens(live: Live) -> None:
    """The direct path (a lone submit leased to an idle worker) mints its token in the same
    instant as the task id: it must still be unrelated to it."""
    async with live.connect() as ws:
        await hello(ws, capacity=50)
        pairs = []
        for _ in range(20):
            task_id = await submit(live)
            [d] = (await recv(ws))["items"]
            assert d["task_id"] == task_id
            pairs.append((task_id, d["lease_token"]))
    for task_id, token in pairs:
        assert token not in guesses_from(task_id, 4096)
        body = token.removeprefix("lse_")
        assert body[:10] != task_id[:10]  # no shared time prefix


def test_lease_tokens_share_no_prefix_or_arithmetic_with_ids() -> None:
    """Statistically: tokens made right after ids differ from them like independent random
    values — shared leading characters as for chance (1/32 each), differences spread over
    the whole 130-bit range, and no two tokens alike."""
    samples = [(new_id(), new_token("lse_")) for _ in range(4000)]
    tokens = [t.removeprefix("lse_") for _, t in samples]
    assert len(set(tokens)) == len(tokens)
    assert all(len(t) == 26 for t in tokens)
    same_first = sum(i[0] == t[0] for i, t in samples for t in [t.removeprefix("lse_")])
    assert same_first < 4000 * 3 / 32  # chance: 1/32 (a time prefix would give ~4000)
    common = [len(list(itertools.takewhile(lambda p: p[0] == p[1], zip(i, t, strict=False))))
              for i, t in zip((i for i, _ in samples), tokens, strict=True)]  # fmt: skip
    assert max(common) <= 6 and sum(common) / len(common) < 0.2
    small = 0
    for task_id, token in zip((i for i, _ in samples), tokens, strict=True):
        delta = abs(_decode(token) - _decode(task_id))
        small += delta < 1 << 100  # an id-derived token would be within 2^16 of the id
    assert small < 10
    bits = [_decode(t) for t in tokens]
    ones = sum(bin(b).count("1") for b in bits) / (len(bits) * 130)
    assert 0.48 < ones < 0.52  # every bit random, none fixed by a clock or a counter

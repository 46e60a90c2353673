"""Conformance: every governance store method, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.governance.model import ApiKey, AuditEntry
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import governance as gov

SCOPE = Scope("acme", "prod")


def key(key_id: str, clock: FakeClock, scope: Scope = SCOPE, **overrides: object) -> ApiKey:
    fields: dict[str, object] = {
        "id": key_id,
        "scope": scope,
        "name": "ci",
        "roles": ("submitter", "worker"),
        "queues": ("emails", "reports"),
        "secret_hash": "a" * 64,
        "created_at": clock.now(),
        "revoked_at": None,
    }
    fields.update(overrides)
    return ApiKey(**fields)  # type: ignore[arg-type]


async def test_execute_many_inserts_every_row(db: Database, clock: FakeClock) -> None:
    rows = [{"name": f"t{i}", "created_at": clock.now()} for i in range(3)]

    async def unit(tx: Tx) -> int:
        changed = await tx.execute_many("tenant_insert", rows)
        await gov.environment_ensure(tx, Scope("t1", "prod"), clock.now())
        return changed

    assert await db.run(unit) == 3
    assert await db.read(gov.environment_list) == [Scope("t1", "prod")]

    async def duplicate(tx: Tx) -> int:
        return await tx.execute_many("tenant_insert", rows[:1])

    with pytest.raises(gov.DuplicateKey):
        await db.run(duplicate)


async def test_execute_many_goes_past_one_statement_of_rows(db: Database, clock: FakeClock) -> None:
    """More rows than one multi-row statement holds: every row lands, and a duplicate in a later
    chunk fails the whole unit (nothing of it is kept)."""
    rows = [{"name": f"bulk{i:04}", "created_at": clock.now()} for i in range(1201)]

    async def unit(tx: Tx) -> int:
        return await tx.execute_many("tenant_insert", rows)

    assert await db.run(unit) == 1201

    fresh = [{"name": f"more{i:04}", "created_at": clock.now()} for i in range(1100)]

    async def with_duplicate(tx: Tx) -> int:
        return await tx.execute_many("tenant_insert", [*fresh, rows[-1]])

    with pytest.raises(gov.DuplicateKey):
        await db.run(with_duplicate)

    async def again(tx: Tx) -> int:  # the failed unit left none of its rows behind
        return await tx.execute_many("tenant_insert", fresh)

    assert await db.run(again) == 1100


@pytest.mark.covers("tenant_ensure", "environment_ensure", "environment_list")
async def test_tenant_and_environment_are_created_once(db: Database, clock: FakeClock) -> None:
    async def unit(tx: Tx) -> tuple[bool, bool, bool, bool]:
        first = await gov.environment_ensure(tx, SCOPE, clock.now())
        again = await gov.environment_ensure(tx, SCOPE, clock.now())
        other = await gov.environment_ensure(tx, Scope("acme", "staging"), clock.now())
        tenant_again = await gov.tenant_ensure(tx, "acme", clock.now())
        return first, again, other, tenant_again

    assert await db.run(unit) == (True, False, True, False)
    listed = await db.read(gov.environment_list)
    assert listed == [Scope("acme", "prod"), Scope("acme", "staging")]


@pytest.mark.covers("key_insert", "key_get")
async def test_key_round_trips_and_scope_hides_foreign_keys(db: Database, clock: FakeClock) -> None:
    record = key("k1", clock)

    async def insert(tx: Tx) -> None:
        await gov.key_insert(tx, record)
        await gov.key_insert(tx, key("k2", clock, queues=None, roles=("admin",)))

    await db.run(insert)

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await gov.key_get(tx, "k1"),
            await gov.key_get(tx, "k1", SCOPE),
            await gov.key_get(tx, "k1", Scope("globex", "prod")),
            await gov.key_get(tx, "k1", Scope("acme", "staging")),
            await gov.key_get(tx, "missing"),
            await gov.key_get(tx, "k2"),
        )

    found, scoped, foreign_tenant, foreign_env, missing, unrestricted = await db.read(read)
    assert found == record
    assert scoped == record
    assert foreign_tenant is None and foreign_env is None and missing is None
    assert isinstance(unrestricted, ApiKey)
    assert unrestricted.queues is None and unrestricted.roles == ("admin",)
    assert found.created_at == clock.now()  # microseconds and UTC survive the round trip


@pytest.mark.covers("key_insert")
async def test_duplicate_key_id_is_refused(db: Database, clock: FakeClock) -> None:
    async def insert(tx: Tx) -> None:
        await gov.key_insert(tx, key("same", clock))

    await db.run(insert)
    with pytest.raises(gov.DuplicateKey):
        await db.run(insert)


@pytest.mark.covers("key_list")
async def test_key_list_pages_in_id_order_per_scope(db: Database, clock: FakeClock) -> None:
    other = Scope("globex", "prod")

    async def insert(tx: Tx) -> None:
        for i in range(5):
            await gov.key_insert(tx, key(f"k{i}", clock))
        await gov.key_insert(tx, key("x0", clock, scope=other))

    await db.run(insert)

    async def page(after: str, scope: Scope | None = SCOPE) -> list[str]:
        async def unit(tx: Tx) -> list[ApiKey]:
            return await gov.key_list(tx, scope, limit=2, after=after)

        return [k.id for k in await db.read(unit)]

    assert await page(gov.FIRST) == ["k0", "k1"]
    assert await page("k1") == ["k2", "k3"]
    assert await page("k3") == ["k4"]
    assert await page(gov.FIRST, other) == ["x0"]
    assert await page("k4", None) == ["x0"]


@pytest.mark.covers("key_revoke")
async def test_key_revoke_is_fenced_to_one_change(db: Database, clock: FakeClock) -> None:
    async def insert(tx: Tx) -> None:
        await gov.key_insert(tx, key("k1", clock))

    await db.run(insert)
    revoked_at = clock.advance(timedelta(seconds=5))

    async def revoke(tx: Tx) -> bool:
        return await gov.key_revoke(tx, "k1", revoked_at)

    assert await db.run(revoke) is True
    assert await db.run(revoke) is False  # already revoked: no change

    async def missing(tx: Tx) -> bool:
        return await gov.key_revoke(tx, "nope", revoked_at)

    assert await db.run(missing) is False

    async def read(tx: Tx) -> ApiKey | None:
        return await gov.key_get(tx, "k1")

    found = await db.read(read)
    assert found is not None and found.revoked_at == revoked_at


@pytest.mark.covers("keys_unusable")
async def test_keys_unusable_are_the_revoked_and_the_missing(
    db: Database, clock: FakeClock
) -> None:
    async def setup(tx: Tx) -> None:
        await gov.key_insert(tx, key("k1", clock))
        await gov.key_insert(tx, key("k2", clock))
        await gov.key_revoke(tx, "k2", clock.now())

    await db.run(setup)

    async def unusable(tx: Tx) -> set[str]:
        return await gov.keys_unusable(tx, ["k1", "k2", "gone", "k1"])

    assert await db.read(unusable) == {"k2", "gone"}
    assert await db.read(lambda tx: gov.keys_unusable(tx, [])) == set()


@pytest.mark.covers("audit_insert", "audit_list")
async def test_audit_lists_newest_first_by_scope_and_target(db: Database, clock: FakeClock) -> None:
    def record(i: int, scope: Scope = SCOPE, target: str = "k1") -> AuditEntry:
        return AuditEntry(
            id=f"aud_{i:03d}",
            scope=scope,
            actor="cli",
            action="key.create",
            target_kind="api_key",
            target_id=target,
            details={"i": i, "nested": {"ok": True}} if i % 2 else {},
            request_id=f"req_{i}" if i % 2 else None,
            created_at=clock.now(),
        )

    async def insert(tx: Tx) -> None:
        for i in range(4):
            await gov.audit_insert(tx, record(i, target="k1" if i < 3 else "k2"))
        await gov.audit_insert(tx, record(9, scope=Scope("acme", "staging")))

    await db.run(insert)

    async def listing(
        before: str = gov.LAST, target: tuple[str, str] | None = None
    ) -> list[AuditEntry]:
        async def unit(tx: Tx) -> list[AuditEntry]:
            return await gov.audit_list(tx, SCOPE, limit=2, before=before, target=target)

        return await db.read(unit)

    first = await listing()
    assert [r.id for r in first] == ["aud_003", "aud_002"]
    assert [r.id for r in await listing(before="aud_002")] == ["aud_001", "aud_000"]
    assert [r.id for r in await listing(target=("api_key", "k2"))] == ["aud_003"]
    assert [r.id for r in await listing(target=("api_key", "k1"))] == ["aud_002", "aud_001"]
    assert first[0].details == {"i": 3, "nested": {"ok": True}}
    assert first[0].request_id == "req_3"
    assert first[1].details == {} and first[1].request_id is None
    assert first[0].created_at == clock.now()

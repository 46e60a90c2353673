"""A node trusts a checked API key for ``ORBIT_KEY_CACHE_MS`` before reading it again: one
key read a second instead of one a request, with a revocation effective at once on the node
that made it and within that time on every other."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import FakeClock
from orbit_server.errors import DatabaseUnavailable, Unauthenticated
from orbit_server.governance.keys import Role
from orbit_server.governance.service import KeyService
from orbit_server.store import Database
from orbit_server.store import governance as gov
from tests.conftest import SCOPE

ADMIN = Actor("test")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The key ids read from the database, in order."""
    seen: list[str] = []
    key_get = gov.key_get

    async def counted(tx: object, key_id: str, *args: object) -> object:
        seen.append(key_id)
        return await key_get(tx, key_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(gov, "key_get", counted)
    return seen


def service(db: Database, clock: FakeClock, cache_ms: int = 1000) -> KeyService:
    return KeyService(db, clock, AuditWriter(clock), cache_ms=cache_ms)


async def new_key(keys: KeyService) -> tuple[str, str]:
    created = await keys.create(SCOPE, (Role.SUBMITTER,), actor=ADMIN)
    return created.record.id, created.token


async def test_a_checked_key_is_read_again_only_after_the_cache_time(
    db: Database, clock: FakeClock, reads: list[str]
) -> None:
    keys = service(db, clock)
    key_id, token = await new_key(keys)
    for _ in range(5):
        assert (await keys.authenticate(token)).key_id == key_id
    assert reads == [key_id]
    clock.advance(timedelta(milliseconds=999))
    await keys.authenticate(token)
    assert reads == [key_id]
    clock.advance(timedelta(milliseconds=1))
    await keys.authenticate(token)
    await keys.authenticate(token)
    assert reads == [key_id, key_id]


async def test_the_secret_is_checked_on_every_request(
    db: Database, clock: FakeClock, reads: list[str]
) -> None:
    keys = service(db, clock)
    key_id, token = await new_key(keys)
    await keys.authenticate(token)
    with pytest.raises(Unauthenticated):
        await keys.authenticate(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))
    assert (await keys.authenticate(token)).key_id == key_id
    assert reads == [key_id]


async def test_a_key_revoked_on_this_node_is_refused_at_once(
    db: Database, clock: FakeClock
) -> None:
    keys = service(db, clock)
    key_id, token = await new_key(keys)
    await keys.authenticate(token)
    await keys.revoke(key_id, actor=ADMIN, scope=SCOPE)
    with pytest.raises(Unauthenticated, match="revoked"):
        await keys.authenticate(token)


async def test_a_key_revoked_on_another_node_is_refused_within_the_cache_time(
    db: Database, clock: FakeClock
) -> None:
    here, there = service(db, clock), service(db, clock)
    key_id, token = await new_key(there)
    await here.authenticate(token)
    await there.revoke(key_id, actor=ADMIN, scope=SCOPE)
    assert (await here.authenticate(token)).key_id == key_id  # still trusted, for now
    clock.advance(timedelta(seconds=1))
    with pytest.raises(Unauthenticated, match="revoked"):
        await here.authenticate(token)
    clock.advance(timedelta(hours=1))
    with pytest.raises(Unauthenticated, match="revoked"):  # a revoked key is never kept
        await here.authenticate(token)


async def test_no_cache_reads_the_key_on_every_request(
    db: Database, clock: FakeClock, reads: list[str]
) -> None:
    keys = service(db, clock, cache_ms=0)
    key_id, token = await new_key(keys)
    await keys.authenticate(token)
    await keys.authenticate(token)
    assert reads == [key_id, key_id]


async def test_unknown_keys_are_not_kept(db: Database, clock: FakeClock, reads: list[str]) -> None:
    keys = service(db, clock)
    key_id, token = await new_key(keys)
    unknown = token.replace(key_id, "01" + "0" * (len(key_id) - 2), 1)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await keys.authenticate(unknown)
    assert len(reads) == 2


async def test_nothing_is_taken_from_memory_while_the_database_is_down(
    db: Database, clock: FakeClock, reads: list[str]
) -> None:
    keys = service(db, clock)
    key_id, token = await new_key(keys)
    await keys.authenticate(token)
    db.availability.failed(DatabaseUnavailable())
    await keys.authenticate(token)  # read again (here the database still answers)
    assert reads == [key_id, key_id]

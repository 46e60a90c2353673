"""Conformance: the workflow definitions' store methods, on every dialect."""

from __future__ import annotations

from datetime import timedelta

import pytest

from orbit_server.clock import FakeClock
from orbit_server.store import Database, Tx
from orbit_server.store import definitions as definition_store
from orbit_server.store.base import DuplicateKey
from orbit_server.weave.model import StoredDefinition
from tests.store.builders import OTHER, SCOPE


@pytest.mark.covers(
    "workflow_definition_insert", "workflow_definition_get", "workflow_definition_latest_version",
    "workflow_definitions_list",
)  # fmt: skip
async def test_definition_versions_are_kept_listed_and_the_latest_found(
    db: Database, clock: FakeClock
) -> None:
    published = []
    for name, version in (("signup", "2"), ("signup", "1"), ("billing", "1"), ("signup", "10")):
        body = {"start": "a", "steps": [{"id": "a", "kind": "task", "version": version}]}
        published.append(StoredDefinition(SCOPE, name, version, f"d-{name}-{version}", body,
                                          clock.now()))  # fmt: skip
        clock.advance(timedelta(seconds=1))

    async def publish(tx: Tx) -> None:
        for record in published:
            await definition_store.workflow_definition_insert(tx, record)

    await db.run(publish)
    with pytest.raises(DuplicateKey):
        await db.run(lambda tx: definition_store.workflow_definition_insert(tx, published[0]))

    async def read(tx: Tx) -> tuple[object, ...]:
        return (
            await definition_store.workflow_definition_get(tx, SCOPE, "signup", "2"),
            await definition_store.workflow_definition_get(tx, OTHER, "signup", "2"),
            await definition_store.workflow_definition_latest_version(tx, SCOPE, "signup"),
            await definition_store.workflow_definition_latest_version(tx, SCOPE, "none"),
        )

    assert await db.read(read) == (published[0], None, "10", None)

    async def listed(name: str | None, after: tuple[str, str] | None, limit: int) -> list[str]:
        found = await db.read(
            lambda tx: definition_store.workflow_definitions_list(
                tx, SCOPE, name=name, after=after, limit=limit
            )
        )
        assert all(d.body is None for d in found)  # lists leave the bodies out
        return [f"{d.name}@{d.version}" for d in found]

    assert await listed(None, None, 10) == ["billing@1", "signup@1", "signup@10", "signup@2"]
    assert await listed(None, ("signup", "1"), 2) == ["signup@10", "signup@2"]
    assert await listed("signup", None, 2) == ["signup@1", "signup@10"]
    assert await listed("signup", ("signup", "10"), 5) == ["signup@2"]

"""Checked definitions by (scope, name, version), kept while used: versions never change."""

from __future__ import annotations

from collections import OrderedDict

from orbit_server.errors import NotFound
from orbit_server.scope import Scope
from orbit_server.store import Tx
from orbit_server.store import definitions as definition_store
from orbit_server.weave.definition import Definition, parse

CACHE_SIZE = 256


class Definitions:
    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[Scope, str, str], Definition] = OrderedDict()

    async def load(self, tx: Tx, scope: Scope, name: str, version: str | None) -> Definition:
        if version is None:  # the latest: one index read, then (usually) the cache
            version = await definition_store.workflow_definition_latest_version(tx, scope, name)
            if version is None:
                raise NotFound(f"no workflow definition {name!r} is published")
        key = (scope, name, version)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        record = await definition_store.workflow_definition_get(tx, scope, name, version)
        if record is None:
            raise NotFound(f"workflow definition {name!r} has no version {version!r}")
        found = parse(record.body or {})
        self._cache[key] = found
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return found

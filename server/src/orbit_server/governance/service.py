"""Application services for keys and the audit log: one short transaction per use case."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from orbit_server.audit import Actor, AuditWriter
from orbit_server.clock import Clock
from orbit_server.errors import InvalidRequest, NotFound, Unauthenticated
from orbit_server.governance.keys import (
    Principal,
    Role,
    check_key_fields,
    generate_key,
    is_key_id,
    parse_token,
    secret_matches,
)
from orbit_server.governance.model import ApiKey, AuditEntry
from orbit_server.scope import Scope
from orbit_server.store import Database, Tx
from orbit_server.store import governance as gov


@dataclass(frozen=True, slots=True)
class CreatedKey:
    record: ApiKey
    token: str  # shown once, never stored


# Most keys a node remembers as checked; past it the one read longest ago is forgotten.
KNOWN_KEYS = 10_000


class KeyService:
    """Keys: create, list, revoke, and the check of every request's key.

    A key read for a request is trusted for ``cache_ms`` (one second by default) before it is
    read again, so that a client sending many requests costs one key read a second instead of
    one a request. A revocation on this node forgets the key at once; one on another node takes
    effect here when the entry expires, within ``cache_ms``. Only usable keys are kept (an
    unknown or revoked one is read again on its next try), and the secret is checked on every
    request.
    """

    def __init__(
        self, db: Database, clock: Clock, audit: AuditWriter, *, cache_ms: int = 1000
    ) -> None:
        self._db = db
        self._clock = clock
        self._audit = audit
        self._revoked_listeners: list[Callable[[str], None]] = []
        self._cache_for = timedelta(milliseconds=cache_ms)
        self._known: OrderedDict[str, tuple[ApiKey, datetime]] = OrderedDict()

    async def create(
        self,
        scope: Scope,
        roles: tuple[Role, ...],
        *,
        actor: Actor,
        queues: tuple[str, ...] | None = None,
        name: str | None = None,
    ) -> CreatedKey:
        try:
            queues = check_key_fields(roles, name, queues)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        new = generate_key()
        now = self._clock.now()
        record = ApiKey(
            id=new.id,
            scope=scope,
            name=name,
            roles=tuple(str(r) for r in roles),
            queues=queues,
            secret_hash=new.secret_hash,
            created_at=now,
            revoked_at=None,
        )

        async def unit(tx: Tx) -> None:
            await gov.environment_ensure(tx, scope, now)
            await gov.key_insert(tx, record)
            await self._audit.record(
                tx,
                scope=scope,
                actor=actor,
                action="key.create",
                target_kind="api_key",
                target_id=record.id,
                details={"roles": list(record.roles), "queues": queues, "name": name},
            )

        await self._db.run(unit)
        return CreatedKey(record=record, token=new.token)

    async def get(self, key_id: str, scope: Scope) -> ApiKey:
        if not is_key_id(key_id):
            raise NotFound("no such API key")

        async def unit(tx: Tx) -> ApiKey | None:
            return await gov.key_get(tx, key_id, scope)

        found = await self._db.read(unit)
        if found is None:
            raise NotFound("no such API key")
        return found

    async def list(
        self, scope: Scope | None, *, limit: int, after: str | None = None
    ) -> list[ApiKey]:
        async def unit(tx: Tx) -> list[ApiKey]:
            return await gov.key_list(tx, scope, limit=limit, after=after or gov.FIRST)

        return await self._db.read(unit)

    async def revoke(self, key_id: str, *, actor: Actor, scope: Scope | None) -> ApiKey:
        """Revoke a key (idempotent); ``scope`` None is the CLI's view of every scope."""
        if not is_key_id(key_id):
            raise NotFound("no such API key")

        async def unit(tx: Tx) -> ApiKey | None:
            key = await gov.key_get(tx, key_id, scope)
            if key is None:
                return None
            if await gov.key_revoke(tx, key_id, self._clock.now()):
                await self._audit.record(
                    tx,
                    scope=key.scope,
                    actor=actor,
                    action="key.revoke",
                    target_kind="api_key",
                    target_id=key_id,
                )
            return await gov.key_get(tx, key_id)

        revoked = await self._db.run(unit)
        if revoked is None:
            raise NotFound("no such API key")
        self._known.pop(key_id, None)
        for listener in self._revoked_listeners:
            listener(key_id)
        return revoked

    async def _key(self, key_id: str) -> ApiKey | None:
        """The key as remembered while its entry lasts, else as read now (and remembered
        when it is usable; its secret is checked on every use all the same). While the
        database is known to be down nothing is taken from memory: the read refuses (503), as
        every other request does."""
        now = self._clock.now()
        known = self._known.get(key_id)
        if known is not None and now < known[1] and self._db.availability.down_since is None:
            return known[0]

        async def unit(tx: Tx) -> ApiKey | None:
            return await gov.key_get(tx, key_id)

        key = await self._db.read(unit)
        if key is None or key.revoked_at is not None or not self._cache_for:
            self._known.pop(key_id, None)
            return key
        self._known[key_id] = (key, now + self._cache_for)
        self._known.move_to_end(key_id)
        if len(self._known) > KNOWN_KEYS:
            self._known.popitem(last=False)
        return key

    def on_revoked(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(key_id)`` after a revocation made on this node has committed (the
        worker gateway closes that key's connections at once)."""
        self._revoked_listeners.append(listener)

    async def unusable(self, key_ids: Collection[str]) -> set[str]:
        """Which of ``key_ids`` were revoked (on any node) or deleted: one indexed read."""

        async def unit(tx: Tx) -> set[str]:
            return await gov.keys_unusable(tx, list(key_ids))

        return await self._db.read(unit)

    async def authenticate(self, token: str | None) -> Principal:
        """The principal of a bearer token; Unauthenticated for a missing, bad or revoked key."""
        parsed = parse_token(token) if token else None
        if parsed is None:
            raise Unauthenticated()
        key_id, secret = parsed
        if not is_key_id(key_id):
            raise Unauthenticated()

        key = await self._key(key_id)
        if key is None or not secret_matches(secret, key.secret_hash):
            raise Unauthenticated()
        if key.revoked_at is not None:
            raise Unauthenticated("this API key has been revoked")
        return Principal(
            key_id=key.id,
            scope=key.scope,
            roles=frozenset(Role(r) for r in key.roles),
            queues=None if key.queues is None else frozenset(key.queues),
        )


class AuditService:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def list(
        self,
        scope: Scope,
        *,
        limit: int,
        before: str | None = None,
        target: tuple[str, str] | None = None,
    ) -> list[AuditEntry]:
        async def unit(tx: Tx) -> list[AuditEntry]:
            return await gov.audit_list(
                tx, scope, limit=limit, before=before or gov.LAST, target=target
            )

        return await self._db.read(unit)

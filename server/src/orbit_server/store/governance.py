"""Store methods for tenants, environments, API keys and the audit log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from orbit_server.governance.model import ApiKey, AuditEntry
from orbit_server.scope import Scope
from orbit_server.store.base import DuplicateKey, Row, Tx

# Cursor sentinels: every id sorts after "" and before "~".
FIRST = ""
LAST = "~"


async def tenant_ensure(tx: Tx, name: str, now: datetime) -> bool:
    """Create the tenant unless it exists; answers whether it was created."""
    try:
        await tx.execute("tenant_insert", {"name": name, "created_at": now})
    except DuplicateKey:
        return False
    return True


async def environment_ensure(tx: Tx, scope: Scope, now: datetime) -> bool:
    """Create the tenant and environment unless they exist; answers whether the environment
    was created."""
    await tenant_ensure(tx, scope.tenant, now)
    try:
        await tx.execute(
            "environment_insert",
            {"tenant": scope.tenant, "name": scope.environment, "created_at": now},
        )
    except DuplicateKey:
        return False
    return True


async def environment_list(tx: Tx) -> list[Scope]:
    rows = await tx.fetch_all("environment_list")
    return [Scope(str(r["tenant"]), str(r["name"])) for r in rows]


def _key(row: Row) -> ApiKey:
    queues = row["queues"]
    return ApiKey(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        name=row["name"],
        roles=tuple(str(row["roles"]).split(",")) if row["roles"] else (),
        queues=tuple(msgspec.json.decode(queues)) if queues is not None else None,
        secret_hash=str(row["secret_hash"]),
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )


async def key_insert(tx: Tx, key: ApiKey) -> None:
    await tx.execute(
        "key_insert",
        {
            "id": key.id,
            "tenant": key.scope.tenant,
            "environment": key.scope.environment,
            "name": key.name,
            "roles": ",".join(key.roles),
            "queues": None
            if key.queues is None
            else msgspec.json.encode(list(key.queues)).decode(),
            "secret_hash": key.secret_hash,
            "created_at": key.created_at,
        },
    )


async def key_get(tx: Tx, key_id: str, scope: Scope | None = None) -> ApiKey | None:
    """One key by id; with ``scope``, a key of another scope is answered as missing."""
    row = await tx.fetch_one("key_get", {"id": key_id})
    if row is None:
        return None
    key = _key(row)
    if scope is not None and key.scope != scope:
        return None
    return key


async def key_list(tx: Tx, scope: Scope | None, *, limit: int, after: str = FIRST) -> list[ApiKey]:
    """Keys in id order after the cursor ``after``; every scope when ``scope`` is None."""
    if scope is None:
        rows = await tx.fetch_all("key_list_all", {"after": after, "limit": limit})
    else:
        rows = await tx.fetch_all(
            "key_list_scoped",
            {
                "tenant": scope.tenant,
                "environment": scope.environment,
                "after": after,
                "limit": limit,
            },
        )
    return [_key(r) for r in rows]


async def keys_unusable(tx: Tx, key_ids: Sequence[str]) -> set[str]:
    """Those of ``key_ids`` that were revoked or no longer exist."""
    wanted = sorted(set(key_ids))
    if not wanted:
        return set()
    rows = await tx.fetch_all("keys_unusable", {"ids": wanted})
    return set(wanted) - {str(r["id"]) for r in rows}


async def key_revoke(tx: Tx, key_id: str, now: datetime) -> bool:
    """Mark a key revoked; answers False when it was already revoked or does not exist."""
    return await tx.execute("key_revoke", {"id": key_id, "revoked_at": now}) == 1


async def audit_insert(tx: Tx, record: AuditEntry) -> None:
    await tx.execute(
        "audit_insert",
        {
            "id": record.id,
            "tenant": record.scope.tenant,
            "environment": record.scope.environment,
            "actor": record.actor,
            "action": record.action,
            "target_kind": record.target_kind,
            "target_id": record.target_id,
            "details": msgspec.json.encode(record.details).decode() if record.details else None,
            "request_id": record.request_id,
            "created_at": record.created_at,
        },
    )


def _audit(row: Row) -> AuditEntry:
    details = row["details"]
    return AuditEntry(
        id=str(row["id"]),
        scope=Scope(str(row["tenant"]), str(row["environment"])),
        actor=str(row["actor"]),
        action=str(row["action"]),
        target_kind=str(row["target_kind"]),
        target_id=str(row["target_id"]),
        details=msgspec.json.decode(details) if details else {},
        request_id=row["request_id"],
        created_at=row["created_at"],
    )


async def audit_list(
    tx: Tx,
    scope: Scope,
    *,
    limit: int,
    before: str = LAST,
    target: tuple[str, str] | None = None,
) -> list[AuditEntry]:
    """Newest first, strictly before the cursor id; optionally for one target (kind, id)."""
    params: dict[str, Any] = {
        "tenant": scope.tenant,
        "environment": scope.environment,
        "before": before,
        "limit": limit,
    }
    if target is None:
        rows = await tx.fetch_all("audit_list", params)
    else:
        params["target_kind"], params["target_id"] = target
        rows = await tx.fetch_all("audit_list_target", params)
    return [_audit(r) for r in rows]

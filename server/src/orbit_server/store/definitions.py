"""Store methods of workflow definitions (decision 0015): each published version of a
definition, immutable once written."""

from __future__ import annotations

from orbit_server.scope import Scope
from orbit_server.store.base import Row, Tx, json_or_none, json_value, row_scope, scope_params
from orbit_server.weave.model import StoredDefinition


def _definition(row: Row) -> StoredDefinition:
    return StoredDefinition(
        scope=row_scope(row),
        name=str(row["name"]),
        version=str(row["version"]),
        digest=str(row["digest"]),
        body=json_value(row["body"]) if "body" in row else None,
        created_at=row["created_at"],
    )


async def workflow_definition_insert(tx: Tx, record: StoredDefinition) -> None:
    """Raises ``DuplicateKey`` when the version exists."""
    await tx.execute(
        "workflow_definition_insert",
        {**scope_params(record.scope), "name": record.name, "version": record.version,
         "digest": record.digest, "body": json_or_none(record.body),
         "created_at": record.created_at},
    )  # fmt: skip


async def workflow_definition_get(
    tx: Tx, scope: Scope, name: str, version: str
) -> StoredDefinition | None:
    row = await tx.fetch_one(
        "workflow_definition_get", {**scope_params(scope), "name": name, "version": version}
    )
    return None if row is None else _definition(row)


async def workflow_definition_latest_version(tx: Tx, scope: Scope, name: str) -> str | None:
    """The version of ``name`` published last (an index-only read)."""
    row = await tx.fetch_one(
        "workflow_definition_latest_version", {**scope_params(scope), "name": name}
    )
    return None if row is None else str(row["version"])


async def workflow_definitions_list(
    tx: Tx, scope: Scope, *, name: str | None, after: tuple[str, str] | None, limit: int
) -> list[StoredDefinition]:
    """Versions by name then version (all names, or one name's)."""
    if name is not None:
        rows = await tx.fetch_all(
            "workflow_definition_versions",
            {**scope_params(scope), "name": name, "after": after[1] if after else "",
             "limit": limit},
        )  # fmt: skip
    else:
        after_name, after_version = after or ("", "")
        rows = await tx.fetch_all(
            "workflow_definitions_list",
            {**scope_params(scope), "after_name": after_name, "after_version": after_version,
             "limit": limit},
        )  # fmt: skip
    return [_definition(r) for r in rows]

"""``orbit migrate`` and ``orbit keys``: short administrative runs against the database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import typer

from orbit_server.audit import Actor, AuditWriter
from orbit_server.bootstrap import database_for
from orbit_server.clock import SystemClock, to_rfc3339
from orbit_server.config import Settings
from orbit_server.errors import NotFound, OrbitError
from orbit_server.governance.keys import parse_roles
from orbit_server.governance.model import ApiKey
from orbit_server.governance.service import KeyService
from orbit_server.scope import Scope
from orbit_server.store import Database
from orbit_server.store.migrate import MigrationError, migrate, schema_status
from orbit_server.store.probe import UnsupportedServer

CLI_ACTOR = Actor("cli")


def report_error(message: str) -> int:
    """Print ``error: …`` to stderr; answers the exit code for a refusal."""
    typer.echo(f"error: {message}", err=True)
    return 2


@asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[Database]:
    db = database_for(settings, exclusive=False)
    try:
        info = await db.connect()
        for warning in info.warnings:
            typer.echo(f"warning: {warning}", err=True)
        yield db
    finally:
        await db.close()


async def migrate_database(settings: Settings) -> int:
    try:
        async with connected(settings) as db:
            applied = await migrate(db)
    except (OrbitError, MigrationError, UnsupportedServer) as exc:
        return report_error(str(exc))
    if not applied:
        typer.echo("schema is current; nothing to do")
    for m in applied:
        typer.echo(f"applied {m.version:04d}_{m.name}")
    return 0


async def _key_service(db: Database) -> KeyService | None:
    status = await schema_status(db)
    if not status.current:
        typer.echo(f"error: {status.describe()}", err=True)
        return None
    clock = SystemClock()
    return KeyService(db, clock, AuditWriter(clock))


async def create_key(
    settings: Settings,
    tenant: str,
    environment: str,
    roles: list[str],
    queues: list[str] | None,
    name: str | None,
) -> int:
    try:
        scope = Scope(tenant, environment)
        parsed = parse_roles(roles)
    except ValueError as exc:
        return report_error(str(exc))
    try:
        async with connected(settings) as db:
            service = await _key_service(db)
            if service is None:
                return 2
            created = await service.create(
                scope, parsed, actor=CLI_ACTOR, queues=tuple(queues) if queues else None, name=name
            )
    except (OrbitError, UnsupportedServer) as exc:
        return report_error(str(exc))
    record = created.record
    typer.echo(
        f"created key {record.id} in {tenant}/{environment} with roles {', '.join(record.roles)}"
    )
    if record.queues:
        typer.echo(f"queues: {', '.join(record.queues)}")
    typer.echo("the key is shown once; store it now:")
    typer.echo(created.token)
    return 0


def _describe(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "tenant": key.scope.tenant,
        "environment": key.scope.environment,
        "name": key.name,
        "roles": list(key.roles),
        "queues": None if key.queues is None else list(key.queues),
        "created_at": to_rfc3339(key.created_at),
        "revoked_at": to_rfc3339(key.revoked_at),
    }


async def list_keys(
    settings: Settings, tenant: str | None, environment: str | None, output: str
) -> int:
    if output not in ("table", "json"):
        return report_error("--output must be table or json")
    if (tenant is None) != (environment is None):
        return report_error("give --tenant and --environment together, or neither")
    try:
        scope = Scope(tenant, environment) if tenant and environment else None
    except ValueError as exc:
        return report_error(str(exc))
    keys: list[ApiKey] = []
    try:
        async with connected(settings) as db:
            service = await _key_service(db)
            if service is None:
                return 2
            after: str | None = None
            while True:
                page = await service.list(scope, limit=500, after=after)
                keys.extend(page)
                if len(page) < 500:
                    break
                after = page[-1].id
    except (OrbitError, UnsupportedServer) as exc:
        return report_error(str(exc))
    rows = [_describe(k) for k in keys]
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "tenant", "environment", "roles", "queues", "name", "created", "revoked")
    for r in rows:
        table.add_row(
            str(r["id"]),
            str(r["tenant"]),
            str(r["environment"]),
            ",".join(r["roles"]),  # type: ignore[arg-type]
            "*" if r["queues"] is None else ",".join(r["queues"]),  # type: ignore[arg-type]
            str(r["name"] or ""),
            str(r["created_at"]),
            str(r["revoked_at"] or ""),
        )
    Console(width=200).print(table)
    return 0


async def revoke_key(settings: Settings, key_id: str) -> int:
    try:
        async with connected(settings) as db:
            service = await _key_service(db)
            if service is None:
                return 2
            key = await service.revoke(key_id, actor=CLI_ACTOR, scope=None)
    except NotFound:
        return report_error(f"no API key with id {key_id}")
    except (OrbitError, UnsupportedServer) as exc:
        return report_error(str(exc))
    typer.echo(f"revoked key {key.id} ({key.scope.tenant}/{key.scope.environment})")
    return 0

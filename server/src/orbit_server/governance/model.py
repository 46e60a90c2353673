"""Governance's domain types: an API key and an audit log entry. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orbit_server.scope import Scope


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    scope: Scope
    name: str | None
    roles: tuple[str, ...]
    queues: tuple[str, ...] | None
    secret_hash: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: str
    scope: Scope
    actor: str
    action: str
    target_kind: str
    target_id: str
    details: dict[str, Any]
    request_id: str | None
    created_at: datetime

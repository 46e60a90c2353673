"""Wire models of the HTTP API (msgspec structs; unknown request fields are refused)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from orbit_server.clock import to_rfc3339
from orbit_server.governance import model as governance_model


class Request(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of request bodies."""


class Error(msgspec.Struct):
    """What went wrong, in every error answer (``errors.error_body``; docs/reference/errors.md)."""

    code: Annotated[str, msgspec.Meta(description="A stable code; program against it.")]
    category: Literal["protocol", "permission", "conflict", "transient"]
    message: Annotated[str, msgspec.Meta(description="For people; the wording may change.")]
    retryable: bool
    request_id: Annotated[str, msgspec.Meta(description="As in the X-Request-Id header.")]
    details: (
        Annotated[
            dict[str, Any],
            msgspec.Meta(description="Only for some codes, e.g. definition_invalid."),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET


class ErrorEnvelope(msgspec.Struct):
    """The body of every error answer."""

    error: Error


class Health(msgspec.Struct):
    status: str


class ReadinessBody(msgspec.Struct, omit_defaults=True):
    ready: bool
    checks: dict[str, str]
    error: Error | None = None


class WhoAmI(msgspec.Struct):
    key_id: str
    tenant: str
    environment: str
    roles: list[str]
    queues: list[str] | None


QueueName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class KeyCreate(Request):
    roles: Annotated[list[Annotated[str, msgspec.Meta(max_length=32)]], msgspec.Meta(max_length=8)]
    queues: Annotated[list[QueueName], msgspec.Meta(max_length=100)] | None = None
    name: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class ApiKey(msgspec.Struct):
    id: str
    tenant: str
    environment: str
    name: str | None
    roles: list[str]
    queues: list[str] | None
    created_at: str
    revoked_at: str | None
    revoked: bool

    @classmethod
    def of(cls, key: governance_model.ApiKey) -> ApiKey:
        return cls(
            id=key.id,
            tenant=key.scope.tenant,
            environment=key.scope.environment,
            name=key.name,
            roles=list(key.roles),
            queues=None if key.queues is None else list(key.queues),
            created_at=to_rfc3339(key.created_at) or "",
            revoked_at=to_rfc3339(key.revoked_at),
            revoked=key.revoked_at is not None,
        )


class CreatedApiKey(msgspec.Struct):
    key: ApiKey
    api_key: str  # the secret, shown once


class ApiKeyList(msgspec.Struct):
    items: list[ApiKey]
    next_cursor: str | None


class AuditEntry(msgspec.Struct):
    id: str
    actor: str
    action: str
    target_kind: str
    target_id: str
    details: dict[str, Any]
    request_id: str | None
    created_at: str

    @classmethod
    def of(cls, record: governance_model.AuditEntry) -> AuditEntry:
        return cls(
            id=record.id,
            actor=record.actor,
            action=record.action,
            target_kind=record.target_kind,
            target_id=record.target_id,
            details=record.details,
            request_id=record.request_id,
            created_at=to_rfc3339(record.created_at) or "",
        )


class AuditList(msgspec.Struct):
    items: list[AuditEntry]
    next_cursor: str | None

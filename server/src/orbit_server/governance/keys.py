"""API keys and principals: pure rules, no I/O.

A key reads ``ok_<id>_<secret>``. The id is public and indexes the row; the secret is 256
random bits of which only a SHA-256 digest is stored. A slow password hash buys nothing for a
secret with that much entropy (the practice of GitHub and Stripe tokens) and would cost CPU on
every request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from orbit_server.errors import Forbidden
from orbit_server.ids import new_id
from orbit_server.scope import Scope

PREFIX = "ok_"


class Role(StrEnum):
    SUBMITTER = "submitter"
    WORKER = "worker"
    OPERATOR = "operator"
    ADMIN = "admin"


ALL_ROLES: tuple[Role, ...] = tuple(Role)


def parse_roles(values: Iterable[str]) -> tuple[Role, ...]:
    """Validated, de-duplicated roles in a stable order; raises ValueError naming a bad one."""
    wanted = set()
    for value in values:
        try:
            wanted.add(Role(value.strip().lower()))
        except ValueError:
            allowed = ", ".join(ALL_ROLES)
            raise ValueError(f"unknown role {value!r}; roles are {allowed}") from None
    if not wanted:
        raise ValueError("a key needs at least one role")
    return tuple(r for r in ALL_ROLES if r in wanted)


@dataclass(frozen=True, slots=True)
class NewKey:
    id: str
    token: str
    secret_hash: str


def generate_key() -> NewKey:
    key_id = new_id()
    secret = secrets.token_urlsafe(32)
    return NewKey(id=key_id, token=f"{PREFIX}{key_id}_{secret}", secret_hash=hash_secret(secret))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else None."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def parse_token(token: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed token, else None."""
    if not token.startswith(PREFIX):
        return None
    key_id, sep, secret = token[len(PREFIX) :].partition("_")
    if not sep or not key_id or len(secret) < 20 or len(token) > 200:
        return None
    return key_id, secret


_KEY_ID = re.compile(r"^[0-9a-z]{26}$")
MAX_KEY_NAME = 200
MAX_QUEUE_NAME = 200
MAX_KEY_QUEUES = 100


def check_key_fields(
    roles: tuple[Role, ...], name: str | None, queues: tuple[str, ...] | None
) -> tuple[str, ...] | None:
    """Validate a key's label and queue list; answers the queues without duplicates.

    Queues restrict what a *worker* key may work on; ``None`` means every queue.
    """
    if name is not None and len(name) > MAX_KEY_NAME:
        raise ValueError(f"a key name has at most {MAX_KEY_NAME} characters")
    if queues is None:
        return None
    if Role.WORKER not in roles:
        raise ValueError("queues restrict worker keys; give the key the worker role or no queues")
    if not queues:
        raise ValueError("name at least one queue, or leave queues out for every queue")
    if len(queues) > MAX_KEY_QUEUES:
        raise ValueError(f"a key names at most {MAX_KEY_QUEUES} queues")
    if any(not q.strip() or len(q) > MAX_QUEUE_NAME for q in queues):
        raise ValueError(f"queue names have 1 to {MAX_QUEUE_NAME} characters")
    return tuple(dict.fromkeys(queues))


def is_key_id(value: str) -> bool:
    """Key ids are 26 lower-case base32 characters; anything else names no key."""
    return bool(_KEY_ID.match(value))


def secret_matches(secret: str, secret_hash: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), secret_hash)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: one key, in one scope, with roles and (for workers) queues."""

    key_id: str
    scope: Scope
    roles: frozenset[Role]
    queues: frozenset[str] | None  # None: every queue

    def require(self, *roles: Role) -> None:
        """Raise Forbidden unless the principal holds one of ``roles``."""
        if not self.roles.intersection(roles):
            needed = " or ".join(roles)
            raise Forbidden(f"this needs an API key with the {needed} role")

    def may_use_queue(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    @property
    def actor(self) -> str:
        """How the audit log names this principal."""
        return f"key:{self.key_id}"

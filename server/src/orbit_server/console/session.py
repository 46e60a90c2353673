"""Who is signed in to the console, and the CSRF token of their forms.

The API key a person signs in with is kept in an ``HttpOnly``, ``SameSite=Strict`` cookie
(``Secure`` over HTTPS) and checked on every request as the API checks a bearer key, so a
revoked key stops working in the console as it does anywhere. It is never written into a
page or a URL. Each form carries a token derived from the key (an HMAC only its holder and
the server can compute): a forged request from another site has the cookie but not the token.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from orbit_server.audit import Actor
from orbit_server.governance.keys import Principal, Role

# Who may do what: the HTTP API's rules for the same calls (api/routes/*).
READERS = frozenset({Role.SUBMITTER, Role.OPERATOR, Role.ADMIN})  # every page that reads
WRITERS = frozenset({Role.SUBMITTER, Role.OPERATOR})  # cancel a task, signal a workflow
CANCELLERS = READERS  # cancel a workflow
CONTROLLERS = frozenset({Role.OPERATOR, Role.ADMIN})  # pause/resume a workflow, its steps
OPERATORS = frozenset({Role.OPERATOR})  # queues, task retry/resolve, schedules, bulk operations
OVERSEERS = frozenset({Role.OPERATOR, Role.ADMIN})  # see workers, audit, bulk operations
# The same sets as the API's routes declare (tests/console/test_console_roles.py holds them
# together): the console may never allow what the API refuses.

COOKIE = "orbit_console"
CSRF_FIELD = "csrf"
_CSRF_LABEL = b"orbit-console-csrf-v1"


def csrf_token(key: str) -> str:
    return hmac.new(key.encode(), _CSRF_LABEL, hashlib.sha256).hexdigest()


def csrf_ok(key: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf_token(key), given)


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in key, what it may do, and its forms' token."""

    principal: Principal
    csrf: str
    request_id: str | None = None

    def may(self, roles: frozenset[Role]) -> bool:
        return bool(self.principal.roles & roles)

    @property
    def writer(self) -> bool:
        """May cancel tasks and signal workflows."""
        return self.may(WRITERS)

    @property
    def controller(self) -> bool:
        """May pause, resume and recover workflow instances."""
        return self.may(CONTROLLERS)

    @property
    def operator(self) -> bool:
        """May act: pause, cancel, retry, resolve, bulk operations."""
        return self.may(OPERATORS)

    @property
    def sees_operations(self) -> bool:
        """May see the operators' views: workers, audit, bulk operations."""
        return self.may(OVERSEERS)

    @property
    def actor(self) -> Actor:
        return Actor(self.principal.actor, self.request_id)

"""Direct dispatch (decision 0010): a task submitted while a worker connected to this node
waits with a free slot for its type is leased to that worker in the submit's own
transaction, instead of entering the claim range for a claim transaction to find it. Only
when nothing of its type waits in the claim range (so it overtakes nobody), its queue is
neither paused nor limited, and it has no concurrency key, gate, delay or idempotency key.

Pulse defines what it needs of the node's dispatch here; the worker gateway provides it."""

from __future__ import annotations

from typing import Protocol

from orbit_server.pulse.worker import Lease, Session
from orbit_server.scope import Scope


class Reservation(Protocol):
    """A free slot of one worker connection, taken for one task."""

    session: Session

    def deliver(self, lease: Lease) -> None:
        """Send the lease (after its transaction committed)."""
        ...

    def give_back(self) -> None:
        """The slot was not used: return it."""
        ...


class DirectDispatch(Protocol):
    def reserve(
        self, scope: Scope, queue: str, type_: str, version: str | None
    ) -> Reservation | None:
        """A free slot for a task of ``queue``/``type_`` (pinned to ``version``, or not), or
        None when no connection of this node has one."""
        ...

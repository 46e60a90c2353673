"""Why no connected worker could take a claimable task (pure)."""

from __future__ import annotations

import pytest

from orbit_server.pulse.workers import HandlerView, why_unserved

ANY = HandlerView("emails", "send", ())
V1 = HandlerView("reports", "build", ("1",))


@pytest.mark.parametrize(
    ("queue", "type_", "version", "handlers", "keys", "reason"),
    [
        ("emails", "send", None, [ANY], [None], None),
        ("emails", "send", "7", [ANY], [None], None),  # a handler of any version takes it
        ("reports", "build", "1", [V1], [None], None),
        ("reports", "build", None, [V1], [None], None),  # a task of no version: any handler
        ("reports", "build", "2", [V1], [None], "incompatible_version"),
        ("emails", "sned", None, [ANY], [None], "no_handler"),
        ("emails", "send", None, [], [None], "no_handler"),
        ("emails", "send", None, [], [("reports",)], "queue_out_of_scope"),
        ("emails", "send", None, [], [], "queue_out_of_scope"),  # no worker key at all
        ("emails", "send", None, [], [("reports",), ("emails",)], "no_handler"),
    ],
)
def test_why_unserved(
    queue: str,
    type_: str,
    version: str | None,
    handlers: list[HandlerView],
    keys: list[tuple[str, ...] | None],
    reason: str | None,
) -> None:
    assert why_unserved(queue, type_, version, handlers, keys) == reason

"""The pytest plugin of ``orbit_sdk.testing`` (registered through the ``pytest11`` entry point).

Fixtures, none of which does anything until a test asks for it:

- ``orbit_server`` (session): one ``orbit dev --testing`` for the whole session, started when
  the first test that needs it runs and stopped at the end. Under pytest-xdist each worker
  process starts its own.
- ``orbit`` (function): an :class:`~orbit_sdk.testing.OrbitTest` in a fresh environment of
  that server; its workers are stopped and its client closed after the test.
- ``orbit_client`` (function): ``orbit.client``, a sync ``Client`` for that environment.
- ``orbit_worker`` (function): a factory, ``orbit_worker(worker)``, that starts the handlers of
  ``worker`` on a thread of their own for the rest of the test and answers the
  :class:`~orbit_sdk.testing.TestWorker`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the plugin loads with every pytest run: import the rest only when used
    from orbit_sdk import Client
    from orbit_sdk.testing import OrbitServer, OrbitTest, TestWorker
    from orbit_sdk.worker import Worker


@pytest.fixture(scope="session")
def orbit_server() -> Iterator[OrbitServer]:
    """One ``orbit dev --testing`` for the session (see :class:`~orbit_sdk.testing.OrbitServer`)."""
    from orbit_sdk.testing import OrbitServer

    server = OrbitServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def orbit(orbit_server: OrbitServer) -> Iterator[OrbitTest]:
    """This test's own environment on the session's server, with clients and helpers."""
    from orbit_sdk.testing import OrbitTest

    test = OrbitTest(orbit_server)
    try:
        yield test
    finally:
        test.close()


@pytest.fixture
def orbit_client(orbit: OrbitTest) -> Client:
    """A sync ``Client`` for this test's environment."""
    return orbit.client


@pytest.fixture
def orbit_worker(orbit: OrbitTest) -> Iterator[Callable[..., TestWorker]]:
    """``orbit_worker(worker, concurrency=4)``: run ``worker``'s handlers until the test ends."""
    started: list[TestWorker] = []

    def start(worker: Worker, *, concurrency: int = 4) -> TestWorker:
        made = orbit.worker(worker, concurrency=concurrency)
        made.start()
        started.append(made)
        return made

    try:
        yield start
    finally:
        for made in started:
            if made.running:
                made.stop()

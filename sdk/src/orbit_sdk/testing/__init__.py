"""Testing tools: run handlers and workflows against a real Orbit server in a test suite.

The pytest plugin (enabled when ``orbit-sdk`` is installed, and costing nothing until a test
asks for one of its fixtures) starts one ``orbit dev --testing`` per test session and gives each
test its own environment::

    def test_send_welcome(orbit):  # the fixture is an OrbitTest
        with orbit.worker(app.worker):
            task = orbit.run_task("emails", "send-welcome", {"user": 42})
        assert task.state == "succeeded"

Outside pytest, :class:`OrbitServer` starts the server and :class:`OrbitTest` makes an
environment on it. The server is the ``orbit`` command of the ``orbit-server`` distribution,
run as a child process.
"""

from orbit_sdk.testing._faults import InjectedFailure, LostAttempt
from orbit_sdk.testing._orbit import OrbitTest
from orbit_sdk.testing._server import OrbitServer, ServerNotInstalled, TestEnvironment
from orbit_sdk.testing._worker import TestWorker

__all__ = [
    "InjectedFailure",
    "LostAttempt",
    "OrbitServer",
    "OrbitTest",
    "ServerNotInstalled",
    "TestEnvironment",
    "TestWorker",
]

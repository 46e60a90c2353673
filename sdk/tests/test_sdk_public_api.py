"""The curated public surface of orbit_sdk, and its independence from the server."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import orbit_sdk

SDK_SOURCE = Path(orbit_sdk.__file__).parent

EXPECTED_PUBLIC_NAMES = {
    "AsyncClient",
    "Attempt",
    "AuthenticationError",
    "Backfill",
    "Branch",
    "Client",
    "ClientConfig",
    "ConfigurationError",
    "ConflictError",
    "FirePage",
    "IdempotencyConflictError",
    "NotFoundError",
    "OrbitError",
    "OutcomeUnknownError",
    "Parallel",
    "PayloadError",
    "PendingSignal",
    "PermissionDeniedError",
    "ProtocolError",
    "Queue",
    "QueueFullError",
    "RateLimitedError",
    "Readiness",
    "RedactSecrets",
    "RetryPolicy",
    "Schedule",
    "ScheduleFire",
    "SchedulePage",
    "ScheduleTask",
    "StateConflictError",
    "SubmitOptions",
    "Task",
    "TaskDefaults",
    "TaskError",
    "TaskFailedError",
    "TaskHandle",
    "TaskOwner",
    "TaskPage",
    "TaskProgress",
    "TaskRef",
    "TaskRequest",
    "TaskStep",
    "TransientError",
    "TransportError",
    "UnavailableError",
    "When",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowDefinitionPage",
    "WorkflowError",
    "WorkflowInstance",
    "WorkflowPage",
    "WorkflowSignal",
    "WorkflowStep",
    "WorkflowStepPage",
    "WorkflowWait",
    "__version__",
    "task_ref",
}


def test_all_is_the_curated_public_api() -> None:
    assert set(orbit_sdk.__all__) == EXPECTED_PUBLIC_NAMES
    assert len(orbit_sdk.__all__) == len(EXPECTED_PUBLIC_NAMES)
    for name in orbit_sdk.__all__:
        assert getattr(orbit_sdk, name) is not None, name


def test_version_matches_the_installed_distribution() -> None:
    assert orbit_sdk.__version__ == "0.2.0"
    assert orbit_sdk.__version__ == importlib.metadata.version("orbit-sdk")


def test_package_is_typed() -> None:
    assert (SDK_SOURCE / "py.typed").is_file()


def test_sdk_never_imports_the_server() -> None:
    offenders = []
    for path in sorted(SDK_SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            offenders += [f"{path.name}: {m}" for m in modules if m.split(".")[0] == "orbit_server"]

    assert list(SDK_SOURCE.rglob("*.py")), "no SDK sources found"
    assert offenders == []

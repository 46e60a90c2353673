"""Settings (SPEC O1, O4): one frozen object, read once from flags and ``ORBIT_*`` variables.

Flags win over the environment, the environment over defaults. Every value and the relations
between lease, heartbeat, timeout, capacity and retention values are validated here, once, at
start; an invalid value stops the program with a message naming the setting.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from orbit_server.store.url import InvalidDatabaseUrl, SQLiteUrl, parse_database_url


class SettingsError(ValueError):
    """An invalid setting; the message names it as ``ORBIT_X`` (flag ``--x``)."""


class ServerRole(StrEnum):
    """What one instance does; each can be switched off per instance (SPEC O1)."""

    API = "api"
    GATEWAY = "gateway"
    DISPATCH = "dispatch"
    RECOVERY = "recovery"
    SCHEDULER = "scheduler"
    ADVANCEMENT = "advancement"
    EVENTS = "events"
    CONSOLE = "console"  # the operator console at /console (an adapter, like the API)


def _env_name(name: str) -> str:
    return "ORBIT_" + name.upper()


def _flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _setting(default: Any, doc: str, *, minimum: int | None = None) -> Any:
    return field(default=default, metadata={"doc": doc, "minimum": minimum})


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str = _setting(
        "", "Database URL: mysql://user:pw@host:3306/orbit or sqlite:///path/orbit.db"
    )
    host: str = _setting("127.0.0.1", "Address the HTTP/WebSocket listener binds")
    port: int = _setting(7070, "Port of the HTTP/WebSocket listener", minimum=0)
    node_id: str = _setting("", "This instance's name in leases and logs (default: host-pid)")
    processes: int = _setting(
        1, "orbit server only: server processes sharing the listener, each its own node", minimum=1
    )
    roles: frozenset[ServerRole] = _setting(
        frozenset(ServerRole), "Comma-separated roles this instance runs, or 'all'"
    )
    log_level: str = _setting("info", "debug, info, warning or error")
    log_format: str = _setting("console", "console (human) or json (one object per line)")
    db_pool_min: int = _setting(1, "Connections a MySQL pool keeps open", minimum=0)
    db_pool_max: int = _setting(20, "Most connections a MySQL pool opens", minimum=1)
    db_connect_timeout_ms: int = _setting(5000, "Timeout to connect to the database", minimum=100)
    db_unit_timeout_ms: int = _setting(
        30_000,
        "Longest one transaction may take before it is abandoned (the request answers 503)",
        minimum=100,
    )
    max_body_bytes: int = _setting(
        8 * 1024 * 1024, "Largest HTTP request body accepted (checked before parsing)", minimum=1024
    )
    max_json_depth: int = _setting(
        64, "Deepest nesting of arrays and objects a JSON request body may have", minimum=8
    )
    http_header_timeout_ms: int = _setting(
        10_000,
        "Time an HTTP connection has to send a request's complete headers (from its opening "
        "or the end of the previous response) before it is closed",
        minimum=100,
    )
    http_idle_timeout_ms: int = _setting(
        5_000,
        "How long an idle keep-alive HTTP connection stays open (whole seconds)",
        minimum=1000,
    )
    http_max_connections: int = _setting(
        1000, "Most HTTP connections open at once (worker WebSockets not counted)", minimum=1
    )
    ws_max_frame_bytes: int = _setting(
        16 * 1024 * 1024, "Largest WebSocket frame a worker may send", minimum=1024
    )
    ws_compression: str = _setting(
        "off",
        "Compression of worker connections: off, or deflate (permessage-deflate, for workers "
        "across slow links; costs CPU on both ends)",
    )
    submit_rate_per_key: int = _setting(
        0, "Tasks per second one API key may submit on one node (0: no limit)", minimum=0
    )
    submit_burst_per_key: int = _setting(
        1000, "Tasks a key may submit at once before its rate applies", minimum=1
    )
    max_params_bytes: int = _setting(
        1024 * 1024, "Largest params of one task, as JSON (a bigger task answers 413)", minimum=1024
    )
    key_cache_ms: int = _setting(
        1000,
        "How long a node trusts an API key it has checked before reading it again: a key "
        "revoked on another node (or by the CLI) stops working here within this time (0: read "
        "it on every request)",
        minimum=0,
    )
    lease_ms: int = _setting(
        30_000, "How long a worker's lease lasts without renewal", minimum=1000
    )
    heartbeat_ms: int = _setting(10_000, "How often workers renew leases", minimum=100)
    task_timeout_ms: int = _setting(
        300_000, "Default run-time limit of a task attempt", minimum=1000
    )
    max_task_timeout_ms: int = _setting(
        86_400_000, "Largest run-time limit a task may ask for", minimum=1000
    )
    node_max_leases: int = _setting(
        10_000, "Most tasks one node holds leased or running across all its workers", minimum=1
    )
    worker_max_capacity: int = _setting(
        1000, "Most concurrent tasks one worker connection may take", minimum=1
    )
    handshake_timeout_ms: int = _setting(
        10_000, "Time a new worker connection has to say hello", minimum=100
    )
    drain_grace_ms: int = _setting(
        30_000, "On shutdown, time running work gets to finish", minimum=0
    )
    result_retention_ms: int = _setting(
        7 * 86_400_000,
        "How long finished tasks, workflows and their results are kept",
        minimum=60_000,
    )
    idempotency_retention_ms: int = _setting(
        7 * 86_400_000, "How long an idempotency key keeps answering with its task", minimum=60_000
    )
    schedule_misfire_ms: int = _setting(
        60_000,
        "A due schedule slot this late is missed (its catch-up policy decides) even when no "
        "later slot is due yet",
        minimum=1000,
    )
    schedule_batch: int = _setting(
        500, "Most schedules one scheduler transaction fires or records", minimum=1
    )
    schedule_backfill_budget: int = _setting(
        500, "Most slots one step of a backfill handles", minimum=1
    )
    audit_retention_ms: int = _setting(
        365 * 86_400_000, "How long audit records are kept", minimum=86_400_000
    )
    schedule_backfill_max_slots: int = _setting(
        10_000, "Most slots one backfill may cover (a larger range is refused)", minimum=1
    )
    workflow_max_step_executions: int = _setting(
        200_000,
        "Most step executions (map items and poll rounds included) one workflow instance may "
        "make; the next fails it with step_limit_exceeded",
        minimum=100,
    )
    metrics_max_queues: int = _setting(
        100,
        "Queue names one node gives their own label in metrics; later ones are labelled 'other'",
        minimum=1,
    )
    metrics_sample_ms: int = _setting(
        15_000,
        "How often the one node that holds the sampling duty reads queue depth from the database",
        minimum=1000,
    )

    def has_role(self, role: ServerRole) -> bool:
        return role in self.roles

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        flags: Mapping[str, Any] | None = None,
        *,
        defaults: Mapping[str, Any] | None = None,
    ) -> Settings:
        """Build and validate: ``flags`` (None values ignored) win over ``environ``, which wins
        over ``defaults`` (a command's own defaults) and the built-in ones."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw: Any = None
            if flags and flags.get(f.name) is not None:
                raw = flags[f.name]
            elif _env_name(f.name) in environ:
                raw = environ[_env_name(f.name)]
            elif defaults and f.name in defaults:
                raw = defaults[f.name]
            if raw is not None:
                values[f.name] = _coerce(f.name, f.type, raw, f.metadata.get("minimum"))
        if not values.get("node_id"):
            values["node_id"] = f"{socket.gethostname()}-{os.getpid()}"
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        def fail(name: str, message: str) -> None:
            raise SettingsError(
                f"invalid setting {_env_name(name)} ({_flag_name(name)}): {message}"
            )

        if self.database_url:
            try:
                parsed = parse_database_url(self.database_url)
            except InvalidDatabaseUrl as exc:
                fail("database_url", str(exc))
            if self.processes > 1 and isinstance(parsed, SQLiteUrl):
                fail("processes", "SQLite serves one process; use MySQL or MariaDB for several")
        if self.port > 65535:
            fail("port", "must be at most 65535")
        if self.log_level not in ("debug", "info", "warning", "error"):
            fail("log_level", "must be debug, info, warning or error")
        if self.log_format not in ("console", "json"):
            fail("log_format", "must be console or json")
        if self.ws_compression not in ("off", "deflate"):
            fail("ws_compression", "must be off or deflate")
        if self.max_params_bytes > self.max_body_bytes:
            fail(
                "max_params_bytes", f"must not exceed ORBIT_MAX_BODY_BYTES ({self.max_body_bytes})"
            )
        if self.db_pool_min > self.db_pool_max:
            fail("db_pool_min", f"must not exceed ORBIT_DB_POOL_MAX ({self.db_pool_max})")
        if self.heartbeat_ms * 2 > self.lease_ms:
            fail(
                "lease_ms",
                f"must be at least twice ORBIT_HEARTBEAT_MS ({self.heartbeat_ms}) so that one "
                "lost heartbeat does not lose the lease",
            )
        if self.task_timeout_ms > self.max_task_timeout_ms:
            fail(
                "task_timeout_ms",
                f"must not exceed ORBIT_MAX_TASK_TIMEOUT_MS ({self.max_task_timeout_ms})",
            )
        if self.worker_max_capacity > self.node_max_leases:
            fail(
                "worker_max_capacity",
                f"must not exceed ORBIT_NODE_MAX_LEASES ({self.node_max_leases}): one worker "
                "cannot take more than its node may hold",
            )
        if self.handshake_timeout_ms > self.lease_ms:
            fail("handshake_timeout_ms", f"must not exceed ORBIT_LEASE_MS ({self.lease_ms})")
        if self.drain_grace_ms > self.max_task_timeout_ms:
            fail("drain_grace_ms", "must not exceed ORBIT_MAX_TASK_TIMEOUT_MS")
        if self.idempotency_retention_ms > self.result_retention_ms:
            fail(
                "idempotency_retention_ms",
                f"must not exceed ORBIT_RESULT_RETENTION_MS ({self.result_retention_ms}): "
                "a replayed key must still find its task",
            )
        if self.result_retention_ms < 2 * self.max_task_timeout_ms:
            fail(
                "result_retention_ms",
                "must be at least twice ORBIT_MAX_TASK_TIMEOUT_MS so results outlive the "
                "longest attempt",
            )

    def as_environment(self) -> dict[str, str]:
        """The settings as ``ORBIT_*`` variables, to start another process with them."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset):
                value = ",".join(sorted(str(v) for v in value))
            out[_env_name(f.name)] = str(value)
        return out

    def public_dict(self) -> dict[str, Any]:
        """The settings with secrets masked, for logs and diagnostics."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "database_url" and value:
                value = parse_database_url(value).redacted()
            elif isinstance(value, frozenset):
                value = sorted(str(v) for v in value)
            out[f.name] = value
        return out


def _coerce(name: str, kind: Any, raw: Any, minimum: int | None) -> Any:
    def fail(message: str) -> SettingsError:
        return SettingsError(f"invalid setting {_env_name(name)} ({_flag_name(name)}): {message}")

    if kind in ("int", int):
        try:
            value = int(str(raw).strip().replace("_", ""))
        except ValueError:
            raise fail(f"expected a whole number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise fail(f"must be at least {minimum}, got {value}")
        return value
    if kind in ("str", str):
        return str(raw).strip()
    if name == "roles":
        return parse_server_roles(raw, fail)
    raise fail("unsupported type")  # pragma: no cover - every field type is handled above


def parse_server_roles(raw: Any, fail: Callable[[str], SettingsError]) -> frozenset[ServerRole]:
    items = raw if isinstance(raw, list | tuple | set | frozenset) else str(raw).split(",")
    names = {str(i).strip().lower() for i in items if str(i).strip()}
    if names == {"all"}:
        return frozenset(ServerRole)
    if not names:
        raise fail("name at least one role, or 'all'")
    try:
        return frozenset(ServerRole(n) for n in names)
    except ValueError:
        allowed = ", ".join(r.value for r in ServerRole)
        raise fail(f"roles are {allowed} (or all), got {raw!r}") from None


def describe_settings() -> list[tuple[str, str, str, str]]:
    """(environment variable, flag, default, description) for every setting; feeds the docs."""
    rows = []
    for f in fields(Settings):
        default = f.default
        if isinstance(default, frozenset):
            default = "all"
        rows.append((_env_name(f.name), _flag_name(f.name), str(default), f.metadata["doc"]))
    return rows

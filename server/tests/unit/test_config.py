"""Settings: sources, precedence, validation of values and of their relations."""

from __future__ import annotations

import pytest

from orbit_server.config import ServerRole, Settings, SettingsError, describe_settings


def test_defaults_are_valid_and_complete() -> None:
    settings = Settings.load(environ={})
    assert settings.port == 7070 and settings.roles == frozenset(ServerRole)
    assert settings.node_id  # a default node id is derived


def test_flags_win_over_environment_over_defaults() -> None:
    env = {"ORBIT_PORT": "8000", "ORBIT_HOST": "0.0.0.0", "ORBIT_LEASE_MS": "60000"}
    settings = Settings.load(environ=env, flags={"port": 9000, "host": None}, defaults={"port": 1})
    assert (settings.port, settings.host, settings.lease_ms) == (9000, "0.0.0.0", 60000)
    assert Settings.load(environ={}, defaults={"port": 1}).port == 1


def test_settings_are_frozen() -> None:
    settings = Settings.load(environ={})
    with pytest.raises(AttributeError):
        settings.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ORBIT_PORT": "http"}, "ORBIT_PORT"),
        ({"ORBIT_PORT": "70000"}, "ORBIT_PORT"),
        ({"ORBIT_HEARTBEAT_MS": "50"}, "ORBIT_HEARTBEAT_MS"),
        ({"ORBIT_LEASE_MS": "15000"}, "ORBIT_LEASE_MS"),  # < 2 x heartbeat
        ({"ORBIT_TASK_TIMEOUT_MS": "90000000"}, "ORBIT_TASK_TIMEOUT_MS"),
        ({"ORBIT_HANDSHAKE_TIMEOUT_MS": "40000"}, "ORBIT_HANDSHAKE_TIMEOUT_MS"),
        (
            {"ORBIT_IDEMPOTENCY_RETENTION_MS": str(30 * 86_400_000)},
            "ORBIT_IDEMPOTENCY_RETENTION_MS",
        ),
        ({"ORBIT_RESULT_RETENTION_MS": "100000000"}, "ORBIT_RESULT_RETENTION_MS"),
        ({"ORBIT_DB_POOL_MIN": "30"}, "ORBIT_DB_POOL_MIN"),
        ({"ORBIT_WORKER_MAX_CAPACITY": "20000"}, "ORBIT_WORKER_MAX_CAPACITY"),
        ({"ORBIT_ROLES": "api,telepathy"}, "ORBIT_ROLES"),
        ({"ORBIT_ROLES": ""}, "ORBIT_ROLES"),
        ({"ORBIT_LOG_FORMAT": "xml"}, "ORBIT_LOG_FORMAT"),
        ({"ORBIT_WS_COMPRESSION": "gzip"}, "ORBIT_WS_COMPRESSION"),
        ({"ORBIT_DATABASE_URL": "postgres://x/y"}, "ORBIT_DATABASE_URL"),
        ({"ORBIT_DATABASE_URL": "mysql://u@h:99x/db"}, "ORBIT_DATABASE_URL"),
    ],
)
def test_invalid_values_name_the_setting(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        Settings.load(environ=env)


def test_roles_can_be_switched_off_per_instance() -> None:
    settings = Settings.load(environ={"ORBIT_ROLES": "api, dispatch"})
    assert settings.roles == {ServerRole.API, ServerRole.DISPATCH}
    assert not settings.has_role(ServerRole.SCHEDULER)
    assert Settings.load(environ={"ORBIT_ROLES": "all"}).roles == frozenset(ServerRole)


def test_public_dict_masks_the_database_password() -> None:
    settings = Settings.load(environ={"ORBIT_DATABASE_URL": "mysql://orbit:hunter2@db:3306/orbit"})
    shown = settings.public_dict()
    assert "hunter2" not in str(shown) and shown["database_url"].startswith("mysql://orbit:***@")


def test_every_setting_is_described() -> None:
    rows = describe_settings()
    assert all(doc for *_, doc in rows)
    assert {env for env, *_ in rows} >= {"ORBIT_DATABASE_URL", "ORBIT_HOST", "ORBIT_PORT"}

"""ClientConfig: explicit arguments, then ORBIT_URL / ORBIT_API_KEY; validated at construction."""

from __future__ import annotations

import dataclasses

import pytest

from orbit_sdk import ClientConfig, ConfigurationError

ENV = {"ORBIT_URL": "http://orbit.test:7070", "ORBIT_API_KEY": "env-key"}


def test_from_env_reads_url_and_key() -> None:
    config = ClientConfig.from_env(ENV)

    assert config.url == "http://orbit.test:7070"
    assert config.api_key == "env-key"
    assert config.timeout == 30.0


def test_explicit_arguments_win_over_environment() -> None:
    config = ClientConfig.from_env(
        ENV, url="https://explicit.test", api_key="explicit-key", timeout=5.0
    )

    assert config.url == "https://explicit.test"
    assert config.api_key == "explicit-key"
    assert config.timeout == 5.0


def test_each_field_falls_back_to_the_environment_on_its_own() -> None:
    config = ClientConfig.from_env(ENV, url="https://explicit.test")

    assert config.url == "https://explicit.test"
    assert config.api_key == "env-key"


def test_empty_and_blank_variables_count_as_unset() -> None:
    config = ClientConfig.from_env({"ORBIT_URL": " http://orbit.test/ \n", "ORBIT_API_KEY": "  "})

    assert config.url == "http://orbit.test"
    assert config.api_key is None


def test_missing_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="ORBIT_URL"):
        ClientConfig.from_env({"ORBIT_API_KEY": "k"})


def test_configuration_error_is_a_value_error() -> None:
    assert issubclass(ConfigurationError, ValueError)


def test_defaults_to_os_environ_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORBIT_URL", "http://from-os.test:1234")
    monkeypatch.setenv("ORBIT_API_KEY", "os-key")

    config = ClientConfig.from_env()

    assert (config.url, config.api_key) == ("http://from-os.test:1234", "os-key")


def test_trailing_slash_removed_and_path_prefix_kept() -> None:
    assert ClientConfig(url="https://gw.test/orbit/").url == "https://gw.test/orbit"


@pytest.mark.parametrize(
    "url",
    ["orbit.test:7070", "ftp://orbit.test", "http://", "http://orbit.test/?a=1", "http://h/#x"],
)
def test_invalid_urls_rejected(url: str) -> None:
    with pytest.raises(ConfigurationError, match="Orbit URL"):
        ClientConfig(url=url)


def test_credentials_in_url_rejected_without_echoing_them() -> None:
    with pytest.raises(ConfigurationError, match="credentials") as info:
        ClientConfig(url="http://user:s3cret@orbit.test")

    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan"), float("inf")])
def test_timeout_must_be_positive_and_finite(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        ClientConfig(url="http://orbit.test", timeout=timeout)


@pytest.mark.parametrize("key", ["", " padded "])
def test_explicit_bad_api_key_rejected(key: str) -> None:
    with pytest.raises(ConfigurationError, match="api_key"):
        ClientConfig.from_env({}, url="http://orbit.test", api_key=key)


def test_repr_never_shows_the_api_key() -> None:
    config = ClientConfig(url="http://orbit.test", api_key="top-secret-key")

    assert "top-secret-key" not in repr(config)
    assert "http://orbit.test" in repr(config)


def test_config_is_frozen() -> None:
    config = ClientConfig(url="http://orbit.test")

    with pytest.raises(dataclasses.FrozenInstanceError):
        config.url = "http://other.test"  # type: ignore[misc]

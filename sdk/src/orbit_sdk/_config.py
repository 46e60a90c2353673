"""Client configuration: explicit arguments first, then the environment."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_TIMEOUT",
    "URL_ENV",
    "ClientConfig",
    "ConfigurationError",
    "split_urls",
]

URL_ENV = "ORBIT_URL"
API_KEY_ENV = "ORBIT_API_KEY"
DEFAULT_TIMEOUT = 30.0


class ConfigurationError(ValueError):
    """The client configuration is missing or invalid (raised before any request is sent)."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where and how the client talks to Orbit.

    ``url`` is the server's base URL (``http://127.0.0.1:7070``); API paths such as ``/v1/tasks``
    are joined to it, so a path prefix behind a reverse proxy is kept. ``urls`` lists several
    nodes of one Orbit service for failover (``url`` may also be a comma-separated list); after
    validation ``urls`` holds every URL and ``url`` the first. ``api_key`` may be ``None`` for
    the unauthenticated health endpoints. ``timeout`` is in seconds and applies to connect,
    read, write and pool acquisition separately. The key is kept out of ``repr()``.
    """

    url: str = ""
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        urls = tuple(dict.fromkeys(_validated_url(u) for u in split_urls(self.urls or self.url)))
        if self.urls and self.url and _validated_url(self.url) != urls[0]:
            raise ConfigurationError("url must be the first of urls; pass one or the other")
        object.__setattr__(self, "urls", urls)
        object.__setattr__(self, "url", urls[0])
        if self.api_key is not None and (not self.api_key or self.api_key != self.api_key.strip()):
            raise ConfigurationError("api_key must be non-empty and have no surrounding whitespace")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigurationError(
                f"timeout must be a positive number of seconds: {self.timeout}"
            )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        urls: str | Sequence[str] | None = None,
    ) -> ClientConfig:
        """Build a configuration from ``ORBIT_URL`` and ``ORBIT_API_KEY``.

        ``environ`` defaults to ``os.environ`` and is read when this is called, never at import.
        An explicit ``urls`` or ``url`` (one URL or several separated by commas, like
        ``ORBIT_URL``) or ``api_key`` wins over the environment; empty variables count as
        unset. Raises :class:`ConfigurationError` when no URL is given either way.
        """
        if urls is not None and url is not None:
            raise ConfigurationError("pass url or urls, not both")
        env = os.environ if environ is None else environ
        given = urls if urls is not None else url
        resolved = split_urls(given if given is not None else _env_value(env, URL_ENV) or "")
        resolved_key = api_key if api_key is not None else _env_value(env, API_KEY_ENV)
        return cls(urls=resolved, api_key=resolved_key, timeout=timeout)


def split_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """The URLs in one string, a comma-separated string or a sequence of either, in order,
    blanks dropped (shared by the clients and the worker). Raises :class:`ConfigurationError`
    when there are none."""
    items = [urls] if isinstance(urls, str) else list(urls)
    found = tuple(part.strip() for item in items for part in item.split(",") if part.strip())
    if not found:
        raise ConfigurationError(f"no Orbit URL: pass url=... or set {URL_ENV}")
    return found


def _env_value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def _validated_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if "@" in parts.netloc:
        # Credentials in the URL would show up in reprs and logs; the key has its own field.
        raise ConfigurationError("Orbit URL must not contain credentials; use api_key")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"Orbit URL must be an absolute http(s) URL: {url!r}")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"Orbit URL must not have a query or fragment: {url!r}")
    return parts.geturl().rstrip("/")

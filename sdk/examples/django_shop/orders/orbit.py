"""The process's Orbit client, made on first use from the settings."""

from __future__ import annotations

import functools

from django.conf import settings

from orbit_sdk import Client


@functools.cache
def orbit_client() -> Client:
    """One client per process: it keeps its connections, and fails over between the URLs
    of ``ORBIT_URL``."""
    return Client(urls=settings.ORBIT_URL, api_key=settings.ORBIT_API_KEY)

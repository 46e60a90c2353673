"""The shop's settings, read from the environment once at startup."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    database_url: str  # SQLAlchemy's asyncio URL of the business database
    orbit_url: str  # one Orbit URL, or several separated by commas (tried in turn)
    orbit_api_key: str | None  # a key with the submitter role (the relay submits)
    embedded_relay: bool  # deliver the outbox from the app's own event loop

    @classmethod
    def from_env(cls) -> Settings:
        relay = os.environ.get("OUTBOX_RELAY", "embedded")
        if relay not in ("embedded", "external"):
            raise ValueError(f"OUTBOX_RELAY must be 'embedded' or 'external', not {relay!r}")
        return cls(
            database_url=os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///shop.db"),
            orbit_url=os.environ.get("ORBIT_URL", "http://127.0.0.1:7070"),
            orbit_api_key=os.environ.get("ORBIT_API_KEY") or None,
            embedded_relay=relay == "embedded",
        )

"""Orbit's releases as ``compat/releases.toml`` records them, for the compatibility tests."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RELEASES_FILE = ROOT / "compat" / "releases.toml"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str  # empty for the current tree
    protocols: tuple[int, ...]
    migrations: int
    contract: tuple[int, ...]
    frames: Path
    schema: Path

    @property
    def current(self) -> bool:
        return not self.commit

    def frame_files(self) -> list[Path]:
        return sorted(p for p in self.frames.glob("*.json") if not p.name.endswith(".schema.json"))


@cache
def releases() -> tuple[Release, ...]:
    """Every release, oldest first; the last one is the current tree."""
    data = tomllib.loads(RELEASES_FILE.read_text())
    return tuple(
        Release(
            version=r["version"],
            commit=r["commit"],
            protocols=tuple(r["protocols"]),
            migrations=int(r["migrations"]),
            contract=tuple(r["contract"]),
            frames=ROOT / r["frames"],
            schema=ROOT / r["schema"],
        )
        for r in data["release"]
    )


def current() -> Release:
    return releases()[-1]


def previous() -> Release:
    return releases()[-2]

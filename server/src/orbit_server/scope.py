"""The (tenant, environment) every object and every API key belongs to (SPEC G1, G2)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def valid_scope_name(name: str) -> bool:
    """Tenant and environment names: lower-case letters, digits, ``_ . -``; at most 64."""
    return bool(_NAME.match(name))


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    tenant: str
    environment: str

    def __post_init__(self) -> None:
        for what, value in (("tenant", self.tenant), ("environment", self.environment)):
            if not valid_scope_name(value):
                raise ValueError(
                    f"invalid {what} name {value!r}: use 1-64 lower-case letters, digits, "
                    "'_', '.' or '-', starting with a letter or digit"
                )

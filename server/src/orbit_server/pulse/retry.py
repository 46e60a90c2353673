"""Retry policy (SPEC P3): exponential backoff with full jitter and a cap. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_backoff_ms: int = 1000
    backoff_multiplier: float = 2.0
    max_backoff_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("retry.max_attempts must be at least 1")
        if self.initial_backoff_ms < 0 or self.max_backoff_ms < 0:
            raise ValueError("retry backoffs must not be negative")
        if self.backoff_multiplier < 1.0:
            raise ValueError("retry.backoff_multiplier must be at least 1.0")
        if self.max_backoff_ms < self.initial_backoff_ms:
            raise ValueError("retry.max_backoff_ms must be at least retry.initial_backoff_ms")

    def attempts_left(self, attempts_started: int) -> bool:
        return attempts_started < self.max_attempts

    def ceiling_ms(self, attempts_started: int) -> int:
        """The largest delay before attempt ``attempts_started + 1`` (1-based growth)."""
        exponent = max(0, attempts_started - 1)
        # Bound the exponent before the power so that huge attempt counts cannot overflow.
        grown = self.initial_backoff_ms * self.backoff_multiplier ** min(exponent, 64)
        return int(min(self.max_backoff_ms, grown))

    def backoff_ms(self, attempts_started: int, rng: random.Random | None = None) -> int:
        """Equal jitter: uniform in [ceiling / 2, ceiling], so retries of many tasks spread out
        without collapsing to zero."""
        ceiling = self.ceiling_ms(attempts_started)
        draw = (rng or random).random()
        return ceiling // 2 + int(draw * (ceiling - ceiling // 2))

"""Per-key submission rate limits (SPEC G4): token buckets held by each node.

A bucket holds up to ``burst`` tokens and refills at ``rate`` per second; a submission of n
tasks takes n tokens or is refused with the time until they will be there. Buckets live in
memory (rebuildable statistics, SPEC S1), so with several nodes the limit applies per node.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self,
        rate_per_s: float,
        burst: float,
        *,
        now: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        self.rate = rate_per_s
        self.burst = burst
        self._now = now
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, key: str, amount: int = 1) -> float:
        """Take ``amount`` tokens; answers 0 when allowed, else the seconds to wait."""
        if not self.enabled:
            return 0.0
        now = self._now()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(self.burst, now)
            self._buckets[key] = bucket
            if len(self._buckets) > self._max_keys:  # bounded memory: forget the oldest
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
        if amount > self.burst:
            return math.inf  # can never pass at once: the caller must split it
        if bucket.tokens >= amount:
            bucket.tokens -= amount
            return 0.0
        return (amount - bucket.tokens) / self.rate

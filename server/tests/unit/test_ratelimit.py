"""Token buckets for submission rate limits, on a fake clock."""

from __future__ import annotations

import math

from orbit_server.runtime.ratelimit import RateLimiter


class Ticker:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_buckets_refill_at_the_rate_up_to_the_burst() -> None:
    clock = Ticker()
    limiter = RateLimiter(rate_per_s=10, burst=5, now=clock)
    assert limiter.take("k", 5) == 0
    assert limiter.take("k") == 0.1  # one token takes a tenth of a second
    clock.t += 0.1
    assert limiter.take("k") == 0
    clock.t += 100
    assert limiter.take("k", 5) == 0 and limiter.take("k", 1) > 0  # capped at the burst
    assert limiter.take("other", 5) == 0  # keys are independent


def test_requests_bigger_than_the_burst_can_never_pass() -> None:
    limiter = RateLimiter(rate_per_s=10, burst=5, now=Ticker())
    assert math.isinf(limiter.take("k", 6))


def test_a_zero_rate_means_no_limit_and_memory_is_bounded() -> None:
    assert RateLimiter(rate_per_s=0, burst=1).take("k", 10_000) == 0
    limiter = RateLimiter(rate_per_s=1, burst=1, now=Ticker(), max_keys=10)
    for i in range(100):
        limiter.take(f"k{i}")
    assert len(limiter._buckets) == 10

"""The submit rate of an API key (``ORBIT_SUBMIT_RATE_PER_KEY``, ``ORBIT_SUBMIT_BURST_PER_KEY``),
taken by everything that makes tasks on a caller's behalf: submits, batches, backfills."""

from __future__ import annotations

import math
from typing import Any

from orbit_server.errors import InvalidRequest, RateLimited
from orbit_server.governance.keys import Principal
from orbit_server.runtime.node import Node


def take_submit_quota(
    node: Node,
    principal: Principal,
    count: int,
    *,
    what: str = "",
    advice: str,
    details: dict[str, Any] | None = None,
) -> None:
    """Take ``count`` tasks of the key's rate, or refuse: ``400 invalid_request`` when more
    than the burst could never pass (``what`` the request holds, the burst, then ``advice``;
    ``details`` gain the burst), ``429 rate_limited`` with the wait when they only come too
    soon."""
    limiter = node.submit_limiter
    wait_s = limiter.take(principal.key_id, count)
    if wait_s == 0:
        return
    if math.isinf(wait_s):  # waiting cannot help: the request itself is too big
        raise InvalidRequest(
            f"{what}this key may submit at most {limiter.burst:g} tasks at once{advice}",
            details=None if details is None else {**details, "burst": int(limiter.burst)},
        )
    raise RateLimited(
        f"this key submits faster than {limiter.rate:g} tasks/s",
        retry_after_s=max(1, math.ceil(wait_s)),
    )

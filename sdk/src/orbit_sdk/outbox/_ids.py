"""Row ids: 26 characters, Crockford base32 of a 48-bit millisecond time and 80 random bits
(the ULID layout), so that ids sort by the time they were made. Ids made in one process are
strictly increasing, also within one millisecond."""

from __future__ import annotations

import os
import threading
import time
from typing import Final

__all__ = ["new_id"]

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_RANDOM_BITS: Final = 80
_lock = threading.Lock()
_last = 0


def _encode(value: int) -> str:
    chars = []
    for _ in range(26):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(now_ms: int | None = None) -> str:
    """A new id; ``now_ms`` is the time in milliseconds since the epoch (default: now)."""
    global _last  # noqa: PLW0603 - the process's one sequence, guarded by _lock
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    value = (ms << _RANDOM_BITS) | int.from_bytes(os.urandom(10), "big")
    with _lock:
        if value <= _last:
            value = _last + 1
        _last = value
    return _encode(value)

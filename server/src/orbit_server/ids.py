"""Opaque, time-ordered identifiers.

Ids sort by creation time (48-bit milliseconds) followed by 80 random bits, so new rows land at
the end of InnoDB's clustered index instead of splitting pages at random.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str = "", *, now_ms: int | None = None) -> str:
    """A 26-character time-ordered id, optionally prefixed (``key_…``)."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    return prefix + _base32(ms & ((1 << 48) - 1), 10) + _base32(rand, 16)

"""Opaque, time-ordered identifiers, and secrets that look like them.

An id is 48 bits of milliseconds followed by 80 bits that are random for the first id of a
millisecond and incremented for the next ones, so ids made by one process sort in creation order
(audit logs list newest first by id) and new rows land at the end of InnoDB's clustered index.
Across processes, ids of the same millisecond are ordered arbitrarily.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_RANDOM_BITS = 80


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


class _Monotonic:
    """Process-wide state of the generator (the one global in Orbit: ids must not repeat)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_ms = -1
        self.last_rand = 0

    def next(self, ms: int) -> tuple[int, int]:
        with self.lock:
            if ms <= self.last_ms:
                ms = self.last_ms
                rand = self.last_rand + 1 + int.from_bytes(os.urandom(2), "big")
                if rand >> _RANDOM_BITS:  # exhausted this millisecond: borrow the next one
                    ms, rand = ms + 1, int.from_bytes(os.urandom(9), "big")
            else:
                rand = int.from_bytes(os.urandom(9), "big")  # 72 bits leaves room to count up
            self.last_ms, self.last_rand = ms, rand
            return ms, rand


_STATE = _Monotonic()


def new_id(prefix: str = "", *, now_ms: int | None = None) -> str:
    """A 26-character time-ordered id, optionally prefixed (``aud_…``)."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if now_ms is None:
        ms, rand = _STATE.next(ms)
    else:
        rand = int.from_bytes(os.urandom(10), "big")
    return prefix + _base32(ms & ((1 << 48) - 1), 10) + _base32(rand, 16)


_TOKEN_BITS = 130  # 26 base32 characters, all from the CSPRNG


def new_token(prefix: str = "") -> str:
    """A 26-character secret, optionally prefixed (``lse_…``): 130 bits from the operating
    system's CSPRNG, unrelated to any id or clock, so that knowing an id tells nothing about
    it (lease tokens fence holders, SPEC P2)."""
    return prefix + _base32(secrets.randbits(_TOKEN_BITS), 26)

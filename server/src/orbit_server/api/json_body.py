"""Request bodies: JSON decoding with a nesting bound.

msgspec recurses on the C stack and raises ``RecursionError`` near the interpreter's recursion
limit (a 500 for every JSON endpoint, and values stored that deep fail again later, deeper in
the stack). A nesting depth over ``ORBIT_MAX_JSON_DEPTH`` is ``400 invalid_request`` before the
body is parsed; the depth is measured on the raw bytes with their strings removed, at C speed.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from orbit_server.errors import InvalidRequest

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_untyped = msgspec.json.Decoder()


def too_deep(body: bytes, max_depth: int) -> bool:
    """Whether arrays and objects nest deeper than ``max_depth`` (strings do not count)."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    brackets = _STRING.sub(b"", body).translate(_TO_SQUARE, _NOT_BRACKET)
    # Each round removes the innermost containers, so the depth is the number of rounds.
    for _ in range(max_depth):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


def decode_body(body: bytes, target: Any, *, max_depth: int) -> Any:
    """Decode a request body (its conversion to ``target`` is Litestar's), or raise."""
    if too_deep(body, max_depth):
        raise InvalidRequest(f"the request body nests arrays and objects deeper than {max_depth}")
    try:
        value = _untyped.decode(body)
    except msgspec.DecodeError as exc:
        # msgspec's decode messages ("Input data was truncated") describe the input only.
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:  # unreachable below the depth bound; kept as a last line
        raise InvalidRequest("the request body nests too deeply") from None
    return value

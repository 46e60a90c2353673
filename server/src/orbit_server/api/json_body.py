"""Request bodies: strict JSON decoding with a nesting bound and duplicate keys refused.

msgspec recurses on the C stack and raises ``RecursionError`` near the interpreter's recursion
limit, and it keeps the last of duplicate keys. Orbit refuses both before a body reaches a
handler: a nesting depth over ``ORBIT_MAX_JSON_DEPTH`` and any repeated key in any object are
``400 invalid_request``, and the body is then converted to its wire struct without coercion
(``"paused": 0`` is not a boolean).

Both checks work on the raw bytes at C speed. The depth is measured on the body with its
strings removed. Duplicate keys are found by counting colons: outside strings a colon follows
every key once, and re-encoding the decoded value keeps every colon of the strings and one per
kept key, so the counts differ exactly when a key was dropped. A colon written as ``\\u003a``
would upset that balance, so such bodies take the exact (slower) path of the standard library.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from orbit_server.errors import InvalidRequest

# Possessive, and the closing quote optional: an unterminated string must not make the search
# retry from every later quote (quadratic in the body's size).
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?')
_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_ESCAPED_COLON = (b"\\u003a", b"\\u003A")
_untyped = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


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


def has_duplicate_keys(body: bytes, value: Any) -> bool:
    """Whether some object of ``body`` (already decoded into ``value``) repeats a key."""
    if _ESCAPED_COLON[0] in body or _ESCAPED_COLON[1] in body:
        return _has_duplicate_keys_exact(body)
    return body.count(b":") != _encoder.encode(value).count(b":")


class _DuplicateKey(Exception):
    pass


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey
    return result


def _has_duplicate_keys_exact(body: bytes) -> bool:
    try:
        json.loads(body, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey:
        return True
    return False


def decode_body(body: bytes, target: Any, *, max_depth: int) -> Any:
    """Decode a request body into ``target`` (a wire type), or raise ``InvalidRequest``."""
    if too_deep(body, max_depth):
        raise InvalidRequest(f"the request body nests arrays and objects deeper than {max_depth}")
    try:
        value = _untyped.decode(body)
    except msgspec.DecodeError as exc:
        # msgspec's decode messages ("Input data was truncated") describe the input only.
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:  # unreachable below the depth bound; kept as a last line
        raise InvalidRequest("the request body nests too deeply") from None
    if has_duplicate_keys(body, value):
        raise InvalidRequest("the request body repeats a key in one object")
    if target is Any:
        return value
    try:
        return msgspec.convert(value, target, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"invalid request: {_field_first(str(exc))}") from None


def _field_first(message: str) -> str:
    """msgspec's "Expected `int` >= 1000 - at `$.tasks[1].timeout_ms`" as
    "tasks[1].timeout_ms: Expected `int` >= 1000" (the field, then the reason)."""
    reason, sep, where = message.rpartition(" - at `$")
    if not sep:
        return message
    field = where.rstrip("`").lstrip(".")
    return f"{field}: {reason}" if field else reason

"""The request body checks that run before a body is parsed, on raw bytes."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_server.api.json_body import decode_body, too_deep
from orbit_server.errors import InvalidRequest


@pytest.mark.parametrize(
    ("body", "deepest"),
    [
        (b"{}", 1),
        (b'{"a": [[{"b": []}]]}', 5),
        (b'["[[[[[[", "]]]]]"]', 1),  # brackets inside strings do not count
        (b'["a\\"[[[", [[]]]', 3),  # nor after an escaped quote
    ],
)
def test_depth_is_measured_outside_strings(body: bytes, deepest: int) -> None:
    assert not too_deep(body, deepest)
    assert too_deep(body, deepest - 1) or deepest == 1


def test_a_body_of_unterminated_strings_is_refused_in_linear_time() -> None:
    """Quotes that never close made the string pattern retry from every later quote: an
    80 kB body took 40 s. The possessive pattern reads it once (4 MB: 0.15 s)."""
    body = b"[" * 65 + b'\\"' * 2_000_000
    with pytest.raises(InvalidRequest):
        decode_body(body, Any, max_depth=64)

"""Opaque list cursors (API.md: ``?limit=`` default 50, max 500, and ``?cursor=``)."""

from __future__ import annotations

import base64
import binascii
import re

from orbit_server.errors import InvalidRequest

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def page_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


_MARK = "c1:"  # versions the cursor format and makes garbage detectable


def encode_cursor(position: str) -> str:
    return base64.urlsafe_b64encode((_MARK + position).encode()).decode().rstrip("=")


# What the positions of Orbit's lists look like. A cursor built by hand around anything else
# (``c1:<anything>``) does not come from Orbit and is refused, not answered with an empty page.
ID_POSITION = re.compile(r"(?:[a-z]{1,5}_)?[0-9a-hjkmnp-tv-z]{26}")
NAME_POSITION = re.compile(r"\S{1,200}")


def decode_cursor(cursor: str | None, shape: re.Pattern[str] | None = None) -> str | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    position = text[len(_MARK) :] if text.startswith(_MARK) else ""
    if not position or (shape is not None and shape.fullmatch(position) is None):
        raise InvalidRequest("the cursor is not valid; use next_cursor from a list answer")
    return position


def next_cursor(positions: list[str], limit: int) -> str | None:
    """A cursor after the last item of a full page (a short page is the last one)."""
    return encode_cursor(positions[-1]) if len(positions) == limit and positions else None

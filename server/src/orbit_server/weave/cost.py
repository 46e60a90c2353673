"""What an expression may cost, estimated before it runs (SPEC W1, W9). Pure.

The CEL runtime holds the GIL for a whole evaluation and takes no memory or time limit but its
iteration budget (10,000 comprehension steps in all), so an evaluation that runs is one that
stalls the event loop for as long as it takes. Its cost follows from two things known before it
runs: the expression's shape, read here from its source (which operators, and how deep inside
comprehension macros), and the size of the data it reads (its longest list, its longest string).

The estimate is an upper bound in rough units of "one byte copied or compared":

- ``n`` = the most items a comprehension can go over: the longest list the expression sees
  (times the concatenations outside comprehensions that could lengthen it), capped by the
  runtime's iteration budget;
- ``+`` (which may copy the values it joins) and ``in`` (which may walk a list) cost the
  largest value (``S``: the longest string, or 16 bytes per item of the longest list) each
  time they run: ``n ** depth`` times inside ``depth`` nested comprehensions;
- comparisons and calls cost the longest string (at least 16) each time they run: they
  compare or read scalars, not whole lists (comparing two whole lists is rare, and ``in`` or
  a comprehension is what walks one);
- ``map`` and ``filter`` copy their growing list at every step: ``16 * n ** 2`` each;
- memory: each ``+`` may build a value as large as all the values it joins, ``n ** depth``
  times; a variable read outside comprehensions, or inside a ``map``'s body, may put a copy
  of the value it reads into the result (``exists``, ``all`` and ``filter`` keep no copy of
  what their bodies read).

An evaluation whose estimate is over :data:`WORK_BUDGET` (a tenth to a fifth of a second) or
:data:`MEMORY_BUDGET` is refused without running. Measuring the data costs less than the
runtime's own conversion of it, which happens on every evaluation that reads it: its size as
JSON is taken first (fast, and enough for small data); only a data set too large for that
rough bound is walked for its lengths.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgspec

WORK_BUDGET = 64 * 1024 * 1024  # ≈ 0.1 to 0.2 s of copying and comparing
MEMORY_BUDGET = 64 * 1024 * 1024  # bytes an evaluation may build
ITERATIONS = 10_000  # the runtime's comprehension budget (all comprehensions together)
ITEM_BYTES = 16  # what one list item costs to copy or compare, at least
MACROS = frozenset({"map", "filter", "all", "exists", "exists_one"})
COPYING = frozenset({"map", "filter"})  # accumulate a list, copied at every step
HEAVY = frozenset({"+", "==", "!=", "<", "<=", ">", ">=", "in"})
KEYWORDS = frozenset({"true", "false", "null", "in"})
_PUNCT = ("==", "!=", "<=", ">=", "&&", "||")


@dataclass(frozen=True, slots=True)
class Shape:
    """What the cost of an expression depends on, read from its source."""

    names: frozenset[str]  # the top-level identifiers it reads
    heavy: tuple[int, ...]  # the comprehension depth of each ``+`` and ``in``
    compares: tuple[int, ...]  # the depth of each comparison and call
    joins: tuple[int, ...]  # the comprehension depth of each ``+``
    copying: tuple[int, ...]  # the depth of each ``map`` / ``filter`` (1 for the outermost)
    reads: tuple[int, ...]  # the depth of each variable read whose value may be in the result
    outer_joins: int  # ``+`` outside comprehensions (could lengthen a list one goes over)
    literals: int  # characters of source: a bound on the items of lists it writes out

    @property
    def free(self) -> bool:
        """No operator whose cost grows with the data, and a result that holds at most a few
        copies of it: nothing to estimate."""
        return (
            not (self.heavy or self.compares or self.copying or any(self.reads))
            and len(self.reads) <= 4
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    work: int
    memory: int
    longest_list: int
    longest_string: int

    def refusal(self) -> str | None:
        """Why the evaluation must not run, or None."""
        if self.work <= WORK_BUDGET and self.memory <= MEMORY_BUDGET:
            return None
        return (
            "the expression is too costly to evaluate over this data (its longest list has "
            f"{self.longest_list} items, its longest string {self.longest_string} characters): "
            f"an estimated {self.work:,} units of work and {self.memory:,} bytes built, where "
            f"an evaluation may take {WORK_BUDGET:,} and {MEMORY_BUDGET:,}"
        )


@lru_cache(maxsize=4096)
def shape_of(source: str) -> Shape:
    tokens = list(_tokens(source))
    stack: list[str] = []  # per open parenthesis: the macro that opened it, or ""
    names: set[str] = set()
    heavy: list[int] = []
    compares: list[int] = []
    joins: list[int] = []
    copying: list[int] = []
    reads: list[int] = []
    for i, tok in enumerate(tokens):
        before = tokens[i - 1] if i else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        macros = [m for m in stack if m]
        depth = len(macros)
        if tok == "(":
            macro = before in MACROS and i >= 2 and tokens[i - 2] == "."
            if macro and before in COPYING:
                copying.append(depth + 1)
            if not macro and (before.isidentifier() or before in (")", "]")):
                compares.append(depth)  # a call: reads its arguments
            stack.append(before if macro else "")
        elif tok == ")":
            if stack:
                stack.pop()
        elif tok in ("+", "in"):
            heavy.append(depth)
            if tok == "+":
                joins.append(depth)
        elif tok in HEAVY:
            compares.append(depth)
        elif tok.isidentifier() and before != "." and after != "(" and tok not in KEYWORDS:
            names.add(tok)
            if all(m == "map" for m in macros):  # its value may end up in the result
                reads.append(depth)
    return Shape(
        names=frozenset(names),
        heavy=tuple(heavy),
        compares=tuple(compares),
        joins=tuple(joins),
        copying=tuple(copying),
        reads=tuple(reads),
        outer_joins=sum(1 for d in joins if d == 0),
        literals=len(source),
    )


def estimate(shape: Shape, data: Mapping[str, Any]) -> Estimate:
    """The cost of evaluating an expression of ``shape`` over ``data`` (its variables).

    First from the data's size as JSON (a fast upper bound of its lists' and strings'
    lengths); only when that is over the budget from the lengths themselves, walked."""
    values = [v for k, v in data.items() if k in shape.names]
    try:
        size = len(msgspec.json.encode(values))
    except (TypeError, msgspec.EncodeError):
        size = None
    if size is not None:
        rough = _estimate(shape, size // 2, size)
        if rough.refusal() is None:
            return rough
    return _estimate(shape, *_measure(values))


def _estimate(shape: Shape, longest_list: int, longest_string: int) -> Estimate:
    value = max(longest_string, ITEM_BYTES * longest_list, 1)
    scalar = max(longest_string, ITEM_BYTES)  # what a comparison or a call reads, at most
    n = min(ITERATIONS, longest_list * (shape.outer_joins + 1) + shape.literals)
    joined = value * (len(shape.joins) + 1)  # the largest value a chain of ``+`` may build
    work = sum(n**depth * joined for depth in shape.heavy)
    work += sum(n**depth * scalar for depth in shape.compares)
    work += sum(ITEM_BYTES * n ** (depth + 1) for depth in shape.copying)
    memory = sum(n**depth * joined for depth in shape.joins)
    memory += sum(n**depth * value for depth in shape.reads)
    return Estimate(work, memory, longest_list, longest_string)


def _measure(values: Iterable[Any]) -> tuple[int, int]:
    """The longest list (or map) and the longest string in ``values``, all levels."""
    longest_list = longest_string = 0
    todo = list(values)
    while todo:
        value = todo.pop()
        if isinstance(value, str):
            longest_string = max(longest_string, len(value))
        elif isinstance(value, dict):
            longest_list = max(longest_list, len(value))
            todo.extend(value.values())
            longest_string = max(longest_string, max(map(len, value), default=0))
        elif isinstance(value, list | tuple):
            longest_list = max(longest_list, len(value))
            todo.extend(value)
    return longest_list, longest_string


def _tokens(source: str) -> Iterator[str]:
    """CEL's tokens, enough to see operators and calls: string and bytes literals and
    comments are skipped whole (an operator inside a string is no operator)."""
    i, end = 0, len(source)
    while i < end:
        char = source[i]
        if char.isspace():
            i += 1
        elif source.startswith("//", i):
            newline = source.find("\n", i)
            i = end if newline < 0 else newline + 1
        elif char in "'\"" or (char in "rRbB" and _quote_at(source, i)):
            i = _skip_string(source, i)
            yield "''"
        elif char.isalpha() or char == "_":
            start = i
            while i < end and (source[i].isalnum() or source[i] == "_"):
                i += 1
            yield source[start:i]
        elif char.isdigit():
            while i < end and (source[i].isalnum() or source[i] == "."):
                i += 1
            yield "0"
        else:
            pair = source[i : i + 2]
            if pair in _PUNCT:
                i += 2
                yield pair
            else:
                i += 1
                yield char


def _quote_at(source: str, i: int) -> bool:
    """Whether a string literal with prefixes (``r``, ``b``, ``rb``, ...) starts at ``i``."""
    j = i
    while j < len(source) and j - i < 2 and source[j] in "rRbB":
        j += 1
    return j < len(source) and source[j] in "'\"" and not (i and source[i - 1].isalnum())


def _skip_string(source: str, i: int) -> int:
    raw = False
    while source[i] in "rRbB":
        raw = raw or source[i] in "rR"
        i += 1
    quote = source[i : i + 3] if source[i : i + 3] in ("'''", '"""') else source[i]
    i += len(quote)
    while i < len(source):
        if not raw and source[i] == "\\":
            i += 2
        elif source.startswith(quote, i):
            return i + len(quote)
        else:
            i += 1
    return i

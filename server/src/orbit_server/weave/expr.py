"""Weave's expression language (SPEC W1): branch conditions and data mappings are CEL
expressions, compiled when a definition is published and evaluated by the server over a
workflow's data. CEL is deterministic, side-effect free and not Turing-complete: no loops but
its bounded comprehension macros, no clock, no I/O. Pure; the CEL runtime is Google's
(``cel-expr-python``), behind this module only.

An expression sees the variables it is compiled for (by default ``input``, ``steps``,
``signal``, ``item``, ``index`` and ``round``), each any JSON value. Its result is a JSON value
again: CEL timestamps become RFC 3339 strings and durations milliseconds; a result that is not
JSON (bytes, a type) is an error, as is any evaluation error (a missing key, a division by
zero, an integer out of range).

Cost: evaluation is synchronous, holds the GIL throughout (a worker thread would not free the
event loop) and its cost grows with the data it reads. The runtime stops comprehensions after
10,000 steps, but its ``map`` and ``filter`` macros are quadratic in the list's length (a
``map`` over 8,000 items takes seconds) and nothing bounds the strings and lists it builds. So
every evaluation is estimated first (``weave/cost.py``: the expression's shape and the sizes
of the data it reads) and one over the budget (about a tenth of a second, 64 MiB built) fails
without running, as any evaluation error does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from orbit_server.weave.cost import Shape, estimate, shape_of

MAX_SOURCE = 4096  # characters of one expression
MAX_RESULT_ITEMS = 100_000  # list items and map entries in one result, all levels together
VARIABLES = frozenset({"input", "steps", "signal", "item", "index", "round"})


class ExpressionInvalid(ValueError):
    """An expression that cannot be compiled; the message says where and why."""


class ExpressionFailed(Exception):
    """An evaluation that produced no JSON value; the message says why."""


@dataclass(frozen=True, slots=True)
class Expression:
    """A compiled expression; evaluate it with :meth:`evaluate`."""

    source: str
    variables: frozenset[str]
    _compiled: Any
    _shape: Shape

    def evaluate(self, data: Mapping[str, Any]) -> Any:
        """The expression's value over ``data`` (its variables; absent ones are null); an
        evaluation estimated to cost more than the budget fails without running."""
        bound = {name: data.get(name) for name in self.variables}
        if not self._shape.free:
            refusal = estimate(self._shape, bound).refusal()
            if refusal is not None:
                raise ExpressionFailed(refusal)
        try:
            value = self._compiled.eval(data=bound)
        except Exception as exc:  # the runtime refused the data itself
            raise ExpressionFailed(_reason(exc)) from None
        if value.type() == cel.Type.ERROR:
            raise ExpressionFailed(_reason(value.value()))
        return _to_json(value.plain_value(), [MAX_RESULT_ITEMS])

    def test(self, data: Mapping[str, Any]) -> bool:
        """The value of a condition: it must be a boolean."""
        value = self.evaluate(data)
        if not isinstance(value, bool):
            raise ExpressionFailed(f"a condition must be true or false, not {_kind(value)}")
        return value


def compile_expression(source: str, variables: Iterable[str] = VARIABLES) -> Expression:
    """Compile ``source`` for ``variables``; raises :class:`ExpressionInvalid` with the
    compiler's message (position and reason)."""
    names = frozenset(variables)
    if not source.strip():
        raise ExpressionInvalid("an expression must not be empty")
    if len(source) > MAX_SOURCE:
        raise ExpressionInvalid(f"an expression has at most {MAX_SOURCE} characters")
    return Expression(source, names, _compile(source, names), shape_of(source))


@lru_cache(maxsize=4096)
def _compile(source: str, names: frozenset[str]) -> Any:
    try:
        return _env(names).compile(source)
    except Exception as exc:
        raise ExpressionInvalid(_reason(exc)) from None


@lru_cache(maxsize=64)
def _env(names: frozenset[str]) -> Any:
    return cel.NewEnv(variables=dict.fromkeys(sorted(names), cel.Type.DYN))


def _reason(error: object) -> str:
    """The runtime's message without its status prefix and trailing status."""
    text = str(error).strip()
    for prefix in ("INVALID_ARGUMENT: ", "NOT_FOUND: ", "OUT_OF_RANGE: ", "INTERNAL: "):
        text = text.removeprefix(prefix)
    text = text.removeprefix("ERROR: ").removesuffix(" [INVALID_ARGUMENT]")
    text = text.removesuffix(" [INTERNAL]")
    return text.replace("<input>:", "at ", 1).replace(" (in container '')", "")


def _to_json(value: Any, budget: list[int]) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        moment = value.astimezone(UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, list | tuple | dict):
        budget[0] -= len(value)
        if budget[0] < 0:
            raise ExpressionFailed(f"a result has at most {MAX_RESULT_ITEMS} items")
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise ExpressionFailed("a map in a result must have string keys")
            return {k: _to_json(v, budget) for k, v in value.items()}
        return [_to_json(v, budget) for v in value]
    raise ExpressionFailed(f"a result must be a JSON value, not {_kind(value)}")


def _kind(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__

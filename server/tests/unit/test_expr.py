"""Weave's expressions (CEL): compile errors with reasons, deterministic evaluation over JSON
data, JSON results, evaluation errors, limits."""

from __future__ import annotations

import pytest

from orbit_server.weave import cost, expr
from orbit_server.weave.expr import (
    MAX_SOURCE,
    ExpressionFailed,
    ExpressionInvalid,
    compile_expression,
)

DATA = {
    "input": {"amount": 150, "customer": {"tier": "gold"}, "items": [1, 2, 3]},
    "steps": {"check": {"output": {"ok": True, "score": 0.75}}},
    "signal": None,
}


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("input.amount > 100 && steps.check.output.ok", True),
        ("input.customer.tier == 'gold' ? 'priority' : 'normal'", "priority"),
        ("input.items.map(x, x * 2)", [2, 4, 6]),
        ("input.items.filter(x, x > 1).size()", 2),
        ("{'total': input.amount * 2, 'score': steps.check.output.score}",
         {"total": 300, "score": 0.75}),
        ("has(input.coupon) ? input.coupon : null", None),
        ("signal == null", True),
        ("timestamp('2026-01-01T00:00:00Z') + duration('90s')", "2026-01-01T00:01:30.000Z"),
        ("duration('1m30s')", 90_000),
        ("1u + 2u", 3),
    ],
)  # fmt: skip
def test_expressions_evaluate_to_json_values(source: str, value: object) -> None:
    assert compile_expression(source).evaluate(DATA) == value


def test_a_condition_is_true_or_false() -> None:
    assert compile_expression("input.amount > 100").test(DATA) is True
    with pytest.raises(ExpressionFailed, match="true or false, not int"):
        compile_expression("input.amount").test(DATA)


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("input.amount >", "Syntax error"),
        ("secrets.token", "undeclared reference to 'secrets"),
        ("'a' + 1", "no matching overload"),
        ("   ", "must not be empty"),
        ("1" * (MAX_SOURCE + 1), f"at most {MAX_SOURCE} characters"),
    ],
)
def test_expressions_that_cannot_compile_say_why(source: str, reason: str) -> None:
    with pytest.raises(ExpressionInvalid, match=reason):
        compile_expression(source)


def test_only_the_declared_variables_exist() -> None:
    assert compile_expression("item * 2", ["item"]).evaluate({"item": 21}) == 42
    with pytest.raises(ExpressionInvalid, match="undeclared reference to 'input"):
        compile_expression("input.amount", ["item"])


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("input.missing", "Key not found"),
        ("input.amount / 0", "divide by zero"),
        ("b'abc'", "not bytes"),
        ("{1: 'a'}", "string keys"),
    ],
)
def test_evaluation_errors_are_failures_with_a_reason(source: str, reason: str) -> None:
    with pytest.raises(ExpressionFailed, match=reason):
        compile_expression(source).evaluate(DATA)


def test_a_number_beyond_64_bits_in_the_data_fails_the_evaluation() -> None:
    with pytest.raises(ExpressionFailed, match="out of range"):
        compile_expression("input.n + 1").evaluate({"input": {"n": 2**70}})


def test_absent_variables_are_null_and_results_do_not_depend_on_anything_else() -> None:
    expression = compile_expression("round == null && item == null")
    assert expression.evaluate({}) is True
    assert [compile_expression("input.items.map(x, x + 1)").evaluate(DATA) for _ in range(3)] == [
        [2, 3, 4]
    ] * 3


def test_a_result_larger_than_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(expr, "MAX_RESULT_ITEMS", 100)
    data = {"input": {"items": list(range(40))}}
    assert len(compile_expression("input.items.map(x, [x])").evaluate(data)) == 40  # 80 items
    with pytest.raises(ExpressionFailed, match="at most 100 items"):
        compile_expression("input.items.map(x, [x, x])").evaluate(data)  # 120 items


def test_a_runaway_comprehension_is_stopped() -> None:
    source = "input.items.map(a, input.items.map(b, input.items.map(c, a + b + c)))"
    with pytest.raises(ExpressionFailed, match="too costly"):  # 27,000 steps: not even begun
        compile_expression(source).evaluate({"input": {"items": list(range(30))}})


def test_a_costly_evaluation_fails_before_it_runs_and_cheap_ones_run() -> None:
    big = {"input": {"s": "x" * 1_000_000, "l": list(range(300))}}
    growing = compile_expression("{'n': size(input.l.map(x, input.s + input.s))}")
    with pytest.raises(ExpressionFailed, match="too costly to evaluate over this data"):
        growing.evaluate(big)  # ran, it built 600 MB
    quadratic = compile_expression("size(input.map(x, x + 1))")
    with pytest.raises(ExpressionFailed, match="its longest list has 12000 items"):
        quadratic.evaluate({"input": list(range(12_000))})  # ran, it took seconds
    copies = compile_expression("[" + ", ".join(["input.s"] * 100) + "]")
    with pytest.raises(ExpressionFailed, match="too costly"):
        copies.evaluate(big)
    # The same shapes over ordinary data, and plain reads of large data, run.
    assert quadratic.evaluate({"input": list(range(1000))}) == 1000
    small = {"input": {"s": "ab", "l": [1, 2, 3]}}
    assert growing.evaluate(small) == {"n": 3}
    assert compile_expression("input.s + input.s").evaluate(big) == "x" * 2_000_000
    assert (
        compile_expression("'order-' + input.id").evaluate(
            {"input": {"id": "o1", "lines": list(range(100_000))}}
        )
        == "order-o1"
    )


def test_ordinary_comprehensions_over_objects_run() -> None:
    """Comparisons inside a comprehension compare scalars: they are not charged as if they
    copied the largest list, so lookups over a few thousand objects run."""
    items = [{"id": f"id{k}", "name": "n" * 20, "tags": ["a", "b", "x"]} for k in range(3000)]
    data = {"input": {"items": items, "wanted": "id2999"}}
    assert compile_expression("input.items.exists(i, i.id == input.wanted)").evaluate(data)
    tagged = compile_expression("input.items.map(i, i.tags.exists(t, t == 'x'))")
    assert tagged.evaluate({"input": {"items": items[:300]}}) == [True] * 300
    ids = compile_expression("input.items.filter(i, i.id.startsWith('id1')).size()")
    assert ids.evaluate({"input": {"items": items[:1000]}}) == 111


def test_operators_inside_string_literals_cost_nothing() -> None:
    shape = cost.shape_of("'a + b == c' + \"x.map(y, y)\" + r'''(+)''' // + +\n")
    assert (shape.joins, shape.copying, shape.names) == ((0, 0), (), frozenset())
    nested = cost.shape_of("input.l.map(x, input.l.filter(y, y + x > 1))")
    assert nested.copying == (1, 2) and nested.joins == (2,)
    assert nested.names == {"input", "x", "y"}

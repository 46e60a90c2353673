"""A workflow definition's steps as an SVG graph (pure): boxes in layers by their distance from
the first step, arrows along ``next``, choices, timeouts and failures, each box coloured by the
state of the step's latest execution in an instance. Branches of a parallel step and a map's
steps are drawn inside their step's box as a list (their own graphs are one level down)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 168, 44, 48, 28, 12
EDGE_FIELDS = ("next", "on_failure", "on_timeout", "on_exhausted")


@dataclass(frozen=True, slots=True)
class Box:
    id: str
    kind: str
    layer: int
    row: int
    state: str | None

    @property
    def x(self) -> int:
        return PAD + self.layer * (BOX_W + GAP_X)

    @property
    def y(self) -> int:
        return PAD + self.row * (BOX_H + GAP_Y)


def edges(step: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(label, target) of each way out of a step."""
    for choice in step.get("choices") or []:
        if choice.get("next"):
            yield "when", str(choice["next"])
    if step.get("default"):
        yield "default", str(step["default"])
    for name in EDGE_FIELDS:
        if step.get(name):
            yield name.removeprefix("on_"), str(step[name])


def layout(steps: list[Mapping[str, Any]], states: Mapping[str, str]) -> list[Box]:
    """Layers by breadth-first distance from the first step (steps not reached go last)."""
    ids = [str(s["id"]) for s in steps]
    by_id = {str(s["id"]): s for s in steps}
    layer: dict[str, int] = {}
    if ids:
        layer[ids[0]] = 0
        frontier = [ids[0]]
        while frontier:
            following = []
            for step_id in frontier:
                for _, target in edges(by_id[step_id]):
                    if target in by_id and target not in layer:
                        layer[target] = layer[step_id] + 1
                        following.append(target)
            frontier = following
    last = max(layer.values(), default=-1)
    rows: dict[int, int] = {}
    boxes = []
    for step_id in ids:
        depth = layer.get(step_id, last + 1)
        row = rows.get(depth, 0)
        rows[depth] = row + 1
        kind = str(by_id[step_id].get("kind", ""))
        boxes.append(Box(step_id, kind, depth, row, states.get(step_id)))
    return boxes


def render(body: Mapping[str, Any] | None, states: Mapping[str, str] | None = None) -> Markup:
    """The SVG of a definition's top-level steps; ``states``: step id → the state of its
    latest execution (an instance's view)."""
    steps = list((body or {}).get("steps") or [])
    boxes = layout(steps, states or {})
    if not boxes:
        return Markup("")
    at = {b.id: b for b in boxes}
    width = PAD * 2 + (max(b.layer for b in boxes) + 1) * (BOX_W + GAP_X) - GAP_X
    height = PAD * 2 + (max(b.row for b in boxes) + 1) * (BOX_H + GAP_Y) - GAP_Y
    parts = [
        f'<svg class="graph" role="img" aria-label="the workflow\'s steps" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/>'
        "</marker></defs>",
    ]
    for step in steps:
        source = at[str(step["id"])]
        for label, target in edges(step):
            if target not in at:
                continue
            dest = at[target]
            x1, y1 = source.x + BOX_W, source.y + BOX_H // 2
            x2, y2 = dest.x, dest.y + BOX_H // 2
            if dest.layer <= source.layer:  # a loop back: go round below
                x1, y1 = source.x + BOX_W // 2, source.y + BOX_H
                x2, y2 = dest.x + BOX_W // 2, dest.y + BOX_H
                mid = max(y1, y2) + GAP_Y // 2
                d = f"M {x1} {y1} C {x1} {mid} {x2} {mid} {x2} {y2}"
            else:
                d = f"M {x1} {y1} C {x1 + GAP_X // 2} {y1} {x2 - GAP_X // 2} {y2} {x2} {y2}"
            parts.append(f'<path d="{d}"><title>{escape(label)}</title></path>')
    for box in boxes:
        state = box.state or "not_reached"
        parts.append(
            f'<g class="s-{escape(state)}" data-step="{escape(box.id)}" '
            f'data-state="{escape(state)}">'
            f'<rect x="{box.x}" y="{box.y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text x="{box.x + 10}" y="{box.y + 18}">{escape(box.id[:22])}</text>'
            f'<text x="{box.x + 10}" y="{box.y + 35}" opacity=".7">{escape(box.kind)}'
            f"{' · ' + escape(box.state) if box.state else ''}</text>"
            f"<title>{escape(box.id)} ({escape(box.kind)}): {escape(state)}</title></g>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every value in it went through escape()

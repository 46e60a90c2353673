"""Drawing the API's objects for people (rich tables) and for scripts (JSON as the API sent it).

A command describes what to show with ``Column``s and ``Field``s; nothing here knows about
tasks or queues.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

Getter = Callable[[dict[str, Any]], Any]


def pick(path: str) -> Getter:
    """A getter for ``"a.b"``: ``obj["a"]["b"]``, or None when a part is missing."""
    parts = path.split(".")

    def get(obj: dict[str, Any]) -> Any:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return None
            value = value.get(part)
        return value

    return get


@dataclass(frozen=True)
class Column:
    """One column of a list table: a header and where its cell comes from."""

    header: str
    value: Getter
    no_wrap: bool = False

    @classmethod
    def of(cls, header: str, path: str | None = None, *, no_wrap: bool = False) -> Column:
        return cls(header, pick(path or header), no_wrap)


def cell(value: Any) -> str:
    """A value as one short table cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) >= {"code", "message"}:
        return f"{value['code']}: {value['message']}" if value["message"] else str(value["code"])
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def table(
    items: Iterable[dict[str, Any]], columns: Sequence[Column], title: str | None = None
) -> Table:
    drawn = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        drawn.add_column(column.header, no_wrap=column.no_wrap, overflow="fold")
    for item in items:
        drawn.add_row(*(cell(column.value(item)) for column in columns))
    return drawn


def details(obj: dict[str, Any], fields: Sequence[Column] | None = None) -> Table:
    """One object as two columns, field and value; every field when none are named."""
    drawn = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    drawn.add_column(style="bold", no_wrap=True)
    drawn.add_column(overflow="fold")
    rows = fields if fields is not None else [Column.of(name) for name in obj]
    for field in rows:
        value = field.value(obj)
        text = json.dumps(value, indent=2) if isinstance(value, dict | list) and value else None
        drawn.add_row(field.header, text if text is not None else cell(value))
    return drawn


def stack(*parts: RenderableType | None) -> Group:
    """Renderables one below the other, a blank line between them."""
    shown: list[RenderableType] = []
    for part in parts:
        if part is None:
            continue
        if shown:
            shown.append(Text(""))
        shown.append(part)
    return Group(*shown)


def console() -> Console:
    # Wide when piped, so that a redirected table keeps one line per row.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def show(renderable: RenderableType) -> None:
    console().print(renderable)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def watch(draw: Callable[[], RenderableType], every_s: float) -> None:
    """Redraw ``draw()`` every ``every_s`` seconds until Ctrl-C, with when it was drawn.

    Ctrl-C only sets a flag, read between redraws: an interrupt raised in the middle of a
    redraw could leave the terminal library's lock held, and the command would then hang on
    its way out instead of stopping."""

    def frame() -> RenderableType:
        drawn_at = time.strftime("%H:%M:%S")
        footer = Text(f"{drawn_at}, every {every_s:g} s; Ctrl-C to stop", style="dim")
        return Group(draw(), footer)

    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        with Live(frame(), console=console(), auto_refresh=False) as live:
            while not stop.wait(every_s):
                live.update(frame(), refresh=True)
    finally:
        signal.signal(signal.SIGINT, previous)

"""The server of ``python -m bench trip``: the ``orbit`` command itself
(``python -m bench.trip_server dev …``) with a profile hook that records the calls of
``orbit_server``'s functions, in every thread, while a window is open.

SIGUSR1 opens a window (it prints ``TRIP_ON_<n>=1``); SIGUSR2 closes it, writes what it saw
to ``$TRIP_OUT/window-<n>.json`` and prints ``TRIP_OFF_<n>=<path>``. A call is the start of a
function's frame: a generator or coroutine counts once, when it first runs, not at each
resume. Comprehensions and module bodies are not functions here. Each call is recorded with
its caller (the nearest ``orbit_server`` frame below it on its thread's stack, if any) and its
root (the farthest: the function the asyncio task or thread began in), so that the calls of a
background loop can be told apart from the trip's.
"""

from __future__ import annotations

import asyncio
import contextvars
import dis
import inspect
import json
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import orbit_server

PACKAGE = str(Path(orbit_server.__file__).resolve().parent) + os.sep
SKIP = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<module>"})
GENERATOR = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)

# The frames that run an event loop: a coroutine's stack ends there (what lies below is the
# loop's own caller, not the coroutine's).
LOOP = frozenset(
    {
        asyncio.events.Handle._run.__code__,
        asyncio.runners.Runner.run.__code__,
        asyncio.base_events.BaseEventLoop.run_forever.__code__,
        asyncio.base_events.BaseEventLoop.run_until_complete.__code__,
    }
)

# code → (function, offset of its first RESUME for generators and coroutines, else -1), or
# None for code that is not one of orbit_server's functions
_codes: dict[CodeType, tuple[str, int] | None] = {}
# The root of the main thread's task that made the current context: the SQLite thread runs a
# unit in a copy of its submitter's context, so its calls are rooted where the unit came from.
ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("trip_origin")
MAIN = threading.main_thread()


class _Recording:
    on = False
    window = 0
    log: list[tuple[str, str | None, str]] = []


REC = _Recording()


def _classify(code: CodeType) -> tuple[str, int] | None:
    found: tuple[str, int] | None = None
    path = code.co_filename
    if path.startswith(PACKAGE) and code.co_name not in SKIP:
        first = -1
        if code.co_flags & GENERATOR:
            first = next(i.offset for i in dis.get_instructions(code) if i.opname == "RESUME")
        name = f"{path[len(PACKAGE) :].replace(os.sep, '/')}:{code.co_qualname}"
        found = (f"{name}@{code.co_firstlineno}", first)
    _codes[code] = found
    return found


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if not REC.on or event != "call":
        return
    code = frame.f_code
    info = _codes[code] if code in _codes else _classify(code)
    if info is None or (info[1] >= 0 and frame.f_lasti != info[1]):
        return  # not orbit_server's, or a generator or coroutine resumed
    caller: str | None = None
    root = info[0]
    back = frame.f_back
    while back is not None and back.f_code not in LOOP:
        above = _codes[back.f_code] if back.f_code in _codes else _classify(back.f_code)
        if above is not None:
            if caller is None:
                caller = above[0]
            root = above[0]
        back = back.f_back
    if threading.current_thread() is MAIN:
        if ORIGIN.get(None) != root:
            ORIGIN.set(root)
    else:
        root = ORIGIN.get(root)
    REC.log.append((info[0], caller, root))


def _open(signum: int, frame: FrameType | None) -> None:
    REC.window += 1
    REC.log = []
    REC.on = True
    os.write(1, f"TRIP_ON_{REC.window}=1\n".encode())


def _close(signum: int, frame: FrameType | None) -> None:
    REC.on = False
    seen = Counter(REC.log)
    rows = [[callee, caller, root, n] for (callee, caller, root), n in seen.items()]
    path = Path(os.environ["TRIP_OUT"]) / f"window-{REC.window}.json"
    path.write_text(json.dumps({"package": "orbit_server", "calls": rows}))
    os.write(1, f"TRIP_OFF_{REC.window}={path}\n".encode())


def main() -> None:
    signal.signal(signal.SIGUSR1, _open)
    signal.signal(signal.SIGUSR2, _close)
    threading.setprofile(_profile)  # threads started from now on (the SQLite one among them)
    sys.setprofile(_profile)
    from orbit_server.cli import main as orbit

    sys.argv = ["orbit", *sys.argv[1:]]
    orbit()


if __name__ == "__main__":
    main()

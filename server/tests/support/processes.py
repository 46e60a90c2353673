"""Run the real ``orbit`` command in a child process, as a user would."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str


def orbit_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "orbit_server", *args]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    env.update(extra or {})
    return env


def run_orbit(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Finished:
    done = subprocess.run(
        orbit_command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(env),
        check=False,
    )
    return Finished(done.returncode, done.stdout, done.stderr)


class OrbitProcess:
    """A long-running ``orbit dev`` / ``orbit server``; stdout lines are collected as they come."""

    def __init__(
        self, args: Sequence[str], env: dict[str, str] | None = None, *, raw: bool = False
    ) -> None:
        self.proc = subprocess.Popen(
            list(args) if raw else orbit_command(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(env),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.announced: dict[str, str] = {}
        self.stderr_lines: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    @classmethod
    def command(cls, argv: Sequence[str], env: dict[str, str] | None = None) -> OrbitProcess:
        """Any command line (e.g. a script) rather than ``orbit …``."""
        return cls(argv, env, raw=True)

    def wait_for(self, *names: str, timeout: float = 30) -> dict[str, str]:
        """Block until each ``NAME=value`` line has been printed; answers them."""
        deadline = time.monotonic() + timeout
        while not all(n in self.announced for n in names):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(
                    f"orbit did not print {names}; exit={self.proc.poll()} "
                    f"stderr={''.join(self.stderr_lines)[-2000:]}"
                )
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            name, sep, value = line.partition("=")
            if sep and name.isupper():
                self.announced[name] = value
        return self.announced

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            for pump in self._pumps:
                pump.join(timeout=5)
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

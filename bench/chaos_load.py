"""The chaos scenario's load: client threads submitting a mixed load over HTTP, each submit
with an idempotency key of its own, re-sent with the same key and body after every ambiguous
answer (timeout, connection error, 5xx, 429) until a definite one."""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import httpx2

from bench.chaos_checks import Submit

KEYS = 6  # concurrency keys of the keyed tasks
# (kind, weight, hold in ms): what the load is made of.
MIX = (("idempotent", 40, (100, 800)), ("unsafe", 20, (300, 1500)), ("keyed", 25, (200, 600)),
       ("limited", 15, (200, 500)))  # fmt: skip


def _body(kind: str, key: str, rng: random.Random) -> dict[str, Any]:
    hold = {k: h for k, _, h in MIX}[kind]
    params: dict[str, Any] = {"key": key, "hold_ms": rng.randint(*hold)}
    body: dict[str, Any] = {
        "queue": "chaos-limited" if kind == "limited" else "chaos",
        "type": kind,
        "idempotency_key": key,
        "retry": {
            "max_attempts": 50,
            "initial_backoff_ms": 100,
            "backoff_multiplier": 1.5,
            "max_backoff_ms": 2000,
        },
    }
    if kind == "unsafe":
        body["side_effect"] = "unsafe"
    if kind == "keyed":
        params["concurrency_key"] = body["concurrency_key"] = f"k{rng.randrange(KEYS)}"
    body["params"] = params
    return body


class Load:
    """Client threads submitting at ``rate`` until ``stop``; a submit in flight at the stop
    is still re-sent until it gets a definite answer (or ``give_up_s`` passes)."""

    def __init__(self, urls: list[str], key: str, rate: float, clients: int, seed: int) -> None:
        self.urls = urls
        self.headers = {"Authorization": f"Bearer {key}"}
        self.rate = rate
        self.clients = clients
        self.seed = seed
        self.submits: list[Submit] = []
        self.give_up_s = 120.0
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)
        ]

    def start(self) -> None:
        self._began = time.monotonic()
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _client(self, lane: int) -> None:
        rng = random.Random(self.seed * 1000 + lane)
        kinds = [k for k, _, _ in MIX]
        weights = [w for _, w, _ in MIX]
        with httpx2.Client(timeout=3.0, headers=self.headers) as http:
            while not self._stop.is_set():
                n = next(self._numbers)
                kind = rng.choices(kinds, weights)[0]
                submit = Submit(key=f"chaos-{self.seed}-{n}", kind=kind)
                with self._lock:
                    self.submits.append(submit)
                self._send(http, submit, _body(kind, submit.key, rng), lane + n)
                early = self._began + (n + 1) / self.rate - time.monotonic()
                if early > 0:
                    self._stop.wait(early)  # pacing the load, not a synchronisation

    def _send(self, http: httpx2.Client, submit: Submit, body: dict[str, Any], turn: int) -> None:
        first = time.monotonic()
        while time.monotonic() - first < self.give_up_s:
            url = self.urls[(turn + submit.sends) % len(self.urls)]
            submit.sends += 1
            sent = time.time()
            try:
                answer = http.post(f"{url}/v1/tasks", json=body)
            except httpx2.TransportError:  # timeouts are transport errors too
                submit.ambiguous += 1
                time.sleep(0.2)  # the re-send's back-off
                continue
            answered = time.time()
            if answer.status_code in (200, 201):
                submit.id = answer.json()["id"]
                submit.ids.append(submit.id)
                submit.outcome, submit.status = "acked", answer.status_code
                submit.sent, submit.answered = sent, answered
                return
            if answer.status_code == 429 or answer.status_code >= 500:
                submit.ambiguous += 1
                time.sleep(0.2)
                continue
            submit.status = answer.status_code
            submit.outcome = "conflict" if b"idempotency_conflict" in answer.content else "rejected"
            return
        submit.outcome = "gave_up"

"""Running a node behind uvicorn: ``orbit dev`` and ``orbit server``."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import structlog
import uvicorn

from orbit_server.api.app import OrbitApp
from orbit_server.api.http_protocol import http_protocol
from orbit_server.audit import Actor
from orbit_server.bootstrap import SchemaNotCurrent, build_app, build_node, database_for
from orbit_server.cli.admin import report_error
from orbit_server.clock import AdjustableClock
from orbit_server.config import ServerRole, Settings
from orbit_server.errors import OrbitError, Unauthenticated
from orbit_server.gateway.asgi_ws import WorkerWebSocketProtocol
from orbit_server.governance.keys import ALL_ROLES
from orbit_server.observability.logging import configure_logging
from orbit_server.runtime.node import Node
from orbit_server.scope import Scope
from orbit_server.store.migrate import MigrationError, migrate
from orbit_server.store.probe import UnsupportedServer
from orbit_server.store.sqlite_backend import InstanceLocked

log = structlog.get_logger("orbit.serve")

DEV_SCOPE = Scope("default", "dev")
DEV_KEY_FILE = "dev-key"
STARTUP_ERRORS = (OrbitError, SchemaNotCurrent, UnsupportedServer, InstanceLocked, MigrationError)


async def ensure_dev_key(node: Node, data_dir: Path) -> str:
    """Reuse the dev key kept in the data dir while it is valid, else make a new one."""
    path = data_dir / DEV_KEY_FILE
    if path.exists():
        token = path.read_text().strip()
        try:
            await node.keys.authenticate(token)
        except Unauthenticated:
            pass
        else:
            return token
    created = await node.keys.create(DEV_SCOPE, ALL_ROLES, actor=Actor("orbit-dev"), name="dev")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(created.token + "\n")
    return created.token


async def serve_dev(settings: Settings, data_dir: Path, *, testing: bool = False) -> int:
    """``orbit dev``; ``testing``: with a clock tests can move forward and throwaway
    environments (the routes of ``api/routes/dev.py``)."""
    configure_logging(settings.log_level, settings.log_format)
    await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
    db = database_for(settings, exclusive=True)
    try:
        await db.connect()
        await migrate(db)
        node = await build_node(settings, db=db, clock=AdjustableClock() if testing else None)
    except STARTUP_ERRORS as exc:
        await db.close()
        return report_error(str(exc))
    token = await ensure_dev_key(node, data_dir)
    return await serve(node, announce_key=token, testing=testing)


LISTEN_FD = "ORBIT_LISTEN_FD"  # set by a parent ``orbit server --processes N`` for its children


def supervise_processes(settings: Settings) -> int:
    """``orbit server --processes N``: bind the listener once, start N server processes that
    share it (each its own node, ``<node-id>-1`` … ``-N``), pass SIGINT/SIGTERM on to them and
    wait for them all. The kernel spreads connections over the processes."""
    configure_logging(settings.log_level, settings.log_format)
    try:
        sock = bind_listener(settings.host, settings.port)
    except OSError as exc:
        return report_error(f"cannot listen on {settings.host}:{settings.port}: {exc}")
    sock.listen(2048)
    env = {**os.environ, **settings.as_environment(), LISTEN_FD: str(sock.fileno())}
    children = []
    for i in range(1, settings.processes + 1):
        child_env = {**env, "ORBIT_PROCESSES": "1", "ORBIT_NODE_ID": f"{settings.node_id}-{i}"}
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "orbit_server", "server"],
                env=child_env,
                pass_fds=(sock.fileno(),),
            )
        )

    def forward(signum: int, frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    port = sock.getsockname()[1]
    print(f"ORBIT_URL=http://{public_host(settings.host)}:{port}", flush=True)
    log.info("serving with processes", processes=settings.processes, port=port)
    codes = [child.wait() for child in children]
    sock.close()
    return max(codes)


async def serve_production(settings: Settings) -> int:
    configure_logging(settings.log_level, settings.log_format)
    log.info("starting", settings=settings.public_dict())
    db = database_for(settings, exclusive=True)
    try:
        node = await build_node(settings, db=db)
    except STARTUP_ERRORS as exc:
        await db.close()
        return report_error(str(exc))
    return await serve(node)


class _Server(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM after serving, killing the process before the node
    drains; Orbit handles the signals itself and exits 0 after a clean shutdown."""

    def __init__(self, config: uvicorn.Config, app: OrbitApp) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()
        self._app = app
        self._draining: asyncio.Task[None] | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Workers hear of the drain and finish their work before uvicorn closes connections;
        # a second signal cuts the wait short.
        if self._app.worker_endpoint is not None and not self.force_exit:
            self._draining = asyncio.create_task(self._app.worker_endpoint.drain())
            with contextlib.suppress(asyncio.CancelledError):
                await self._draining
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.listening.set()

    def request_exit(self) -> None:
        if self.should_exit:
            self.force_exit = True  # a second signal skips the graceful wait
            if self._draining is not None:
                self._draining.cancel()
        self.should_exit = True


def public_host(bound: str) -> str:
    """The host to print in ORBIT_URL: loopback for wildcard binds, IPv6 in brackets."""
    if bound in ("0.0.0.0", ""):  # noqa: S104
        return "127.0.0.1"
    if bound == "::":
        return "[::1]"
    return f"[{bound}]" if ":" in bound else bound


def bind_listener(host: str, port: int) -> socket.socket:
    """Bind the listening socket up front, so a taken port is a clear error, not a crash."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


# A young collection per 50,000 net allocations, a middle one per 20 young ones, a full one per
# 100 middle ones at most (Python's defaults: 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 100)


# A full collection at most this often: what reaches the oldest generation is otherwise
# collected only after 100 middle collections, about 100 million allocations, so cyclic garbage
# stays for hours. A database outage makes much of it: each broken connection keeps its
# prepared statements (which point back at it) and the error that broke it (a traceback whose
# frames point back at the connection). Measured: with no full collection a server under load
# grew by about 5 MiB at each outage and did not level off; a full collection of what is not
# frozen takes a few milliseconds.
FULL_COLLECTION_S = 60.0


async def collect_fully(every_s: float = FULL_COLLECTION_S) -> None:
    """Run a full collection every ``every_s`` seconds, until cancelled."""
    while True:
        await asyncio.sleep(every_s)
        began = time.perf_counter()
        found = gc.collect()
        log.debug("full collection", unreachable=found,
                  ms=round((time.perf_counter() - began) * 1000, 1))  # fmt: skip


def tune_gc() -> None:
    """Collect less often, and never look at what startup built again. The server allocates
    many short-lived objects per task (rows, records, frames); with the default thresholds a
    full collection ran every second or so and stopped the event loop for 30–45 ms, while
    transactions in flight held their locks. Frozen: modules, the app, everything alive now.
    Plain burn-down in ``python -m bench throughput``: about 6 % more tasks/s."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(node: Node, *, announce_key: str | None = None, testing: bool = False) -> int:
    """Serve until SIGINT/SIGTERM, then drain and close. Prints ORBIT_URL once listening."""
    settings = node.settings
    inherited = os.environ.get(LISTEN_FD)
    try:
        if inherited is not None:  # one of several processes: the parent bound the listener
            sock = socket.socket(fileno=int(inherited))
        else:
            sock = bind_listener(settings.host, settings.port)
    except OSError as exc:
        await node.stop()
        where = f"{settings.host}:{settings.port}"
        return report_error(f"cannot listen on {where}: {exc.strerror or exc}")
    app = build_app(node, testing=testing)
    tune_gc()
    config = uvicorn.Config(
        app,
        loop="none",
        http=http_protocol(settings),
        timeout_keep_alive=max(1, settings.http_idle_timeout_ms // 1000),
        ws=WorkerWebSocketProtocol,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=max(1, settings.drain_grace_ms // 1000),
        ws_max_size=settings.ws_max_frame_bytes,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        ws_per_message_deflate=settings.ws_compression == "deflate",
    )
    server = _Server(config, app)
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        node.readiness.draining = True  # /readyz turns 503 while in-flight requests finish
        server.request_exit()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    await node.start()
    if app.worker_endpoint is not None:
        await app.worker_endpoint.start()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    collecting = asyncio.create_task(collect_fully())
    try:
        listening = asyncio.create_task(server.listening.wait())
        await asyncio.wait([serving, listening], return_when=asyncio.FIRST_COMPLETED)
        listening.cancel()
        if server.started:
            port = sock.getsockname()[1]
            host = public_host(settings.host)
            if inherited is None:  # the parent announced it
                print(f"ORBIT_URL=http://{host}:{port}", flush=True)
            if announce_key is not None:
                print(f"ORBIT_API_KEY={announce_key}", flush=True)
                if settings.has_role(ServerRole.CONSOLE):  # orbit dev: where to click
                    print(f"ORBIT_CONSOLE_URL=http://{host}:{port}/console/", flush=True)
            log.info("listening", url=f"http://{host}:{port}", node=settings.node_id)
        await serving
    finally:
        collecting.cancel()
        await node.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        sock.close()
    if not server.started:
        return report_error("the HTTP listener could not start")
    return 0

"""Where a run's data lives and how durable its commits are, read from the database server
itself: a figure measured on tmpfs, where a commit's flush costs nothing, says little about a
server whose commits wait for a disk.

Every report records these facts (``report.write``), and the runner refuses to measure on a
memory filesystem unless told to (``--allow-tmpfs``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Filesystems kept in memory: a commit's fsync returns at once.
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs"})

# Read with SHOW GLOBAL VARIABLES; every report carries them.
VARIABLES = (
    "datadir",
    "innodb_flush_log_at_trx_commit",
    "innodb_doublewrite",
    "innodb_buffer_pool_size",
    "innodb_log_file_size",
    "innodb_flush_method",
    "log_bin",
    "sync_binlog",
    "binlog_format",
    "wsrep_on",
)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes a space, tab, newline and backslash in a path as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the filesystem ``path`` is on (``ext4``, ``xfs``, ``tmpfs``, ``overlay``…),
    from the longest mount point in ``/proc/mounts`` that contains it; ``unknown`` if none
    does or the table cannot be read."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return "unknown"
    target = os.path.realpath(path)
    best, found = -1, "unknown"
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _unescape_mount(fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        # Later lines win a tie: a filesystem mounted over another one hides it.
        if inside and len(point) >= best:
            best, found = len(point), fields[2]
    return found


def on_memory(facts: dict[str, Any]) -> bool:
    """Whether the facts say the data is on a memory filesystem."""
    return str(facts.get("storage", {}).get("filesystem")) in MEMORY_FILESYSTEMS


async def _read_variables(url: str) -> dict[str, Any]:
    import asyncmy

    from bench.baseline import _connect_args

    conn = await asyncmy.connect(**{**_connect_args(url), "db": None, "autocommit": True})
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT VERSION()")
            row = await cur.fetchone()
            marks = ", ".join(["%s"] * len(VARIABLES))
            await cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({marks})", VARIABLES)
            variables = {str(name): value for name, value in await cur.fetchall()}
    finally:
        conn.close()
    return {"version": row[0] if row else None, **variables}


def database_facts(url: str, *, private: bool) -> dict[str, Any]:
    """The server's version and durability settings, and ``storage``: who runs the server
    (``private`` — the runner's own — or ``external server``), its data directory and the
    filesystem that directory is on. An external server's directory is looked up on this
    machine only when the URL points at this machine and the directory exists here;
    otherwise its filesystem is ``unknown``. Call it outside an event loop."""
    facts = asyncio.run(_read_variables(url))
    datadir = str(facts.pop("datadir", "") or "")
    local = private or (urlsplit(url).hostname or "127.0.0.1") in _LOOPBACK
    here = local and bool(datadir) and Path(datadir).is_dir()
    facts["storage"] = {
        "server": "private" if private else "external server",
        "datadir": datadir or "unknown",
        "filesystem": filesystem_type(Path(datadir)) if here else "unknown",
    }
    return facts


def describe(facts: dict[str, Any]) -> str:
    """One sentence of the facts, for a report's head."""
    storage = facts.get("storage", {})
    server = (
        "the runner's private server"
        if storage.get("server") == "private"
        else "an external server"
    )

    def mib(name: str) -> str:
        value = str(facts.get(name))
        return f"{int(value) // (1024 * 1024):,} MiB" if value.isdigit() else "unknown"

    binlog = facts.get("log_bin")
    sync = f" (sync_binlog={facts.get('sync_binlog')})" if binlog == "ON" else ""
    return (
        f"Database: {facts.get('version')} on {server}, data in "
        f"`{storage.get('datadir')}` on **{storage.get('filesystem')}**; "
        f"innodb_flush_log_at_trx_commit={facts.get('innodb_flush_log_at_trx_commit')}, "
        f"innodb_doublewrite={facts.get('innodb_doublewrite')}, "
        f"innodb_flush_method={facts.get('innodb_flush_method')}, "
        f"buffer pool {mib('innodb_buffer_pool_size')}, log file {mib('innodb_log_file_size')}, "
        f"binlog {binlog}{sync}."
    )

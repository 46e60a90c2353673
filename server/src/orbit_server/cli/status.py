"""``orbit status``: ask a running server over HTTP (ORBIT_URL, ORBIT_API_KEY)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import typer


def _get(url: str, api_key: str | None, timeout_s: float) -> tuple[int, Any]:
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - http(s) checked below
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body or b"null")
        except ValueError:
            return exc.code, None


def show_status(url: str, api_key: str | None, timeout_s: float = 10.0) -> int:
    """Print readiness and, with a key, whom the key belongs to. 0 when ready."""
    if not url.startswith(("http://", "https://")):
        typer.echo("error: ORBIT_URL must start with http:// or https://", err=True)
        return 2
    base = url.rstrip("/")
    try:
        status, ready = _get(f"{base}/readyz", None, timeout_s)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        typer.echo(f"error: cannot reach {base}: {getattr(exc, 'reason', exc)}", err=True)
        return 1
    checks = ready.get("checks", {}) if isinstance(ready, dict) else {}
    state = "ready" if status == 200 else "not ready"
    typer.echo(f"{base}: {state} ({', '.join(f'{k}={v}' for k, v in checks.items())})")
    if "database_node" in checks:
        role = checks.get("database_role", "unknown role")
        typer.echo(f"database node: {checks['database_node']} ({role})")
    if api_key:
        status_me, me = _get(f"{base}/v1/whoami", api_key, timeout_s)
        if status_me == 200 and isinstance(me, dict):
            typer.echo(
                f"key {me['key_id']}: {me['tenant']}/{me['environment']}, "
                f"roles {', '.join(me['roles'])}"
            )
        else:
            typer.echo(_key_not_checked(status_me, me, checks), err=True)
            return 1
    return 0 if status == 200 else 1


def _key_not_checked(status: int, body: Any, checks: dict[str, Any]) -> str:
    """Why ``/v1/whoami`` did not answer 200: the key is refused only on 401/403; a server
    that cannot reach its database cannot tell (503), and saying "rejected" would send the
    operator after the wrong fault."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    code = error.get("code") if isinstance(error, dict) else None
    if status in (401, 403):
        return f"key rejected: {code or status}"
    if status == 503 or checks.get("database") == "unreachable":
        detail = code or f"HTTP {status}"
        return f"database unavailable ({detail}): the server cannot check the key now; retry later"
    return f"key not checked: HTTP {status}" + (f" ({code})" if code else "")

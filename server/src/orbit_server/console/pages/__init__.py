"""The console's pages, one module per area; each page reads through the services as the HTTP
API does, and each action is a POST that the services audit."""

from __future__ import annotations

from orbit_server.console.pages import ops, overview, schedules, tasks, workflows

ROUTES = [*overview.ROUTES, *tasks.ROUTES, *workflows.ROUTES, *schedules.ROUTES, *ops.ROUTES]

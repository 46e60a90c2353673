"""The ``orbit`` command line."""

from orbit_server.cli.app import main

__all__ = ["main"]

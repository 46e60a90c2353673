"""``python -m orbit_server`` is the ``orbit`` command."""

from orbit_server.cli import main

main()

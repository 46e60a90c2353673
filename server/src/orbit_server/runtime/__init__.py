"""The running node: its services, readiness and the owner of every background loop."""

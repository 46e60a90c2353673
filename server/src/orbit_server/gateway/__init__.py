"""WebSocket adapter: the worker endpoint ``/v1/worker``."""

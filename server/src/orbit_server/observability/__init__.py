"""Structured logging and Prometheus metrics (SPEC G6)."""

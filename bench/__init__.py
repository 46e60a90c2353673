"""Orbit's opt-in benchmarks (never part of the default test run; a smoke mode is)."""

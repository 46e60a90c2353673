"""Runnable examples of the Orbit SDK; each one is exercised by the SDK's tests."""

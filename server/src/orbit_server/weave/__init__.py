"""Weave: declarative, versioned workflows on top of Pulse."""

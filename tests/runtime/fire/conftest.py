"""Fixtures of the fire pipeline's tests (tests/runtime/fire/firing_world.py)."""

from firing_world import executor, w, world

__all__ = ["executor", "w", "world"]

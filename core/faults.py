"""Fault injection, for the tests that prove a run survives faults."""

import os


def injected_fault(name: str) -> bool:
    """Test hook: faults named in the ``A3G_FAULT`` environment variable (comma-separated) are injected at the
    places that check for them, so that tests can prove the run survives them. Unset in normal use."""
    return name in os.environ.get("A3G_FAULT", "").split(",")

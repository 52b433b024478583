"""The version of jt-core (one place; the distributions are versioned in lockstep)."""

__version__ = "0.1.0"

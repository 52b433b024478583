"""The version of jt-core (one place; the distributions are versioned in lockstep)."""

__version__ = "0.1.0"
#: The same as a tuple of ints, as jax-triton publishes its own.
__version_info__ = tuple(int(part) for part in __version__.split("."))

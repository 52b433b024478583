"""An example jt plugin: a backend and a launcher for the made-up JAX platform ``"toy"``.

The platform does not exist in JAX, so nothing ever lowers for it in a real program; the plugin shows every piece
a real backend has (registration, target, compile, launch) and can be tested anywhere, as its tests show.
"""

__version__ = "0.1.0"

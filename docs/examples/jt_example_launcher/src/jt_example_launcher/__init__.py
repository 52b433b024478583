"""An example jt plugin: a launcher for the CPU that runs each call's kernel on the host and logs the run.

It is built on jt's public plugin surface only (``jt_core.plugin``), as its tests check.
"""

__version__ = "0.1.0"

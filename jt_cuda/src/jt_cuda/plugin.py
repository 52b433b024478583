"""The jt plugin module of jt-cuda: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

"""The jt plugin module of jt-rocm: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

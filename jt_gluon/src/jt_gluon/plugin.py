"""The jt plugin module of jt-gluon: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

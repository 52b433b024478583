"""Gluon dialect for jt: run @gluon.jit kernels through jt.triton_call."""

__version__ = "0.1.0"

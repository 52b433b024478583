"""CUDA backend for jt: compile Triton kernels to cubin and launch them on NVIDIA GPUs from JAX."""

__version__ = "0.1.0"

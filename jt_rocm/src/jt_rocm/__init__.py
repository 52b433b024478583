"""ROCm backend for jt: compile Triton kernels to HSACO and launch them on AMD GPUs from JAX."""

__version__ = "0.1.0"

"""jt: call Triton and Gluon kernels from JAX.

``import jt_core as jt`` then ``jt.triton_call(x, y, kernel=add_kernel, out_shape=x, grid=..., BLOCK=1024)``.
"""

from __future__ import annotations

from jt_core import utils
from jt_core._version import __version__, __version_info__
from jt_core.api import triton_call
from jt_core.call import CompileOptions
from jt_core.checks import CpuChecks, cpu_checks
from jt_core.configs import normalize_grid
from jt_core.dtypes import get_type_id
from jt_core.errors import (
    ConfigSkippedWarning,
    CpuFallbackWarning,
    DataRaceError,
    DifferentialMismatchError,
    DuplicateBackendError,
    JtError,
    KernelCallTypeError,
    KernelCallValueError,
    KernelCompileError,
    KernelRuntimeError,
    NoBackendError,
    NoDeviceError,
    NoUsableConfigError,
    OutOfBoundsAccessError,
    OutOfResourcesError,
    PluginError,
    PluginFaultError,
    PluginLoadError,
    ProcessAgreementError,
    UnsupportedKernelError,
    UnwrittenOutputError,
    UnwrittenOutputWarning,
)
from jt_core.exporting import export
from jt_core.gradients import kernel_vjp
from jt_core.partitioning import BatchDims, Elementwise, PartitionRule, partitioned
from jt_core.plugin.registry import list_plugins
from jt_core.plugin.roles import Backend, CompileRequest, Dialect, Launcher
from jt_core.plugin.specs import hookimpl, hookspec
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.tensordesc import TensorDescriptor
from jt_core.triton_lib import CUSTOM_CALL_TARGET_NAME, get_compute_capability, get_serialized_metadata
from jt_core.utils import cdiv, next_power_of_2, strides_from_shape

__all__ = [
    "CUSTOM_CALL_TARGET_NAME",
    "BatchDims",
    "Backend",
    "CompileOptions",
    "CompileRequest",
    "CompiledKernel",
    "ConfigSkippedWarning",
    "CpuChecks",
    "CpuFallbackWarning",
    "DataRaceError",
    "DifferentialMismatchError",
    "Dialect",
    "DuplicateBackendError",
    "Elementwise",
    "JtError",
    "KernelCallTypeError",
    "KernelCallValueError",
    "KernelCompileError",
    "KernelRuntimeError",
    "Launcher",
    "NoBackendError",
    "NoDeviceError",
    "NoUsableConfigError",
    "OutOfBoundsAccessError",
    "OutOfResourcesError",
    "PartitionRule",
    "PluginError",
    "PluginFaultError",
    "PluginLoadError",
    "ProcessAgreementError",
    "Target",
    "TensorDescriptor",
    "UnsupportedKernelError",
    "UnwrittenOutputError",
    "UnwrittenOutputWarning",
    "__version__",
    "__version_info__",
    "cdiv",
    "cpu_checks",
    "export",
    "get_compute_capability",
    "get_serialized_metadata",
    "get_type_id",
    "hookimpl",
    "hookspec",
    "kernel_vjp",
    "list_plugins",
    "next_power_of_2",
    "normalize_grid",
    "partitioned",
    "strides_from_shape",
    "triton_call",
    "utils",
]

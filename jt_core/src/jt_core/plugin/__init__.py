"""What a plugin builds on: the one jt-core module a plugin author imports (with `jt_core.gpu` for a GPU
runtime's launchers, and `jt_core.testing` in tests). Nothing else in jt-core is an interface.

A plugin module declares the API version it is written for, and implements hooks:

```python
from jt_core.plugin import API_VERSION, Backend, hookimpl

JT_PLUGIN_API = 1  # the loader refuses a plugin that declares none, or another version

@hookimpl
def jt_register_backends(platform):
    ...
```

What is here:

* the roles a plugin fills, `Backend`, `Launcher` and `Dialect`, and the values they pass:
  `Target`, `CompileRequest`, `CompiledKernel` (`plain_metadata` makes compiler
  metadata JSON data);
* the bound call they read: `KernelCall`, its `ParamSlot` leaves (kinds `INPUT`,
  `OUTPUT`, `SCALAR`; a tensor descriptor's `TensorDescriptorSpec`), `LaunchConfig`,
  `CompileOptions`, `LaunchOptions`, `Specialization`, `KernelParam`, and for a call
  ``jax.vmap`` batched on a grid axis, `BatchInfo`; `TritonOptions`, a base for a backend's own options
  when it compiles with one of Triton's backends;
* running kernels on the host, for launchers: `run_on_host` (a call's kernel on NumPy arrays, in Triton's
  interpreter, as jt's CPU backend runs it) and `emit_host_callback` (the operation that calls a Python
  function on the host when XLA runs the computation);
* `hookimpl`, and `API_VERSION`;
* the errors to raise (a user's mistake, a failed compile, a kernel a backend cannot run);
* `settings` (environment switches read the way jt reads them), `files` (the per-machine cache
  folder, one private subfolder per purpose), `LibrarySpec` and `NativeBuildError` (a C++ library
  built at first use, once per machine).

**Compatibility.** Within one `API_VERSION` jt-core only adds: hooks, optional methods with a default, and
arguments. jt calls a hook, and the contract methods a plugin overrides, with the arguments their signatures name
and no others, so an implementation that does not name a new argument is not affected by it; when a plugin
registers a backend, launcher or dialect, jt checks that each parameter of those methods is one jt offers, and
that the role's class attributes are set. A name jt-core retires keeps working for one minor version, with a
``DeprecationWarning`` naming its replacement and the jt-core version that refuses it
(`jt_core.plugin.retired`). Anything else (a changed meaning) comes with a new version, and the loader names the
plugins still written for the old one.

**Inside the package.** This module is the interface; the package's modules hold jt's plugin machinery, one role
each, and are not an interface (a plugin that imports one is refused by jt's own import contract):

* `specs` -- the hook specifications, `hookimpl` and the API version;
* `values` -- `Target`, `CompiledKernel`, `plain_metadata`;
* `roles` -- the roles (`Backend`, `Launcher`, `Dialect`),
  `CompileRequest`, and how jt asks a component its questions (the arguments its methods name);
* `retired` -- the names of earlier contracts and the version that refuses each;
* `validation` -- what jt checks when a plugin registers a component;
* `signatures` -- calling a function with the arguments it names;
* `records` -- what jt knows of each plugin (status, what it provides, its faults);
* `faults` -- the faults of plugins kept on this machine;
* `loader` -- entry points, loading, isolation of broken plugins, the ``JT_*`` switches;
* `registry` -- backends, launchers and dialects, and the choice among them;
* `facade` -- the typed facade: the only caller of the hooks in jt's call path;
* `host` -- `run_on_host` and `emit_host_callback`.
"""

from __future__ import annotations

from jt_core import files, settings
from jt_core.call import (
    INPUT,
    OUTPUT,
    SCALAR,
    BatchInfo,
    CompileOptions,
    KernelCall,
    KernelParam,
    LaunchConfig,
    LaunchOptions,
    ParamSlot,
    Specialization,
    TritonOptions,
)
from jt_core.errors import (
    JtError,
    KernelCallTypeError,
    KernelCallValueError,
    KernelCompileError,
    KernelRuntimeError,
    NoDeviceError,
    OutOfResourcesError,
    UnsupportedKernelError,
)
from jt_core.native import LibrarySpec, NativeBuildError
from jt_core.plugin.host import emit_host_callback, run_on_host
from jt_core.plugin.roles import Backend, CompileRequest, Dialect, Launcher
from jt_core.plugin.specs import PLUGIN_API_VERSION as API_VERSION
from jt_core.plugin.specs import hookimpl
from jt_core.plugin.values import CompiledKernel, Target, plain_metadata
from jt_core.tensordesc import TensorDescriptorSpec

__all__ = [
    "API_VERSION",
    "INPUT",
    "OUTPUT",
    "SCALAR",
    "Backend",
    "BatchInfo",
    "CompileOptions",
    "CompileRequest",
    "CompiledKernel",
    "Dialect",
    "JtError",
    "KernelCall",
    "KernelCallTypeError",
    "KernelCallValueError",
    "KernelCompileError",
    "KernelParam",
    "KernelRuntimeError",
    "LaunchConfig",
    "LaunchOptions",
    "Launcher",
    "LibrarySpec",
    "NativeBuildError",
    "NoDeviceError",
    "OutOfResourcesError",
    "ParamSlot",
    "Specialization",
    "Target",
    "TensorDescriptorSpec",
    "TritonOptions",
    "UnsupportedKernelError",
    "files",
    "hookimpl",
    "emit_host_callback",
    "plain_metadata",
    "run_on_host",
    "settings",
]

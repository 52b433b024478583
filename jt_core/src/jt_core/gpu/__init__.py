"""The GPU launch layer GPU plugins share: jt's launch handler, jaxlib's handler, and the launcher bases.

* :mod:`jt_core.gpu.handler` -- jt's C++ launch handler (shared headers, built per runtime, registered with XLA);
* :mod:`jt_core.gpu.attributes` -- the attributes a call to that handler carries;
* :mod:`jt_core.gpu.jaxlib_call` -- the kernel-call message jaxlib's Triton handler reads;
* :mod:`jt_core.gpu.launchers` -- :class:`~jt_core.gpu.launchers.HandlerLauncher` and
  :class:`~jt_core.gpu.launchers.JaxlibLauncher`, the bases of every GPU plugin's launchers.
"""

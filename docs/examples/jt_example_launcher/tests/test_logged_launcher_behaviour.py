"""The logged launcher is found through its entry point, runs calls on the host when asked for, under jax.vmap too,
and logs every run."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jt_example_launcher import plugin
from jt_example_launcher.launcher import LoggedLauncher, runs

import jt_core as jt
from jt_core.testing import fake_entry_point, load_tile, record_lowerings, sample_add_kernel, using_plugins


def rand(*shape: int) -> np.ndarray:
    return np.random.default_rng().standard_normal(shape, np.float32)


def add(x, y, **options):
    n = x.shape[-1]
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=jt.cdiv(n, 32), n=n, BLOCK=32, **options)


def test_listed_by_jt_with_what_it_provides(jt_plugin_manager) -> None:
    record = {record.name: record for record in jt_plugin_manager.list_plugins()}["runlog"]
    assert record.status == "loaded", record.error
    assert record.distribution == "jt-example-launcher"
    assert record.launchers == ["cpu:logged"]


def test_a_call_that_names_it_runs_on_the_host_and_is_logged(jt_plugin_manager) -> None:
    x, y = rand(96), rand(96)
    before = len(runs())
    out = jax.jit(lambda a, b: add(a, b, launcher="logged", name="logged_add"))(x, y)
    np.testing.assert_array_equal(np.asarray(out), x + y)
    (run,) = runs()[before:]
    assert (run.name, run.grid, run.batch_shape) == ("logged_add", (3, 1, 1), ())
    assert run.seconds > 0


def test_under_vmap_it_runs_the_wrapper_kernel_over_the_batch(jt_plugin_manager) -> None:
    x, y = rand(2, 3, 64), rand(64)
    before = len(runs())
    one = jax.vmap(lambda a, b: add(a, b, launcher="logged", name="vmapped_add"), in_axes=(0, None))
    with record_lowerings(LoggedLauncher) as lowered:
        out = jax.jit(jax.vmap(one, in_axes=(0, None)))(x, y)  # y is shared by the whole batch
    np.testing.assert_array_equal(np.asarray(out), x + y)
    (lowering,) = lowered
    assert lowering.call.fn is not sample_add_kernel  # the generated wrapper
    assert lowering.call.batch.base.fn is sample_add_kernel
    (run,) = runs()[before:]
    assert (run.name, run.batch_shape) == ("vmapped_add", (2, 3))
    assert run.grid[lowering.call.batch.axis] == 6  # the batch, flattened onto one free grid axis


def test_jt_s_own_launchers_come_first_unless_it_is_chosen(jt_plugin_manager) -> None:
    x, y = rand(64), rand(64)
    before = len(runs())
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda a, b: add(a, b, name="default_add"))(x, y)), x + y)
    assert [run.name for run in runs()[before:]] == []
    entry = fake_entry_point("runlog", plugin, distribution="jt-example-launcher")
    with using_plugins(entry, installed=False, environ={"JT_LAUNCHER_CPU": "logged"}):
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda a, b: add(a, b, name="chosen_add"))(x, y)), x + y)
    assert [run.name for run in runs()[before:]] == ["chosen_add"]


def test_it_passes_tensor_descriptors(jt_plugin_manager) -> None:
    x = rand(48, 40)
    desc = jt.TensorDescriptor(x, block_shape=(16, 16))
    tile = jax.jit(lambda d: load_tile(d, 32, 32, launcher="logged"))(desc)
    expected = np.zeros((16, 16), np.float32)
    expected[:, :8] = x[32:48, 32:40]  # the tile's columns past the tensor's edge read zeros
    np.testing.assert_array_equal(np.asarray(tile), expected)


def test_an_error_in_the_kernel_reaches_the_caller(jt_plugin_manager) -> None:
    x, y = rand(64), rand(64)

    def past_the_end(a, b):  # n=96 on 64-element buffers
        return jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=3, n=96, BLOCK=32, launcher="logged")

    with pytest.raises(Exception, match=r"OutOfBoundsAccessError: kernel 'sample_add_kernel'"):
        jax.block_until_ready(jax.jit(past_the_end)(x, y))

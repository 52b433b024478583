"""Python-level constructs that compiled Triton gives a meaning of its own, run by the CPU interpreter and compiled
on a GPU, each against one NumPy reference: ``and``/``or``/``not`` on tensors and scalars (chained, nested, mixed
with constexprs, short-circuited), names bound to ``triton.language`` members in a kernel's module or a helper's,
closure variables and nested ``@triton.jit`` helpers, and a causal attention whose mask is ``causal and in_bounds``.

Every test runs once per platform: ``cpu`` (Triton's interpreter) and ``cuda`` (compiled; skipped without a GPU and
the jt-cuda plugin).
"""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from core_alias_helpers import soft_norm
from triton.language import maximum as larger

import jt_core as jt

# Triton deprecates `and`/`or` on blocks (its front end warns while compiling, on the CPU when the kernel is checked
# at lowering): these kernels use them on purpose, to check what they mean.
pytestmark = pytest.mark.filterwarnings("ignore:Logical operators 'and' and 'or' are deprecated:UserWarning")

PLATFORMS = ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.requires_plugin("cuda")])]

exp = tl.exp
unrolled = tl.static_range
total = tl.sum

#: The rows of ``boolean_kernel``'s output, each the NumPy reference of one expression, element by element (``a``,
#: ``b``, ``c`` are blocks of booleans, ``pid`` the index of the program writing the element; ``ON`` is a true
#: constexpr, ``OFF`` a false one).
BOOLEAN_ROWS = {
    "a and b": lambda a, b, c, pid: a & b,
    "a or b": lambda a, b, c, pid: a | b,
    "not a": lambda a, b, c, pid: ~a,
    "a and b and c": lambda a, b, c, pid: a & b & c,
    "a or b or c": lambda a, b, c, pid: a | b | c,
    "a and (b or c)": lambda a, b, c, pid: a & (b | c),
    "not (a and b)": lambda a, b, c, pid: ~(a & b),
    "ON and a and b": lambda a, b, c, pid: a & b,
    "a and b and ON": lambda a, b, c, pid: a & b,
    "a and OFF": lambda a, b, c, pid: np.zeros_like(a),
    "OFF or a": lambda a, b, c, pid: a,
    "a or ON": lambda a, b, c, pid: np.ones_like(a),
    "not OFF and a": lambda a, b, c, pid: a,
    "pid >= 1 and pid < 3": lambda a, b, c, pid: (pid >= 1) & (pid < 3),
    "pid == 0 or pid == 3": lambda a, b, c, pid: (pid == 0) | (pid == 3),
    "not pid == 2": lambda a, b, c, pid: pid != 2,
    "pid >= 2 and a": lambda a, b, c, pid: a & (pid >= 2),
    "a or pid == 1": lambda a, b, c, pid: a | (pid == 1),
    "OFF and never()": lambda a, b, c, pid: np.zeros_like(a),
    "ON or never()": lambda a, b, c, pid: np.ones_like(a),
}


@triton.jit
def never():
    tl.static_assert(False, "an operand after one a constexpr decided was evaluated")
    return 1


@triton.jit
def boolean_kernel(x_ptr, out_ptr, n, ON: tl.constexpr, OFF: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    a = x > 0.0
    b = offs % 3 != 0
    c = x < 1.0
    one = tl.full([BLOCK], 1, tl.int32)
    zero = tl.zeros([BLOCK], tl.int32)
    rows = out_ptr + offs
    tl.store(rows + 0 * n, tl.where(a and b, one, zero))
    tl.store(rows + 1 * n, tl.where(a or b, one, zero))
    tl.store(rows + 2 * n, tl.where(not a, one, zero))
    tl.store(rows + 3 * n, tl.where(a and b and c, one, zero))
    tl.store(rows + 4 * n, tl.where(a or b or c, one, zero))
    tl.store(rows + 5 * n, tl.where(a and (b or c), one, zero))
    tl.store(rows + 6 * n, tl.where(not (a and b), one, zero))
    tl.store(rows + 7 * n, tl.where(ON and a and b, one, zero))
    tl.store(rows + 8 * n, tl.where(a and b and ON, one, zero))
    tl.store(rows + 9 * n, tl.where(a and OFF, one, zero))
    tl.store(rows + 10 * n, tl.where(OFF or a, one, zero))
    tl.store(rows + 11 * n, tl.where(a or ON, one, zero))
    tl.store(rows + 12 * n, tl.where(not OFF and a, one, zero))
    tl.store(rows + 13 * n, tl.where(pid >= 1 and pid < 3, one, zero))
    tl.store(rows + 14 * n, tl.where(pid == 0 or pid == 3, one, zero))
    tl.store(rows + 15 * n, tl.where(not pid == 2, one, zero))  # noqa: SIM201
    tl.store(rows + 16 * n, tl.where(pid >= 2 and a, one, zero))
    tl.store(rows + 17 * n, tl.where(a or pid == 1, one, zero))
    tl.store(rows + 18 * n, tl.where(OFF and never(), one, zero))
    tl.store(rows + 19 * n, tl.where(ON or never(), one, zero))


@triton.jit
def aliases_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """Module-level aliases (``exp``, ``larger``, ``unrolled``, ``total``) and a helper from a module of aliases."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = exp(x) + soft_norm(x)
    for _ in unrolled(2):
        y = larger(y, 0.5 * y)
    tl.store(out_ptr + offs, y + total(x, axis=0))


def make_offset_kernel(offset: float) -> Any:
    """A kernel reading a closure variable (a constexpr) and a nested helper bound in the closure."""
    OFFSET = tl.constexpr(offset)
    helper = soft_norm

    @triton.jit
    def offset_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, helper(tl.load(x_ptr + offs)) + OFFSET)

    return offset_kernel


@triton.jit
def causal_attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, n_ctx, scale, HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """One block of query rows against every key block, with an online softmax, as flash attention does."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    rows = offs_m[:, None] < n_ctx
    q = tl.load(q_ptr + offs_m[:, None] * HEAD + offs_d[None, :], mask=rows, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
    for start_n in range(0, n_ctx, BLOCK_N):
        cols = start_n + offs_n
        kv = cols[:, None] * HEAD + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=cols[:, None] < n_ctx, other=0.0)
        v = tl.load(v_ptr + kv, mask=cols[:, None] < n_ctx, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        causal = offs_m[:, None] >= cols[None, :]
        in_bounds = cols[None, :] < n_ctx
        mask = causal and in_bounds
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + offs_m[:, None] * HEAD + offs_d[None, :], acc / l_i[:, None], mask=rows)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def on(platform: str, *arrays: np.ndarray) -> list[Any]:
    device = jax.devices(platform)[0]
    return [jax.device_put(array, device) for array in arrays]


def soft_norm_reference(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.exp(x) + 1.0)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_and_or_not_mean_what_compiled_triton_computes(platform: str, rng: np.random.Generator) -> None:
    programs, block = 4, 16
    n = programs * block
    x = rng.uniform(-1.0, 2.0, n).astype(np.float32)
    (x_dev,) = on(platform, x)
    out_shape = jax.ShapeDtypeStruct((len(BOOLEAN_ROWS), n), jnp.int32)
    out = jax.jit(
        lambda x: jt.triton_call(
            x, n=n, kernel=boolean_kernel, out_shape=out_shape, grid=programs, ON=True, OFF=False, BLOCK=block
        )
    )(x_dev)
    got = np.asarray(out)
    offs = np.arange(n)
    a, b, c, pid = x > 0.0, offs % 3 != 0, x < 1.0, offs // block
    for row, (expression, reference) in enumerate(BOOLEAN_ROWS.items()):
        np.testing.assert_array_equal(got[row], reference(a, b, c, pid).astype(np.int32), err_msg=expression)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_names_bound_to_language_members_in_kernel_and_helper_modules(platform: str, rng: np.random.Generator) -> None:
    block = 16
    x = rng.standard_normal(block).astype(np.float32)
    (x_dev,) = on(platform, x)
    out = jax.jit(lambda x: jt.triton_call(x, kernel=aliases_kernel, out_shape=x, grid=1, BLOCK=block))(x_dev)
    expected = np.exp(x) + soft_norm_reference(x)
    expected = np.maximum(expected, 0.5 * expected)
    expected = np.maximum(expected, 0.5 * expected) + x.sum()
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_closure_variables_and_helpers_bound_in_a_closure(platform: str, rng: np.random.Generator) -> None:
    block = 16
    x = rng.standard_normal(block).astype(np.float32)
    (x_dev,) = on(platform, x)
    for offset in (0.25, -3.0):  # two kernels of one source: each keeps its own closure
        kernel = make_offset_kernel(offset)
        out = jax.jit(lambda x, kernel=kernel: jt.triton_call(x, kernel=kernel, out_shape=x, grid=1, BLOCK=block))(
            x_dev
        )
        np.testing.assert_allclose(np.asarray(out), soft_norm_reference(x) + offset, rtol=1e-5, atol=1e-6)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    s = q @ k.T * scale
    s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


@pytest.mark.parametrize("platform", PLATFORMS)
def test_causal_attention_masked_with_and(platform: str, rng: np.random.Generator) -> None:
    n_ctx, head, block = 40, 16, 16  # the last key block is partly past the end
    q, k, v = (rng.standard_normal((n_ctx, head)).astype(np.float32) for _ in range(3))
    scale = head**-0.5
    devs = on(platform, q, k, v)
    out = jax.jit(
        lambda q, k, v: jt.triton_call(
            q,
            k,
            v,
            n_ctx=n_ctx,
            scale=scale,
            kernel=causal_attention_kernel,
            out_shape=q,
            grid=triton.cdiv(n_ctx, block),
            HEAD=head,
            BLOCK_M=block,
            BLOCK_N=block,
        )
    )(*devs)
    np.testing.assert_allclose(np.asarray(out), attention_reference(q, k, v, scale), rtol=1e-4, atol=1e-5)

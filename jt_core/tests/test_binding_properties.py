"""Property tests of argument binding: generated kernel signatures and call forms, checked against a model.

Each example generates a kernel (pointers read, tuples of pointers, pointers read and written, integer scalars,
constexprs with and without defaults, output pointers, in any order), a call of it (either convention, positional
and keyword mixes, constexprs by position, aliases, Refs, pytree outputs), and sometimes a mistake in the call.
A model of the documented binding rule, built on Python's own ``inspect.Signature.bind_partial``, says what the
call means. The call must then either run on the CPU backend and give exactly what the model computes with NumPy,
or raise a jt error whose message names an argument; never an internal exception, never a silently wrong result.

The example count is small for CI and the examples are the same on every run; ``JT_PROPERTY_EXPLORE=1`` draws
fresh ones (seeded by ``--hypothesis-seed``) and ``JT_PROPERTY_EXAMPLES`` sets how many. A failure prints the
example and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import jt_core as jt
from jt_core.errors import JtError

N = 16  # elements per array: one program of one block
KINDS = ("in", "pair", "io", "s", "c", "out")
CALL_OPTIONS = ("out_shape", "out_type", "input_output_aliases", "grid", "kernel")


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: int | None = None

    @property
    def constexpr(self) -> bool:
        return self.kind == "c"


# -- generated kernels --------------------------------------------------------------------------------------------


def kernel_source(params: tuple[Param, ...]) -> str:
    """A kernel that sums every input, scalar and constexpr (each with its own weight) into ``acc`` and stores
    ``acc + 1000 * (k + 1)`` through its k-th written pointer; weights and offsets make any mix-up visible."""
    signature = []
    for p in params:
        text = f"{p.name}: tl.constexpr" if p.constexpr else p.name
        signature.append(text if p.default is None else f"{text} = {p.default}")
    lines = [
        f"def kernel({', '.join(signature)}):",
        f"    offs = tl.arange(0, {N})",
        f"    acc = tl.zeros(({N},), tl.float32)",
    ]
    for weight, p in enumerate(params, start=1):
        if p.kind in ("in", "io"):
            lines.append(f"    acc += tl.load({p.name} + offs) * {weight}")
        elif p.kind == "pair":
            lines.append(
                f"    acc += tl.load({p.name}[0] + offs) * {weight} + tl.load({p.name}[1] + offs) * {weight + 0.5}"
            )
        elif p.kind in ("s", "c"):
            lines.append(f"    acc += {p.name} * {weight}")
    for k, p in enumerate(p for p in params if p.kind in ("io", "out")):
        lines.append(f"    tl.store({p.name} + offs, acc + {1000 * (k + 1)})")
    return "import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Builds (once per signature) and imports the generated kernel module; Triton reads kernels from files."""
    folder = tmp_path_factory.mktemp("binding_kernels")
    built: dict[tuple[Param, ...], Any] = {}

    def get(params: tuple[Param, ...]) -> Any:
        if params not in built:
            name = f"generated_kernel_{len(built)}"
            path = folder / f"{name}.py"
            path.write_text(kernel_source(params))
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            built[params] = module.kernel
        return built[params]

    yield get
    for name in [n for n in sys.modules if n.startswith("generated_kernel_")]:
        del sys.modules[name]


@st.composite
def signatures(draw: Any) -> tuple[Param, ...]:
    counts = {
        "in": draw(st.integers(1, 2)),
        "pair": draw(st.integers(0, 1)),
        "io": draw(st.integers(0, 1)),
        "s": draw(st.integers(0, 2)),
        "c": draw(st.integers(0, 2)),
        "out": draw(st.integers(0, 2)),
    }
    if counts["out"] + counts["io"] == 0:
        counts["out"] = 1
    kinds = draw(st.permutations([kind for kind in KINDS for _ in range(counts[kind])]))
    names = [f"{kind}{i}" for i, kind in enumerate(kinds)]
    # Defaults only on a trailing run of constexprs (Python wants defaults last).
    trailing = 0
    while trailing < len(kinds) and kinds[len(kinds) - 1 - trailing] == "c":
        trailing += 1
    with_default = draw(st.integers(0, trailing))
    params = []
    for i, (kind, name) in enumerate(zip(kinds, names)):
        default = draw(st.integers(0, 5)) if i >= len(kinds) - with_default else None
        params.append(Param(name, kind, default))
    return tuple(params)


# -- generated calls -----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Call:
    """A call as the user writes it: values are arrays, ints, tuples, ``Ref("name")`` markers or out specs."""

    args: list[Any]
    kwargs: dict[str, Any]
    outputs: Any  # pytree of jax.ShapeDtypeStruct
    out_keyword: str
    aliases: dict[int, int]
    mistake: str = ""


@dataclasses.dataclass(frozen=True, eq=False)
class Ref:
    """Stands for ``jax.new_ref(value)``, made inside the jitted call."""

    value: Any


@dataclasses.dataclass(frozen=True)
class Out:
    """In the model's binding: the parameter takes output ``index``."""

    index: int


SPEC = jax.ShapeDtypeStruct((N,), jnp.float32)


@st.composite
def calls(draw: Any, params: tuple[Param, ...]) -> Call:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def array() -> np.ndarray:
        return rng.standard_normal(N).astype(np.float32)

    use_refs = draw(st.booleans())
    intended: dict[str, Any] = {}
    out_params, aliased_inputs = [], []
    for p in params:
        if p.kind == "in":
            intended[p.name] = array()
        elif p.kind == "pair":
            intended[p.name] = (array(), array())
        elif p.kind == "io":
            value = array()
            if use_refs:
                intended[p.name] = Ref(value)
            else:
                intended[p.name] = value
                aliased_inputs.append(p.name)
        elif p.kind == "s":
            intended[p.name] = draw(st.integers(2, 40))
        elif p.kind == "c":
            if p.default is None or draw(st.booleans()):
                intended[p.name] = draw(st.integers(0, 5))
        else:
            out_params.append(p.name)
    # Outputs: one per output parameter and one per aliased input (current convention: no parameter of its own).
    n_out = len(out_params) + len(aliased_inputs)
    flat_index = {}
    index = 0
    for p in params:
        if p.constexpr:
            continue
        flat_index[p.name] = index
        index += 2 if p.kind == "pair" else 1
    # The aliased inputs' outputs sit anywhere among the outputs; the others go to the output parameters in order.
    positions = draw(st.permutations(range(n_out)))
    aliases = {flat_index[name]: position for name, position in zip(aliased_inputs, positions)}
    if not aliases and out_params and draw(st.booleans()):
        # Classic aliasing (jax-triton 0.3): an output keeps its parameter and shares an input array's buffer;
        # the key counts the array operands only.
        arrays = [v for p in params for v in _leaves(intended.get(p.name)) if isinstance(v, (np.ndarray, Ref))]
        if arrays:
            aliases = {draw(st.integers(0, len(arrays) - 1)): draw(st.integers(0, len(out_params) - 1))}
    structure = draw(st.sampled_from(["leaf", "tuple", "list", "dict"] if n_out == 1 else ["tuple", "list", "dict"]))
    leaves = [SPEC] * n_out
    outputs: Any = {
        "leaf": lambda: leaves[0] if leaves else (),
        "tuple": lambda: tuple(leaves),
        "list": lambda: list(leaves),
        "dict": lambda: {f"o{i}": leaf for i, leaf in enumerate(leaves)},  # keys sort in output order
    }[structure]()
    # Positional values: a prefix of the given parameters, in operand or declaration order.
    declaration = draw(st.booleans())
    targets = [p for p in params if declaration or not p.constexpr]
    prefix = []
    for p in targets:
        if p.name not in intended:
            break
        prefix.append(p)
    k = draw(st.integers(0, len(prefix)))
    args = [intended[p.name] for p in prefix[:k]]
    kwargs = {name: value for name, value in intended.items() if name not in {p.name for p in prefix[:k]}}
    call = Call(args, kwargs, outputs, draw(st.sampled_from(["out_shape", "out_type"])), aliases)
    mistake = draw(st.sampled_from(["", "", "", "drop", "extra", "twice", "unknown", "outputs", "alias"]))
    apply_mistake(call, mistake, params, draw, rng)
    return call


def _leaves(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    return value if isinstance(value, tuple) else (value,)


def apply_mistake(call: Call, mistake: str, params: tuple[Param, ...], draw: Any, rng: np.random.Generator) -> None:
    call.mistake = mistake
    if mistake == "drop" and (call.args or call.kwargs):
        if call.kwargs and (not call.args or draw(st.booleans())):
            del call.kwargs[draw(st.sampled_from(sorted(call.kwargs)))]
        else:
            call.args.pop()
    elif mistake == "extra":
        call.args.append(rng.standard_normal(N).astype(np.float32) if draw(st.booleans()) else 7)
    elif mistake == "twice" and call.args:
        targets = [p for p in params if not p.constexpr][: len(call.args)]
        if targets:
            call.kwargs[targets[0].name] = call.args[0]
    elif mistake == "unknown":
        call.kwargs[draw(st.sampled_from(["BLOK", "zzz", params[0].name + "_"]))] = 3
    elif mistake == "outputs":
        leaves = jax.tree_util.tree_leaves(call.outputs)
        call.outputs = tuple(leaves[:-1]) if leaves and draw(st.booleans()) else (*leaves, SPEC)
    elif mistake == "alias":
        call.aliases = {**call.aliases, draw(st.integers(0, 6)): draw(st.integers(0, 3))}


# -- the model -------------------------------------------------------------------------------------------------------


#: In the model's binding: whether the call is classic with aliases (alias keys then count arrays only).
CLASSIC = "classic convention with aliases"


class Refused(Exception):
    """The model says the call is an error."""


def model(params: tuple[Param, ...], call: Call) -> dict[str, Any]:
    """What the call means under the documented rule: parameter name -> value, and the outputs' parameters."""
    names = {p.name for p in params}
    if any(key not in names for key in call.kwargs):
        raise Refused("unknown keyword")
    leaves = jax.tree_util.tree_leaves(call.outputs)
    n_out, n_alias = len(leaves), len(call.aliases)
    nonconstexpr = [p for p in params if not p.constexpr]
    readings = []
    operand_order = inspect.Signature(
        [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in nonconstexpr]
        + [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY) for p in params if p.constexpr]
    )
    readings.append((operand_order, False))
    if any(p.constexpr for p in params[: len(call.args)]):
        declaration = inspect.Signature(
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
        )
        readings.append((declaration, True))
    for signature, in_declaration_order in readings:
        try:
            bound = dict(signature.bind_partial(*call.args, **call.kwargs).arguments)
        except TypeError:
            continue
        left = [p.name for p in nonconstexpr if p.name not in bound]
        if len(left) == n_out - n_alias:
            outputs = [o for o in range(n_out) if o not in set(call.aliases.values())]
        elif len(left) == n_out and not in_declaration_order:
            outputs = list(range(n_out))
        else:
            continue
        if any(isinstance(bound.get(p.name), np.ndarray) for p in params if p.constexpr):
            continue  # an array cannot be a constexpr value: that reading does not fit
        bound.update({name: Out(o) for name, o in zip(left, outputs)})
        bound[CLASSIC] = n_alias > 0 and len(left) == n_out
        return bound
    raise Refused("no reading fits")


def expected(params: tuple[Param, ...], call: Call, bound: dict[str, Any]) -> list[np.ndarray]:
    """The outputs (user outputs, then Ref contents) the model computes, or ``Refused`` for calls that must fail."""
    n_out = len(jax.tree_util.tree_leaves(call.outputs))
    refs = [p.name for p in params if isinstance(bound.get(p.name), Ref)]
    if n_out == 0 and not refs:
        raise Refused("no outputs")
    if refs and call.aliases:
        raise Refused("refs with aliases")
    for p in params:
        if p.constexpr and p.name not in bound and p.default is None:
            raise Refused("constexpr without value")
    # The operand leaves in order (for alias indices), and each output's starting contents.
    leaves = []
    for p in params:
        value = bound.get(p.name)
        if p.constexpr or isinstance(value, Out):
            continue
        leaves.extend(value if isinstance(value, tuple) else [value])
    if bound[CLASSIC]:  # the classic convention counts the array operands only (jax-triton 0.3)
        leaves = [leaf for leaf in leaves if isinstance(leaf, (np.ndarray, Ref))]
    buffers: dict[str, np.ndarray] = {}
    for in_index, out_index in call.aliases.items():
        if not (0 <= in_index < len(leaves) and 0 <= out_index < n_out) or not isinstance(leaves[in_index], np.ndarray):
            raise Refused("bad alias")
        buffers[f"out{out_index}"] = leaves[in_index]
    if len(set(call.aliases.values())) != len(call.aliases):
        raise Refused("two aliases of one output")

    def buffer(value: Any) -> str:
        """The buffer a pointer argument names; kinds that do not fit are refused."""
        if isinstance(value, Out):
            return f"out{value.index}"
        if isinstance(value, Ref):
            return f"ref{id(value)}"
        for name, array in buffers.items():
            if array is value:
                return name
        if isinstance(value, np.ndarray):
            return f"in{id(value)}"
        raise Refused("a pointer parameter got a non-array")

    state: dict[str, np.ndarray] = {}
    for name, array in buffers.items():
        state[name] = array.astype(np.float64)
    for o in range(n_out):
        state.setdefault(f"out{o}", np.full(N, np.nan))
    for p in params:
        value = bound.get(p.name)
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Ref):
                state[f"ref{id(item)}"] = item.value.astype(np.float64)
            elif isinstance(item, np.ndarray) and buffer(item) not in state:
                state[buffer(item)] = item.astype(np.float64)
    acc = np.zeros(N)
    for weight, p in enumerate(params, start=1):
        value = bound.get(p.name, p.default)
        if p.kind in ("in", "io"):
            acc = acc + state[buffer(value)] * weight
        elif p.kind == "pair":
            if not (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, np.ndarray) for v in value)):
                raise Refused("a pair parameter got something else")
            acc = acc + state[buffer(value[0])] * weight + state[buffer(value[1])] * (weight + 0.5)
        elif p.kind in ("s", "c"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise Refused("a number parameter got something else")
            acc = acc + value * weight
    written = [p for p in params if p.kind in ("io", "out")]
    for k, p in enumerate(written):
        target = buffer(bound.get(p.name))
        if target.startswith("in"):
            raise Refused("a store into a plain input")
        state[target] = acc + 1000 * (k + 1)
    return [state[f"out{o}"] for o in range(n_out)] + [state[f"ref{id(bound[name])}"] for name in refs]


# -- the property ----------------------------------------------------------------------------------------------------


def run(kernel: Any, call: Call) -> list[np.ndarray]:
    refs: list[Any] = []

    def materialize(value: Any) -> Any:
        if isinstance(value, Ref):
            ref = jax.new_ref(jnp.asarray(value.value))
            refs.append(ref)
            return ref
        if isinstance(value, tuple):
            return tuple(materialize(v) for v in value)
        return jnp.asarray(value) if isinstance(value, np.ndarray) else value

    def body() -> Any:
        refs.clear()
        args = [materialize(v) for v in call.args]
        kwargs = {key: materialize(v) for key, v in call.kwargs.items()}
        out = jt.triton_call(
            *args,
            kernel=kernel,
            grid=1,
            input_output_aliases=call.aliases or None,
            **{call.out_keyword: call.outputs},
            **kwargs,
        )
        return jax.tree_util.tree_leaves(out) + [ref[...] for ref in refs]

    return [np.asarray(leaf) for leaf in jax.block_until_ready(jax.jit(body)())]


EXAMPLES = int(os.environ.get("JT_PROPERTY_EXAMPLES", "100"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not os.environ.get("JT_PROPERTY_EXPLORE"),
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_call_runs_as_the_model_says_or_fails_naming_an_argument(kernels: Any, data: Any) -> None:
    params = data.draw(signatures(), label="kernel parameters")
    call = data.draw(calls(params), label="call")
    kernel = kernels(params)
    bound: dict[str, Any] | None = None
    want: list[np.ndarray] | None = None
    try:
        bound = model(params, call)
        want = expected(params, call, bound)
    except Refused:
        pass
    try:
        got = run(kernel, call)
    except Exception as error:  # the property is about which exceptions come out
        carried = jt.errors.from_runtime_error(error) if isinstance(error, jax.errors.JaxRuntimeError) else error
        assert isinstance(carried, JtError), f"internal exception {type(error).__name__}: {error}"
        message = str(carried)
        named = [p.name for p in params] + list(call.kwargs) + list(CALL_OPTIONS)
        assert any(name in message for name in named), f"the error names no argument: {message}"
        assert want is None, f"the model runs this call, jt refused it: {message}"
        event(f"refused: {type(carried).__name__}")
        return
    assert want is not None, f"jt ran a call the model refuses: {call}"
    event("ran (classic convention with aliases)" if bound is not None and bound[CLASSIC] else "ran")
    assert len(got) == len(want)
    for got_leaf, want_leaf in zip(got, want):
        np.testing.assert_allclose(got_leaf, want_leaf, rtol=1e-5, atol=1e-4)


def test_the_model_itself_on_a_known_call(kernels: Any) -> None:
    """The model agrees with a hand-computed call, so the property compares against something true."""
    params = (Param("in0", "in"), Param("s1", "s"), Param("out2", "out"), Param("c3", "c", 2))
    x = np.arange(N, dtype=np.float32)
    call = Call([x, 5], {}, SPEC, "out_shape", {})
    (want,) = expected(params, call, model(params, call))
    np.testing.assert_allclose(want, x * 1 + 5 * 2 + 2 * 4 + 1000)
    (got,) = run(kernels(params), call)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert Path(kernels(params).fn.__code__.co_filename).exists()

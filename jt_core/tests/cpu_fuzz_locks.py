"""Generated spin locks for the CPU fuzzer, as Triton's layer-norm backward tutorial takes one: each program spins on
``tl.atomic_cas(lock, 0, 1)`` for the lock of its slot, reads the slot's count, stores its block into the slot's
accumulator or combines it with what is there (a sum, a maximum, a minimum, an exclusive or), counts itself, and
releases the lock (``tl.atomic_xchg(lock, 0)`` or ``tl.atomic_cas(lock, 1, 0)``).

Whatever order the programs take the lock in, the result is the same: the combinations are exact and commutative
(float sums of small integers). The reference combines them in the order of the program ids; the lock must be free
again at the end, and each count the number of programs of its slot (or 1, for the variant that only marks a slot
taken, as the tutorial does).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cpu_fuzz_programs import Expected, Instance, Program, _module, random_array
from cpu_fuzz_semantics import I32, ty
from hypothesis import strategies as st

#: What a program combines its block with the slot's, and the types it does so in.
COMBINES = {
    "add": ("int32", "uint32", "int64", "fp16", "fp32", "fp64"),
    "max": ("int32", "uint32", "int64", "fp32", "fp64"),
    "min": ("int32", "int64", "fp32"),
    "xor": ("int32", "uint32", "int64"),
}
_SOURCE = {"add": "x + {old}", "max": "tl.maximum(x, {old})", "min": "tl.minimum(x, {old})", "xor": "x ^ {old}"}


def _combine(name: str, x: np.ndarray, old: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        if name == "add":
            return (x + old).astype(x.dtype)
        if name == "max":
            return np.fmax(x, old)
        if name == "min":
            return np.fmin(x, old)
        return x ^ old


@st.composite
def locks(draw: Any, avoid: frozenset[str]) -> Program:
    """One to six programs sharing one to three slots, each slot's accumulator guarded by a spin lock."""
    combine = draw(st.sampled_from(tuple(COMBINES)))
    t = ty(draw(st.sampled_from(COMBINES[combine])))
    block = draw(st.sampled_from((8, 16)))
    programs = draw(st.integers(1, 6))
    slots = draw(st.integers(1, 3))
    spread = draw(st.sampled_from((1, 2, 5)))  # slot = (pid * spread) % SLOTS
    counting = draw(st.sampled_from(("mark", "count")))
    acquire = draw(st.sampled_from(("", ', sem="acquire"', ', sem="acq_rel"')))
    release = draw(st.sampled_from(("tl.atomic_xchg(lock, 0)", "tl.atomic_cas(lock, 1, 0)")))
    barrier = draw(st.booleans())

    count_update = "tl.atomic_xchg(count, 1)" if counting == "mark" else "tl.store(count, n + 1)"
    body = [
        "    pid = tl.program_id(0)",
        "    offs = tl.arange(0, BLOCK)",
        "    x = tl.load(x_ptr + pid * BLOCK + offs)",
        "    slot = (pid * SPREAD) % SLOTS",
        "    lock = lock_ptr + slot",
        "    count = count_ptr + slot",
        f"    while tl.atomic_cas(lock, 0, 1{acquire}) == 1:",
        "        pass",
        "    n = tl.load(count)",
        "    if n == 0:",
        f"        {count_update}" if counting == "mark" else "        tl.store(count, 1)",
        "    else:",
        "        x = " + _SOURCE[combine].format(old="tl.load(acc_ptr + slot * BLOCK + offs)"),
    ]
    if counting == "count":
        body.append(f"        {count_update}")
    body.append("    tl.store(acc_ptr + slot * BLOCK + offs, x)")
    if barrier:
        body.append("    tl.debug_barrier()")
    body.append(f"    {release}")
    params = ["x_ptr", "acc0_ptr", "count0_ptr", "lock0_ptr", "acc_ptr", "count_ptr", "lock_ptr"]
    params += ["BLOCK: tl.constexpr", "SLOTS: tl.constexpr", "SPREAD: tl.constexpr"]
    source = _module(params, body)

    def make(rng: np.random.Generator) -> Instance:
        if t.is_float:
            data = rng.integers(-8, 9, programs * block).astype(t.np)  # sums exact in any order
        else:
            data = random_array(rng, t, programs * block, avoid)
        acc = random_array(rng, t, slots * block, avoid)
        count = np.zeros(slots, np.int32)
        lock = np.zeros(slots, np.int32)
        want_acc, want_count = acc.copy(), count.copy()
        for pid in range(programs):
            slot = (pid * spread) % slots
            x = data[pid * block : (pid + 1) * block]
            here = slice(slot * block, (slot + 1) * block)
            want_acc[here] = x if want_count[slot] == 0 else _combine(combine, x, want_acc[here])
            want_count[slot] = 1 if counting == "mark" else want_count[slot] + 1

        def reference(slack: frozenset[str]) -> list[Expected]:
            return [Expected(v, np.zeros(v.shape)) for v in (want_acc, want_count, np.zeros(slots, np.int32))]

        return Instance([data, acc, count, lock], reference)

    return Program(
        "locks",
        source,
        {},
        [((slots * block,), t), ((slots,), I32), ((slots,), I32)],
        {1: 0, 2: 1, 3: 2},
        (programs,),
        {"BLOCK": block, "SLOTS": slots, "SPREAD": spread},
        make,
        may_hand_over=True,
    )


__all__ = ["locks"]

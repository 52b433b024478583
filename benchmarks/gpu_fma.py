"""What Triton computes on a GPU for a product followed by a sum, with ``enable_fp_fusion`` on and off.

Each pattern runs on 4096 random elements per dtype; every result is compared with three exact references, each
rounded once from the exact value (`fractions.Fraction`):

* ``per-op``: the product rounded to the dtype, then the sum rounded;
* ``fused``: the product fused into the sum (one rounding), the other product (if any) rounded;
* ``fused-right``: for ``a*b + c*d``, the right-hand product fused instead of the left.

Prints one line per (dtype, fusion, pattern) with how many results equal each reference. Needs a CUDA GPU, torch and
triton: ``python benchmarks/gpu_fma.py``.
"""

from __future__ import annotations

import fractions
import sys

try:
    import torch
except ImportError:  # the kernel and references import without it (for reading the PTX on a host)
    torch = None
import triton
import triton.language as tl

PATTERNS = {
    0: "a*b + c",
    1: "c + a*b",
    2: "a*b - c",
    3: "c - a*b",
    4: "a*b + c*d",
    5: "p = a*b stored too; p + c",
    6: "acc += a*b in a loop (2 trips)",
    7: "p = a*b before a loop; acc += p in it (2 trips)",
    8: "(a*b + c) * d + a",
    9: "-(a*b) + c",
    10: "a*b + c, product widened to float32 first",
}


@triton.jit
def _pattern_kernel(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, aux_ptr, n, trips, PATTERN: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    c = tl.load(c_ptr + offsets, mask=mask)
    d = tl.load(d_ptr + offsets, mask=mask)
    if PATTERN == 0:
        r = a * b + c
    elif PATTERN == 1:
        r = c + a * b
    elif PATTERN == 2:
        r = a * b - c
    elif PATTERN == 3:
        r = c - a * b
    elif PATTERN == 4:
        r = a * b + c * d
    elif PATTERN == 5:
        p = a * b
        tl.store(aux_ptr + offsets, p, mask=mask)
        r = p + c
    elif PATTERN == 6:
        r = c
        for _ in range(2):
            r = r + a * b
    elif PATTERN == 7:
        p = a * b
        r = c
        for _ in range(trips):
            r = r + p
    elif PATTERN == 8:
        r = (a * b + c) * d + a
    elif PATTERN == 9:
        r = -(a * b) + c
    else:
        r = ((a * b).to(tl.float32) + c.to(tl.float32)).to(a.dtype)
    tl.store(out_ptr + offsets, r, mask=mask)


_FORMATS = {"float32": (24, -126, 127), "float16": (11, -14, 15), "bfloat16": (8, -126, 127)}


def _round(x: fractions.Fraction, dtype: torch.dtype) -> fractions.Fraction:
    """``x`` rounded to nearest-even in ``dtype`` (exact; overflow gives a value past the largest finite)."""
    precision, emin, _ = _FORMATS[str(dtype).removeprefix("torch.")]
    if x == 0:
        return x
    sign = -1 if x < 0 else 1
    x = abs(x)
    exponent = x.numerator.bit_length() - x.denominator.bit_length()
    if fractions.Fraction(2) ** exponent > x:
        exponent -= 1
    exponent = max(exponent, emin)
    unit = fractions.Fraction(2) ** (exponent - precision + 1)
    q = x / unit
    whole = q.numerator // q.denominator
    rest = q - whole
    if rest > fractions.Fraction(1, 2) or (rest == fractions.Fraction(1, 2) and whole % 2):
        whole += 1
    return sign * whole * unit


def _references(pattern: int, a, b, c, d, dtype) -> dict[str, list[fractions.Fraction]]:
    F = fractions.Fraction
    R = lambda x: _round(x, dtype)  # noqa: E731
    wide = lambda x: _round(x, "float32")  # noqa: E731
    per_op, fused, right = [], [], []
    for x, y, z, w in zip(a, b, c, d, strict=True):
        x, y, z, w = F(x), F(y), F(z), F(w)
        if pattern in (0, 1, 5):
            per_op.append(R(R(x * y) + z)), fused.append(R(x * y + z))
        elif pattern == 2:
            per_op.append(R(R(x * y) - z)), fused.append(R(x * y - z))
        elif pattern == 3:
            per_op.append(R(z - R(x * y))), fused.append(R(z - x * y))
        elif pattern == 4:
            per_op.append(R(R(x * y) + R(z * w))), fused.append(R(x * y + R(z * w))), right.append(R(R(x * y) + z * w))
        elif pattern == 6:
            p = R(x * y)
            per_op.append(R(R(z + p) + p))
            fused.append(R(R(z + x * y) + x * y))
        elif pattern == 7:
            p = R(x * y)
            per_op.append(R(R(z + p) + p)), fused.append(R(R(z + x * y) + x * y))
        elif pattern == 8:
            inner_p, inner_f = R(R(x * y) + z), R(x * y + z)
            per_op.append(R(R(inner_p * w) + x)), fused.append(R(inner_f * w + x))
        elif pattern == 9:
            per_op.append(R(z - R(x * y))), fused.append(R(z - x * y))
        else:
            per_op.append(R(wide(R(x * y)) + z)), fused.append(R(wide(x * y) + z))
    return {"per-op": per_op, "fused": fused, "fused-right": right}


def main() -> int:
    n = 4096
    rows = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(n, generator=generator).to(dtype).cuda() for _ in range(4)]
        exact = [[fractions.Fraction(float(v)) for v in t.float().cpu().tolist()] for t in inputs]
        for fusion in (True, False):
            for pattern, text in PATTERNS.items():
                out = torch.full((n,), float("nan"), dtype=dtype, device="cuda")
                aux = torch.empty_like(out)
                _pattern_kernel[(triton.cdiv(n, 256),)](
                    *inputs, out, aux, n, 2, PATTERN=pattern, BLOCK=256, enable_fp_fusion=fusion
                )
                got = [fractions.Fraction(float(v)) for v in out.float().cpu().tolist()]
                refs = _references(pattern, *exact, dtype)
                counts = {name: sum(g == r for g, r in zip(got, ref)) for name, ref in refs.items() if ref}
                best = max(counts, key=counts.get)
                rows.append((str(dtype).removeprefix("torch."), fusion, text, counts, best))
                print(
                    f"{rows[-1][0]:9s} fusion={fusion!s:5s} {text:42s} "
                    + "  ".join(f"{k}={v}/{n}" for k, v in counts.items())
                    + f"  -> {best}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""THE op table: every builtin scalar function, in one place.

Each :class:`OpSpec` row gives a builtin's name, arity, torch reference (the oracle, also run on meta tensors
to learn result dtypes), Triton rendering, the Triton helper functions that rendering calls, and, for binary
operators usable by ``reduce``/``scan``, the laws and identity. The Python API (``tc.exp``), the tracer
(``x + y``), the DSL (``map exp``), the emitter and the torch oracle all read this table and nothing else.

On the GPU, the functions ``tl`` lacks (log1p, expm1, tanh, pow) call CUDA's libdevice. Triton's interpreter
has no libdevice, so each such helper also carries a portable formula, chosen when the module is imported
(``TC_COMPILED``); the CPU test suite checks the portable formulas and the GPU suite libdevice:

* ``log1p(x) = log(u) * x / (u - 1)`` with ``u = 1 + x`` (exact where ``u == 1``): D. Goldberg, "What every
  computer scientist should know about floating-point arithmetic", ACM Computing Surveys 23(1), 1991, Thm. 4.
* ``expm1(x) = (u - 1) * x / log(u)`` with ``u = exp(x)``: W. Kahan's trick, in N. J. Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., SIAM 2002, section 1.14.1.
* ``tanh(x) = -expm1(-2|x|) / (expm1(-2|x|) + 2)``, with the sign of ``x``.
* ``softplus(x) = x if x > 20 else log1p(exp(x))``: torch.nn.functional.softplus with beta=1, threshold=20;
  in float32 as ``max(x, 0) + log1p(exp(-|x|))``, which rounds to ``x`` above 20.
* ``log1p(t)`` for float32 ``t`` in [0, 1] (softplus and logaddexp): ``t * p(t)``, ``p`` of degree 9 interpolating
  ``log1p(t) / t`` at Chebyshev nodes (``bench/experiments/log1p_fit.py``), within 2 ulp; on the GPU and under
  the interpreter alike.
* ``gelu``: Hendrycks and Gimpel, "Gaussian Error Linear Units", arXiv:1606.08415, exact (erf) form and
  tanh approximation, as torch.nn.functional.gelu(approximate="none" | "tanh").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One builtin scalar function.

    ``triton`` is a format string over the already-evaluated operands ``{0}``, ``{1}``, ... ;
    ``helpers`` names the entries of :data:`HELPERS` it calls. ``identity`` is set for operators that
    ``reduce`` and ``scan`` accept; ``reduce_ref(x, dims)`` and ``scan_ref(x, dim)`` are torch's own
    reduction and scan for it. ``tile_reduce`` and ``tile_scan`` (format strings over a tile ``{0}`` and an
    axis ``{1}``) name a native Triton reduction that equals folding with the operator; without them the
    kernel uses ``tl.reduce`` / ``tl.associative_scan`` with the operator as combine function. The native
    forms name Triton's own combine functions (``tl.standard._sum_combine``, ...): on the GPU they compile
    like ``tl.sum``; Triton's interpreter recognises them and runs numpy's reduction instead of folding one
    element at a time in Python. (``tl.sum`` itself cannot be called from a module loaded with the
    interpreter switched on after ``triton.language`` was imported.) ``by_number(c, dtype)``, where torch's
    kernel for a Python number ``c`` as the last operand differs from its kernel for a tensor there, gives that
    rendering and its helpers for the op's torch ``dtype`` (or None: the general one).
    """

    name: str
    arity: int
    torch: Callable
    triton: str
    doc: str
    helpers: tuple[str, ...] = ()
    associative: bool = False
    commutative: bool = False
    identity: float | None = None
    reduce_ref: Callable | None = None
    scan_ref: Callable | None = None
    tile_reduce: str | None = None
    tile_scan: str | None = None
    integer: str | None = None  # rendering for integer operands, where it differs (floor of an int is itself)
    integer_helpers: tuple[str, ...] = ()  # the helpers that rendering calls
    by_number: Callable | None = None  # (number, dtype) -> (rendering, helpers) or None


def _prod_over(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, dim=d)
    return x


def _folded(fn, start):
    """torch's meaning of a bitwise reduce and scan, which torch lacks: ``fn`` folded element by element (in
    row-major order over the reduced axes) from ``start`` of a tensor (all ones, or zeros)."""
    def reduce_ref(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
        kept = [d for d in range(x.dim()) if d not in dims]
        count = math.prod(x.shape[d] for d in dims)
        rows = x.permute(*kept, *dims).reshape(*(x.shape[d] for d in kept), count)
        acc = start(torch.zeros(rows.shape[:-1], dtype=x.dtype, device=x.device))
        for k in range(count if x.device.type != "meta" else 0):
            acc = fn(acc, rows[..., k])
        return acc

    def scan_ref(x: torch.Tensor, d: int) -> torch.Tensor:
        if x.device.type == "meta" or x.shape[d] == 0:
            return x.clone()
        outs = [x.select(d, 0)]
        for k in range(1, x.shape[d]):
            outs.append(fn(outs[-1], x.select(d, k)))
        return torch.stack(outs, d)
    return reduce_ref, scan_ref


def _integral_only(fn):
    """torch's bitwise op, refusing floats as torch's CPU and CUDA kernels do (a meta tensor would not)."""
    def op(a, b):
        for v in (a, b):
            if (v.is_floating_point() if isinstance(v, torch.Tensor) else isinstance(v, float)):
                raise RuntimeError(f"{fn.__name__} takes integers and bools, as torch's, not floats")
        return fn(a, b)
    op.__name__ = fn.__name__
    return op


def _tensor_args(fn):
    """torch's ``fn`` for an op whose torch function takes tensors only (torch.maximum, torch.bitwise_and, ...):
    a Python number becomes a 0-d tensor, which promotes as a weak scalar does (an int with a float tensor is the
    float's dtype; with an int8 tensor, int8), so ``maximum(x, 0)`` means what it does for ``x + 0``."""
    def op(*args):
        return fn(*(a if isinstance(a, torch.Tensor) else torch.tensor(a) for a in args))
    op.__name__ = fn.__name__
    return op


def _all_ones(x: torch.Tensor) -> torch.Tensor:
    return ~torch.zeros_like(x)


_AND, _OR, _XOR = (_folded(torch.bitwise_and, _all_ones), _folded(torch.bitwise_or, torch.zeros_like),
                   _folded(torch.bitwise_xor, torch.zeros_like))


def _nan_max(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return torch.amax(x, dim=dims)


def _nan_min(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return torch.amin(x, dim=dims)


# Triton helper functions the renderings call. Each is emitted once, and only when used.
# name -> (source, helpers it calls)
HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tc_compiled": ('''
from triton.language.extra import libdevice

# True when this module is imported with Triton's interpreter off: helpers then call CUDA's libdevice (fast
# and accurate), which the interpreter lacks; under the interpreter they use the portable formulas.
TC_COMPILED = tl.constexpr(not triton.knobs.runtime.interpret)
''', ()),
    "tc_abs_int": ('''
@triton.jit
def tc_abs_int(x):
    # torch.abs of an int32 or int64: INT_MIN stays INT_MIN. Compiled, as a shift, xor and subtract in inline PTX:
    # tl.abs and every select or max form of it reach PTX as abs.s32/abs.s64, which ptxas takes to be 0 or more, so
    # where(abs(x) > -1, a, b) took a at INT_MIN on the H200 (bench/experiments/int_abs.py)
    if TC_COMPILED:
        if x.dtype == tl.int64:
            r = tl.inline_asm_elementwise("{ .reg .s64 t; shr.s64 t, $1, 63; xor.b64 $0, $1, t; sub.s64 $0, $0, t; }",
                                          "=l,l", [x], dtype=tl.int64, is_pure=True, pack=1)
        else:
            r = tl.inline_asm_elementwise("{ .reg .s32 t; shr.s32 t, $1, 31; xor.b32 $0, $1, t; sub.s32 $0, $0, t; }",
                                          "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    else:
        r = tl.abs(x)
    return r
''', ("tc_compiled",)),
    "tc_log1p": ('''
@triton.jit
def tc_log1p(x):
    if TC_COMPILED:
        r = libdevice.log1p(x)
    else:
        # log1p(x) = log(u) * x / (u - 1), u = 1 + x (Goldberg 1991, Theorem 4)
        u = 1.0 + x
        r = tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
        r = tl.where(x == float("inf"), x, r)
    return r
''', ("tc_compiled",)),
    "tc_expm1": ('''
@triton.jit
def tc_expm1(x):
    if TC_COMPILED:
        r = libdevice.expm1(x)
    else:
        # expm1(x) = (u - 1) * x / log(u), u = exp(x) (Kahan; Higham 2002, 1.14.1)
        u = tl.exp(x)
        r = tl.where(u == 1.0, x, (u - 1.0) * (x / tl.log(u)))
        r = tl.where(u - 1.0 == -1.0, -1.0, r)
        r = tl.where(u == float("inf"), u, r)
    return r
''', ("tc_compiled",)),
    "tc_tanh": ('''
@triton.jit
def tc_tanh(x):
    if TC_COMPILED:
        t = libdevice.tanh(x)
    else:
        # tanh(|x|) = -expm1(-2|x|) / (expm1(-2|x|) + 2), sign restored
        e = tc_expm1(-2.0 * tl.abs(x))
        t = -e / (e + 2.0)
        t = tl.where(x < 0.0, -t, t)
        t = tl.where(x == 0.0, x, t)  # tanh(-0.0) is -0.0
    return t
''', ("tc_compiled", "tc_expm1")),
    "tc_log1p_unit": ('''
@triton.jit
def tc_log1p_unit(t):
    # log1p(t) for float32 t in [0, 1] (and NaN): t * p(t), p the degree-9 Chebyshev interpolant of log1p(t) / t
    # on [0, 1] with float32 coefficients (bench/experiments/log1p_fit.py), evaluated by Horner's rule; within
    # 2 ulp of the correctly rounded result over [0, 1]. Ten FMAs where libdevice's log1p reduces the range first.
    p = -0.003176057 * t + 0.019542526
    p = p * t - 0.05637361
    p = p * t + 0.105436236
    p = p * t - 0.15269667
    p = p * t + 0.19663274
    p = p * t - 0.24951616
    p = p * t + 0.3332971
    p = p * t - 0.49999893
    return t * (p * t + 1.0)
''', ()),
    "tc_softplus": ('''
@triton.jit
def tc_softplus(x):
    # torch.nn.functional.softplus(x, beta=1, threshold=20)
    if x.dtype == tl.float32:
        # log1p(exp(x)) = max(x, 0) + log1p(exp(-|x|)), the log1p's argument in (0, 1]; above 20 the second term
        # is below half an ulp of x, so the sum rounds to x: torch's threshold with no branch
        r = tl.maximum(x, 0.0) + tc_log1p_unit(tl.exp(-tl.abs(x)))
    else:
        r = tl.where(x > 20.0, x, tc_log1p(tl.exp(x)))
    return r
''', ("tc_log1p", "tc_log1p_unit")),
    "tc_gelu_tanh": ('''
@triton.jit
def tc_gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hendrycks & Gimpel 2016
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + tc_tanh(inner))
''', ("tc_tanh",)),
    "tc_pow": ('''
@triton.jit
def tc_pow(a, b):
    if TC_COMPILED:
        r = libdevice.pow(a, b)
    else:
        r = tc_pow_portable(a, b)
    return r
''', ("tc_compiled", "tc_pow_portable")),
    "tc_pow_half": ('''
@triton.jit
def tc_pow_half(a, b, root):
    # float16 a ** b for a number b of 0.5 or -0.5 (root: sqrt(a) or rsqrt(a)), as torch.pow: compiled (CUDA)
    # the root, as for every float dtype; interpreted (CPU) C's pow, which torch's CPU float16 kernel calls for
    # every exponent. They differ at -0.0 and -inf: pow(-0.0, 0.5) is 0.0, sqrt(-0.0) -0.0; pow(-inf, 0.5) inf
    if TC_COMPILED:
        r = root
    else:
        r = tc_pow_portable(a, b)
    return r
''', ("tc_compiled", "tc_pow_portable")),
    "tc_pow_portable": ('''
@triton.jit
def tc_pow_portable(a, b):
    # a ** b as torch.pow (C99 pow's special cases): |a| ** b = exp2(b log2|a|), then the sign and the edges
    mag = tl.exp2(b * tl.log2(tl.abs(a)))
    b_int = tl.floor(b) == b
    b_odd = b_int & (tl.floor(b * 0.5) * 2.0 != b)
    negative = (a < 0.0) | ((a == 0.0) & (1.0 / a < 0.0))  # the sign bit, -0.0 included
    r = tl.where(negative & b_odd, mag * -1.0, mag)  # (Triton's unary minus is 0 - x: +0.0 for 0.0)
    r = tl.where((a < 0.0) & (a > float("-inf")) & (~b_int), float("nan"), r)
    r = tl.where((tl.abs(a) == 1.0) & (tl.abs(b) == float("inf")), 1.0, r)
    return tl.where((b == 0.0) | (a == 1.0), 1.0, r)
''', ()),
    "tc_maximum": ('''
@triton.jit
def tc_maximum(a, b):
    # NaN-propagating maximum, as torch.maximum (tl.maximum drops NaN); on ties a, as torch's CPU kernel (which
    # decides the sign of maximum(0.0, -0.0))
    return tl.where(a != a, a, tl.where((b != b) | (b > a), b, a))
''', ()),
    "tc_minimum": ('''
@triton.jit
def tc_minimum(a, b):
    # NaN-propagating minimum, as torch.minimum (tl.minimum drops NaN); on ties a, as torch's CPU kernel
    return tl.where(a != a, a, tl.where((b != b) | (b < a), b, a))
''', ()),
    "tc_logaddexp": ('''
@triton.jit
def tc_logaddexp(a, b):
    # log(exp(a) + exp(b)) = max + log1p(exp(min - max)), as torch.logaddexp; equal arguments (infinities
    # included) give a + log(2) exactly, and a NaN propagates
    hi = tl.maximum(a, b)
    lo = tl.minimum(a, b)
    if hi.dtype == tl.float32:
        r = hi + tc_log1p_unit(tl.exp(lo - hi))  # exp(lo - hi) in [0, 1]
    else:
        r = hi + tc_log1p(tl.exp(lo - hi))
    r = tl.where(a == b, a + 0.6931471805599453, r)
    return tl.where((a != a) | (b != b), a + b, r)
''', ("tc_log1p", "tc_log1p_unit")),
    "tc_nan_to": ('''
@triton.jit
def tc_nan_to(x, value):
    # x, with NaN replaced by value (torch.nansum counts a NaN as 0)
    return tl.where(x != x, value, x)
''', ()),
    "tc_to_bf16": ('''
@triton.jit
def tc_to_bf16(x):
    # float32 -> bfloat16, rounded to nearest even, as torch. Compiled, Triton's conversion does this; Triton's
    # interpreter truncates instead, so there the rounding is done on the bits (a NaN is kept a quiet NaN rather
    # than rounded into an infinity)
    if TC_COMPILED:
        r = x.to(tl.bfloat16)
    else:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)
        rounded = tl.where(x != x, bits | 0x400000, rounded)
        r = (rounded >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)  # (its conversion garbles subnormals)
    return r
''', ("tc_compiled",)),
    "tc_from_bf16": ('''
@triton.jit
def tc_from_bf16(x):
    # bfloat16 -> float32, exact: a bfloat16 is the high half of a float32. Compiled, Triton's conversion; under
    # Triton's interpreter, whose conversion garbles subnormals (below 1.2e-38), the bits shifted
    if TC_COMPILED:
        r = x.to(tl.float32)
    else:
        r = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return r
''', ("tc_compiled",)),
    "tc_last": ('''
@triton.jit
def tc_last(x, N: tl.constexpr):
    # the last column of a 2-D tile, read with a sum (which Triton's interpreter runs as one numpy call) of that
    # column and, elsewhere, the sum's exact identity: 0 for integers; -0.0 for floats (-0.0 + v is v for every
    # v, -0.0 included, where +0.0 would turn a -0.0 into +0.0). numpy's sum starts from +0.0, so under the
    # interpreter a float column is summed as its bits
    last = (tl.arange(0, N) == N - 1)[None, :]
    if not x.dtype.is_floating():
        r = tl.reduce(tl.where(last, x, 0), 1, tl.standard._sum_combine)
    elif TC_COMPILED:
        r = tl.reduce(tl.where(last, x, tc_negative_zero(x.dtype)), 1, tl.standard._sum_combine)
    elif x.dtype.primitive_bitwidth == 64:
        r = tl.reduce(tl.where(last, x.to(tl.int64, bitcast=True), 0), 1, tl.standard._sum_combine)
        r = r.to(tl.int64).to(x.dtype, bitcast=True)
    elif x.dtype.primitive_bitwidth == 32:
        r = tl.reduce(tl.where(last, x.to(tl.int32, bitcast=True), 0), 1, tl.standard._sum_combine)
        r = r.to(tl.int32).to(x.dtype, bitcast=True)
    else:
        r = tl.reduce(tl.where(last, x.to(tl.int16, bitcast=True), 0), 1, tl.standard._sum_combine)
        r = r.to(tl.int16).to(x.dtype, bitcast=True)
    return r
''', ("tc_compiled", "tc_negative_zero")),
    "tc_put_status16": ('''
@triton.jit
def tc_put_status16(flags, slot, status, a, b, c, mask):
    # a look-back's 16-byte status word ``slot`` (int32 words: the status, then the bits of up to three 32-bit
    # fields), written in one store where ``mask`` holds. Compiled, one 16-byte vector store in inline PTX (Triton
    # has no 16-byte store of four int32s); an aligned 16-byte access is performed as one, which CUB's tile
    # status words rely on too. Inline PTX runs in every thread that holds an element: for one row, which every
    # thread holds, thread 0 alone stores (P10: 0.295 ms with every thread storing, 0.275 ms so). Under the
    # interpreter, which runs programs one at a time, four stores
    words = flags.to(tl.pointer_type(tl.int32), bitcast=True) + 4 * slot
    zero = slot * 0
    if TC_COMPILED:
        here = mask
        if slot.shape[0] == 1:
            thread = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
            here = mask & (thread == 0)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.s32 p, $1, 0; @p st.volatile.global.v4.b32 [$2], {$3, $4, $5, $6}; mov.u32 $0, 0; }",
            "=r,r,l,r,r,r,r", [here.to(tl.int32), words, (zero + status).to(tl.int32), (zero + a).to(tl.int32),
                               (zero + b).to(tl.int32), (zero + c).to(tl.int32)],
            dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.store(words + 1, zero + a, mask=mask)
        tl.store(words + 2, zero + b, mask=mask)
        tl.store(words + 3, zero + c, mask=mask)
        tl.store(words, (zero + status).to(tl.int32), mask=mask)
''', ("tc_compiled",)),
    "tc_get_status16": ('''
@triton.jit
def tc_get_status16(flags, at):
    # the four int32 words of each 16-byte status word ``at`` (every one in bounds), read in one load each
    # (:data:`tc_put_status16`)
    words = flags.to(tl.pointer_type(tl.int32), bitcast=True) + 4 * at
    if TC_COMPILED:
        status, a, b, c = tl.inline_asm_elementwise(
            "ld.volatile.global.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l", [words],
            dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=False, pack=1)
    else:
        status = tl.load(words, volatile=True)
        a = tl.load(words + 1)
        b = tl.load(words + 2)
        c = tl.load(words + 3)
    return status, a, b, c
''', ("tc_compiled",)),
    "tc_negative_zero": ('''
@triton.jit
def tc_negative_zero(dtype: tl.constexpr):
    # -0.0 in a float dtype, from its sign bit (a -0.0 literal may be materialised as +0.0)
    if dtype.primitive_bitwidth == 64:
        z = tl.full([1], -9223372036854775808, tl.int64).to(dtype, bitcast=True)
    elif dtype.primitive_bitwidth == 32:
        z = tl.full([1], -2147483648, tl.int32).to(dtype, bitcast=True)
    else:
        z = tl.full([1], -32768, tl.int16).to(dtype, bitcast=True)
    return z
''', ()),
    "tc_max_over": ('''
@triton.jit
def tc_max_over(x, AXIS: tl.constexpr):
    # NaN-propagating max along AXIS, as torch.amax (Triton's max drops NaN): NaN if any is NaN; any dtype
    nan = tl.reduce(tl.where(x != x, x, 0), AXIS, tl.standard._sum_combine)  # NaN or 0
    return tl.where(nan != nan, nan, tl.reduce(x, AXIS, tl.standard._elementwise_max)).to(x.dtype)  # keeps -0.0
''', ()),
    "tc_min_over": ('''
@triton.jit
def tc_min_over(x, AXIS: tl.constexpr):
    # NaN-propagating min along AXIS, as torch.amin (Triton's min drops NaN): NaN if any is NaN; any dtype
    nan = tl.reduce(tl.where(x != x, x, 0), AXIS, tl.standard._sum_combine)  # NaN or 0
    return tl.where(nan != nan, nan, tl.reduce(x, AXIS, tl.standard._elementwise_min)).to(x.dtype)  # keeps -0.0
''', ()),
}

_ARG_STEP = '''
@triton.jit
def tc_arg{kind}_step(av, ai, bv, bi):
    # one step of torch.arg{kind}: NaN beats every number, then the {better} value; ties keep the smaller index
    a_nan = av != av
    b_nan = bv != bv
    tie = (av == bv) | (a_nan & b_nan)
    take_a = (av {op} bv) | (a_nan & ~b_nan) | (tie & (ai < bi))
    return tl.where(take_a, av, bv), tl.where(take_a, ai, bi)
'''
_ARG_OVER = '''
@triton.jit
def tc_arg{kind}_over(v, i, AXIS: tl.constexpr):
    # torch.arg{kind} along AXIS of (value, index) tiles: the NaN-propagating {kind}, then the smallest index
    # holding it (two native reductions: no element-by-element fold in Triton's interpreter)
    best = tc_{kind}_over(v, AXIS)
    hit = (v == tl.expand_dims(best, AXIS)) | ((v != v) & tl.expand_dims(best != best, AXIS))
    index = tl.reduce(tl.where(hit, i, 9223372036854775807), AXIS, tl.standard._elementwise_min)
    return best, index
'''
_CUM_STEP = '''
@triton.jit
def tc_cum{kind}_step(av, ai, bv, bi):
    # one step of torch.cum{kind} on (value, position) pairs, b the later in scan order: b wins when {better} or
    # equal (the latest position on ties), or NaN (NaN beats every number); a lane with position -1 is empty
    take_b = ((bv {op}= av) | (bv != bv)) & (bi >= 0)
    return tl.where(take_b, bv, av), tl.where(take_b, bi, ai)
'''
_WRAP = '''
@triton.jit
def tc_wrap_{name}(x):
    # x (int32) wrapped into {name}'s range, held in int32. Compiled, one PTX bit-field extract, which LLVM cannot
    # narrow into 16-bit arithmetic (on the H200 ptxas drops the wrap of neg.s16/abs.s16 before a widening)
    if TC_COMPILED:
        r = tl.inline_asm_elementwise("bfe.{sign}32 $0, $1, 0, {bits};", "=r,r", [x], dtype=tl.int32, is_pure=True,
                                      pack=1)
    else:
        r = {formula}
    return r
'''
for _name, _sign, _bits, _formula in (("int8", "s", 8, "((x + 128) & 255) - 128"),
                                       ("int16", "s", 16, "((x + 32768) & 65535) - 32768"),
                                       ("uint8", "u", 8, "x & 255")):
    HELPERS[f"tc_wrap_{_name}"] = (_WRAP.format(name=_name, sign=_sign, bits=_bits, formula=_formula),
                                   ("tc_compiled",))
for _kind, _better, _op in (("max", "larger", ">"), ("min", "smaller", "<")):
    HELPERS[f"tc_arg{_kind}_step"] = (_ARG_STEP.format(kind=_kind, better=_better, op=_op), ())
    HELPERS[f"tc_cum{_kind}_step"] = (_CUM_STEP.format(kind=_kind, better=_better, op=_op), ())
    HELPERS[f"tc_arg{_kind}_over"] = (_ARG_OVER.format(kind=_kind), (f"tc_{_kind}_over",))


def _unary(name, torch_fn, triton, doc, helpers=()):
    return OpSpec(name, 1, torch_fn, triton, doc, helpers)


def _binary(name, torch_fn, triton, doc, helpers=(), **laws):
    return OpSpec(name, 2, torch_fn, triton, doc, helpers, **laws)


_SQRT_HALF = 1.0 / math.sqrt(2.0)


def _pow_by_number(exponent, dtype: torch.dtype):
    """``x ** exponent`` for a Python number ``exponent``, where torch.pow(tensor, number) is not C's pow: 0.5 and
    -0.5 are sqrt and rsqrt (they differ from C's pow at -0.0 and -inf), except for float16 on the CPU, whose
    kernel calls C's pow (:data:`tc_pow_half` picks by device). Other exponents: None (2 and 3, which torch
    multiplies out, are squared and cubed when traced; at special values that is C's pow too). Torch's pow of a
    tensor exponent is C's pow whatever its values."""
    root = {0.5: "tl.sqrt({0})", -0.5: "tl.rsqrt({0})"}.get(exponent) if type(exponent) is float else None
    if root is None or not dtype.is_floating_point:
        return None
    if dtype == torch.float16:
        return f"tc_pow_half({{0}}, {{1}}, {root})", ("tc_pow_half",)
    return root, ()


_TABLE: list[OpSpec] = [
    OpSpec("abs", 1, torch.abs, "tl.abs({0})", "absolute value", integer="tc_abs_int({0})",
           integer_helpers=("tc_abs_int",)),
    OpSpec("neg", 1, torch.neg, "({0} * -1.0)", "negation (of 0.0 too: -0.0, unlike Triton's unary minus)",
           integer="(-{0})"),
    _unary("exp", torch.exp, "tl.exp({0})", "e ** x"),
    _unary("exp2", torch.exp2, "tl.exp2({0})", "2 ** x"),
    _unary("expm1", torch.expm1, "tc_expm1({0})", "exp(x) - 1, accurate near 0", ("tc_expm1",)),
    _unary("log", torch.log, "tl.log({0})", "natural logarithm"),
    _unary("log2", torch.log2, "tl.log2({0})", "base-2 logarithm"),
    _unary("log1p", torch.log1p, "tc_log1p({0})", "log(1 + x), accurate near 0", ("tc_log1p",)),
    _unary("sqrt", torch.sqrt, "tl.sqrt({0})", "square root"),
    _unary("rsqrt", torch.rsqrt, "tl.rsqrt({0})", "1 / sqrt(x)"),
    _unary("square", torch.square, "{0} * {0}", "x * x"),
    _unary("reciprocal", torch.reciprocal, "1.0 / {0}", "1 / x"),
    _unary("sin", torch.sin, "tl.sin({0})", "sine (radians)"),
    _unary("cos", torch.cos, "tl.cos({0})", "cosine (radians)"),
    _unary("tanh", torch.tanh, "tc_tanh({0})", "hyperbolic tangent", ("tc_tanh",)),
    _unary("sigmoid", torch.sigmoid, "1.0 / (1.0 + tl.exp(-{0}))", "logistic function 1 / (1 + exp(-x))"),
    _unary("softplus", F.softplus, "tc_softplus({0})", "log(1 + exp(x)); x itself above 20 (torch's threshold)",
           ("tc_softplus",)),
    OpSpec("relu", 1, torch.relu, "tl.where({0} < 0.0, 0.0, {0})", "max(x, 0); NaN stays NaN",
           integer="tl.where({0} < 0, 0, {0})"),
    _unary("gelu", F.gelu, f"0.5 * {{0}} * (1.0 + tl.erf({{0}} * {_SQRT_HALF!r}))",
           "x * Phi(x), exact (erf) form"),
    _unary("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), "tc_gelu_tanh({0})",
           "gelu, tanh approximation", ("tc_gelu_tanh",)),
    _unary("silu", F.silu, "{0} / (1.0 + tl.exp(-{0}))", "x * sigmoid(x)"),
    _unary("erf", torch.erf, "tl.erf({0})", "error function"),
    OpSpec("floor", 1, torch.floor, "tl.floor({0})", "round toward -inf", integer="{0}"),
    OpSpec("ceil", 1, torch.ceil, "tl.ceil({0})", "round toward +inf", integer="{0}"),
    OpSpec("sign", 1, torch.sign, "tl.where({0} > 0.0, 1.0, tl.where({0} < 0.0, -1.0, 0.0))",
           "-1, 0 or 1 (0 for NaN, as torch on the CPU)",
           integer="tl.where({0} > 0, 1, tl.where({0} < 0, -1, 0)).to({0}.dtype)"),
    _binary("add", torch.add, "{0} + {1}", "a + b", associative=True, commutative=True, identity=0.0,
            reduce_ref=lambda x, dims: torch.sum(x, dim=dims), scan_ref=lambda x, d: torch.cumsum(x, dim=d),
            tile_reduce="tl.reduce({0}, {1}, tl.standard._sum_combine)",
            tile_scan="tl.associative_scan({0}, {1}, tl.standard._sum_combine)"),
    _binary("sub", torch.sub, "{0} - {1}", "a - b"),
    _binary("mul", torch.mul, "{0} * {1}", "a * b", associative=True, commutative=True, identity=1.0,
            reduce_ref=_prod_over, scan_ref=lambda x, d: torch.cumprod(x, dim=d),
            tile_reduce="tl.reduce({0}, {1}, tl.standard._prod_combine)",
            tile_scan="tl.associative_scan({0}, {1}, tl.standard._prod_combine)"),
    _binary("div", torch.div, "{0} / {1}", "true division a / b"),
    OpSpec("pow", 2, torch.pow, "tc_pow({0}, {1})", "a ** b", ("tc_pow",), by_number=_pow_by_number),
    _binary("maximum", _tensor_args(torch.maximum), "tc_maximum({0}, {1})", "larger of a and b; NaN if either is NaN",
            ("tc_maximum",), associative=True, commutative=True, identity=-math.inf,
            reduce_ref=_nan_max, scan_ref=lambda x, d: torch.cummax(x, dim=d).values,
            tile_reduce="tc_max_over({0}, {1})"),
    _binary("minimum", _tensor_args(torch.minimum), "tc_minimum({0}, {1})", "smaller of a and b; NaN if either is NaN",
            ("tc_minimum",), associative=True, commutative=True, identity=math.inf,
            reduce_ref=_nan_min, scan_ref=lambda x, d: torch.cummin(x, dim=d).values,
            tile_reduce="tc_min_over({0}, {1})"),
    _binary("logaddexp", _tensor_args(torch.logaddexp), "tc_logaddexp({0}, {1})", "log(exp(a) + exp(b)), without overflow",
            ("tc_logaddexp",), associative=True, commutative=True, identity=-math.inf,
            reduce_ref=lambda x, dims: torch.logsumexp(x, dim=dims), scan_ref=lambda x, d: torch.logcumsumexp(x, d)),
    _binary("bitwise_and", _integral_only(_tensor_args(torch.bitwise_and)), "{0} & {1}", "a & b, bit by bit (integers and bool)",
            associative=True, commutative=True, identity=-1.0, reduce_ref=_AND[0], scan_ref=_AND[1]),
    _binary("bitwise_or", _integral_only(_tensor_args(torch.bitwise_or)), "{0} | {1}", "a | b, bit by bit (integers and bool)",
            associative=True, commutative=True, identity=0.0, reduce_ref=_OR[0], scan_ref=_OR[1]),
    _binary("bitwise_xor", _integral_only(_tensor_args(torch.bitwise_xor)), "{0} ^ {1}", "a ^ b, bit by bit (integers and bool)",
            associative=True, commutative=True, identity=0.0, reduce_ref=_XOR[0], scan_ref=_XOR[1]),
    _binary("lt", torch.lt, "{0} < {1}", "a < b (bool)"),
    _binary("le", torch.le, "{0} <= {1}", "a <= b (bool)"),
    _binary("gt", torch.gt, "{0} > {1}", "a > b (bool)"),
    _binary("ge", torch.ge, "{0} >= {1}", "a >= b (bool)"),
    _binary("eq", torch.eq, "{0} == {1}", "a == b (bool)"),
    _binary("ne", torch.ne, "{0} != {1}", "a != b (bool)"),
    _binary("logical_and", torch.logical_and, "(({0} != 0) & ({1} != 0))", "a and b, each true when nonzero (bool)",
            associative=True, commutative=True, identity=1.0,
            reduce_ref=lambda x, dims: torch.all(x, dim=dims), scan_ref=lambda x, d: torch.cumsum(x == 0, d) == 0,
            tile_reduce="(tl.reduce(({0} != 0).to(tl.int32), {1}, tl.standard._elementwise_min) != 0)"),
    _binary("logical_or", torch.logical_or, "(({0} != 0) | ({1} != 0))", "a or b, each true when nonzero (bool)",
            associative=True, commutative=True, identity=0.0,
            reduce_ref=lambda x, dims: torch.any(x, dim=dims), scan_ref=lambda x, d: torch.cumsum(x != 0, d) > 0,
            tile_reduce="(tl.reduce(({0} != 0).to(tl.int32), {1}, tl.standard._elementwise_max) != 0)"),
    OpSpec("where", 3, torch.where, "tl.where({0}, {1}, {2})", "b where cond else c"),
]

OPS: dict[str, OpSpec] = {spec.name: spec for spec in _TABLE}


def helper_closure(names) -> list[str]:
    """The helpers ``names`` need, each after the helpers it calls, without repeats."""
    order: dict[str, None] = {}

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in HELPERS[name][1]:
            visit(dep)
        order[name] = None

    for name in names:
        visit(name)
    return list(order)


def markdown_table() -> str:
    """The builtin table as Markdown: ``docs/builtins.md`` is this text (a test keeps them equal)."""
    lines = ["# Builtin scalar functions", "",
             "Generated from the op table (`tricomb/scalar/builtins.py`) by `tricomb.scalar.builtins.markdown_table()`;",
             "`tests/test_docs.py` checks that this file is current. Each name is `tc.NAME` in Python and `NAME` in",
             "the DSL. Operators (with an identity) can be given to `reduce` and `scan`.", "",
             "| name | arguments | meaning | torch reference | operator: identity |", "|---|---|---|---|---|"]
    for spec in _TABLE:
        name = getattr(spec.torch, "__name__", "")
        ref = f"torch.nn.functional.{name}" if getattr(F, name, None) is spec.torch else f"torch.{name}"
        if spec.name == "gelu_tanh":
            ref = "torch.nn.functional.gelu(approximate='tanh')"
        op = f"{spec.identity!r}" if spec.identity is not None else ""
        lines.append(f"| `{spec.name}` | {spec.arity} | {spec.doc} | `{ref}` | {op} |")
    return "\n".join(lines) + "\n"

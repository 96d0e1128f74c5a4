"""The device helpers of emitted kernels: ``@triton.jit`` functions the op table's renderings and the kernel
emitters call by name.

Nothing here is called inside tricomb: an emitted module holds a copy of each helper its kernel reads (and of
each helper those read), found by name and copied with its source (:mod:`tricomb.codegen.sources`). So they may
use only ``triton``, ``triton.language`` and each other, and a comment in them is read by whoever reads a
kernel.

On the GPU, the functions ``tl`` lacks (log1p, expm1, tanh, pow) call CUDA's libdevice. Triton's interpreter
has no libdevice, so each such helper also carries a portable formula, chosen when the emitted module is
imported (``TC_COMPILED``); the CPU test suite checks the portable formulas and the GPU suite libdevice:

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

Variants differ by ``tl.constexpr`` parameters (``MAX`` for max or min, ``BITS`` and ``SIGNED`` for a wrap);
``tl.reduce`` and ``tl.associative_scan`` take a combine function of the fields alone, so those of argmax,
argmin, cummax and cummin are one-line wrappers.
"""
import triton
import triton.language as tl
from triton.language.extra import libdevice

# True when this module is imported with Triton's interpreter off: helpers then call CUDA's libdevice (fast
# and accurate), which the interpreter lacks; under the interpreter they use the portable formulas.
TC_COMPILED = tl.constexpr(not triton.knobs.runtime.interpret)


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


@triton.jit
def tc_gelu_tanh(x):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hendrycks & Gimpel 2016
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + tc_tanh(inner))


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


@triton.jit
def tc_pow(a, b):
    if TC_COMPILED:
        r = libdevice.pow(a, b)
    else:
        r = tc_pow_portable(a, b)
    return r


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


@triton.jit
def tc_maximum(a, b):
    # NaN-propagating maximum, as torch.maximum (tl.maximum drops NaN); on ties a, as torch's CPU kernel (which
    # decides the sign of maximum(0.0, -0.0))
    return tl.where(a != a, a, tl.where((b != b) | (b > a), b, a))


@triton.jit
def tc_minimum(a, b):
    # NaN-propagating minimum, as torch.minimum (tl.minimum drops NaN); on ties a, as torch's CPU kernel
    return tl.where(a != a, a, tl.where((b != b) | (b < a), b, a))


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


@triton.jit
def tc_from_bf16(x):
    # bfloat16 -> float32, exact: a bfloat16 is the high half of a float32. Compiled, Triton's conversion; under
    # Triton's interpreter, whose conversion garbles subnormals (below 1.2e-38), the bits shifted
    if TC_COMPILED:
        r = x.to(tl.float32)
    else:
        r = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return r


@triton.jit
def tc_wrap(x, BITS: tl.constexpr, SIGNED: tl.constexpr):
    # x (int32) wrapped into the range of a BITS-bit integer, signed or not, held in int32. Compiled, one PTX
    # bit-field extract, which LLVM cannot narrow into 16-bit arithmetic (on the H200 ptxas drops the wrap of
    # neg.s16/abs.s16 before a widening)
    if TC_COMPILED:
        r = tl.inline_asm_elementwise(f"bfe.s32 $0, $1, 0, {BITS};" if SIGNED else f"bfe.u32 $0, $1, 0, {BITS};",
                                      "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    elif SIGNED:
        r = ((x + (1 << (BITS - 1))) & ((1 << BITS) - 1)) - (1 << (BITS - 1))
    else:
        r = x & ((1 << BITS) - 1)
    return r


@triton.jit
def tc_int_of_words(hi, lo):
    # a runtime scalar int: the int64 whose high and low 32 bits the launch passed as two int32 (so Triton types
    # them int32 whatever the value, and compiles one kernel for every value)
    return (hi.to(tl.int64) << 32) | (lo.to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def tc_float_of_words(hi, lo):
    # a runtime scalar float: the double whose bits the launch passed as two int32 (Triton would take a Python
    # float as a float32, rounding a float64 pipeline's scalar)
    return tc_int_of_words(hi, lo).to(tl.float64, bitcast=True)


# --- tiles: the last column, and folds that follow torch's NaN rules ------------------------------------------


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


@triton.jit
def tc_extreme_over(x, AXIS: tl.constexpr, MAX: tl.constexpr):
    # NaN-propagating max (MAX) or min along AXIS, as torch.amax and torch.amin (Triton's drop NaN): NaN if any
    # is NaN; any dtype
    nan = tl.reduce(tl.where(x != x, x, 0), AXIS, tl.standard._sum_combine)  # NaN or 0
    any_nan = nan != nan
    if MAX:
        best = tl.reduce(x, AXIS, tl.standard._elementwise_max)
    else:
        best = tl.reduce(x, AXIS, tl.standard._elementwise_min)
    return tl.where(any_nan, nan, best).to(x.dtype)  # keeps -0.0


@triton.jit
def tc_arg_step(av, ai, bv, bi, MAX: tl.constexpr):
    # one step of torch.argmax (MAX) or torch.argmin: NaN beats every number, then the larger (smaller) value;
    # ties keep the smaller index
    a_nan = av != av
    b_nan = bv != bv
    tie = (av == bv) | (a_nan & b_nan)
    better = (av > bv) if MAX else (av < bv)
    take_a = better | (a_nan & ~b_nan) | (tie & (ai < bi))
    return tl.where(take_a, av, bv), tl.where(take_a, ai, bi)


@triton.jit
def tc_arg_over(v, i, AXIS: tl.constexpr, MAX: tl.constexpr):
    # torch.argmax (MAX) or torch.argmin along AXIS of (value, index) tiles: the NaN-propagating max or min, then
    # the smallest index holding it (two native reductions: no element-by-element fold in Triton's interpreter)
    best = tc_extreme_over(v, AXIS, MAX)
    hit = (v == tl.expand_dims(best, AXIS)) | ((v != v) & tl.expand_dims(best != best, AXIS))
    index = tl.reduce(tl.where(hit, i, 9223372036854775807), AXIS, tl.standard._elementwise_min)
    return best, index


@triton.jit
def tc_cum_step(av, ai, bv, bi, MAX: tl.constexpr):
    # one step of torch.cummax (MAX) or torch.cummin on (value, position) pairs, b the later in scan order: b wins
    # when larger (smaller) or equal (the latest position on ties), or NaN (NaN beats every number); a lane with
    # position -1 is empty
    better = (bv >= av) if MAX else (bv <= av)
    take_b = (better | (bv != bv)) & (bi >= 0)
    return tl.where(take_b, bv, av), tl.where(take_b, bi, ai)


# --- a look-back's 16-byte status words (tricomb.codegen.lookback) --------------------------------------------


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

"""THE op table: every builtin scalar function, in one place.

Each :class:`OpSpec` row gives a builtin's name, arity, torch reference (the oracle, also run on meta tensors
to learn result dtypes), Triton rendering, the Triton helper functions that rendering calls, and, for binary
operators usable by ``reduce``/``scan``, the laws and identity. The Python API (``tc.exp``), the tracer
(``x + y``), the DSL (``map exp``), the emitter and the torch oracle all read this table and nothing else.

The Triton helper functions a rendering calls (``tc_log1p``, ``tc_maximum``, ...) are ``@triton.jit`` functions
of :mod:`tricomb.codegen.device`, named here; an emitted module holds a copy of those its kernel calls.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .ir import Arg, Call, Const, Function


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One builtin scalar function.

    ``triton`` is a format string over the already-evaluated operands ``{0}``, ``{1}``, ... ;
    ``helpers`` names the device helpers (:mod:`tricomb.codegen.device`) it calls, which take tiles, so that a
    constant operand is passed as one. ``identity`` is set for operators that
    ``reduce`` and ``scan`` accept; ``reduce_ref(x, dims)`` and ``scan_ref(x, dim)`` are torch's own
    reduction and scan for it. ``tile_reduce`` and ``tile_scan`` (format strings over a tile ``{0}`` and an
    axis ``{1}``) name a native Triton reduction that equals folding with the operator; without them the
    kernel uses ``tl.reduce`` / ``tl.associative_scan`` with the operator as combine function. The native
    forms name Triton's own combine functions (``tl.standard._sum_combine``, ...): on the GPU they compile
    like ``tl.sum``; Triton's interpreter recognises them and runs numpy's reduction instead of folding one
    element at a time in Python. (``tl.sum`` itself cannot be called from a module loaded with the
    interpreter switched on after ``triton.language`` was imported.) ``by_number(c, dtype)``, where torch's
    kernel for a Python number ``c`` as the last operand differs from its kernel for a tensor there, gives that
    rendering for the op's torch ``dtype`` (or None: the general one).

    Internal rows (``internal``), which no user writes, are what the ``expand`` pass rewrites derived stages
    into: ``converts_to`` marks a conversion to that dtype, as torch's ``Tensor.to`` converts (rounding, and
    wrapping integers); ``leaf`` marks a value the kernel knows about the element rather than computes from it,
    the kernel variable of that name: its ``position`` along the folded axes, or ``K``, the count of elements a
    fold combines. Their torch functions give the dtype only (a leaf's values exist in a kernel alone).
    ``runtime`` marks a runtime scalar of that Python type (bool, int or float): the value given at each call
    whose index among the pipeline's runtime scalars is the operand; its torch function gives a number of that
    type, which torch promotes as a weak scalar (:mod:`tricomb.pipeline.scalars`).
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
    by_number: Callable | None = None  # (number, dtype) -> rendering or None
    internal: bool = False
    converts_to: torch.dtype | None = None
    leaf: str | None = None
    runtime: type | None = None


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


def _where(condition, a, b):
    """torch.where, whose condition may also be a Python bool (a runtime scalar's test): torch takes a tensor."""
    return torch.where(condition if isinstance(condition, torch.Tensor) else torch.tensor(condition), a, b)


_where.__name__ = "where"  # (the op table names torch's function it stands for)


def _all_ones(x: torch.Tensor) -> torch.Tensor:
    return ~torch.zeros_like(x)


_AND, _OR, _XOR = (_folded(torch.bitwise_and, _all_ones), _folded(torch.bitwise_or, torch.zeros_like),
                   _folded(torch.bitwise_xor, torch.zeros_like))


def _nan_max(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return torch.amax(x, dim=dims)


def _nan_min(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return torch.amin(x, dim=dims)


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
        return f"tc_pow_half({{0}}, {{1}}, {root})"
    return root


_TABLE: list[OpSpec] = [
    OpSpec("abs", 1, torch.abs, "tl.abs({0})", "absolute value", integer="tc_abs_int({0})"),
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
            tile_reduce="tc_extreme_over({0}, {1}, True)"),
    _binary("minimum", _tensor_args(torch.minimum), "tc_minimum({0}, {1})", "smaller of a and b; NaN if either is NaN",
            ("tc_minimum",), associative=True, commutative=True, identity=math.inf,
            reduce_ref=_nan_min, scan_ref=lambda x, d: torch.cummin(x, dim=d).values,
            tile_reduce="tc_extreme_over({0}, {1}, False)"),
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
    OpSpec("where", 3, _where, "tl.where({0}, {1}, {2})", "b where cond else c"),
]

# dtypes a derived stage's ``dtype=`` may name (torch.sum's, torch.cumsum's)
CONVERTIBLE = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64)


def convert_op(dtype: torch.dtype) -> str:
    """The name of the internal row converting to ``dtype``."""
    return f"to_{str(dtype)[6:]}"


def _conversion(dtype: torch.dtype) -> OpSpec:
    def to(x):
        return x.to(dtype) if isinstance(x, torch.Tensor) else torch.tensor(x).to(dtype)
    return OpSpec(convert_op(dtype), 1, to, "{0}", f"x converted to {str(dtype)[6:]}, as torch's Tensor.to",
                  internal=True, converts_to=dtype)


def _int64(*_) -> torch.Tensor:
    return torch.zeros((), dtype=torch.int64)


INDEX = OpSpec("index", 1, _int64, "",
               "the element's int64 coordinate along the axis given (an int, negative from the end) of the shape the "
               "function's arguments broadcast to")  # (a user's, as tc.index; not in PUBLIC: it takes no value)

# Where a kernel stands when it computes a coordinate (the ``expand`` pass rewrites ``index`` into one of these):
COORDINATE_PHASES = {
    "in": "the element as read (before the plan's first fold, in an attached pipeline, after an attach)",
    "out": "the element as written after a scan",
    "row": "the row a reduce left (a reduced dimension kept has coordinate 0)",
}

_INTERNAL: list[OpSpec] = [
    INDEX,
    OpSpec("position", 1, lambda x: torch.zeros_like(torch.as_tensor(x), dtype=torch.int64), "position",
           "the int64 position of the element along the axes the next fold combines (row-major over several)",
           internal=True, leaf="position"),
    OpSpec("count", 1, lambda x: torch.ones_like(torch.as_tensor(x)), "K",
           "the number of elements the fold before it combined, in the element's dtype", internal=True, leaf="K"),
    *(OpSpec(f"coordinate_{phase}", 1, _int64, "", f"the int64 coordinate of {what} along the iteration dimension given",
             internal=True, leaf=f"{phase}_at{{0}}") for phase, what in COORDINATE_PHASES.items()),
    *(_conversion(dtype) for dtype in CONVERTIBLE),
    *(OpSpec(f"runtime_{kind.__name__}", 1, lambda _, kind=kind: kind(1), "",
             f"the runtime {kind.__name__} given at each call, the operand its index among them",
             internal=True, runtime=kind) for kind in (bool, int, float)),
]

OPS: dict[str, OpSpec] = {spec.name: spec for spec in _TABLE + _INTERNAL}
# ``index`` and what the expand pass rewrites it into: each a coordinate in the shape of all its function's arguments
COORDINATES = frozenset([INDEX.name] + [f"coordinate_{phase}" for phase in COORDINATE_PHASES])
PUBLIC: dict[str, OpSpec] = {spec.name: spec for spec in _TABLE}


@dataclass(frozen=True, slots=True)
class TupleOpSpec:
    """A builtin operator on k-tuples: ``function`` (2k arguments, k results, in the ops above) is its meaning,
    ``identity`` its identity (a k-tuple); ``commutative`` as its laws are. ``combine`` is its native rendering,
    a format string over the 2k operands (the left tuple's fields, then the right one's) calling ``helpers``;
    ``tile_reduce``, where set, a native fold of the k field tiles ``{0}``, ... along an axis ``{k}``, returning
    the k folded fields."""

    name: str
    function: Function
    identity: tuple
    commutative: bool
    combine: str
    helpers: tuple[str, ...]
    tile_reduce: str | None = None


def _arg_step(largest: bool) -> Function:
    """torch.argmax's (``largest``) or torch.argmin's step on (value, position) pairs: NaN beats every number,
    then the larger (smaller) value; on ties the smaller position. It commutes: positions differ."""
    av, ai, bv, bi = (Arg(i) for i in range(4))
    a_nan, b_nan = Call("ne", (av, av)), Call("ne", (bv, bv))
    tie = Call("logical_or", (Call("eq", (av, bv)), Call("logical_and", (a_nan, b_nan))))
    better = Call("gt" if largest else "lt", (av, bv))
    take_a = Call("logical_or", (Call("logical_or", (better, Call("logical_and", (a_nan, Call("eq", (bv, bv)))))),
                                 Call("logical_and", (tie, Call("lt", (ai, bi))))))
    return Function(4, (Call("where", (take_a, av, bv)), Call("where", (take_a, ai, bi))),
                    "argmax_step" if largest else "argmin_step")


def _cum_step(largest: bool) -> Function:
    """torch.cummax's (``largest``) or torch.cummin's step on (value, position) pairs, b the later in scan order:
    b wins when larger (smaller) or equal, so the latest position on ties, or NaN; position -1 is no element. It
    does not commute: which side is later decides ties."""
    av, ai, bv, bi = (Arg(i) for i in range(4))
    better = Call("ge" if largest else "le", (bv, av))
    take_b = Call("logical_and", (Call("logical_or", (better, Call("ne", (bv, bv)))), Call("ge", (bi, Const(0)))))
    return Function(4, (Call("where", (take_b, bv, av)), Call("where", (take_b, bi, ai))),
                    "cummax_step" if largest else "cummin_step")


_NO_POSITION = 2 ** 63 - 1  # int64 max: loses every tie, so lanes past the end are never chosen

TUPLE_OPS: dict[str, TupleOpSpec] = {spec.name: spec for spec in [
    TupleOpSpec("argmax", _arg_step(True), (-math.inf, _NO_POSITION), True, "tc_arg_step({0}, {1}, {2}, {3}, True)",
                ("tc_arg_step",), "tc_arg_over({0}, {1}, {2}, True)"),
    TupleOpSpec("argmin", _arg_step(False), (math.inf, _NO_POSITION), True, "tc_arg_step({0}, {1}, {2}, {3}, False)",
                ("tc_arg_step",), "tc_arg_over({0}, {1}, {2}, False)"),
    TupleOpSpec("cummax", _cum_step(True), (-math.inf, -1), False, "tc_cum_step({0}, {1}, {2}, {3}, True)",
                ("tc_cum_step",)),
    TupleOpSpec("cummin", _cum_step(False), (math.inf, -1), False, "tc_cum_step({0}, {1}, {2}, {3}, False)",
                ("tc_cum_step",)),
]}


def tuple_operator(op: Function) -> TupleOpSpec | None:
    """The row whose function ``op`` is, by identity: the expand pass writes these very functions, and a user's
    operator with the same body stays the user's (its tile folds are its own: ``tc_arg_over`` returns the
    extreme and the smallest position holding it, which for a user's pairs need not come from one element)."""
    return next((spec for spec in TUPLE_OPS.values() if spec.function is op), None)


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
        lines.append(f"| `{spec.name}` | {spec.arity} | {spec.doc.replace('|', chr(92) + '|')} | `{ref}` | {op} |")
    lines.append(f"| `{INDEX.name}` | 1 (an int axis) | {INDEX.doc}; not in a reduce or scan operator | "
                 "`torch.arange` along the axis, broadcast | |")
    return "\n".join(lines) + "\n"

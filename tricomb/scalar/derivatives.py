"""THE derivative table: each builtin's vector-Jacobian product, keyed by the op table's names.

A rule takes the operands ``args``, the op's own result ``out`` and the cotangent ``g`` of that result, all
:class:`~tricomb.scalar.trace.Traced` values, and returns one entry per operand: its share of the cotangent (an
expression or a number), or None where the operand gets no gradient (a condition, an integer, a step). The
formulas are torch's (``tools/autograd/derivatives.yaml``), including its choices at ties and edges: half the
cotangent to each side of ``maximum(a, a)``, ``relu``'s zero at 0, ``softplus``'s threshold of 20, ``pow``'s zero
at a zero exponent.

:func:`pullback` applies the table to a whole scalar function by reverse accumulation over its DAG, visiting each
distinct node once (B. Speelpenning, "Compiling fast partial derivatives of functions given by algorithms",
1980; A. Griewank and A. Walther, "Evaluating Derivatives", 2nd ed., SIAM 2008, ch. 3).
"""
from __future__ import annotations

import math
from typing import Callable

from ..errors import UnsupportedError
from .builtins import OPS
from .ir import Arg, Call, Const, Expr, Function, JitCall, JitRef, as_expr, substitute, walk
from .jit_body import body
from .trace import BUILTINS, Traced, constants_folded

_T = BUILTINS
_LN2 = math.log(2.0)
_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_INV_SQRT_PI = 2.0 / math.sqrt(math.pi)
_GELU_K = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


def _gelu(x, y, g):
    cdf = 0.5 * (1.0 + _T["erf"](x * _SQRT_HALF))
    return (g * (cdf + x * _T["exp"](-0.5 * x * x) * _INV_SQRT_2PI),)


def _gelu_tanh(x, y, g):
    t = _T["tanh"](_GELU_K * (x + _GELU_C * x * x * x))
    inner = _GELU_K * (1.0 + 3.0 * _GELU_C * x * x)
    return (g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner),)


def _silu(x, y, g):
    s = _T["sigmoid"](x)
    return (g * s * (1.0 + x * (1.0 - s)),)


def _pow(a, b, y, g):
    base = _T["where"](b == 0, 0.0, g * b * _T["pow"](a, b - 1))
    exponent = _T["where"]((a == 0) & (b >= 0), 0.0, g * y * _T["log"](a))
    return base, exponent


def _extreme(larger: bool):
    """maximum (``larger``) or minimum: the cotangent goes to the winner, half to each side of a tie, and to
    both where a NaN makes the comparison false (torch's ``masked_fill_(self < other, 0)``)."""
    def rule(a, b, y, g):
        a_loses, b_loses = (a < b, b < a) if larger else (a > b, b > a)
        half = g * 0.5
        return (_T["where"](a == b, half, _T["where"](a_loses, 0.0, g)),
                _T["where"](a == b, half, _T["where"](b_loses, 0.0, g)))
    return rule


Rule = Callable[..., tuple]

VJP: dict[str, Rule] = {
    "abs": lambda x, y, g: (g * _T["sign"](x),),
    "neg": lambda x, y, g: (-g,),
    "exp": lambda x, y, g: (g * y,),
    "exp2": lambda x, y, g: (g * y * _LN2,),
    "expm1": lambda x, y, g: (g * (y + 1.0),),
    "log": lambda x, y, g: (g / x,),
    "log2": lambda x, y, g: (g / (x * _LN2),),
    "log1p": lambda x, y, g: (g / (x + 1.0),),
    "sqrt": lambda x, y, g: (g / (2.0 * y),),
    "rsqrt": lambda x, y, g: (-0.5 * g * y * y * y,),
    "square": lambda x, y, g: (2.0 * g * x,),
    "reciprocal": lambda x, y, g: (-g * y * y,),
    "sin": lambda x, y, g: (g * _T["cos"](x),),
    "cos": lambda x, y, g: (-g * _T["sin"](x),),
    "tanh": lambda x, y, g: (g * (1.0 - y * y),),
    "sigmoid": lambda x, y, g: (g * y * (1.0 - y),),
    "softplus": lambda x, y, g: (_T["where"](x > 20.0, g, g * _T["sigmoid"](x)),),
    "relu": lambda x, y, g: (_T["where"](y <= 0.0, 0.0, g),),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": _silu,
    "erf": lambda x, y, g: (g * _TWO_INV_SQRT_PI * _T["exp"](-x * x),),
    "add": lambda a, b, y, g: (g, g),
    "sub": lambda a, b, y, g: (g, -g),
    "mul": lambda a, b, y, g: (g * b, g * a),
    "div": lambda a, b, y, g: (g / b, -g * y / b),
    "pow": _pow,
    "maximum": _extreme(True),
    "minimum": _extreme(False),
    "logaddexp": lambda a, b, y, g: (g / (1.0 + _T["exp"](b - a)), g / (1.0 + _T["exp"](a - b))),
    "where": lambda c, a, b, y, g: (None, _T["where"](c, g, 0.0), _T["where"](c, 0.0, g)),
}

# ops whose result carries no gradient to their operands: steps (torch's zero gradient), comparisons and logic
# (bool results), bit operations (integers), coordinates and counts (leaves), runtime scalars (given, not computed)
NO_GRADIENT = frozenset(["floor", "ceil", "sign", "bitwise_and", "bitwise_or", "bitwise_xor", "lt", "le", "gt", "ge",
                         "eq", "ne", "logical_and", "logical_or", "index", "position", "count",
                         "coordinate_in", "coordinate_out", "coordinate_row",
                         "runtime_bool", "runtime_int", "runtime_float"])


def _conversion_rule(x, y, g):
    return (g,)


def rule_for(op: str) -> Rule | None:
    """The op's rule; None for an op in :data:`NO_GRADIENT`. A conversion passes the cotangent through (the
    pullback's caller converts each gradient to its input's dtype)."""
    if op in VJP:
        return VJP[op]
    if OPS[op].converts_to is not None:
        return _conversion_rule
    if op in NO_GRADIENT:
        return None
    raise KeyError(f"the builtin {op!r} has no entry in the derivative table")


# the derivatives users give their @triton.jit functions (tricomb.vjp): a rule as in VJP, on traced values
JIT_VJP: dict[JitRef, Rule] = {}


def define_jit_vjp(ref: JitRef, rule: Rule) -> None:
    JIT_VJP[ref] = rule


def differentiable(fn: Function) -> None:
    """Raise UnsupportedError, naming the function, when ``fn`` calls a ``@triton.jit`` function with no
    derivative: none given (:data:`JIT_VJP`), and a body that is not only builtins (:mod:`.jit_body`)."""
    for node in walk(*fn.outputs):
        if isinstance(node, JitCall) and node.fn not in JIT_VJP:
            try:
                body(node.fn, len(node.args))
            except UnsupportedError as exc:
                caller = "" if fn.name == node.fn.name else f" (called by {fn.name})"
                raise UnsupportedError(exc.message.replace(f"function {node.fn.name}:", f"function {node.fn.name}"
                                                           f"{caller}:", 1), fn.location) from None


def _jit_shares(node: JitCall, g: Expr) -> tuple:
    """The shares of a ``@triton.jit`` call's operands: by the rule its user gave, else by the pullback of its
    body (a placeholder argument after the body's own carries the cotangent until it is substituted)."""
    rule = JIT_VJP.get(node.fn)
    if rule is not None:
        shares = rule(*(Traced(a) for a in node.args), Traced(node), Traced(g))
        return shares if isinstance(shares, tuple) else (shares,)
    k = len(node.args)
    fn = body(node.fn, k)
    exprs = pulled(fn, tuple(range(k)), (Arg(k),))
    return tuple(substitute(Function(k + 1, exprs), [*node.args, g]))


def _add(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else Call("add", (a, b))


def pullback(fn: Function, wanted: tuple[int, ...]) -> Function:
    """The vector-Jacobian product of ``fn``: a function of ``fn``'s ``k`` arguments, then one cotangent per
    result of ``fn`` (arguments ``k`` to ``k + m - 1``), returning the gradient of each argument in ``wanted``
    (0.0 for one that no result depends on). Raises UnsupportedError for a ``@triton.jit`` call."""
    k = fn.arity
    grads = pulled(fn, wanted, tuple(Arg(k + j) for j in range(len(fn.outputs))))
    return Function(k + len(fn.outputs), grads, f"d_{fn.name}", fn.location)


def pulled(fn: Function, wanted: tuple[int, ...], seeds: tuple[Expr | None, ...]) -> tuple[Expr, ...]:
    """The gradients of ``fn``'s arguments in ``wanted`` given the cotangent ``seeds`` of its results (None: no
    cotangent, which then reaches nothing), as expressions over ``fn``'s arguments and whatever the seeds read.
    A gradient that no seeded result depends on is exactly ``Const(0.0)``, so a caller can tell the structural
    zeros of a Jacobian (a seed of 1.0 on one result gives one column)."""
    differentiable(fn)
    adjoint: dict[Expr, Expr] = {}
    for out, seed in zip(fn.outputs, seeds):
        if seed is not None:
            adjoint[out] = _add(adjoint.get(out), seed)
    for node in reversed(list(walk(*fn.outputs))):
        g = adjoint.get(node)
        if g is None or not isinstance(node, (Call, JitCall)):
            continue
        if isinstance(node, JitCall):
            shares = _jit_shares(node, g)
        else:
            rule = rule_for(node.op)
            if rule is None:
                continue
            with constants_folded():
                shares = rule(*(Traced(a) for a in node.args), Traced(node), Traced(g))
        for operand, share in zip(node.args, shares):
            if share is not None and not isinstance(operand, Const):
                adjoint[operand] = _add(adjoint.get(operand), as_expr(share.expr if isinstance(share, Traced)
                                                                      else share))
    return tuple(adjoint.get(Arg(i), ZERO) for i in wanted)


ZERO = Const(0.0)


def is_zero(expr: Expr) -> bool:
    """Whether ``expr`` is the structural zero :func:`pulled` gives for a gradient no result reaches."""
    return expr is ZERO

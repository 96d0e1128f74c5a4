"""Emitting scalar functions as straight-line Triton code, one SSA temporary per operation.

The same emitter serves map and zip_with bodies, combine functions for reduce/scan, and epilogues after a
reduction. Renderings come from the op table; identical subexpressions are emitted once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..scalar.builtins import OPS
from ..scalar.ir import Arg, Call, Const, Expr, Function, JitCall
from .writer import Names, Writer


def render_const(value) -> str:
    """A Python number as Triton source (``inf`` and ``nan`` as ``float(...)``)."""
    if isinstance(value, bool) or isinstance(value, int):
        return repr(value)
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return repr(float(value))


@dataclass
class ScalarContext:
    """What scalar emission needs from the module: names, the jit functions copied in, and helpers used."""

    names: Names
    jit_names: dict[int, str]  # id(python function of a user @triton.jit function) -> emitted name
    helpers: list[str] = field(default_factory=list)

    def use_helpers(self, names) -> None:
        for name in names:
            if name not in self.helpers:
                self.helpers.append(name)


def emit_function(w: Writer, ctx: ScalarContext, fn: Function, args: list[str], fill_shape: str,
                  fill_dtype: str) -> list[str]:
    """Emit ``fn`` applied to the variables ``args``; return one variable (or literal) per output.

    A constant output is widened to a tile with ``tl.full(fill_shape, value, fill_dtype)``.
    """
    memo: dict[Expr, str] = {}

    def value(expr: Expr) -> str:
        if expr in memo:
            return memo[expr]
        if isinstance(expr, Arg):
            result = args[expr.index]
        elif isinstance(expr, Const):
            result = render_const(expr.value)
        else:
            operands = [value(a) for a in expr.args]
            result = ctx.names.fresh("t")
            w.line(f"{result} = {_render(ctx, expr, operands)}")
        memo[expr] = result
        return result

    results = []
    for out in fn.outputs:
        var = value(out)
        if isinstance(out, Const):
            var = f"tl.full({fill_shape}, {var}, {fill_dtype})"
        results.append(var)
    return results


def _render(ctx: ScalarContext, expr: Call | JitCall, operands: list[str]) -> str:
    if isinstance(expr, JitCall):
        return f"{ctx.jit_names[id(expr.fn.fn.fn)]}({', '.join(operands)})"
    spec = OPS[expr.op]
    ctx.use_helpers(spec.helpers)
    return spec.triton.format(*operands)

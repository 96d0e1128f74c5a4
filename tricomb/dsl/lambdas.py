"""DSL lambdas: ``x -> exp(x) * 2`` and ``(a, b) -> (a + b, a * b)``, parsed into a Python function of the same
parameters that the scalar tracer then records, so a lambda written as text means exactly what the same lambda
written in Python means (operators, promotion of constants, ``x ** 2``).

Each expression node becomes a closure over ``scope``, the parameters' traced values by name. Names that are
not parameters are the constants ``inf``, ``nan``, ``True`` and ``False``; called names are builtins or ``env``
functions (``@triton.jit`` ones included).
"""
from __future__ import annotations

import inspect
import keyword
import math

import lark

from ..errors import ArityError, ParseError, UnknownNameError
from ..scalar.trace import is_jit_function, jit_call

_CONSTANTS = {"inf": math.inf, "nan": math.nan, "True": True, "False": False}
_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "eq": lambda a, b: a == b,
           "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
           "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _call(fn, args):
    if is_jit_function(fn):
        return jit_call(fn, tuple(args))
    return fn(*args)


class Expressions(lark.Transformer):
    """Transformer rules for lambda expressions; the subclass provides ``_resolve(token)``, ``_where`` and
    ``_runtime(name)`` (the runtime scalar a name reads, or None)."""

    def number(self, items):
        text = str(items[0])
        return lambda scope, value=(float(text) if any(c in text for c in ".eE") else int(text)): value

    def variable(self, items):
        token = items[0]
        name = str(token)
        where = self._where(token)

        def value(scope):
            if name in scope:
                return scope[name]
            runtime = self._runtime(name)
            if runtime is not None:
                return runtime
            if name in _CONSTANTS:
                return _CONSTANTS[name]
            raise UnknownNameError(f"unknown name {name!r} in a lambda: not one of its parameters "
                                   f"({', '.join(scope) or 'none'}), a param, a number in env, nor inf, nan, True, "
                                   "False", where)
        return value

    def call(self, items):
        fn = self._callable(items[0])
        args = [a for a in items[1:] if a is not None]
        where = self._where(items[0])

        def value(scope):
            try:
                return _call(fn, [a(scope) for a in args])
            except ArityError as exc:  # located at the call in the text, not in this module
                raise ArityError(exc.message, where) from None
        return value

    def neg(self, items):
        (operand,) = items
        return lambda scope: -operand(scope)

    def tuple_expr(self, items):
        parts = [a for a in items if a is not None]
        return lambda scope: tuple(p(scope) for p in parts)

    def __default__(self, data, children, meta):
        if data in _BINARY:
            op, (left, right) = _BINARY[data], children
            return lambda scope: op(left(scope), right(scope))
        return super().__default__(data, children, meta)

    def one_param(self, items):
        return [items[0]]

    def param_list(self, items):
        return [t for t in items if t is not None]

    @lark.v_args(meta=True)
    def lambda_(self, meta, items):
        """A Python function of the parameters (tokens) evaluating the body, for the tracer."""
        params, body = items
        if not params:
            raise ParseError("a lambda needs a parameter: the stream's element (a constant is `x -> 1.0`)",
                             self._where(meta))
        names = [str(t) for t in params]
        for t in params:
            if keyword.iskeyword(str(t)) or str(t) in _CONSTANTS:
                raise ParseError(f"{str(t)!r} cannot name a lambda parameter; choose another name", self._where(t))
        if len(set(names)) != len(names):
            raise ParseError(f"a lambda names a parameter twice: ({', '.join(names)})", self._where(params[0]))
        def fn(*args):
            return body(dict(zip(names, args)))

        fn.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                              for n in names])  # the tracer counts these
        fn.__name__ = "<lambda>"
        fn.__tricomb_location__ = self._where(params[0])  # errors about it point at the text, not at this module
        return fn

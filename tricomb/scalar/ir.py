"""Scalar expressions: the body of every function a pipeline stage applies.

A :class:`Function` of ``arity`` arguments returns one or more :data:`Expr` trees over its arguments. Builtins,
traced Python lambdas, user ``@triton.jit`` functions and DSL lambdas all become a ``Function``, so every later
pass handles one representation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from ..errors import Location


@dataclass(frozen=True, slots=True)
class Arg:
    """The ``index``-th argument of the enclosing function."""

    index: int


@dataclass(frozen=True, slots=True, eq=False)
class Const:
    """A Python number. Like a Python scalar in torch, it does not widen a tensor's dtype (a weak scalar).

    Equality is by type and exact value: ``1``, ``1.0`` and ``True`` differ (they promote differently), so do
    ``0.0`` and ``-0.0``; NaN equals NaN (so a function holding NaN is one cache entry).
    """

    value: bool | int | float

    def _key(self):
        return type(self.value), repr(self.value)

    def __eq__(self, other) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True)
class Call:
    """A builtin op (a row of the table in :mod:`tricomb.scalar.builtins`) applied to arguments."""

    op: str
    args: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class JitRef:
    """A user ``@triton.jit`` function, compared by identity."""

    fn: Any = field(compare=True, hash=True)

    @property
    def name(self) -> str:
        return self.fn.fn.__name__


@dataclass(frozen=True, slots=True)
class JitCall:
    """A call of a user ``@triton.jit`` function; its source is copied into the emitted module."""

    fn: JitRef
    args: tuple["Expr", ...]


Expr = Union[Arg, Const, Call, JitCall]


@dataclass(frozen=True, slots=True)
class Function:
    """A scalar function: ``arity`` arguments, one expression per result.

    ``name`` is for display (the DSL printer and messages); ``location`` is where the user wrote it. Neither
    takes part in equality, so the same function written twice is one cache entry.
    """

    arity: int
    outputs: tuple[Expr, ...]
    name: str = field(default="<lambda>", compare=False)
    location: Location | None = field(default=None, compare=False)

    @property
    def output(self) -> Expr:
        """The single result of a one-result function."""
        return self.outputs[0]


def children(expr: Expr) -> tuple[Expr, ...]:
    """The operand expressions of ``expr`` (empty for leaves)."""
    if isinstance(expr, (Call, JitCall)):
        return expr.args
    return ()


def walk(expr: Expr):
    """Every node of ``expr``, operands before the node that uses them."""
    for child in children(expr):
        yield from walk(child)
    yield expr


def fold(function: Function, args: list, on_call) -> list:
    """Evaluate ``function``'s outputs bottom-up: an argument is ``args[i]``, a constant its Python value, and
    a call ``on_call(node, operand_results)``. Shared subexpressions are evaluated once."""
    memo: dict[Expr, object] = {}

    def value(expr: Expr):
        if expr not in memo:
            if isinstance(expr, Arg):
                memo[expr] = args[expr.index]
            elif isinstance(expr, Const):
                memo[expr] = expr.value
            else:
                memo[expr] = on_call(expr, [value(a) for a in expr.args])
        return memo[expr]

    return [value(out) for out in function.outputs]


def jit_functions(function: Function) -> list[JitRef]:
    """The user ``@triton.jit`` functions ``function`` calls, in first-use order, without repeats."""
    seen: dict[JitRef, None] = {}
    for out in function.outputs:
        for node in walk(out):
            if isinstance(node, JitCall):
                seen.setdefault(node.fn, None)
    return list(seen)

"""Scalar expressions: the body of every function a pipeline stage applies.

A :class:`Function` of ``arity`` arguments returns one or more :data:`Expr` over its arguments. Builtins, traced
Python lambdas, user ``@triton.jit`` functions and DSL lambdas all become a ``Function``, so every later pass
handles one representation.

Expressions are DAGs, not trees: ``x = x * 0.5 + x * 0.25`` repeated n times is 3n nodes whose unfolded tree has
about 2**n. Every node is hash-consed (building a node equal to a live one gives that one back), caches its hash,
and compares equal to another only through its own fields, whose children are then compared by identity; so
hashing and equality cost the node's arity, and every traversal here (:func:`walk`, :func:`fold`,
:func:`dag_text`) visits each distinct node once. A pass that recurses into ``args`` itself, without a memo,
is exponential on such a DAG: use these instead.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Union

from ..errors import Location
from .literals import number_key

# Every live node, by its type and key (_Node._key): the table that makes equal nodes one object. Weak, so a
# node no function holds any more is freed; the key holds the node's children, not the node.
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class _HashConsed(type):
    """Constructing a node returns the live node equal to it when there is one, else the new one."""

    def __call__(cls, *args, **kwargs):
        node = super().__call__(*args, **kwargs)
        return _LIVE.setdefault((cls, *node._key()), node)


class _Node(metaclass=_HashConsed):
    """What every expression node shares: hash-consing, a cached hash, equality by the node's own key, a
    ``repr`` whose size is linear in the DAG, and pickling and copying through the constructor (so a copy is
    the canonical node too)."""

    __slots__ = ("__weakref__", "_hash")

    def _key(self) -> tuple:
        """What equality compares: the fields (a constant's type and exact value); children are nodes."""
        raise NotImplementedError

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((type(self).__name__, *self._key())))

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        # equal children are one object (hash-consed), so comparing the keys compares them by identity
        return type(other) is type(self) and self._hash == other._hash and self._key() == other._key()

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return type(self), tuple(getattr(self, f.name) for f in fields(self))

    def __repr__(self) -> str:
        return expr_repr(self)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Arg(_Node):
    """The ``index``-th argument of the enclosing function."""

    index: int

    def _key(self) -> tuple:
        return (self.index,)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Const(_Node):
    """A Python number. Like a Python scalar in torch, it does not widen a tensor's dtype (a weak scalar).

    Equality is by type and exact value: ``1``, ``1.0`` and ``True`` differ (they promote differently), so do
    ``0.0`` and ``-0.0``; NaN equals NaN (so a function holding NaN is one cache entry).
    """

    value: bool | int | float

    def _key(self) -> tuple:
        return number_key(self.value)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(_Node):
    """A builtin op (a row of the table in :mod:`tricomb.scalar.builtins`) applied to arguments."""

    op: str
    args: tuple["Expr", ...]

    def _key(self) -> tuple:
        return self.op, self.args


@dataclass(frozen=True, slots=True, eq=False)
class JitRef:
    """A user ``@triton.jit`` function, compared and hashed by identity (Triton's own hash of a function is its
    cache key, which walks its source and globals: slow, and Triton 3.6's fails on a local that shadows a global
    read as an attribute, ``import math as K; K.pi`` beside a global ``K``)."""

    fn: Any

    def __eq__(self, other) -> bool:
        return isinstance(other, JitRef) and other.fn is self.fn

    def __hash__(self) -> int:
        return id(self.fn)

    @property
    def name(self) -> str:
        return self.fn.fn.__name__


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class JitCall(_Node):
    """A call of a user ``@triton.jit`` function; its source is copied into the emitted module."""

    fn: JitRef
    args: tuple["Expr", ...]

    def _key(self) -> tuple:
        return self.fn, self.args


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


def walk(*roots: Expr) -> Iterator[Expr]:
    """Each distinct node reachable from ``roots`` once, operands before the nodes that use them (the order of
    a depth-first walk of the roots in turn, a node's operands left to right). Iterative: a deep chain does
    not hit Python's recursion limit."""
    seen: set = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(children(root)))]
        while stack:
            node, operands = stack[-1]
            for operand in operands:
                if operand not in seen:
                    seen.add(operand)  # (a DAG: a node in progress is never reached again below itself)
                    stack.append((operand, iter(children(operand))))
                    break
            else:
                stack.pop()
                yield node


def fold(function: Function, args: list, on_call) -> list:
    """Evaluate ``function``'s outputs bottom-up: an argument is ``args[i]``, a constant its Python value, and
    a call ``on_call(node, operand_results)`` (a new list each call). Each distinct node is evaluated once, in
    :func:`walk`'s order."""
    values: dict[Expr, object] = {}
    for node in walk(*function.outputs):
        if isinstance(node, Arg):
            values[node] = args[node.index]
        elif isinstance(node, Const):
            values[node] = node.value
        else:
            values[node] = on_call(node, [values[a] for a in node.args])
    return [values[out] for out in function.outputs]


def as_expr(value) -> Expr:
    """A value :func:`fold` hands over as an expression: an expression as it is, a constant's number as a Const."""
    return value if isinstance(value, (Arg, Const, Call, JitCall)) else Const(value)


def rebuilt(node: Call | JitCall, operands: list) -> Expr:
    """``node`` with ``operands`` (expressions, or constants' numbers, as :func:`fold` hands them over)."""
    return type(node)(node.op if isinstance(node, Call) else node.fn, tuple(as_expr(o) for o in operands))


def substitute(function: Function, args: list[Expr]) -> list[Expr]:
    """``function``'s outputs with its argument ``i`` replaced by the expression ``args[i]`` (each distinct node
    rebuilt once: linear in the DAG)."""
    return [as_expr(o) for o in fold(function, args, rebuilt)]


def jit_functions(function: Function) -> list[JitRef]:
    """The user ``@triton.jit`` functions ``function`` calls, in first-use order, without repeats."""
    seen: dict[JitRef, None] = {}
    for node in walk(*function.outputs):
        if isinstance(node, JitCall):
            seen.setdefault(node.fn, None)
    return list(seen)


def tree_size(roots: tuple[Expr, ...], limit: int) -> int:
    """The number of nodes of ``roots`` unfolded into trees (a shared node counted once per use), or
    ``limit + 1`` when that is more than ``limit``; linear in the DAG, however large the trees."""
    sizes: dict[Expr, int] = {}
    for node in walk(*roots):
        sizes[node] = min(1 + sum(sizes[a] for a in children(node)), limit + 1)
    return min(sum(sizes[r] for r in roots), limit + 1)


def _ref_text(ref: JitRef) -> str:
    """A ``@triton.jit`` function by its qualified name and its identity (JitRef compares by identity; the
    address tells apart two live functions of one name, and names nothing across processes)."""
    python = ref.fn.fn
    return f"{python.__module__}.{python.__qualname__}@{id(ref.fn):x}"


def _node_text(node: Expr, operands: list[str]) -> str:
    """One node as text, its operands already written (``%3``, or a whole subexpression)."""
    if isinstance(node, Arg):
        return f"Arg({node.index!r})"
    if isinstance(node, Const):
        return f"Const({type(node.value).__name__} {node.value!r})"
    head = repr(node.op) if isinstance(node, Call) else _ref_text(node.fn)
    return f"{type(node).__name__}({', '.join([head, *operands])})"


def dag_text(roots: tuple[Expr, ...]) -> str:
    """``roots`` as let-numbered text, linear in the DAG: each distinct node once, as ``%i = node(operands)``
    with its operands by number, then the roots' numbers. A faithful key: the numbering follows :func:`walk`,
    which depends on the structure alone, so equal expressions give equal text, and the text spells out every
    node (an op by name, a constant by type and exact ``repr``, a ``@triton.jit`` function by identity), so
    different expressions give different text.

    >>> x = Arg(0); y = Call("mul", (x, x))
    >>> dag_text((Call("add", (y, y)),))
    "%0 = Arg(0); %1 = Call('mul', %0, %0); %2 = Call('add', %1, %1); -> (%2)"
    """
    numbers: dict[Expr, str] = {}
    lines = []
    for node in walk(*roots):
        numbers[node] = f"%{len(numbers)}"
        lines.append(f"{numbers[node]} = {_node_text(node, [numbers[a] for a in children(node)])}")
    return "; ".join(lines + [f"-> ({', '.join(numbers[r] for r in roots)})"])


_REPR_TREE_LIMIT = 200  # nodes: a larger expression's repr is its let-numbered text


def expr_repr(expr: Expr) -> str:
    """``repr`` of an expression: ``Call('add', Arg(0), Const(float 1.0))`` when its unfolded tree is small,
    else ``<expression: ...>`` around its :func:`dag_text`, so its size stays linear in the DAG."""
    if tree_size((expr,), _REPR_TREE_LIMIT) > _REPR_TREE_LIMIT:
        return f"<expression: {dag_text((expr,))}>"
    texts: dict[Expr, str] = {}
    for node in walk(expr):
        texts[node] = _node_text(node, [texts[a] for a in children(node)])
    return texts[expr]

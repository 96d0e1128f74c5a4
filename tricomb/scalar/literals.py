"""Numbers from the user, made plain, and written as source: the one way a user's number reaches the emitted
module.

A number enters tricomb in three places: a constant a traced function captures (:mod:`.trace`), a global or
closure cell of a copied ``@triton.jit`` function (:mod:`.inline`), and an operator's ``identity=``
(:mod:`tricomb.pipeline.operators`). Each passes it through :func:`plain_number`, so the IR holds only exact
``bool``, ``int`` and ``float`` values; :func:`number_literal` then writes one as source and refuses anything
else, so a value whose ``repr`` is the user's code (an ``int`` subclass, an ``IntEnum``) cannot become code.
"""
from __future__ import annotations

import math
import numbers
import sys


class NotExact(ValueError):
    """A real number that no Python ``int`` or ``float`` equals exactly (``Fraction(1, 3)``, a long double)."""

    def __init__(self, value, nearest: float):
        super().__init__(f"{value!r}, which no Python float equals exactly (the nearest is {nearest!r})")
        self.nearest = nearest


def plain_number(value) -> bool | int | float:
    """``value`` (a bool, an integer or a real number of any type: an ``int`` or ``float`` subclass, an
    ``IntEnum``, a numpy scalar, a ``Fraction``) as the plain ``bool``, ``int`` or ``float`` equal to the value
    Python's arithmetic sees: an ``int`` subclass by its digits and a ``float`` subclass by its double, whatever
    its ``__int__``, ``__float__`` or ``__repr__`` say.

    Raises :class:`NotExact` for a real that no float equals and ``TypeError`` for anything that is not a real
    number; callers raise their own error, naming the argument."""
    if isinstance(value, bool):  # (bool cannot be subclassed)
        return bool(value)
    numpy = sys.modules.get("numpy")  # (a numpy scalar exists only once numpy is imported)
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    if isinstance(value, int):
        return int.__index__(value)  # int's own slot: no method of a subclass runs
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, numbers.Integral):
        return int.__index__(int(value))
    if isinstance(value, numbers.Real):
        return _exact(value, float.__float__(float(value)))
    raise TypeError(f"not a real number: {type(value).__name__}")


def _exact(value, plain: float) -> float:
    if math.isnan(plain) or plain == value:
        return plain
    raise NotExact(value, plain)


def number_key(value: bool | int | float) -> tuple:
    """Equal for two plain numbers exactly when they are one value of one type: ``1``, ``1.0`` and ``True``
    differ (they promote differently), so do ``0.0`` and ``-0.0``; every NaN is one."""
    if type(value) is float:
        return float, "nan" if math.isnan(value) else float.hex(value)
    return type(value), value


def number_literal(value) -> str:
    """The Python source of ``value``, exactly a ``bool``, ``int`` or ``float`` (NaN and the infinities as
    ``float("...")`` expressions, which Python and Triton both evaluate; an int past 64 bits in hexadecimal, which
    Python's limit on decimal digits does not cover). Anything else is refused: convert it first with
    :func:`plain_number`.

    Raises ``TypeError`` (an internal error: the layer that took the value in did not convert it)."""
    kind = type(value)
    if kind is bool:
        return "True" if value else "False"
    if kind is int:
        return int.__repr__(value) if value.bit_length() <= 64 else hex(value)
    if kind is not float:
        raise TypeError(f"internal error: a value of type {kind.__qualname__} reached the emitted source as a "
                        "number; only plain bool, int and float values may (convert it with plain_number where it "
                        "comes in)")
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else 'float("-inf")'
    return float.__repr__(value)  # the shortest text that reads back as the same double

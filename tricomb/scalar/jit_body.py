"""A user ``@triton.jit`` function's body as a scalar :class:`~tricomb.scalar.ir.Function`, for its derivative.

The kernel still calls the user's function as its source (:mod:`.inline`); only the backward needs what it
computes as tricomb's builtins. The body is run once as Python on traced values, its globals seen through a
stand-in for ``triton.language`` (and so its closure): ``tl.exp`` is tricomb's ``exp``, and so on for every op-table row that renders
as a single ``tl`` call (the table is the source of the names), ``tl.math`` is the same namespace, and a
``@triton.jit`` function it calls is traced the same way. Whatever else the body does (a ``tl`` function
without a builtin, a dtype conversion, Python control flow on a value) fails the trace, and the error says
which function, what it used and how to supply the derivative instead (:func:`tricomb.vjp`).
"""
from __future__ import annotations

import functools
import re
import types

import triton
import triton.language as tl

from ..errors import TricombError, UnsupportedError
from .builtins import OPS
from .inline import globals_key
from .ir import Arg, Function, JitRef
from .trace import BUILTINS, Traced, is_jit_function

_SINGLE_CALL = re.compile(r"tl\.(\w+)\(\{0\}(?:, \{1\})?(?:, \{2\})?\)")
# Triton's names for builtins whose table rendering is not a single tl call
_ALIASES = {"maximum": "maximum", "minimum": "minimum", "sigmoid": "sigmoid", "fdiv": "div", "div_rn": "div",
            "abs": "abs", "where": "where"}


def _tl_names() -> dict[str, str]:
    names = {m.group(1): spec.name for spec in OPS.values() if not spec.internal
             for m in [_SINGLE_CALL.fullmatch(spec.triton)] if m and m.group(1) not in ("reduce", "associative_scan")}
    names.update(_ALIASES)
    return names


class _Language:
    """``triton.language`` as tricomb's builtins: each attribute that names one is that builtin, on traced
    values; any other attribute is an error naming it."""

    def __init__(self):
        self._names = _tl_names()

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "math":
            return self
        if name in self._names:
            return BUILTINS[self._names[name]]
        raise UnsupportedError(f"tl.{name}, which has no builtin with a known derivative")


class _Triton:
    def __init__(self, language: _Language):
        self.language = language


def _stand_in(value, language: _Language, active: tuple):
    if value is tl or value is getattr(tl, "math", None):
        return language
    if value is triton:
        return _Triton(language)
    if is_jit_function(value):
        return lambda *args: _call(value, args, active)
    if isinstance(value, tl.constexpr):
        return value.value
    return value


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _call(jit_fn, args: tuple, active: tuple = ()):
    """``jit_fn`` applied to traced ``args`` with its globals seen through the stand-ins."""
    py = jit_fn.fn
    if py in active:
        raise UnsupportedError(f"{py.__name__} calls itself")
    language = _Language()
    scope = {"__builtins__": py.__globals__.get("__builtins__", __builtins__)}
    for name in _names(py.__code__):
        if name in py.__globals__:
            scope[name] = _stand_in(py.__globals__[name], language, active + (py,))
    # a function defined inside another sees ``tl`` and its callees through its closure, not its globals
    closure = tuple(types.CellType(_stand_in(cell.cell_contents, language, active + (py,)))
                    for cell in py.__closure__ or ())
    body = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, closure or None)
    out = body(*args)
    if not isinstance(out, Traced):
        raise UnsupportedError(f"{py.__name__} returns {type(out).__name__}, not one value")
    return out


def body(ref: JitRef, arity: int) -> Function:
    """The body of the ``@triton.jit`` function ``ref`` on ``arity`` arguments, as builtins. Raises
    UnsupportedError naming the function and what in it has no known derivative."""
    return _body(ref, arity, globals_key([ref]))


@functools.lru_cache(maxsize=256)
def _body(ref: JitRef, arity: int, key) -> Function:
    name = ref.name
    try:
        out = _call(ref.fn, tuple(Traced(Arg(i)) for i in range(arity)))
    except (TricombError, TypeError, AttributeError, NameError, ValueError) as exc:
        reason = exc.message if isinstance(exc, TricombError) else f"{type(exc).__name__}: {exc}"
        if isinstance(exc, AttributeError) and getattr(exc, "obj", None) is not None and \
                type(exc.obj).__name__ == "Traced":  # (a method of a value: x.to(...), x.dtype)
            reason = f"it calls the method or reads the attribute .{exc.name} of a value, which is not a builtin"
        raise UnsupportedError(
            f"no gradient through the @triton.jit function {name}: its body could not be read as tricomb's "
            f"builtins ({reason}). Give it a derivative with @tc.vjp({name}), write it as a Python def over tc's "
            "builtins, or call the pipeline under torch.no_grad()") from None
    return Function(arity, (out.expr,), name)

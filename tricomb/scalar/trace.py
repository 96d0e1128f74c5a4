"""Turning what a user passes as a scalar function into a :class:`~tricomb.scalar.ir.Function`.

Builtins are table rows; Python lambdas and defs are traced by calling them on :class:`Traced` placeholders
whose operators build expressions; user ``@triton.jit`` functions become a :class:`JitCall` whose source
:mod:`tricomb.scalar.inline` copies into the emitted module.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import numbers
import operator
import sys

import torch

from ..errors import ArgumentError, ArityError, Location, TraceError, TricombError, caller_location
from .builtins import INDEX, PUBLIC, OpSpec
from .ir import Arg, Call, Const, Expr, Function, JitCall, JitRef
from .literals import NotExact, plain_number

_BOOL_MESSAGE = ("a traced value was used as a Python bool (in if, and, or, not, while, a comparison chain, or "
                 "Python's min/max); the value is not known until the kernel runs. Use tc.where(cond, a, b), "
                 "tc.logical_and/tc.logical_or, or tc.minimum/tc.maximum instead")

# Python operators with no builtin yet, and what to write instead
_NO_OPERATOR = {"//": "tc.floor(a / b) (for floats)", "%": "a - tc.floor(a / b) * b (for floats)",
                "~": "x == 0 (for bools), -1 - x (for integers)", "<<": "a * 2 ** n", ">>": "tc.floor(a / 2 ** n)"}


def _unsupported(symbol: str):
    def method(*_):
        raise TraceError(f"the operator {symbol} has no tricomb builtin yet; write {_NO_OPERATOR[symbol]}",
                         caller_location())
    return method


class Traced:
    """A placeholder for a scalar value while a Python function is traced. Operators build expressions."""

    __slots__ = ("expr",)
    __hash__ = None  # == builds an expression, so a Traced cannot be a dict key

    def __init__(self, expr: Expr):
        self.expr = expr

    def __bool__(self):
        raise TraceError(_BOOL_MESSAGE, caller_location())

    def __float__(self):
        raise TraceError("a traced value was converted with float() or a math-module function; "
                         "use tricomb's builtins (tc.exp, tc.sqrt, ...) inside scalar functions", caller_location())

    __int__ = __index__ = __float__

    def __repr__(self) -> str:
        return f"Traced({self.expr!r})"

    # arithmetic
    def __add__(self, o): return _apply("add", self, o)
    def __radd__(self, o): return _apply("add", o, self)
    def __sub__(self, o): return _apply("sub", self, o)
    def __rsub__(self, o): return _apply("sub", o, self)
    def __mul__(self, o): return _apply("mul", self, o)
    def __rmul__(self, o): return _apply("mul", o, self)
    def __truediv__(self, o): return _apply("div", self, o)
    def __rtruediv__(self, o): return _apply("div", o, self)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return _apply("pow", o, self)
    def __neg__(self): return _apply("neg", self)
    def __pos__(self): return self
    def __abs__(self): return _apply("abs", self)

    __floordiv__ = __rfloordiv__ = _unsupported("//")
    __mod__ = __rmod__ = _unsupported("%")
    def __and__(self, o): return _apply("bitwise_and", self, o)
    def __rand__(self, o): return _apply("bitwise_and", o, self)
    def __or__(self, o): return _apply("bitwise_or", self, o)
    def __ror__(self, o): return _apply("bitwise_or", o, self)
    def __xor__(self, o): return _apply("bitwise_xor", self, o)
    def __rxor__(self, o): return _apply("bitwise_xor", o, self)
    __invert__ = _unsupported("~")
    __lshift__ = __rlshift__ = _unsupported("<<")
    __rshift__ = __rrshift__ = _unsupported(">>")

    # comparisons
    def __lt__(self, o): return _apply("lt", self, o)
    def __le__(self, o): return _apply("le", self, o)
    def __gt__(self, o): return _apply("gt", self, o)
    def __ge__(self, o): return _apply("ge", self, o)
    def __eq__(self, o): return _apply("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return _apply("ne", self, o)  # type: ignore[override]


def to_expr(value) -> Expr:
    """``value`` as an expression: a :class:`Traced` value's own, or a Python number of any type as a
    :class:`Const` of its plain value (:func:`plain_number`). Raises :class:`TraceError` for anything else."""
    if isinstance(value, Traced):
        return value.expr
    numpy = sys.modules.get("numpy")  # (numpy's bool is not a numbers.Real; it exists once numpy is imported)
    if isinstance(value, (bool, numbers.Real)) or numpy is not None and isinstance(value, numpy.bool_):
        try:
            return Const(plain_number(value))
        except NotExact as exc:
            raise TraceError(f"a scalar function used {exc}; write the float (or int) you mean",
                             caller_location()) from None
    if isinstance(value, (tuple, list)):
        raise TraceError(f"a scalar function used a {type(value).__name__} of {len(value)} where one value was "
                         "expected: a field is one number, and only a function's result may be a tuple of fields",
                         caller_location())
    raise TraceError(f"a scalar function used a {type(value).__name__} ({value!r}) where a number or traced value "
                     "was expected; only Python numbers and the function's own arguments can appear in it",
                     caller_location())


def power(base, exponent) -> "Traced":
    """``base ** exponent`` as torch.pow: a number exponent of 2 or 3 is computed by multiplying, as torch's
    kernels do (a float one makes an integer base a float first, as torch's does). Any other exponent stays a
    ``pow``; one of 0.5 or -0.5, a number, is rendered by the op table's ``by_number`` (sqrt or rsqrt, which
    differ from C's pow at -0.0 and -inf, for every dtype torch takes them for)."""
    value = to_expr(exponent).value if isinstance(exponent, numbers.Real) else None
    if not (isinstance(base, Traced) and type(value) in (int, float) and value in (2.0, 3.0)):
        return _apply("pow", base, exponent)
    base = base * 1.0 if not isinstance(value, int) else base
    return _apply("square", base) if value == 2.0 else _apply("mul", _apply("square", base), base)


_FOLDED = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}
_FOLDING = contextvars.ContextVar("tricomb_folding_constants", default=False)


@contextlib.contextmanager
def constants_folded():
    """Within the block, a builtin applied to Python numbers alone is one constant (:func:`_folded`): for
    derivative rules, whose terms of constant operands (``b - 1``, ``log(a)``) torch's own formulas compute in
    double precision. A user's function is traced as written, each builtin computed by the kernel."""
    token = _FOLDING.set(True)
    try:
        yield
    finally:
        _FOLDING.reset(token)


def _apply(op: str, *args) -> Traced:
    exprs = tuple(to_expr(a) for a in args)
    folded = _folded(op, exprs) if _FOLDING.get() else None
    return Traced(folded if folded is not None else Call(op, exprs))


def _folded(op: str, exprs: tuple) -> Const | None:
    """``op`` of Python numbers alone as Python computes it: + - * / of ints and floats by Python's own
    arithmetic (exact integers, or doubles); another builtin of floats, or of ints where torch gives a float
    (``log(2)``, as torch's formulas take a number's logarithm in double), by torch's function in float64. None
    (the builtin stays in the kernel) for anything else: bools, a division by zero, an integer past int64,
    another builtin of an int (``abs(-3)`` is an int), pow (torch computes a power of a number by other
    kernels), a result that is not a float."""
    if op not in PUBLIC or not exprs or not all(isinstance(e, Const) and type(e.value) in (int, float) for e in exprs):
        return None
    values = [e.value for e in exprs]
    if op in _FOLDED:
        if op == "div" and values[1] == 0:
            return None
        value = _FOLDED[op](*values)
        return Const(value) if type(value) is float or -2**63 <= value < 2**63 else None
    if op == "pow":
        return None
    if not all(type(v) is float for v in values) and not PUBLIC[op].torch(*map(torch.tensor, values)).is_floating_point():
        return None
    value = PUBLIC[op].torch(*(torch.tensor(v, dtype=torch.float64) for v in values))
    return Const(value.item()) if isinstance(value, torch.Tensor) and value.dtype == torch.float64 else None


class Builtin:
    """A builtin scalar function (``tc.exp``, ``tc.add``, ...): callable inside traced functions, and usable
    directly as a map function, zip_with function or reduce/scan operator."""

    __slots__ = ("spec",)

    def __init__(self, spec: OpSpec):
        self.spec = spec

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args):
        if len(args) != self.spec.arity:
            raise ArityError(f"tc.{self.name} takes {self.spec.arity} argument(s), got {len(args)}",
                             caller_location())
        return power(*args) if self.name == "pow" else _apply(self.name, *args)

    def __repr__(self) -> str:
        return f"tc.{self.name}"

    def __rshift__(self, other):
        raise ArgumentError(f"tc.{self.name} is a scalar function, not a stage; compose stages: "
                           f"tc.map(tc.{self.name}) >> ...", caller_location())

    __rrshift__ = __rshift__

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        return f"tc.{self.name}: {self.spec.doc} ({self.spec.arity} argument(s))."


class Index(Builtin):
    """``tc.index(axis)``: the element's coordinate along ``axis`` (an int, negative from the end) of the shape
    the function's arguments broadcast to, an int64; usable in any map or zip_with function (a causal mask is
    ``where(index(-1) <= index(-2), v, -inf)``), not in a reduce or scan operator, whose operands are
    accumulated values. Raises ArgumentError for an axis that is not an int."""

    __slots__ = ()

    def __call__(self, *args):
        if len(args) != 1 or type(args[0]) is not int:
            got = ", ".join("a traced value" if isinstance(a, Traced) else repr(a) for a in args) or "nothing"
            raise ArgumentError(f"tc.index takes one axis, an int such as -1 (got {got}); it reads the element's "
                                "coordinate, not a value", caller_location())
        return _apply("index", args[0])


BUILTINS: dict[str, Builtin] = {name: Builtin(spec) for name, spec in PUBLIC.items()}
BUILTINS["index"] = Index(INDEX)


def is_jit_function(obj) -> bool:
    """True for a ``@triton.jit`` function, compiled or interpreted."""
    from triton.runtime.jit import JITFunction
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - older triton
        InterpretedFunction = JITFunction
    return isinstance(obj, (JITFunction, InterpretedFunction))


def to_function(fn, *, role: str, location: Location | None = None) -> Function:
    """The :class:`Function` for ``fn``: a Function, a builtin, a ``@triton.jit`` function or a Python callable.

    ``role`` names the stage argument in messages (for example ``"map's function"``).
    Raises :class:`TraceError` when ``fn`` is not callable or tracing it fails, :class:`ArityError` when its
    parameters cannot be counted.
    """
    if isinstance(fn, Function):
        return fn
    if isinstance(fn, Builtin):
        arity = fn.spec.arity
        return Function(arity, (Call(fn.name, tuple(Arg(i) for i in range(arity))),), fn.name, location)
    if is_jit_function(fn):
        return _from_jit(fn, role, location)
    if isinstance(getattr(fn, "operator", None), str) and getattr(fn, "__module__", "") == "tricomb.api":
        raise TraceError(f"tc.{fn.__name__} is a stage shorthand, not a scalar function; the operator it uses is "
                         f"tc.{fn.operator}", location)
    if hasattr(fn, "ir") and hasattr(fn, "source"):
        raise TraceError(f"{role} is the pipeline {fn}, not a scalar function; operators are tc.add, "
                         "tc.mul, tc.maximum, tc.minimum (tc.sum, tc.max, ... are whole stages)", location)
    if isinstance(fn, type):
        cast = {"float": "x * 1.0", "int": "a dtype= on the stage, or an integer input", "bool": "x != 0"}
        hint = f" (for {fn.__name__}(x) write {cast[fn.__name__]})" if fn.__name__ in cast else ""
        raise TraceError(f"{role} is the type {fn.__name__}, not a scalar function; pass a lambda over tricomb's "
                         f"builtins{hint}", location)
    if getattr(fn, "__module__", "") in ("torch", "torch.nn.functional") or type(fn).__name__ == "builtin_function_or_method":
        name = getattr(fn, "__name__", "")
        name = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "mul", "amax": "maximum",
                "amin": "minimum"}.get(name, name)
        hint = f"use tc.{name}" if name in BUILTINS else "use tricomb's builtins (docs/builtins.md)"
        raise TraceError(f"{role} is {fn!r}, a torch or Python function, not a scalar function; {hint}, or a "
                         "lambda over tricomb's builtins", location)
    if callable(fn):
        return _trace(fn, role, location)
    raise TraceError(f"{role} must be a builtin (tc.exp), a Python function or lambda, or a @triton.jit function; "
                     f"got {type(fn).__name__} {fn!r}", location)


def _positional_arity(fn, role: str, location: Location | None) -> int:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ArityError(f"cannot read the parameters of {role} {fn!r}: {exc}; pass a def or lambda", location)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    bad = [p.name for p in params if p.kind not in kinds]
    if bad:
        raise ArityError(f"{role} has parameters {bad} that are not plain positional ones (*args, **kwargs or "
                         "keyword-only); give it one named parameter per scalar input", location)
    return sum(1 for p in params if p.default is inspect.Parameter.empty)


def _function_location(fn) -> Location | None:
    """Where ``fn`` was written: its DSL text for a lambda parsed from text, else its code's file and line."""
    written = getattr(fn, "__tricomb_location__", None)
    if written is not None:
        return written
    code = getattr(fn, "__code__", None)
    return Location(code.co_filename, code.co_firstlineno) if code is not None else None


def _trace(fn, role: str, location: Location | None) -> Function:
    arity = _positional_arity(fn, role, location)
    name = getattr(fn, "__name__", "<lambda>")
    where = _function_location(fn) or location
    written = getattr(fn, "__tricomb_location__", None)
    try:
        with _jit_calls_traced():
            result = fn(*(Traced(Arg(i)) for i in range(arity)))
    except TricombError as exc:
        if written is not None and (exc.location is None or exc.location.file != written.file):
            raise type(exc)(exc.message, written) from None  # a lambda of DSL text: point at the text
        raise
    except Exception as exc:
        raise TraceError(f"tracing {role} {name!r} failed with {type(exc).__name__}: {exc}. Inside a scalar "
                         "function use Python operators and tricomb builtins (tc.exp, tc.where, ...) on its "
                         "arguments", where) from exc
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)  # a list of fields is a tuple
    if not results:
        raise TraceError(f"{role} {name!r} returned an empty tuple; return at least one value", where)
    try:
        outputs = tuple(to_expr(r) for r in results)
    except TraceError as exc:
        raise TraceError(f"{role} {name!r} returned something else: {exc.message}", where) from None
    return Function(arity, outputs, name, where)


def jit_call(fn, args: tuple, kwargs: dict | None = None) -> Traced:
    """``fn(*args, **kwargs)`` inside a traced scalar function, for a ``@triton.jit`` function ``fn``: the call,
    copied into the kernel with ``fn``; parameters left out take their defaults (numbers). Raises
    :class:`ArityError` for arguments that do not fit its parameters."""
    name = fn.fn.__name__
    _from_jit(fn, f"@triton.jit function {name!r}", caller_location())
    signature = inspect.signature(fn.fn)
    try:
        bound = signature.bind(*args, **(kwargs or {}))
    except TypeError as exc:
        raise ArityError(f"@triton.jit function {name!r} takes ({', '.join(signature.parameters)}): {exc}",
                         caller_location()) from None
    bound.apply_defaults()
    return Traced(JitCall(JitRef(fn), tuple(to_expr(a) for a in bound.args)))


def jit_call_method(self, *args, **kwargs) -> Traced:
    return jit_call(self, args, kwargs)


@contextlib.contextmanager
def _jit_calls_traced():
    """While a Python function is traced, a call of a ``@triton.jit`` function becomes a :func:`jit_call`
    (outside a kernel, Triton would refuse it)."""
    from triton.runtime.jit import JITFunction
    from triton.runtime.interpreter import InterpretedFunction
    real = {cls: cls.__call__ for cls in (JITFunction, InterpretedFunction)}
    for cls in real:
        cls.__call__ = jit_call_method
    try:
        yield
    finally:
        for cls, call in real.items():
            cls.__call__ = call


def _from_jit(fn, role: str, location: Location | None) -> Function:
    from triton.language import constexpr
    params = list(inspect.signature(fn.fn).parameters.values())
    constexprs = [p.name for p in params if p.annotation is constexpr or p.annotation == "tl.constexpr"]
    if constexprs:
        raise ArityError(f"{role} {fn.fn.__name__!r} has tl.constexpr parameters {constexprs}; a scalar function "
                         "takes only values. Make them module-level tl.constexpr constants instead",
                         _function_location(fn.fn) or location)
    arity = _positional_arity(fn.fn, role, location)
    ref = JitRef(fn)
    from .inline import inline_jit_functions
    inline_jit_functions([ref], set())  # copied once now, so what it cannot do is refused when the stage is built
    return Function(arity, (JitCall(ref, tuple(Arg(i) for i in range(arity))),), ref.name,
                    _function_location(fn.fn) or location)

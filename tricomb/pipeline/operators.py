"""Reduce and scan operators that are not builtins: their laws, checked on samples, and their meaning in torch.

A user operator is a scalar function of two arguments (a Python lambda or def over builtins, or a
``@triton.jit`` function) with an ``identity=``; an operator on k-tuples takes 2k arguments (the left tuple's
fields, then the right's), returns k values and has a k-tuple identity. Values below are lists of k tensors.

Before any plan uses it, :func:`check_laws` evaluates it with torch on a seeded sample built where operators
break: each dtype's extremes and large magnitudes, the values next to every constant the operator holds (``c``,
``c +- 1``, the floats either side of ``c``, ``2c``, ``c / 2``, ``-c``, ``1 / c``, ...), its identity and the
identity's infinities, small integers (ties), and random values of several scales (:mod:`.samples` draws them
and evaluates the operator on them); in float64 and in float32,
the dtypes a float stream is combined in (in int64 for an operator torch evaluates on integers alone, as truth
values for a field whose identity is a bool). An operator that is not associative is refused (a kernel combines
in a tree, so the order of combination is not the sequential one), and whether it commutes decides whether a
reduce may combine lanes out of order.

Float rounding alone never trips the check, and it needs no tolerance chosen in advance: each sample is also
evaluated twice with the result of every rounding operation moved by a few ulp (all upward; with alternating
signs), and a difference between two results counts only where it exceeds several times what those moves changed
them by (plus two ulp of the results). A threshold, a saturation or a wrong constant moves a result by far more
than rounding can, while cancellation, which makes rounding matter, shows in the moves too. An element where an
operation overflows (finite operands, an infinite result) is not compared: there the grouping decides, as for
torch's own sums.

An identity checked on one dtype may hold only there: ``2**31 - 1`` is a minimum's identity for int32 values,
``finfo(float32).max`` for float32 ones. Building a stage accepts an identity that holds in some dtype, and planning
the stage for its values checks the operator and its identity in their dtypes (``check_laws(..., dtypes=...)``,
from :func:`tricomb.pipeline.verify.check_in_dtypes`). A builtin operator given an ``identity=`` is not sampled: the
identity must be the builtin's own, exactly, in the values' dtype. tricomb's own operators (:mod:`tricomb.library`)
declare their laws instead (:func:`declare_laws`).

The torch meaning of a reduce or scan with a user operator is the sequential fold, in the combined dtype.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import math
import threading
from dataclasses import dataclass

import torch

from ..errors import ArgumentError, LawError
from ..scalar.builtins import OPS, OpSpec
from ..scalar.dtypes import compute_dtype, typed_identity
from ..scalar.ir import Arg, Call, Const, Function, JitCall, JitRef, as_expr, fold, rebuilt, substitute, walk
from ..scalar.literals import NotExact, number_key, plain_number
from .samples import Run, Sample, Unevaluable, combine, differs, draw_sample, given, user_sample

_SEED = 20261129
_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_FLOATS = (torch.float64, torch.float32)


@dataclass(frozen=True)
class Laws:
    """What the sample showed: associativity holds (else :func:`check_laws` raises), and whether it commutes."""

    associative: bool
    commutative: bool


_DECLARED: dict[tuple[Function, object], Laws] = {}


def declare_laws(fn: Function, identity, laws: Laws) -> None:
    """Register the laws of one of tricomb's own operators with its identity, proven rather than sampled
    (:mod:`tricomb.library`); :func:`declared_laws` gives them back for that operator and identity only."""
    _DECLARED[fn, identity] = laws


def declared_laws(fn: Function, identity) -> Laws | None:
    return _DECLARED.get((fn, identity))


_SHARES: dict[tuple[Function, Function, object], Function] = {}


def declare_share(lift: Function, op: Function, identity, share: Function) -> None:
    """Register one of tricomb's own reduce operators as an online normalizer's pair, which a kernel may fold a
    whole tile at a time. The burden of proof is the library's: ``op``'s field 0 is the larger of the two field
    0s; where those are equal, its field 1 is the sum of the two field 1s; and ``share(m, x)`` is field 1 of
    ``op(m, 0, lift(x)...)`` for ``x <= m`` (what ``x`` adds at the maximum ``m``), NaN exactly when ``x`` or ``m``
    is. A reduce of ``op`` with ``identity`` right after a map of ``lift`` then takes in each tile in two passes
    over registers: ``M``, its largest element, then ``S``, the sum of ``share(M, x)`` (``M`` made NaN where
    ``S`` is); ``(M, S)`` joins the accumulator by ``op``, which still merges programs. One exp per element,
    where lifting each element and combining pairs costs two (Milakov and Gimelshein, "Online normalizer
    calculation for softmax", 2018)."""
    _SHARES[lift, op, identity] = share


def declared_share(lift: Function, op: Function, identity) -> Function | None:
    return _SHARES.get((lift, op, identity))


def derived_share(lift: Function, op: Function, identity) -> Function | None:
    """The share of a user's online normalizer's pair (:func:`declare_share`), derived where it can be shown
    to be one, else None. The caller has shown that ``op`` is associative and commutes. Here: ``lift(x)`` is
    ``(x, c(x))``; ``op``'s field 0 is the builtin ``maximum`` of the field 0s; ``identity`` is ``(-inf, 0)``;
    where the field 0s are equal, field 1 is the sum of the field 1s, exactly, on a grid of values (every
    number of the grid as the maximum, infinities included, and field 1s with NaN and infinities, in float64
    and float32); and the share ``op(m, 0, x, c(x))[1]``, the expression itself, is NaN where ``x`` is. For
    ``x <= m`` field 0 of ``op(m, 0, lift(x))`` is then ``m`` and its field 1 the share, and folding a tile's
    shares at its maximum equals folding the tile by ``op``."""
    if not _normalizer_shape(lift, op, identity):
        return None
    return _checked_share(lift, op)


def _normalizer_shape(lift: Function, op: Function, identity) -> bool:
    maxima = (Call("maximum", (Arg(0), Arg(2))), Call("maximum", (Arg(2), Arg(0))))
    return (lift.arity == 1 and len(lift.outputs) == 2 and lift.outputs[0] == Arg(0) and op.arity == 4
            and len(op.outputs) == 2 and op.outputs[0] in maxima and isinstance(identity, tuple)
            and len(identity) == 2 and identity[0] == -math.inf and identity[1] == 0)


_MAXIMA = (-math.inf, -1e30, -80.0, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 80.0, 1e30, math.inf)
_FIELDS = (0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-3, 7.0, 1e30, -1e30, math.inf, -math.inf, math.nan)


def _at_maximum(expr) -> object:
    """``expr``, a function of ``m`` (``Arg(0)``) and ``x`` (``Arg(1)``), simplified where ``m`` is a number no
    smaller than ``x``, as a kernel calls a share: ``maximum(m, x)`` is ``m``, ``m == m`` holds, a ``where`` on a
    truth it knows is that branch, and ``0.0 + y`` is ``y``. (So the user's ``s1 * exp(m1 - m)`` for the empty
    side, times its 0, is not computed: one exponential per element, as the declared share has.)"""
    m = Arg(0)

    def rule(node, operands):
        args = tuple(as_expr(o) for o in operands)
        if isinstance(node, Call) and node.op == "maximum" and m in args:
            return m
        if isinstance(node, Call) and node.op == "eq" and args == (m, m):
            return Const(True)
        if isinstance(node, Call) and node.op == "where" and isinstance(args[0], Const) and args[0].value is True:
            return args[1]
        if isinstance(node, Call) and node.op == "add" and isinstance(args[0], Const) and args[0].value == 0:
            return args[1]
        return rebuilt(node, list(args))
    return as_expr(fold(Function(2, (expr,)), [Arg(0), Arg(1)], rule)[0])


@functools.lru_cache(maxsize=64)
def _checked_share(lift: Function, op: Function) -> Function | None:
    c = substitute(Function(1, lift.outputs[1:]), [Arg(1)])[0]
    full = substitute(Function(4, op.outputs[1:]), [Arg(0), Const(0.0), Arg(1), c])[0]
    share = Function(2, (_at_maximum(full),), f"share of {op.name}")
    grid = torch.tensor(_MAXIMA, dtype=torch.float64)
    m, x = (t.reshape(-1) for t in torch.meshgrid(grid, grid, indexing="ij"))
    m, x = m[x <= m], x[x <= m]
    try:
        if not torch.equal(_apply(share, [m], [x])[0], _apply(Function(2, (full,)), [m], [x])[0]):
            return None
    except LawError:
        return None
    for dtype in (torch.float64, torch.float32):
        m, a, b = torch.meshgrid(torch.tensor(_MAXIMA, dtype=dtype), torch.tensor(_FIELDS, dtype=dtype),
                                 torch.tensor(_FIELDS, dtype=dtype), indexing="ij")
        try:
            field0, field1 = _apply(op, [m, a], [m, b])
            at_nan = _apply(share, [torch.tensor(_MAXIMA, dtype=dtype)], [torch.full((len(_MAXIMA),), math.nan,
                                                                                       dtype=dtype)])[0]
        except LawError:
            return None
        added = a + b
        if not (torch.equal(field0, m) and bool(((field1 == added) | (field1.isnan() & added.isnan())).all())
                and bool(at_nan.isnan().all())):
            return None
    return share


def _apply(fn: Function, a: list, b: list) -> list[torch.Tensor]:
    from .evaluate import evaluate_function
    try:
        return evaluate_function(fn, [*a, *b])
    except (RuntimeError, TypeError) as exc:
        kinds = ", ".join(str(t.dtype)[6:] for t in [*a, *b])
        raise LawError(f"operator {fn.name!r} cannot be evaluated by torch on ({kinds}) values: {exc}",
                       fn.location) from None


def normalized_identity(identity, location=None):
    """An operator's ``identity=`` checked and made plain: None, a number, or a tuple of numbers (one per field of
    an operator on tuples; a list is taken as a tuple, a 1-tuple as its value). Each number becomes the plain
    Python ``bool``, ``int`` or ``float`` it equals (an IntEnum, a numpy scalar, a float subclass: nothing of the
    caller's own type reaches generated code; bool stays bool). Raises :class:`ArgumentError` for anything else,
    and for a number that no Python int or float represents exactly (``Fraction(1, 3)``, a long double)."""
    if identity is None:
        return None
    if isinstance(identity, (tuple, list)) and identity:
        values = tuple(_plain_number(v, identity, location) for v in identity)
        return values[0] if len(values) == 1 else values
    return _plain_number(identity, identity, location)


def _plain_number(value, identity, location):
    """``value`` as the plain bool, int or float it equals (see :func:`normalized_identity`)."""
    try:
        plain = plain_number(value)
    except NotExact as exc:
        raise ArgumentError(f"identity= holds {exc}; give the float or int you mean", location) from None
    except TypeError:
        raise ArgumentError(f"identity= must be a Python number (the e with e op x == x), or a tuple of numbers for "
                            f"an operator on tuples; got {identity!r}", location) from None
    return _within_floats(plain, location) if type(plain) is int else plain


def _within_floats(value: int, location) -> int:
    """An int identity no dtype holds (past float64's range) is refused: torch could not fill a tensor with it."""
    if abs(value) >= 2 ** 1024:
        raise ArgumentError(f"identity= holds {value}, which is beyond every dtype's range; give an int within int64 "
                            "or a float", location)
    return value


def identities(identity) -> tuple:
    """An ``identity=`` as a tuple of one value per field (a plain number is the identity of one field)."""
    return identity if isinstance(identity, tuple) else (identity,)


def identity_key(identity) -> tuple | None:
    """A key telling identities apart where ``==`` does not: ``0``, ``0.0``, ``-0.0`` and ``False`` differ (a
    bool field is sampled as truth values, an int identity may hold in one dtype only)."""
    return None if identity is None else tuple(number_key(v) for v in identities(identity))


def builtin_parts(op: Function) -> tuple[OpSpec, ...] | None:
    """For an operator on k-tuples that applies a builtin operator to each field on its own (field j of the
    result is ``op_j(left_j, right_j)``, as :func:`tricomb.fanout` builds; one field: the builtin itself): those
    builtins; else None."""
    k = len(op.outputs)
    if op.arity != 2 * k:
        return None
    parts = []
    for j, out in enumerate(op.outputs):
        spec = OPS.get(out.op) if isinstance(out, Call) else None
        if spec is None or spec.identity is None or not (
                out.args == (Arg(j), Arg(k + j)) or (spec.commutative and out.args == (Arg(k + j), Arg(j)))):
            return None
        parts.append(spec)
    return tuple(parts)


def fits(value, dtype: torch.dtype) -> bool:
    """Whether planning takes an identity's field ``value`` for values of ``dtype`` (it refuses a bool for other
    values and an integer outside an integer dtype's range, with a DTypeError; an infinity stands for an integer
    dtype's extreme)."""
    if isinstance(value, bool):
        return dtype == torch.bool
    if dtype == torch.bool or dtype.is_floating_point or math.isinf(value):
        return True
    info = torch.iinfo(dtype)
    return not math.isnan(value) and info.min <= int(value) <= info.max


def candidates(value) -> tuple[torch.dtype, ...]:
    """The dtypes an identity's field may be meant for, by its Python type: a bool's, bool; a float's, the floats
    (``-inf`` is no integer); an int's, any (``-128`` is int8's lowest value, ``1`` is True)."""
    if isinstance(value, bool):
        return (torch.bool,)
    return _FLOATS if isinstance(value, float) else (*_FLOATS, *_INTEGERS, torch.bool)


def _exact(value, dtype: torch.dtype) -> bool:
    """Whether ``value`` is a value of ``dtype`` as it stands, not rounded or cut to one (``0.5`` is no integer,
    ``2`` no bool; an infinity stands for an integer dtype's extreme)."""
    if dtype.is_floating_point:
        return isinstance(value, float) or float(value) == value
    if dtype == torch.bool:
        return isinstance(value, bool) or math.isinf(value) or value in (0, 1)
    return math.isinf(value) or value == int(value)


def _builtin_identity_in(spec: OpSpec, value, dtype: torch.dtype) -> bool:
    """Whether ``value`` (which fits ``dtype``) is the builtin's identity as a value of ``dtype``: the same float,
    zero's sign included; the same bits of an integer (``255`` is ``bitwise_and``'s ``-1`` for uint8)."""
    if not _exact(value, dtype):
        return False
    want = typed_identity(spec.identity, dtype)
    if dtype.is_floating_point:
        return value == want and math.copysign(1.0, value) == math.copysign(1.0, want)
    if dtype == torch.bool:
        return typed_identity(value, dtype) == want
    return (typed_identity(value, dtype) - want) % 2 ** torch.iinfo(dtype).bits == 0


def _builtin_identity_text(spec: OpSpec, dtype: torch.dtype | None) -> str:
    """What the builtin's identity is, in ``dtype`` or in every dtype."""
    if dtype is not None:
        return repr(typed_identity(spec.identity, dtype))
    want = spec.identity
    if math.isinf(want):
        return f"{want!r} (for integers the dtype's {'lowest' if want < 0 else 'highest'} value, for bools {want > 0})"
    every = "-1 (all bits set" if want == -1 else f"{int(want)} (or {want!r}"
    return f"{every}; {typed_identity(want, torch.bool)} for bools)"


def _check_builtin_identity(parts: tuple[OpSpec, ...], identity, dtypes, name: str, location) -> None:
    """A builtin operator (or one per field) given ``identity=``: each field's value must be the builtin's identity
    in every one of ``dtypes`` (None: in some dtype the value fits; planning checks the values' own). Raises
    :class:`LawError` naming the identity it must be."""
    for j, (spec, value) in enumerate(zip(parts, identities(identity))):
        meant = [dtypes[j]] if dtypes is not None else candidates(value)
        held = [_builtin_identity_in(spec, value, d) for d in meant if fits(value, d)]
        if held and (any(held) if dtypes is None else all(held)):
            continue
        where = f" for {str(dtypes[j])[6:]} values" if dtypes is not None else ""
        field = f" (field {j})" if len(parts) > 1 else ""
        raise LawError(f"identity={value!r}{field} is not an identity of {spec.name}{where}: {spec.name}'s identity is "
                       f"{_builtin_identity_text(spec, dtypes[j] if dtypes is not None else None)}. A reduce or scan "
                       "pads its tiles and starts its accumulators with the identity, so any other value changes the "
                       f"result; give {spec.name}'s own, or leave identity= out (it is then used)", location)


def check_laws(op, identity=None, name: str | None = None, location=None, *, dtypes=None, samples=None) -> Laws:
    """Check that ``op`` is associative and find whether it commutes; with ``identity``, check that
    ``identity op x == x == x op identity`` and ``identity op identity == identity`` (lanes past the end of a tile
    hold the identity). Returns the :class:`Laws` found.

    ``op`` is anything ``reduce`` accepts as an operator: a function of 2 values, or of 2k values for an operator
    on k-tuples (the left tuple's fields, then the right one's, returning k values; then ``identity`` is a
    k-tuple). ``name`` names it in messages; ``location`` is where errors point.

    By default the check is the one building a stage runs: on tricomb's seeded sample (extremes, values next to
    the operator's constants, ..., see the module docstring) in float64 and float32, or in int64 for an operator
    torch evaluates on integers alone; a field whose identity is a bool is sampled as truth values. An identity
    passes there when it holds in some dtype (``2**31 - 1`` for a minimum: int32), because running the stage
    checks it again in the values' dtype.

    ``dtypes``: a torch dtype, or one per field: check in those dtypes instead, as a kernel for such values
    combines them (float16 and bfloat16 in float32), the identity as a value of each; it must hold there.
    ``samples``: a tensor, or a sequence of k tensors (the fields, broadcast together): check on your own values
    instead, on triples of positions (all of them for up to 12 values), in the dtypes a kernel computes them in
    (or in ``dtypes``). A check on samples proves nothing about values it did not see (docs/numerics.md).

    A builtin operator (``tc.maximum``, ``lambda a, b: a + b``, or a builtin on each field) is not sampled: its
    identity must be the builtin's own, exactly (``-inf`` for ``maximum``, an integer dtype's lowest value for its
    values), in ``dtypes`` when given.

    Raises :class:`LawError` when ``(a op b) op c`` and ``a op (b op c)`` differ by more than rounding explains,
    naming a counterexample (and pointing at the tuple, linear recurrence, form for ``alpha * a + b``), when
    ``identity`` is not one, when torch cannot evaluate the operator on the values, or when the operator's
    arity is not twice its number of results; :class:`ArgumentError` when ``identity`` is not a number or a
    tuple of numbers, or does not fit ``dtypes``, and for malformed ``dtypes`` or ``samples``.
    """
    from ..scalar.trace import to_function
    identity = normalized_identity(identity, location)
    fn = op if isinstance(op, Function) else to_function(op, role="the operator", location=location)
    name = name or fn.name
    _check_shape(fn, identity, name, location)
    width = len(fn.outputs)
    dtypes = _dtypes_argument(dtypes, width, location)
    parts = builtin_parts(fn)
    if parts is not None:
        if samples is not None:  # (a builtin's laws are known; its samples are still checked to be samples)
            user_sample(samples, dtypes, width, location, torch.Generator())
        if identity is not None:
            _check_fit(identity, dtypes, location)
            _check_builtin_identity(parts, identity, dtypes, name, location)
        return Laws(True, all(p.commutative for p in parts))
    ids = identities(identity) if identity is not None else None
    gen = torch.Generator().manual_seed(_SEED)
    with _one_thread():
        try:
            if samples is None and dtypes is None:
                return _laws_by_default(fn, ids, name, location, gen)
            sample = user_sample(samples, dtypes, width, location, gen) if samples is not None else \
                draw_sample(dtypes, _constants(fn), ids, gen)
            _check_fit(identity, sample.dtypes, location)
            commutes, problem = _check_sample(fn, sample, ids, name, location, gen)
        except Unevaluable as exc:
            raise LawError(str(exc), location) from None
    if problem is not None:
        raise LawError(problem, location)
    return Laws(True, commutes)


_THREADS = {"checks": 0, "caller's": 1}  # checks running now, and the thread count before the first of them
_THREADS_GUARD = threading.Lock()  # (held for the bookkeeping alone, never while a check runs)


@contextlib.contextmanager
def _one_thread():
    """Run a check's torch operations on one thread. Its tensors hold a few thousand elements, where torch's
    vectorized math (exp, log1p, ...) already splits work over threads, and a second core a busy machine hands
    over late costs ~10 ms an operation, 50 times the operation. Checks running at once share the window; the
    last to end restores the caller's count."""
    with _THREADS_GUARD:
        if _THREADS["checks"] == 0:
            _THREADS["caller's"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _THREADS["checks"] += 1
    try:
        yield
    finally:
        with _THREADS_GUARD:
            _THREADS["checks"] -= 1
            if _THREADS["checks"] == 0:
                torch.set_num_threads(_THREADS["caller's"])


def _check_shape(fn: Function, identity, name: str, location) -> None:
    width = len(fn.outputs)
    if fn.arity != 2 * width:
        raise LawError(f"operator {name!r} takes {fn.arity} arguments and returns {width} value(s); an operator "
                       "combines two k-tuples into one: 2k arguments (the left fields, then the right ones) and k "
                       "results", location)
    if identity is not None and len(identities(identity)) != width:
        raise LawError(f"identity={identity!r} has {len(identities(identity))} field(s) but operator {name!r} "
                       f"combines {width}-tuples; give one value per field", location)


def _dtypes_argument(dtypes, width: int, location) -> tuple[torch.dtype, ...] | None:
    """``dtypes=`` as the compute dtype of each of ``width`` fields (one dtype stands for every field)."""
    if dtypes is None:
        return None
    listed = list(dtypes) if isinstance(dtypes, (tuple, list)) else [dtypes]
    named = [getattr(torch, d, None) if isinstance(d, str) else d for d in listed * (width if len(listed) == 1 else 1)]
    known = (torch.float16, torch.bfloat16, *_FLOATS, *_INTEGERS, torch.bool)
    if len(named) != width or not all(d in known for d in named):
        raise ArgumentError(f"dtypes= must be a torch dtype (or its name), or a sequence of {width}, one per field; "
                            f"of {', '.join(str(d)[6:] for d in known)}; got {dtypes!r}", location)
    return tuple(compute_dtype(d) for d in named)


def _check_fit(identity, dtypes, location) -> None:
    for value, dtype in zip(identities(identity) if identity is not None and dtypes else (), dtypes or ()):
        if not fits(value, dtype):
            raise ArgumentError(f"identity={identity!r} holds {value!r}, which is not a value of {str(dtype)[6:]}; "
                                "give a bool for bool values alone, and an integer within an integer dtype's range",
                                location)


def _laws_by_default(fn: Function, ids, name: str, location, gen: torch.Generator) -> Laws:
    """The check building a stage runs (see :func:`check_laws`)."""
    width = len(fn.outputs)
    bools = [isinstance(e, bool) for e in ids] if ids is not None else [False] * width
    constants = _constants(fn)

    def typed(dtype):
        return tuple(torch.bool if b else dtype for b in bools)

    try:
        results = [_check_sample(fn, draw_sample(typed(d), constants, ids, gen), ids, name, location, gen)
                   for d in _FLOATS]
        base = torch.float64
    except Unevaluable as exc:
        if ids is not None and not all(fits(e, d) and _exact(e, d) for e, d in zip(ids, typed(torch.int64))):
            raise LawError(str(exc), location) from None  # (a fraction makes it a float operator)
        results = [_check_sample(fn, draw_sample(typed(torch.int64), constants, ids, gen), ids, name, location, gen)]
        base = torch.int64
    problems = [problem for _, problem in results]
    if ids is not None and None not in problems and not any(
            _identity_holds(fn, ids, dtypes, constants, gen) for dtypes in _other_dtypes(ids, typed(base))):
        raise LawError(problems[0], location)
    return Laws(True, all(commutes for commutes, _ in results))


def _other_dtypes(ids, checked: tuple[torch.dtype, ...]) -> list[tuple[torch.dtype, ...]]:
    """The integer and bool dtypes an identity may hold in besides ``checked`` (one per field): each field that
    may be meant for them (:func:`candidates`) in turn takes every one its value fits exactly; the others stay."""
    others = [tuple(d if d in candidates(e) and fits(e, d) and _exact(e, d) else c for e, c in zip(ids, checked))
              for d in (*_INTEGERS, torch.bool)]
    return [dtypes for dtypes in dict.fromkeys(others) if dtypes != checked]


def _check_sample(fn: Function, sample: Sample, ids, name: str, location, gen) -> tuple[bool, str | None]:
    """Associativity on ``sample`` (a :class:`LawError` when it fails), whether ``fn`` commutes there, and what is
    wrong with the identity ``ids`` there (None: nothing, or no identity)."""
    a, b, c = given(sample.a), given(sample.b), given(sample.c)
    pairs = [(a, b), (b, c), (b, a)] + (_identity_pairs(sample, ids) if ids is not None else [])
    first = combine(fn, pairs, gen)
    ab, bc, ba = first[:3]
    left, right = combine(fn, [(ab, c), (a, bc)], gen)
    i = _first(differs(left, right))
    if i is not None:
        raise LawError(
            f"operator {name!r} is not associative: with a={_text(a.values, i)}, b={_text(b.values, i)}, "
            f"c={_text(c.values, i)}, (a op b) op c = {_text(left.values, i)} but a op (b op c) = "
            f"{_text(right.values, i)}{_in(sample.dtypes)}. A reduce or scan combines in a tree, so its operator "
            f"must be associative{_law_hint(fn)}", location)
    commutes = _first(differs(ab, ba)) is None
    return commutes, (_identity_problem(first[3:], pairs[3][1], pairs[5][0], ids, sample.dtypes, name)
                      if ids is not None else None)


def _identity_pairs(sample: Sample, ids) -> list[tuple[Run, Run]]:
    """``(e, x)``, ``(x, e)`` and ``(e, e)``: the identity ``e`` beside every operand of the identity's check."""
    e = [torch.full_like(t, typed_identity(v, t.dtype)) for v, t in zip(ids, sample.x)]
    x, each, once = given(sample.x), given(e), given([t[:1] for t in e])
    return [(each, x), (x, each), (once, once)]


def _identity_holds(fn: Function, ids, dtypes, constants, gen) -> bool:
    sample = draw_sample(dtypes, constants, ids, gen)
    pairs = _identity_pairs(sample, ids)
    try:
        results = combine(fn, pairs, gen)
    except Unevaluable:
        return False
    return _identity_problem(results, pairs[0][1], pairs[2][0], ids, dtypes, "") is None


def _identity_problem(results: list[Run], x: Run, e: Run, ids, dtypes, name: str) -> str | None:
    """What is wrong with the identity, given ``e op x``, ``x op e`` and ``e op e`` (``results``); None: nothing."""
    ex, xe, ee = results
    shown = ids[0] if len(ids) == 1 else ids
    what = f"identity={shown!r} is not an identity of operator {name!r}{_in(dtypes)}"
    if _first(differs(ee, e)) is not None:
        return (f"{what}: {shown!r} op {shown!r} = {_text(ee.values, 0)}, not {shown!r}; masked lanes combine the "
                "identity with itself, so the operator must give it back (guard the formula with tc.where), or "
                "leave identity= out: tricomb then pads with a validity flag")
    for got, side in ((ex, "e op x"), (xe, "x op e")):
        i = _first(differs(got, x))
        if i is not None:
            return (f"{what}: with x={_text(x.values, i)}, {side} = {_text(got.values, i)}, not x. Give the value e "
                    "with e op x == x op e == x (0 for a sum, 1 for a product, -inf for a maximum), or leave "
                    "identity= out: tricomb then pads with a validity flag")
    return None


def _law_hint(fn: Function) -> str:
    """What to write instead: a one-field operator that multiplies and adds looks like a recurrence step; sub,
    div and pow look like a difference, a ratio or an average."""
    ops = {e.op for out in fn.outputs for e in walk(out) if isinstance(e, Call)}
    if fn.arity == 2 and {"mul", "add"} <= ops:
        return (". A linear recurrence h = alpha * h + x is associative as an operator on pairs (value, decay): "
                "(v1, d1), (v2, d2) -> (v1 * d2 + v2, d1 * d2); tc.library.linear_recurrence() is that scan")
    if ops & {"sub", "div", "pow"}:
        return ("; sub, div and pow are not (a mean is the mean shorthand; a difference or ratio of neighbours is "
                "not a reduce)")
    return ""


def _constants(fn: Function) -> list[float]:
    """The numbers written in the operator: its constants, and those in the source of the ``@triton.jit``
    functions it calls (their callees' and the globals they read included). Bools are not numbers here."""
    nodes = [e for out in fn.outputs for e in walk(out)]
    found = [e.value for e in nodes if isinstance(e, Const) and not isinstance(e.value, bool)]
    jits = list(dict.fromkeys(e.fn for e in nodes if isinstance(e, JitCall)))
    found += _jit_constants(jits) if jits else []
    return [v for v in found if isinstance(v, float) or abs(v) < 2 ** 1023]  # (an int past every dtype: none)


def _jit_constants(refs: list[JitRef]) -> list[float]:
    from ..errors import InlineError
    from ..scalar.inline import inline_jit_functions
    try:
        code = inline_jit_functions(refs, set())
    except InlineError:
        return []  # (its stage refuses it with this error when the kernel is emitted)
    return [node.value for text in code.definitions + code.constants for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and type(node.value) in (int, float)]


def _first(bad: torch.Tensor) -> int | None:
    return int(bad.nonzero()[0]) if bool(bad.any()) else None


def _number(v, dtype: torch.dtype) -> str:
    if isinstance(v, float) and dtype == torch.float32 and math.isfinite(v):
        text = f"{v:.9g}"  # (float32's shortest digits that give it back, at most 9)
        return text + ".0" if text.lstrip("-").isdigit() else text
    return repr(v)


def _text(values: list[torch.Tensor], i: int) -> str:
    items = [_number(t[i].item(), t.dtype) for t in values]
    return items[0] if len(items) == 1 else f"({', '.join(items)})"


def _in(dtypes: tuple[torch.dtype, ...]) -> str:
    """The dtypes of a sample, for a message (float64, the default's first, says nothing)."""
    shown = [str(d)[6:] for d in dtypes if d != torch.bool]
    return "" if all(d == "float64" for d in shown) else f" (computed in {', '.join(dict.fromkeys(shown))})"


def fold_reduce(fn: Function, identity, xs: list, dims: tuple[int, ...]) -> list[torch.Tensor]:
    """The sequential fold of ``fn`` over ``dims`` of the fields ``xs`` (in row-major order), starting from
    ``identity``, or from the first element for an operator without one (which cannot reduce nothing: a
    RuntimeError, as torch.amax of nothing)."""
    kept = [d for d in range(xs[0].dim()) if d not in dims]
    count = math.prod(xs[0].shape[d] for d in dims)
    rows = [x.permute(*kept, *dims).reshape(*(x.shape[d] for d in kept), count) for x in xs]
    if identity is None and count == 0 and rows[0].numel() == 0 and rows[0].shape[:-1].numel() > 0:
        raise RuntimeError(f"operator {fn.name!r} has no identity, so it cannot reduce 0 elements; give it "
                           "identity= or reduce a non-empty axis")
    start = identities(identity) if identity is not None else (0,) * len(xs)
    acc = [torch.full(r.shape[:-1], typed_identity(v, r.dtype), dtype=r.dtype, device=r.device)
           for v, r in zip(start, rows)]
    if xs[0].device.type == "meta":
        return _apply(fn, acc, acc)
    first = 0
    if identity is None and count:
        acc, first = [r[..., 0] for r in rows], 1
    for k in range(first, count):
        acc = _apply(fn, acc, [r[..., k] for r in rows])
    return acc


def fold_scan(fn: Function, identity, xs: list, axis: int) -> list[torch.Tensor]:
    """The inclusive sequential scan of ``fn`` along ``axis`` of the fields ``xs``: from ``identity`` when the
    operator has one (the first element is ``identity op x0``, as the kernel computes it: a linear recurrence's
    first value is ``d0 * 0 + v0``, NaN for a NaN decay), else from the first element itself."""
    if xs[0].device.type == "meta" or xs[0].shape[axis] == 0:
        return _apply(fn, xs, xs)
    firsts = [x.select(axis, 0) for x in xs]
    if identity is not None:
        starts = [torch.full_like(f, typed_identity(v, f.dtype)) for v, f in zip(identities(identity), firsts)]
        firsts = _apply(fn, starts, firsts)
    outs = [firsts]
    for k in range(1, xs[0].shape[axis]):
        outs.append(_apply(fn, outs[-1], [x.select(axis, k) for x in xs]))
    return [torch.stack([o[j] for o in outs], axis) for j in range(len(xs))]

"""Reduce and scan operators that are not builtins: their laws, checked on samples, and their meaning in torch.

A user operator is a scalar function of two arguments (a Python lambda or def over builtins, or a
``@triton.jit`` function) with an ``identity=``; an operator on k-tuples takes 2k arguments (the left tuple's
fields, then the right's), returns k values and has a k-tuple identity. Values below are lists of k tensors.
Before any plan uses it, :func:`check_laws` evaluates it with torch on a seeded random sample of floats and of
small integers (bools for a field whose identity is a bool): an operator that is clearly not associative is
refused (a kernel combines in a tree, so the order of combination is not the sequential one), and whether it
commutes decides whether a reduce may combine lanes out of order (else it combines them in order). Float rounding
alone never trips the check: results are compared with a tolerance of 1e-6 relative to their size, in float64.
tricomb's own operators (:mod:`tricomb.library`) declare their laws instead (:func:`declare_laws`).

The torch meaning of a reduce or scan with a user operator is the sequential fold, in the combined dtype.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentError, LawError
from ..scalar.dtypes import typed_identity
from ..scalar.ir import Call, Function, walk

_SAMPLE = 64
_TOLERANCE = 1e-6


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


def _apply(fn: Function, a: list, b: list) -> list[torch.Tensor]:
    from .evaluate import evaluate_function
    try:
        return evaluate_function(fn, [*a, *b])
    except (RuntimeError, TypeError) as exc:
        kinds = ", ".join(str(t.dtype)[6:] for t in [*a, *b])
        raise LawError(f"operator {fn.name!r} cannot be evaluated by torch on ({kinds}) values: {exc}",
                       fn.location) from None


def normalized_identity(identity, location=None):
    """An operator's ``identity=`` checked: None, a Python number, or a tuple of them (one per field of an
    operator on tuples; a list is taken as a tuple, a 1-tuple as its value). Raises :class:`ArgumentError`
    otherwise."""
    if identity is None or isinstance(identity, (bool, int, float)):
        return identity
    listed = isinstance(identity, (tuple, list))
    if listed and identity and all(isinstance(v, (bool, int, float)) for v in identity):
        return identity[0] if len(identity) == 1 else tuple(identity)
    raise ArgumentError(f"identity= must be a Python number (the e with e op x == x), or a tuple of numbers for an "
                        f"operator on tuples; got {identity!r}", location)


def identities(identity) -> tuple:
    """An ``identity=`` as a tuple of one value per field (a plain number is the identity of one field)."""
    return identity if isinstance(identity, tuple) else (identity,)


def _differ(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Where two results differ beyond float rounding (NaN equal to NaN; exact for integers)."""
    if not (x.is_floating_point() or y.is_floating_point()):
        return x != y
    x, y = x.double(), y.double()
    both_nan = torch.isnan(x) & torch.isnan(y)
    scale = torch.maximum(x.abs(), y.abs()).nan_to_num(0.0, 0.0, 0.0).clamp_min(1.0)
    same = (x == y) | ((x - y).abs() <= _TOLERANCE * scale)
    return ~(same | both_nan)


def _samples(width: int, bools: tuple[bool, ...] = ()) -> list[tuple[list, list, list]]:
    """Floats near 0 and of magnitudes up to 1e3 (a saturating operator shows itself only past its threshold),
    and small integers: three operands of ``width`` fields each. A field whose identity is a bool (``bools``)
    holds random bools instead: its operator works on truth values."""
    gen = torch.Generator().manual_seed(20261129)
    scale = torch.tensor([2.0, 30.0, 1000.0], dtype=torch.float64).repeat_interleave(_SAMPLE // 2)
    bools = bools or (False,) * width

    def truth(n):
        return torch.rand(n, generator=gen) < 0.5

    def floats():
        return [truth(scale.numel()) if b else
                (torch.rand(scale.numel(), generator=gen, dtype=torch.float64) * 2 - 1) * scale for b in bools]

    def ints():
        return [truth(_SAMPLE) if b else torch.randint(-5, 6, (_SAMPLE,), generator=gen) for b in bools]

    return [(floats(), floats(), floats()), (ints(), ints(), ints())]


def _number(v) -> str:
    text = f"{v:.6g}"
    return text + ".0" if isinstance(v, float) and text.lstrip("-").isdigit() else text


def _text(values: list, i: int) -> str:
    items = [_number(t[i].item()) for t in values]
    return items[0] if len(items) == 1 else f"({', '.join(items)})"


def _first_difference(x: list, y: list):
    """The first sample position where two k-field results differ, or None."""
    bad = functools.reduce(torch.logical_or, [_differ(a, b) for a, b in zip(x, y)])
    return int(bad.nonzero()[0]) if bool(bad.any()) else None


def check_laws(op, identity=None, name: str | None = None, location=None) -> Laws:
    """Check an operator's associativity (and find its commutativity) on a seeded sample; with ``identity``,
    check that ``identity op x == x == x op identity`` too. An operator on k-tuples (2k arguments, k results,
    a k-tuple identity) is checked field by field.

    ``op`` is anything ``reduce`` accepts as an operator. One that torch cannot evaluate on floats (a bitwise
    operator) is checked on the integer sample alone, unless its identity is not a whole number. Raises :class:`LawError` when ``(a op b) op c`` and
    ``a op (b op c)`` differ on the sample, naming a counterexample (the message points at the tuple, linear
    recurrence, form for the common case ``alpha * a + b``), when ``identity`` is not one, or when the
    operator's arity is not twice its number of results, and :class:`ArgumentError` when ``identity`` is not a
    number or a tuple of numbers.
    """
    from ..scalar.trace import to_function
    identity = normalized_identity(identity, location)
    fn = op if isinstance(op, Function) else to_function(op, role="the operator", location=location)
    width = len(fn.outputs)
    if fn.arity != 2 * width:
        raise LawError(f"operator {name or fn.name!r} takes {fn.arity} arguments and returns {width} value(s); an "
                       "operator combines two k-tuples into one: 2k arguments (the left fields, then the right "
                       "ones) and k results", location)
    if identity is not None and len(identities(identity)) != width:
        raise LawError(f"identity={identity!r} has {len(identities(identity))} field(s) but operator "
                       f"{name or fn.name!r} combines {width}-tuples; give one value per field", location)
    commutative = True
    bools = tuple(isinstance(v, bool) for v in identities(identity)) if identity is not None else ()
    integral = identity is None or _integral(identities(identity))
    for k, (a, b, c) in enumerate(_samples(width, bools)):
        try:
            left = _apply(fn, _apply(fn, a, b), c)
        except LawError:
            if k == 0 and integral:
                continue  # an operator on integers alone (bitwise): the integer sample checks it
            raise
        right = _apply(fn, a, _apply(fn, b, c))
        i = _first_difference(left, right)
        if i is not None:
            raise LawError(
                f"operator {name or fn.name!r} is not associative: with a={_text(a, i)}, b={_text(b, i)}, "
                f"c={_text(c, i)}, (a op b) op c = {_text(left, i)} but a op (b op c) = {_text(right, i)}. A "
                f"reduce or scan combines in a tree, so its operator must be associative{_law_hint(fn)}", location)
        commutative = commutative and _first_difference(_apply(fn, a, b), _apply(fn, b, a)) is None
        floats = any(t.is_floating_point() for t in a)  # the float sample (bool fields hold truth values)
        if identity is not None and (floats or integral):
            _check_identity(fn, identities(identity), a, name, location)
    return Laws(True, commutative)


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


def _integral(values: tuple) -> bool:
    """Whether an identity also fits the integer sample: whole numbers within int64 (a float such as
    finfo(float32).max is a float-only identity), or infinities (an integer dtype's extremes)."""
    return all(isinstance(v, bool) or (isinstance(v, (int, float)) and (
        abs(v) == float("inf") or (float(v).is_integer() and abs(v) < 2**62))) for v in values)


def _check_identity(fn: Function, identity: tuple, a: list, name, location) -> None:
    """``e op x == x op e == x`` on the sample, and ``e op e == e`` (lanes past the end of a tile hold e)."""
    shown = identity[0] if len(identity) == 1 else identity
    e = [torch.full_like(t, typed_identity(v, t.dtype)) for v, t in zip(identity, a)]
    if _first_difference(_apply(fn, e, e), e) is not None:
        raise LawError(f"identity={shown!r} is not an identity of operator {name or fn.name!r}: {shown!r} op "
                       f"{shown!r} = {_text(_apply(fn, e, e), 0)}, not {shown!r}; masked lanes combine the identity with itself, so the "
                       "operator must give it back (guard the formula with tc.where), or leave identity= out: "
                       "tricomb then pads with a validity flag", location)
    for left, right in ((e, a), (a, e)):
        got = _apply(fn, left, right)
        i = _first_difference(got, a)
        if i is not None:
            raise LawError(f"identity={shown!r} is not an identity of operator {name or fn.name!r}: with "
                           f"x={_text(a, i)}, {'e op x' if left is e else 'x op e'} = {_text(got, i)}, not x. Give "
                           "the value e with e op x == x op e == x (0 for a sum, 1 for a product, -inf for a "
                           "maximum), or leave identity= out: tricomb then pads with a validity flag", location)


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

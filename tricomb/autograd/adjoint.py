"""Gradients of a reduce or a scan by any associative operator, on single values or k-tuples: the adjoint method.

A scan is the recurrence ``y[j] = op(y[j-1], x[j])`` (``y[-1]`` the identity) over the stream's k-tuples. Its
adjoint runs the other way round::

    lam[j] = g[j] + M[j+1] lam[j+1]        dx[j] = B[j]^T lam[j]

with ``g`` the cotangent of ``y``, ``M[j][a][b] = d op_b / d y_a`` and ``B[j] = d op / d x``, both at
``(y[j-1], x[j])``. That is a linear recurrence on k-vectors with k x k coefficients, so it is a scan too, of
the affine maps ``v -> M v + b``, which compose associatively (G. E. Blelloch, "Prefix sums and their
applications", 1990, section 1.4). Indexed by the element whose Jacobian it holds, ``mu[j] = M[j] lam[j]``
is the exclusive reverse scan of ``v -> M[j] v + M[j] g[j]``, and ``lam[j] = g[j] + mu[j+1]``; an exclusive
forward scan (``y[j] = op(y[j-1], x[j-1])``) has ``lam`` itself as the exclusive reverse scan of
``v -> M[j] v + g[j]``. So the backward of a scan is one kernel of the Jacobians, the reverse affine scan and
the pullback of ``dx`` through the maps before, each element reading ``y[j-1]`` as the forward's result one step
back (a :class:`~tricomb.pipeline.ir.Lag`), or, where the result does not hold it exactly, from one kernel before
it that recomputes the exclusive scan.
Only the entries of ``M`` that can be nonzero are scanned: the structural zeros of the Jacobian (a pullback
reaches no entry it does not depend on), closed under products, and only the fields a cotangent reaches. The
linear recurrence's state is then one decay and one value, its closed form (a reverse recurrence with the
decays shifted by one).

A reduce ``r = L[j] op x[j] op R[j]``, with ``L`` the exclusive prefix and ``R`` the exclusive suffix, gives
``dx[j]`` as the pullback of that expression in ``x[j]``: an exclusive forward scan, then one kernel of the
exclusive reverse scan and the pullback. A product's gradient is then the product of the other elements, with
zeros as torch handles them (no division), and a reduce over several axes runs along one axis of the rows
they make, in the row-major order a reduce combines them.

An operator without an identity gets a validity flag for these scans: ``(False, ...)`` is the identity of the
flagged operator, and where the flag is False (the first element) the step is the element itself.

cummax and cummin are a scan by ``maximum``/``minimum`` whose step takes the new element on ties (and at NaN),
as torch's indices do: their Jacobian is the 0/1 of that choice, so the gradient goes to the index each running
value came from, as torch's scatter does.

What is saved: the inputs and the result; the stream and the Jacobians are recomputed, and so is a reduce's
exclusive prefix and a scan's where its result does not hold it.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple, Sequence

import torch

from ..pipeline.ir import Lag, Map, PipelineIR, Reduce, Scan, ZipWith
from ..pipeline.operators import Laws, declare_laws, declared_laws, identities
from ..pipeline.verify import iteration_axes, operator_identity, operator_spec
from ..scalar.builtins import convert_op
from ..scalar.derivatives import ZERO, differentiable, is_zero, pulled
from ..scalar.dtypes import compute_dtype, typed_identity
from ..scalar.ir import Arg, Call, Const, Expr, Function, substitute, walk
from .gather import Run, after_fold, gather, summed_to
from .parts import Parts, jit_key


def _where(c: Expr, a: Expr, b: Expr) -> Expr:
    return Call("where", (c, a, b))


def _sum(terms: Sequence[Expr]) -> Expr:
    out = None
    for t in terms:
        out = t if out is None else Call("add", (out, t))
    return ZERO if out is None else out


def _mul(a: Expr, b: Expr) -> Expr:
    return Call("mul", (a, b))


def associative(op: Function, identity) -> Function:
    """``op`` with its laws declared (associative, not known to commute): a derived operator is associative
    because the forward one is, so its laws are not checked again on samples."""
    if declared_laws(op, identity) is None:
        declare_laws(op, identity, Laws(True, False))
    return op


def flagged(op: Function, k: int) -> Function:
    """``op`` on k-tuples with a validity flag in front: ``(v1, a) . (v2, b)`` is ``a . b`` where both are
    valid, else the valid one; ``(False, ...)`` is its identity."""
    v1, a, v2, b = Arg(0), [Arg(1 + i) for i in range(k)], Arg(k + 1), [Arg(k + 2 + i) for i in range(k)]
    both = substitute(op, a + b)
    fields = [_where(v1, _where(v2, both[i], a[i]), b[i]) for i in range(k)]
    return Function(2 * k + 2, (Call("logical_or", (v1, v2)), *fields), f"flagged_{op.name.strip('<>')}")


def swapped(op: Function, k: int) -> Function:
    """``op`` with its operands swapped: a reverse scan of it combines ``x[j] . (x[j+1] . ...)``, the suffix in
    the forward order a non-commutative operator needs."""
    return Function(2 * k, tuple(substitute(op, [Arg(k + i) for i in range(k)] + [Arg(i) for i in range(k)])),
                    f"swapped_{op.name.strip('<>')}")


def _typed_zero(dtype: torch.dtype):
    return False if dtype == torch.bool else 0.0 if dtype.is_floating_point else 0


def prefix_scan(stream: list[Expr], arity: int, op: Function, identity, dtypes, axis: int, reverse: bool
                ) -> PipelineIR:
    """The exclusive scan of the stream (expressions over ``arity`` inputs) by ``op``: the operator's identity
    first, or, for one without, a validity flag (False first) in front of the fields."""
    k = len(stream)
    if identity is None:
        stream = [Call("logical_or", (Call("eq", (stream[0], stream[0])), Call("ne", (stream[0], stream[0]))))] \
            + stream
        op, identity = flagged(op, k), (False, *(_typed_zero(d) for d in dtypes))
    first = Function(arity, tuple(stream), "recompute")  # (named as explain() shows it: the fold's operands again)
    scan = Scan(associative(op, identity), axis, None, reverse, True, identity)
    return PipelineIR((ZipWith(first) if arity > 1 else Map(first), scan))


def step(op: Function, prev: list[Expr], x: list[Expr], valid: Expr | None, select: str | None) -> list[Expr]:
    """One step of the recurrence, ``op(prev, x)``, as the kernel combines it: ``x`` itself where ``valid`` is
    False; for cummax/cummin (``select``), the choice between ``prev`` and ``x`` that torch's indices make.
    Where ``valid`` is False, ``prev`` (a placeholder) reads as ``x``, so the branch not taken stays as finite
    as the operator on the stream's own values (its gradient, multiplied by zero, must not be NaN)."""
    if valid is not None:
        prev = [_where(valid, p, e) for p, e in zip(prev, x)]
    if select is not None:
        (p,), (e,) = prev, x
        takes = Call("ge" if select == "maximum" else "le", (e, p))
        out = [_where(Call("logical_or", (takes, Call("ne", (e, e)))), e, p)]
    else:
        out = substitute(op, prev + x)
    if valid is not None:
        out = [_where(valid, o, e) for o, e in zip(out, x)]
    return out


class Affine:
    """The scan of affine maps ``v -> M v + b`` on the fields ``live`` of a k-vector, with ``M``'s entries in
    ``pattern`` (closed under products, the diagonal in it) and the rest zero. A state is those entries then
    the vector's; ``combine(left, right)`` is ``right`` after ``left`` (left first in scan order)."""

    def __init__(self, live: tuple[int, ...], pattern: frozenset[tuple[int, int]]):
        self.live, self.entries = live, tuple(sorted(pattern))
        self.width = len(self.entries) + len(live)

    def _index(self, base: int) -> tuple[dict, dict]:
        m = {e: Arg(base + i) for i, e in enumerate(self.entries)}
        v = {a: Arg(base + len(self.entries) + i) for i, a in enumerate(self.live)}
        return m, v

    def operator(self) -> Function:
        (lm, lv), (rm, rv) = self._index(0), self._index(self.width)
        out = [_sum([_mul(rm[a, e], lm[e, c]) for e in self.live if (a, e) in rm and (e, c) in lm])
               for a, c in self.entries]
        out += [_sum([_mul(rm[a, c], lv[c]) for c in self.live if (a, c) in rm] + [rv[a]]) for a in self.live]
        return Function(2 * self.width, tuple(out), "affine")

    def identity(self) -> tuple:
        return tuple(1.0 if a == c else 0.0 for a, c in self.entries) + (0.0,) * len(self.live)

    def scan(self, axis: int, reverse: bool) -> Scan:
        identity = self.identity()
        return Scan(associative(self.operator(), identity), axis, None, reverse, True, identity)


def jacobian(outs: list[Expr], arity: int, positions: list[int], floats: tuple[int, ...]) -> dict:
    """``M[a, b] = d outs[b] / d (argument positions[a])`` for float fields a, b, leaving out structural zeros."""
    fn = Function(arity, tuple(outs), "step")
    m = {}
    for b in floats:
        seeds = tuple(Const(1.0) if j == b else None for j in range(len(outs)))
        column = pulled(fn, tuple(positions[a] for a in floats), seeds)
        m.update({(a, b): e for a, e in zip(floats, column) if not is_zero(e)})
    return m


def closure(m: dict, start: set[int], floats: tuple[int, ...]) -> tuple[tuple[int, ...], frozenset]:
    """The fields a cotangent on ``start`` reaches through ``M`` (``M[a, c]`` takes c to a), and the pattern of
    ``M``'s entries among them closed under products, with the diagonal."""
    live = set(start)
    while True:
        more = {a for (a, c) in m if c in live} - live
        if not more:
            break
        live |= more
    pattern = {(a, c) for (a, c) in m if a in live and c in live} | {(a, a) for a in live}
    while True:
        more = {(a, c) for (a, e) in pattern for (e2, c) in pattern if e == e2} - pattern
        if not more:
            break
        pattern |= more
    return tuple(sorted(live)), frozenset(pattern)


def stream_of(p: Parts, n: int, inputs: list[Expr]) -> list[Expr]:
    """The fold's stream as expressions of the early inputs ``inputs``, in the dtype the fold combines."""
    exprs = substitute(p.before_function(), inputs)
    if p.fold.dtype is not None:
        exprs = [Call(convert_op(p.fold.dtype), (e,)) for e in exprs]
    return exprs


def selects(fold: Scan) -> str | None:
    """``maximum`` or ``minimum`` for a cummax/cummin (with or without its indices), else None."""
    spec = operator_spec(fold.op)
    return spec.name if spec is not None and spec.name in ("maximum", "minimum") else None


def rows(tensors: Sequence[torch.Tensor], shape, axes: tuple[int, ...]):
    """The tensors as rows along their last axis, the reduced ``axes`` of ``shape`` joined in row-major order
    (as a reduce combines them), and the function taking a gradient of those rows back to ``shape``."""
    kept = [d for d in range(len(shape)) if d not in axes]
    perm = kept + list(axes)
    flat = [shape[d] for d in kept] + [math.prod(shape[d] for d in axes)]
    out = [t.expand(shape).permute(perm).reshape(flat) for t in tensors]
    inverse = [perm.index(d) for d in range(len(shape))]
    return out, lambda g: g.reshape([shape[d] for d in perm]).permute(inverse)


class _Layout:
    """Where a backward kernel's arguments are: the early inputs, the validity flag (an operator without an
    identity), the exclusive scan's fields, the cotangents of the fields in ``given``; from ``offset`` on."""

    def __init__(self, offset: int, n: int, k: int, flag: bool, given: tuple[int, ...]):
        self.inputs = [Arg(offset + i) for i in range(n)]
        at = offset + n
        self.valid = Arg(at) if flag else None
        at += flag
        self.prev = [Arg(at + a) for a in range(k)]
        self.g = {a: Arg(at + k + j) for j, a in enumerate(given)}
        self.end = at + k + len(given)

    def wanted(self, inputs: tuple[int, ...]) -> tuple[int, ...]:
        """The argument positions of the early ``inputs``."""
        return tuple(self.inputs[i].index for i in inputs)


class _Fold:
    """What both rules start from: the fold's result and its cotangents (the stages after it pulled back), the
    operator's k fields, the float ones, those a cotangent reaches (``given``), and whether the operator needs a
    validity flag (no identity)."""

    def __init__(self, p: Parts, inputs: tuple, result: tuple, grads, wanted: tuple[int, ...], run: Run):
        self.p, n = p, p.early
        self.early, late = list(inputs[:n]), inputs[n:]
        self.folded, self.cots, self.late_grads, self.computed = after_fold(p, tuple(self.early), late, result,
                                                                            grads, wanted, run)
        self.wanted = tuple(i for i in wanted if i < n)
        self.k = p.fold.op.arity // 2
        self.floats = tuple(a for a in range(self.k) if self.folded[a].is_floating_point())
        self.given = tuple(a for a in self.floats if self.cots[a] is not None)
        self.identity = operator_identity(p.fold)
        self.flag = self.identity is None

    def stream(self, inputs: list[Expr]) -> list[Expr]:
        return stream_of(self.p, self.p.early, inputs)

    def layout(self, offset: int) -> _Layout:
        return _Layout(offset, self.p.early, self.k, self.flag, self.given)

    def prefix(self, op: Function, axis: int, reverse: bool, arity: int | None = None) -> PipelineIR:
        """The exclusive scan by ``op`` of the stream, a pipeline of the early inputs (``arity`` inputs, the
        early ones first)."""
        dtypes = [t.dtype for t in self.folded[:self.k]]
        return prefix_scan(self.stream([Arg(i) for i in range(self.p.early)]), arity or self.p.early, op,
                           self.identity, dtypes, axis, reverse)


def _gradients(p: Parts, grads: tuple[Expr, ...], early: Sequence[torch.Tensor], early_wanted, tensors,
               stages: tuple, run: Run, lags: tuple = ()) -> list:
    """Run ``stages`` then a last zip_with of ``grads`` (one per input in ``early_wanted``; structural zeros
    give zeros and no field), each converted to its input's dtype unless it broadcasts (then summed first). The
    last zip_with takes ``tensors`` again, with ``lags``. A gradient that reads nothing of the stages' state (a
    tuple sum's field: its cotangent, of the reduced shape) is computed from ``tensors`` alone
    (:func:`~.gather.gather`), since a field after a fold has the stream's shape."""
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    width = len(stages[-1].op.outputs)
    fields, found, free = [], {}, {}
    for i, g in zip(early_wanted, grads):
        if is_zero(g):
            found[i] = torch.zeros_like(early[i])
        elif not lags and all(a.index >= width for a in walk(g) if isinstance(a, Arg)):
            free[i] = substitute(Function(width + len(tensors), (g,)), [ZERO] * width + [Arg(j) for j in
                                                                                    range(len(tensors))])[0]
        else:
            full = tuple(early[i].shape) == tuple(shape)
            fields.append((i, full, Call(convert_op(early[i].dtype), (g,)) if full else g))
    if free:
        fn = Function(len(tensors), tuple(free.values()), f"d_{p.fold.op.name.strip('<>')}")
        found.update(zip(free, gather(fn, tuple(early), tuple(tensors[len(early):]), tuple(free), run)))
    if fields:
        arity = width + len(tensors)
        last = ZipWith(Function(arity, tuple(e for _, _, e in fields), f"d_{p.fold.op.name.strip('<>')}"),
                       lags=lags)
        outs = run(PipelineIR(stages + (last,)), tuple(tensors) * 2)
        for (i, full, _), out in zip(fields, outs):
            found[i] = out if full else summed_to(out, early[i].shape, run).to(early[i].dtype)
    return [found[i] for i in early_wanted]


class _Adjoint:
    """What the two adjoint rules share: the operator must be differentiable, and a fold no cotangent reaches
    gives its early inputs zeros."""

    scans = True  # its backward kernels scan (the prefixes; the affine maps)

    @staticmethod
    def check(p: Parts) -> None:
        differentiable(p.fold.op)

    @staticmethod
    def unreached(f: _Fold) -> list:
        return [torch.zeros_like(f.early[i]) for i in f.wanted] + f.late_grads


class AdjointScan(_Adjoint):
    """A scan by any operator but add (cumsum has its closed form): one kernel of the Jacobians, the reverse scan
    of the affine maps and the pullback through the maps before, reading each element's exclusive prefix from the
    forward's saved result one step back (:func:`saved_prefix`), or, where the result does not hold it exactly,
    from a kernel that recomputes the prefix fields the backward reads."""

    @staticmethod
    def applies(p: Parts) -> bool:
        return isinstance(p.fold, Scan)

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads, wanted: tuple[int, ...], run: Run):
        f = _Fold(p, inputs, result, grads, wanted, run)
        if not f.given:
            return _Adjoint.unreached(f)
        early, cots = f.early, f.cots
        if f.folded[0].dim() == 0:  # a 0-d stream scans as one element
            early, cots = [t.reshape(1) for t in early], [None if g is None else g.reshape(1) for g in cots]
        kernel = scan_kernel(p, jit_key(p.pipeline), f.given, f.floats, f.wanted)
        prefix = _Prefix(f, kernel.reads, result)
        tensors = prefix.tensors(early, cots, run)
        elements = Function(len(tensors), renumbered(kernel.elements, 0, prefix.kept), "jacobians")
        grads_in = renumbered(kernel.pullback, kernel.width, prefix.kept)
        stages = (ZipWith(elements, lags=prefix.lags), kernel.scan)
        out = _gradients(p, grads_in, early, f.wanted, tensors, stages, run, prefix.lags)
        return [g.reshape(f.early[i].shape) for g, i in zip(out, f.wanted)] + f.late_grads


class ScanKernel(NamedTuple):
    """The symbolic part of a scan's backward kernel, in :class:`_Layout`'s arguments (every prefix field
    passed): the per-element Jacobians' live entries (``elements``), the reverse affine ``scan`` of them, whose
    state has ``width`` fields, and the ``pullback`` of the inputs wanted (of that state, then the layout's
    arguments again); ``reads``: the layout positions either one reads."""

    elements: Function
    scan: Scan
    width: int
    pullback: Function
    reads: frozenset[int]


@functools.lru_cache(maxsize=256)
def scan_kernel(p: Parts, key: tuple, given: tuple[int, ...], floats: tuple[int, ...],
                wanted: tuple[int, ...]) -> ScanKernel:
    """The symbolic part of the backward kernel of the scan ``p.fold`` (see the module's docstring), for
    cotangents on the fields ``given``, of the float fields ``floats``, for the early inputs ``wanted``: kept,
    since a training step takes the same backward every call, under ``key`` (:func:`~.parts.jit_key`: what
    besides the IR it is derived from)."""
    fold, k, flag = p.fold, p.fold.op.arity // 2, operator_identity(p.fold) is None

    def jacobians(at: _Layout):
        outs = step(fold.op, at.prev, stream_of(p, p.early, at.inputs), at.valid, selects(fold))
        return outs, jacobian(outs, at.end, [a.index for a in at.prev], floats)
    first = _Layout(0, p.early, k, flag, given)
    _, m = jacobians(first)
    affine = Affine(*closure(m, set(given), floats))
    if fold.exclusive:
        b = [first.g.get(a, ZERO) for a in affine.live]
    else:
        b = [_sum([_mul(m[a, c], first.g[c]) for c in given if (a, c) in m]) for a in affine.live]
    elements = Function(first.end, tuple(m.get(e, ZERO) for e in affine.entries) + tuple(b), "jacobians")
    last = _Layout(affine.width, p.early, k, flag, given)
    outs, _ = jacobians(last)
    mu = {a: Arg(len(affine.entries) + j) for j, a in enumerate(affine.live)}
    lam = tuple(_lam(a, last.g, mu, fold.exclusive) for a in range(k))
    pullback = Function(last.end, pulled(Function(last.end, tuple(outs), "step"), last.wanted(wanted), lam),
                        "pullback")
    return ScanKernel(elements, affine.scan(fold.axis, not fold.reverse), affine.width, pullback,
                      frozenset(_read(elements, 0) | _read(pullback, affine.width)))


@functools.lru_cache(maxsize=512)
def renumbered(fn: Function, offset: int, kept: tuple[int, ...]) -> tuple[Expr, ...]:
    """``fn``'s outputs with its arguments from ``offset`` on renumbered to those ``kept`` (positions counted
    from ``offset``), in their order."""
    args: list[Expr] = [Arg(i) for i in range(offset)]
    args += [Arg(offset + kept.index(i)) if i in kept else ZERO for i in range(fn.arity - offset)]
    return tuple(substitute(fn, args))


def _read(fn: Function, offset: int) -> set[int]:
    """The positions (counted from ``offset``) of the arguments ``fn`` reads."""
    return {a.index - offset for a in walk(*fn.outputs) if isinstance(a, Arg) and a.index >= offset}


class _Prefix:
    """Where a scan's backward kernel finds each element's exclusive prefix, the fields of the forward's state
    before the element, in the argument layout of :class:`_Layout` (the early inputs, the validity flag, the k
    prefix fields, the cotangents): only the flag and fields at the positions ``reads`` names are passed
    (``kept``: the layout positions passed), each the forward's result read one step back (``lags``,
    :func:`saved_prefix`) where every one of them is saved exactly, else the fields of one kernel recomputing
    the prefix."""

    def __init__(self, f: _Fold, reads: frozenset[int], result: tuple):
        n, self.f = f.p.early, f
        self.fields = [a for a in range(f.flag + f.k) if n + a in reads]  # (the flag, if any, is field 0)
        self.saved = None if f.flag else saved_prefix(f, self.fields, result)
        end = n + f.flag + f.k + len(f.given)
        self.kept = tuple(range(n)) + tuple(n + a for a in self.fields) + tuple(range(end - len(f.given), end))
        self.lags = () if not self.saved else tuple(
            Lag(n + j, f.p.fold.axis, by, fill) for j, (_, by, fill) in enumerate(self.saved) if by)

    def tensors(self, early: list, cots: list, run: Run) -> list:
        """The backward kernel's tensors: the early inputs, the prefix fields passed (recomputed by one kernel
        where they are not saved), the cotangents ``cots`` of the fields given (all of the stream's rank: a 0-d
        stream's as one element, since a 0-d tensor would not take part in the kernel's dtype promotion)."""
        if self.saved is not None:
            prefix = [t.reshape(early[0].shape) if t.dim() == 0 else t for t, _, _ in self.saved]
        elif self.fields:
            fold, width = self.f.p.fold, self.f.flag + self.f.k
            pipeline = self.f.prefix(fold.op, fold.axis, fold.reverse)
            if self.fields != list(range(width)):
                pipeline = PipelineIR(pipeline.stages + (Map(Function(width, tuple(Arg(a) for a in self.fields),
                                                                      "passed")),))
            prefix = run(pipeline, tuple(early))
        else:
            prefix = []
        return [*early, *prefix, *(cots[a] for a in self.f.given)]


def saved_prefix(f: _Fold, fields: list[int], result: tuple) -> list[tuple] | None:
    """Per prefix field in ``fields``, the tensor that holds the fold's field (its values, where the backward
    computed them already, else a result of the forward that is the field itself), the lag that reads it as
    the exclusive prefix (one step back in scan order; none for an exclusive scan, whose result is its prefix)
    and the operator's identity, which the first element reads; or None where a field is not held so, of the
    fold's shape, in the dtype its scan combines in (a half type's result is rounded)."""
    fold = f.p.fold
    after = None if f.computed else f.p.after_function()
    by = 0 if fold.exclusive else -1 if fold.reverse else 1
    found = []
    for a in fields:
        if after is None:
            t = f.folded[a]
        else:
            at = next((j for j, o in enumerate(after.outputs) if o == Arg(a)), None)
            if at is None:
                return None
            t = result[at]
        like = f.folded[a]
        if t.dtype != like.dtype or compute_dtype(t.dtype) != t.dtype or tuple(t.shape) != tuple(like.shape):
            return None
        found.append((t, by, typed_identity(identities(f.identity)[a], t.dtype)))
    return found


def _lam(a: int, g: dict, mu: dict, exclusive: bool) -> Expr | None:
    """The cotangent of ``y[j]``'s field ``a`` in the step that made it (see the module's docstring)."""
    terms = ([] if exclusive or a not in g else [g[a]]) + ([mu[a]] if a in mu else [])
    return _sum(terms) if terms else None


class AdjointReduce(_Adjoint):
    """A reduce by any operator without a closed form (prod, a user's, tuples): the exclusive prefix, then one
    kernel of the exclusive suffix and the pullback of ``prefix . x . suffix`` in each element."""

    @staticmethod
    def applies(p: Parts) -> bool:
        return isinstance(p.fold, Reduce) and not (p.fold.index or p.fold.skip_nan or p.fold.mean)

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads, wanted: tuple[int, ...], run: Run):
        f = _Fold(p, inputs, result, grads, wanted, run)
        if not f.given:
            return _Adjoint.unreached(f)
        fold, early = p.fold, f.early
        shape = torch.broadcast_shapes(*(t.shape for t in early))
        flat, cots, axis, back = _as_rows(early, f.cots, fold, shape)
        prefix = run(f.prefix(fold.op, axis, False), tuple(flat))
        tensors = [*flat, *prefix, *(cots[a] for a in f.given)]
        suffix = f.prefix(swapped(fold.op, f.k), axis, True, arity=len(tensors))
        at = f.layout(f.k + f.flag)
        with_x = step(fold.op, at.prev, f.stream(at.inputs), at.valid, None)
        after = [Arg(f.flag + a) for a in range(f.k)]
        if f.flag:  # the suffix is valid where its flag (field 0) is: the element's own values stand in elsewhere
            after = [_where(Arg(0), r, w) for r, w in zip(after, with_x)]
        total = substitute(fold.op, with_x + after)
        if f.flag:
            total = [_where(Arg(0), t, w) for t, w in zip(total, with_x)]
        seeds = tuple(at.g.get(a) for a in range(f.k))
        grads_in = pulled(Function(at.end, tuple(total), "reduced"), at.wanted(f.wanted), seeds)
        out = _gradients(p, grads_in, flat, f.wanted, tensors, suffix.stages, run)
        if back is not None:
            out = [summed_to(back(g), early[i].shape, run).to(early[i].dtype) for g, i in zip(out, f.wanted)]
        return out + f.late_grads


def _as_rows(early, cots, fold: Reduce, shape):
    """A reduce's early inputs and cotangents with one reduced axis: as they are (the cotangents with the axis
    kept) when it reduces one, else as the rows :func:`rows` makes (a 0-d stream is one row of one)."""
    axes = iteration_axes(fold, len(shape))
    if len(axes) == 1 and len(shape):
        cots = [None if g is None else _kept_dims(g, fold, axes) for g in cots]
        return early, cots, axes[0], None
    flat, back = rows(early, shape, axes)
    lead = flat[0].shape[:-1]
    cots = [None if g is None else g.reshape(*lead, 1) for g in cots]
    return flat, cots, len(lead), back


def _kept_dims(t: torch.Tensor, fold: Reduce, axes) -> torch.Tensor:
    if fold.keepdim:
        return t
    for d in sorted(axes):
        t = t.unsqueeze(d)
    return t

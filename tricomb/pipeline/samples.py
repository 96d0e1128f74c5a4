"""Where a law check looks, and how it tells a broken law from rounding (:func:`tricomb.pipeline.operators.
check_laws`).

:func:`draw_sample` draws the operands: values of each dtype where operators break (small integers, the
dtype's extremes, large magnitudes, the values next to every constant the operator holds and to its identity,
the identity's infinities) and random ones; :func:`user_sample` takes them from the user's own tensors.
:func:`combine` evaluates the operator on them three times, exactly and with every rounding operation's result
moved by a few eps, so that :func:`differs` counts two groupings as different only beyond what rounding can move
them; an operation that leaves the dtype's normal range is not judged (there the grouping decides the value).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentError
from ..scalar.builtins import OPS
from ..scalar.dtypes import compute_dtype, typed_identity
from ..scalar.ir import Arg, Call, Function, JitCall, fold

_POINTS = 2048  # triples (a, b, c) per dtype
_CHUNK = 32768  # elements per evaluation (what a check stacks stays small: see operators._one_thread)
_JITTER = 2.0  # a perturbed evaluation moves each rounding operation's result by this many eps of its dtype
_SLACK = 4.0  # a difference counts beyond this many times what the perturbed evaluations moved the results
_EXACT = frozenset({"where", "maximum", "minimum", "neg", "abs", "relu", "sign", "floor", "ceil"})  # never round


def _special(dtype: torch.dtype, constants: list[float], identity) -> torch.Tensor:
    """The values of ``dtype`` where operators break: small integers and fractions, large magnitudes and the
    dtype's extremes, the values next to each constant and to the identity (both signs of each), and the
    identity itself, infinities included (padding feeds them to the operator)."""
    if dtype == torch.bool:
        return torch.tensor([False, True])
    near = [0, 1, 2, 3, 5, 10, 1000] + [value for c in constants + ([identity] if identity is not None else [])
                                         if math.isfinite(c) for value in _around(c)]
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        far = [2 ** 7, 2 ** 8, 2 ** 15, 2 ** 16, 2 ** 31, 2 ** 32, 2 ** 62, info.max, info.max - 1, -info.min]
        whole = {int(math.floor(v)) for v in near + far for v in (v, -v) if math.isfinite(v)}
        whole |= {typed_identity(identity, dtype)} if identity is not None and not math.isnan(identity) else set()
        return torch.tensor(sorted(v for v in whole if info.min <= v <= info.max), dtype=dtype)
    info = torch.finfo(dtype)
    far = [0.5, 0.1, 1 / 3, 1e6, 2 ** 24, 2 ** 31, 2 ** 53, 1e15, 1e30, 1e100, 1e200, info.max, info.max / 2,
           math.sqrt(info.max), info.tiny, 1 / math.sqrt(info.max)]
    values = [v for v in near + far for v in (v, -v) if abs(v) <= info.max]
    values += [-0.0] + ([identity] if identity is not None and not math.isfinite(identity) else [])
    pool = torch.tensor(values, dtype=torch.float64).to(dtype)
    beside = torch.tensor([c for c in constants + ([identity] if identity is not None else [])
                           if math.isfinite(c) and abs(c) <= info.max], dtype=torch.float64).to(dtype)
    up, down = torch.full_like(beside, math.inf), torch.full_like(beside, -math.inf)
    return torch.cat([pool, torch.nextafter(beside, up), torch.nextafter(beside, down)])


def _around(c: float) -> list[float]:
    """Where an operator holding the constant ``c`` changes its behaviour: at ``c`` and either side of it, at
    sums of two values that reach it, and at ``1 / c`` (the zero of ``1 + c x``)."""
    return [c, c + 1, c - 1, 2 * c, c / 2, 0.75 * c, 1.5 * c] + ([1 / c] if c else [])


def _random(dtype: torch.dtype, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` random values of ``dtype``: floats uniform in (-s, s) for scales s from 1 to 1e6, a quarter of them
    small integers (ties); integers small, moderate or anywhere in the range; bools."""
    pick = torch.randint(0, 4, (n,), generator=gen)
    if dtype == torch.bool:
        return torch.rand(n, generator=gen) < 0.5
    small = torch.randint(-5, 6, (n,), generator=gen)
    if dtype.is_floating_point:
        scale = torch.tensor([1.0, 30.0, 1000.0, 1e6], dtype=torch.float64)[pick]
        uniform = (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * scale
        return torch.where(pick == 0, small.double(), uniform).to(dtype)
    info = torch.iinfo(dtype)
    moderate = torch.randint(-1000, 1001, (n,), generator=gen)
    anywhere = torch.randint(info.min, info.max, (n,), generator=gen, dtype=torch.int64)
    chosen = torch.where(pick < 2, small, torch.where(pick == 2, moderate, anywhere))
    return chosen.clamp(info.min, info.max).to(dtype)


@dataclass(frozen=True)
class Sample:
    """Operands of one check: ``a``, ``b``, ``c`` (k fields of one value per point each), and ``x``, the operands
    of the identity's check (every special value, then ``a``; of tricomb's sample, the finite ones: an operator's
    meaning on infinite data is its own, while padding feeds it the identity's infinities, which ``a``, ``b``,
    ``c`` hold), in ``dtypes`` (one per field)."""

    dtypes: tuple[torch.dtype, ...]
    a: list[torch.Tensor]
    b: list[torch.Tensor]
    c: list[torch.Tensor]
    x: list[torch.Tensor]


def draw_sample(dtypes: tuple[torch.dtype, ...], constants: list[float], ids, gen: torch.Generator) -> Sample:
    """``_POINTS`` points whose operands' fields are each a special value or a random one (half and half), those
    made of special values alone first (so that a counterexample shows the plainest values); the identity's check
    takes every special value and the first ``_POINTS // 4`` points' ``a``."""
    pools = [_special(d, constants, e) for d, e in zip(dtypes, ids or (None,) * len(dtypes))]
    fields, randoms = [], torch.zeros(3 * _POINTS, dtype=torch.long)
    for d, pool in zip(dtypes, pools):  # each field of a, b and c at once
        special = pool[torch.randint(0, len(pool), (3 * _POINTS,), generator=gen)]
        chosen = torch.rand(3 * _POINTS, generator=gen) < 0.5
        fields.append(torch.where(chosen, special, _random(d, 3 * _POINTS, gen)))
        randoms += ~chosen
    order = torch.sort(randoms.view(3, _POINTS).sum(0), stable=True).indices
    a, b, c = ([f.view(3, _POINTS)[k][order] for f in fields] for k in range(3))
    longest = max(len(p) for p in pools)
    x = [torch.cat([p.repeat(longest // len(p) + 1)[:longest], f[:_POINTS // 4]]) for p, f in zip(pools, a)]
    finite = functools.reduce(torch.logical_and, [torch.isfinite(f) for f in x])
    return Sample(dtypes, a, b, c, [f[finite] for f in x])


def user_sample(samples, dtypes, width: int, location, gen: torch.Generator) -> Sample:
    """Points drawn from the user's values: ``samples`` is a tensor, or a sequence of ``width`` tensors (the
    fields, broadcast together); each point takes every field at one position. Triples of positions are all of
    them for few values, else ``_POINTS`` random ones; the identity's check uses every value (``_POINTS`` random
    ones of many). Computed in ``dtypes``, else in the dtype a kernel computes each field's values in."""
    fields = list(samples) if isinstance(samples, (tuple, list)) else [samples]
    if len(fields) != width or not all(isinstance(t, torch.Tensor) for t in fields):
        raise ArgumentError(f"samples= must be a tensor for an operator on single values, or a sequence of {width} "
                            f"tensors, one per field of the operator's {width}-tuples; got {samples!r}", location)
    try:
        fields = [t.detach().to("cpu").reshape(-1) for t in torch.broadcast_tensors(*fields)]
    except RuntimeError as exc:
        raise ArgumentError(f"samples= fields must broadcast together, as a stream's fields do: {exc}",
                            location) from None
    n = fields[0].numel()
    if n == 0:
        raise ArgumentError("samples= holds no values; give at least one", location)
    dtypes = dtypes or tuple(compute_dtype(t.dtype) for t in fields)
    fields = [t.to(d) for t, d in zip(fields, dtypes)]
    if n ** 3 <= _POINTS:
        i, j, k = (p.reshape(-1) for p in torch.meshgrid(*[torch.arange(n)] * 3, indexing="ij"))
    else:
        i, j, k = (torch.randint(0, n, (_POINTS,), generator=gen) for _ in range(3))
    some = torch.arange(n) if n <= _POINTS else torch.randint(0, n, (_POINTS,), generator=gen)
    return Sample(dtypes, [f[i] for f in fields], [f[j] for f in fields], [f[k] for f in fields],
                   [f[some] for f in fields])


class Unevaluable(Exception):
    """torch cannot evaluate the operator on these dtypes (a bitwise operator on floats); the message says so."""


@dataclass(frozen=True)
class Run:
    """k fields of values computed three times: exactly, then twice with every rounding operation's result moved
    by ``_JITTER`` eps of its dtype (all upward; with signs alternating over the operations and random over the
    elements), so how far the moved ones land measures what rounding can change. ``out_of_range``: the elements
    where an operation on the way left the dtype's normal range, in any of the three (:func:`_left_range`)."""

    copies: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]
    out_of_range: torch.Tensor

    @property
    def values(self) -> list[torch.Tensor]:
        return self.copies[0]


def given(fields: list[torch.Tensor]) -> Run:
    """Operands, exact in every copy."""
    return Run((fields, fields, fields), torch.zeros(fields[0].shape[0], dtype=torch.bool))


def _node(expr, operands: list):
    """One operation of an operator, computed by torch (a ``@triton.jit`` function runs alone, as the torch meaning
    of a pipeline runs it)."""
    if isinstance(expr, JitCall):
        from .evaluate import evaluate_function
        alone = Function(len(operands), (JitCall(expr.fn, tuple(Arg(i) for i in range(len(operands)))),),
                         expr.fn.name)
        return evaluate_function(alone, list(operands))[0]
    if not any(isinstance(o, torch.Tensor) for o in operands):
        operands = [torch.tensor(operands[0]), *operands[1:]]
    return OPS[expr.op].torch(*operands)


def _magnitude(values: list) -> torch.Tensor:
    """The largest finite magnitude among tensors, elementwise."""
    sizes = [v.double().abs().nan_to_num(0.0, 0.0, 0.0) for v in values
             if isinstance(v, torch.Tensor) and v.dtype != torch.bool]
    return functools.reduce(torch.maximum, sizes)


def _evaluate(fn: Function, args: list[torch.Tensor], upward: torch.Tensor, alternating: torch.Tensor):
    """:func:`_evaluate_chunk` on at most ``_CHUNK`` elements at a time."""
    n = upward.shape[0]
    if n <= _CHUNK:
        return _evaluate_chunk(fn, args, upward, alternating)
    pieces = [_evaluate_chunk(fn, [a[i:i + _CHUNK] for a in args], upward[i:i + _CHUNK], alternating[i:i + _CHUNK])
              for i in range(0, n, _CHUNK)]
    outs = [torch.cat([piece[0][j] for piece in pieces]) for j in range(len(fn.outputs))]
    return outs, torch.cat([piece[1] for piece in pieces])


def _evaluate_chunk(fn: Function, args: list[torch.Tensor], upward: torch.Tensor, alternating: torch.Tensor):
    """``fn``'s results on ``args`` (tensors of n elements), the result of each rounding float operation moved by
    ``(upward +- alternating) * _JITTER`` eps: relative to the result for a builtin, to the largest operand or result
    for a ``@triton.jit`` function (whose own roundings are not seen). Returns the results and where an operation
    left the normal range."""
    n = upward.shape[0]
    out_of_range = torch.zeros(n, dtype=torch.bool)
    steps: dict[tuple[torch.dtype, bool], torch.Tensor] = {}  # per dtype, for the two signs of the alternation
    turn = [False]

    def step(dtype: torch.dtype) -> torch.Tensor:
        turn[0] = not turn[0]
        if (dtype, turn[0]) not in steps:
            signed = upward + alternating if turn[0] else upward - alternating
            steps[dtype, turn[0]] = (signed * (_JITTER * torch.finfo(dtype).eps)).to(dtype)
        return steps[dtype, turn[0]]

    def on_call(expr, operands):
        nonlocal out_of_range
        value = _node(expr, operands)
        if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.shape == (n,)):
            return value
        out_of_range = out_of_range | _left_range(expr, value, operands)
        if isinstance(expr, Call) and expr.op in _EXACT:
            return value
        size = value if isinstance(expr, Call) else _magnitude([value, *operands]).to(value.dtype)
        return value + (size * step(value.dtype)).nan_to_num_(0.0, 0.0, 0.0)

    try:
        outs = fold(fn, args, on_call)
    except (RuntimeError, TypeError) as exc:
        kinds = ", ".join(str(t.dtype)[6:] for t in args)
        raise Unevaluable(f"operator {fn.name!r} cannot be evaluated by torch on ({kinds}) values: {exc}") from None
    return [_filled(o, n, args) for o in outs], out_of_range


def _left_range(expr, value: torch.Tensor, operands: list) -> torch.Tensor:
    """Where an operation's result left its dtype's normal range, so that its grouping decides the value: an
    infinity from finite operands (overflow), or, but for an add or a sub (exact there), a result below the smallest
    normal number from operands that are not zero (underflow: ``1e-200 * 1e-200`` is 0, and then ``0 * 1e300`` is
    not ``1e-100``)."""
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    finite = functools.reduce(torch.logical_and, [torch.isfinite(o) for o in tensors])
    left = torch.isinf(value) & finite
    if isinstance(expr, Call) and expr.op in _EXACT | {"add", "sub"}:
        return left
    nonzero = functools.reduce(torch.logical_and, [o != 0 for o in tensors])
    if any(not isinstance(o, torch.Tensor) and o == 0 for o in operands):
        return left
    return left | (value.abs() < torch.finfo(value.dtype).tiny) & nonzero & finite


def _filled(value, n: int, args: list[torch.Tensor]) -> torch.Tensor:
    """A result as n elements (a constant result field takes torch's dtype for it)."""
    if isinstance(value, torch.Tensor):
        return value.expand(n) if value.dim() == 0 else value
    from .evaluate import constant_dtype
    return torch.full((n,), value, dtype=constant_dtype(value, [a.dtype for a in args], False))


def combine(fn: Function, pairs: list[tuple[Run, Run]], gen: torch.Generator) -> list[Run]:
    """``left op right`` for each pair, every pair and copy stacked into one evaluation of ``fn``."""
    sizes = [left.out_of_range.shape[0] for left, _ in pairs]
    m, k = sum(sizes), len(pairs[0][0].values)
    args = [torch.cat([pair[side].copies[c][j] for c in range(3) for pair in pairs]) for side in (0, 1)
            for j in range(k)]
    zeros, ones = torch.zeros(m, dtype=torch.float64), torch.ones(m, dtype=torch.float64)
    signs = torch.randint(0, 2, (m,), generator=gen).double() * 2 - 1
    outs, out_of_range = _evaluate(fn, args, torch.cat([zeros, ones, zeros]), torch.cat([zeros, zeros, signs]))
    out_of_range = out_of_range.view(3, m).any(0) | torch.cat([left.out_of_range | right.out_of_range
                                                                for left, right in pairs])
    parts = [[out[c * m:(c + 1) * m].split(sizes) for out in outs] for c in range(3)]
    return [Run(tuple([field[i] for field in parts[c]] for c in range(3)), flags)
            for i, flags in enumerate(out_of_range.split(sizes))]


def _moved(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``|x - y|`` in float64: 0 where they are equal (infinities included) or both NaN, inf where one is NaN."""
    x, y = x.double(), y.double()
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    return torch.where(same, 0.0, (x - y).abs().nan_to_num(math.inf, math.inf))


def _spread(run: Run, j: int) -> torch.Tensor:
    """How far the perturbed copies of field ``j`` landed from the exact one."""
    return torch.maximum(_moved(run.copies[1][j], run.values[j]), _moved(run.copies[2][j], run.values[j]))


def differs(x: Run, y: Run) -> torch.Tensor:
    """Where two results differ by more than rounding explains (integers and bools: at all), leaving out the elements
    where an operation left the normal range."""
    bad = torch.zeros_like(x.out_of_range)
    for j, (u, v) in enumerate(zip(x.values, y.values)):
        if not (u.is_floating_point() or v.is_floating_point()):
            bad |= u != v
            continue
        info = torch.finfo(u.dtype if u.is_floating_point() else v.dtype)
        size = _magnitude([u, v])
        allowed = _SLACK * (_spread(x, j) + _spread(y, j)) + 2 * info.eps * size + info.tiny
        bad |= _moved(u, v) > allowed
    return bad & ~(x.out_of_range | y.out_of_range)

"""How each fold runs over a sharded axis: its state on one shard, the combine of the ranks' states, its finish.

A fold along the sharded axis is split in three (the rule table, :data:`REDUCE_RULES`, one row per derived form
of :class:`~tricomb.pipeline.ir.Reduce`):

* ``state``: the stages that replace the fold in the shard's own kernel: what each rank computes of its part
  (a sum of its elements; for argmax, the pair of its largest value and that value's global position);
* ``combine``: a reduce along a new leading axis of the ranks' states, stacked in rank order, so an operator
  that does not commute combines in the order the elements have along the axis;
* ``finish``: the maps that turn the combined state into the fold's result (a mean's division by the count of
  the whole axis, argmax's position).

A scan along the sharded axis needs the total of each shard (a reduce by the scan's operator, with its operands
swapped when the scan runs from the end: see :func:`swapped`) and then a seed: :func:`seeded` is the zip_with
that combines the prefix of the ranks before this one (after it, reversed) with each element of the shard's
own scan, in the same kernel.

Positions along the sharded axis are global: a function reading ``index(axis)`` there reads it plus the
shard's offset (:func:`localized`).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

from ..errors import UnsupportedError
from ..pipeline.operators import Laws, declare_laws, declared_laws
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, Stage, ZipWith
from ..pipeline.printer import stage_text
from ..pipeline.shorthands import INDEX_SHORTHANDS
from ..pipeline.verify import operator_spec
from ..scalar.builtins import TUPLE_OPS
from ..scalar.ir import Arg, Call, Const, Function, as_expr, fold, rebuilt, substitute, walk


@dataclass(frozen=True)
class Split:
    """A fold along the sharded axis as its three parts (see the module's docstring)."""

    state: tuple[Stage, ...]
    combine: Reduce
    finish: tuple[Stage, ...]


def _arity_of(op: Function) -> int:
    return op.arity // 2


def swapped(op: Function, identity) -> Function:
    """``op`` with its two operands (k-tuples for an operator on k-tuples) exchanged: a fold by it, left to right,
    folds the elements from the last to the first, as a reversed scan combines them. It is associative exactly
    when ``op`` is, with the same identity: laws declared for ``op`` hold for it too."""
    k = _arity_of(op)
    args = [Arg(k + i) for i in range(k)] + [Arg(i) for i in range(k)]
    result = Function(op.arity, tuple(substitute(op, args)), f"swapped_{op.name}", op.location)
    laws = declared_laws(op, identity)
    if laws is not None:
        declare_laws(result, identity, laws)
    return result


def seeded(op: Function) -> Function:
    """The zip_with of a scan's k result fields and a seed's k fields: ``op(seed, value)``, the prefix of the
    ranks before (after, reversed) combined with each element's prefix within the shard."""
    k = _arity_of(op)
    args = [Arg(k + i) for i in range(k)] + [Arg(i) for i in range(k)]
    outputs = [as_expr(o) for o in substitute(op, args)]
    # an output that reads only the seed (an operator keeping its left operand) still has the stream's shape
    outputs = [o if _reads_stream(o, k) else Call("where", (Const(True), o, Arg(i))) for i, o in enumerate(outputs)]
    return Function(2 * k, tuple(outputs), f"seeded_{op.name}", op.location)


def _reads_stream(expr, k: int) -> bool:
    return any(isinstance(node, Arg) and node.index < k for node in walk(expr))


def appended(width: int, extra: int) -> Function:
    """The zip_with that appends ``extra`` new inputs to a stream of ``width`` fields (an attach's fields)."""
    return Function(width + extra, tuple(Arg(i) for i in range(width + extra)), "with_attached")


def stacked(width: int) -> Function:
    """The zip_with that makes the ranks' ``width`` state fields one stream."""
    return Function(width, tuple(Arg(i) for i in range(width)), "states")


def _with_position(axis: int) -> Function:
    v = Arg(0)
    return Function(1, (v, Call("index", (Const(axis),))), "with_position")


def _position_of() -> Function:
    return Function(2, (Arg(1),), "position_of")


def _over(count: int) -> Function:
    return Function(1, (Call("div", (Arg(0), Const(float(count)))),), "over_count")


def _index_step(stage: Reduce | Scan):
    """The op table's step of (value, position) pairs for argmax/argmin or cummax/cummin, its laws declared: it
    is the fold those shorthands are expanded to, written out here because its positions must be global."""
    kind = "reduce" if isinstance(stage, Reduce) else "scan"
    step = TUPLE_OPS[INDEX_SHORTHANDS[kind, operator_spec(stage.op).name]]
    declare_laws(step.function, step.identity, Laws(associative=True, commutative=False))
    return step


def _plain_reduce(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    combine = Reduce(stage.op, (0,), identity=stage.identity, location=stage.location)
    return Split((stage,), combine, ())


def _mean(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    local = dataclasses.replace(stage, mean=False)
    combine = Reduce(stage.op, (0,), identity=stage.identity, location=stage.location)
    return Split((local,), combine, (Map(_over(count), stage.location),))


def _nansum(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    combine = Reduce(stage.op, (0,), location=stage.location)
    return Split((stage,), combine, ())


def _arg(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    if len(reduced_axes(stage, rank)) != 1:
        raise UnsupportedError(f"{stage_text(stage)} over several axes gives a flat position, which a sharded axis "
                               "does not have; reduce along the sharded axis alone", stage.location)
    step = _index_step(stage)
    pairs = Reduce(step.function, stage.axis, stage.keepdim, identity=step.identity, location=stage.location)
    combine = Reduce(step.function, (0,), identity=step.identity, location=stage.location)
    return Split((Map(_with_position(axis), stage.location), pairs), combine, (Map(_position_of(), stage.location),))


def _refused(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    raise UnsupportedError(f"{stage_text(stage)} along a sharded axis is not supported: its state is a sum and a "
                           "count of the values that are not NaN; write it as a reduce of such pairs "
                           "(map to (where(v != v, 0, v), where(v != v, 0.0, 1.0)), a sum of pairs, a division)",
                           stage.location)


def summed(combine: Reduce) -> bool:
    """Whether the ranks' states are combined by a builtin sum of one field: then one all_reduce adds them (its
    order of additions is the backend's, a rounding's difference from rank order). Maximum and minimum are
    gathered instead: a backend's max need not propagate NaN as torch's does."""
    spec = operator_spec(combine.op)
    return spec is not None and spec.name == "add" and combine.identity in (None, 0, 0.0)


def _kind(stage: Reduce) -> str:
    if stage.index:
        return "index"
    if stage.mean:
        return "nanmean" if stage.skip_nan else "mean"
    return "nansum" if stage.skip_nan else "plain"


# a Reduce's derived form -> (stage, sharded axis, elements the whole fold combines, stream rank) -> its Split
REDUCE_RULES: dict[str, Callable[[Reduce, int, int, int], Split]] = {
    "plain": _plain_reduce,
    "mean": _mean,
    "nansum": _nansum,
    "index": _arg,
    "nanmean": _refused,
}


def split_reduce(stage: Reduce, axis: int, count: int, rank: int) -> Split:
    """``stage``, a reduce whose axes hold the sharded ``axis`` of a stream of ``rank`` dimensions, as its three
    parts."""
    return REDUCE_RULES[_kind(stage)](stage, axis, count, rank)


@dataclass(frozen=True)
class ScanParts:
    """A scan along the sharded axis: ``local``, the stages that scan the shard (positions global); ``total``,
    the reduce giving the shard's total as the scan combines it (one element along the axis); ``op``, the
    operator a seed combines by; ``prefix``, the reduce of the ranks' totals that gives a rank's seed."""

    local: tuple[Stage, ...]
    total: tuple[Stage, ...]
    op: Function
    prefix: Reduce


def split_scan(stage: Scan, axis: int) -> ScanParts:
    """``stage``, a scan along the sharded ``axis``, as a local scan, a shard's total and the seed's parts."""
    if stage.index:
        step = _index_step(stage)
        op, identity = step.function, step.identity
        pairs = (Map(_with_position(axis), stage.location),)
        local = pairs + (dataclasses.replace(stage, op=op, identity=identity, index=False),)
    else:
        op, identity, pairs, local = stage.op, stage.identity, (), (stage,)
    order = swapped(op, identity) if stage.reverse else op
    total = Reduce(order, (axis,), keepdim=True, dtype=stage.dtype, identity=identity, location=stage.location)
    prefix = Reduce(order, (0,), identity=identity, location=stage.location)
    return ScanParts(local, pairs + (total,), op, prefix)


def reduced_axes(stage: Reduce, rank: int) -> tuple[int, ...]:
    """The axes ``stage`` reduces on a stream of ``rank`` dimensions, non-negative, in order."""
    if stage.axis is None:
        return tuple(range(rank))
    return tuple(sorted(a % rank for a in stage.axis))


def folds_along(stage: Stage, axis: int, rank: int) -> bool:
    """Whether ``stage`` combines elements along ``axis`` of a stream of ``rank`` dimensions."""
    if isinstance(stage, Reduce):
        return axis in reduced_axes(stage, rank)
    if isinstance(stage, Scan):
        return stage.axis % rank == axis
    if isinstance(stage, Attach):
        return axis in reduced_axes(stage.reduce, rank)
    return False


def _shifted_function(function: Function, axis: int, rank: int, offset: int) -> Function:
    """``function`` with every ``index(a)`` along ``axis`` read ``offset`` further on."""
    def on_call(node, operands):
        if isinstance(node, Call) and node.op == "index" and operands[0] % rank == axis:
            return Call("add", (Call("index", (Const(operands[0]),)), Const(offset)))
        return rebuilt(node, operands)
    outputs = tuple(as_expr(o) for o in fold(function, [Arg(i) for i in range(function.arity)], on_call))
    return Function(function.arity, outputs, function.name, function.location)


@functools.lru_cache(maxsize=1024)  # (a rank's offsets are the same call after call)
def localized(stages: tuple[Stage, ...], rank: int, axis: int, offset: int) -> tuple[Stage, ...]:
    """``stages``, which start on a stream of ``rank`` dimensions sharded along ``axis``, with every position
    along that axis read ``offset`` further on (the shard's start), as far as the axis lasts."""
    if offset == 0:
        return stages
    out: list[Stage] = []
    for stage in stages:
        if axis is None:
            out.append(stage)
            continue
        if isinstance(stage, (Map, ZipWith)):
            stage = dataclasses.replace(stage, fn=_shifted_function(stage.fn, axis, rank, offset))
        elif isinstance(stage, Attach):
            inner = localized(stage.pipeline.stages, rank, axis, offset)
            stage = dataclasses.replace(stage, pipeline=PipelineIR(inner, stage.pipeline.column_sums))
        out.append(stage)
        rank, axis = after(stage, rank, axis)
    return tuple(out)


def after(stage: Stage, rank: int, axis: int | None) -> tuple[int, int | None]:
    """The stream's rank and the sharded axis's place after ``stage`` (None once a reduce removed it)."""
    if not isinstance(stage, Reduce) or stage.keepdim:
        return rank, axis
    axes = reduced_axes(stage, rank)
    if axis is None or axis in axes:
        return rank - len(axes), None
    return rank - len(axes), axis - sum(1 for a in axes if a < axis)

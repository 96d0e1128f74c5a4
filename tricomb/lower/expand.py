"""Derived stages rewritten as core ones before planning, so that no later pass knows their names.

The shorthands for torch's reductions and scans are flags on :class:`~tricomb.pipeline.ir.Reduce` and
:class:`~tricomb.pipeline.ir.Scan` (their torch meaning, and the oracle, keep them). This pass writes each as
maps around a plain reduce or scan, using the internal rows of the op table (:mod:`tricomb.scalar.builtins`):

* ``dtype=d`` (torch.sum's, torch.cumsum's): a map converting the stream to ``d`` before the fold, as torch
  converts first; after it, for an integer or bool ``d``, a map converting the result back to ``d`` (the fold
  of integers is taken in int64, as torch.sum's result would be; integer sums and products wrap alike in any
  width, so converting back is exact);
* ``mean``: a sum, then a map dividing it by ``count``, the number of elements combined (in the sum's dtype,
  so a float16 mean divides the float32 accumulator as torch.mean does);
* ``nansum``: a map taking NaN to 0 (before any conversion, as torch.nansum drops NaN first), then a sum;
* ``nanmean``: a map to pairs (the value with NaN as 0, and 1.0 where it is not NaN: a count in the value's
  own dtype, accumulated like the sum), a reduce of the pairs by addition, and a map dividing the sum by the
  count (0 / 0 is NaN, torch's answer for a row of NaN);
* ``argmax``/``argmin``: a map pairing each value with its ``position`` along the reduced axes, a reduce of the
  pairs by the op table's argmax/argmin step, and a map keeping the position;
* ``cummax``/``cummin``: the pairing map, then a scan by the cummax/cummin step (its two fields are the result);
* ``index(axis)`` in any function: the ``coordinate_<phase>`` leaf of the iteration dimension it reads
  (:mod:`.coordinates`).

The kernel stays one: every map is fused around the fold.
"""
from __future__ import annotations

import dataclasses

import torch

from ..errors import DTypeError
from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, Stage
from ..pipeline.printer import stage_text
from ..pipeline.shorthands import INDEX_SHORTHANDS
from ..pipeline.verify import operator_spec
from ..scalar.builtins import TUPLE_OPS, convert_op
from ..scalar.ir import Arg, Call, Const, Function
from .bind import Binding, combined_dtypes
from .coordinates import resolve


def _nan_to_zero() -> Function:
    """``v -> where(v != v, 0, v)``."""
    v = Arg(0)
    return Function(1, (Call("where", (Call("ne", (v, v)), Const(0), v)),), "nan_to_zero")


def _nan_split() -> Function:
    """``v -> (where(v != v, 0, v), where(v != v, 0.0, 1.0))``."""
    v = Arg(0)
    not_nan = Call("where", (Call("ne", (v, v)), Const(0.0), Const(1.0)))
    return Function(1, (_nan_to_zero().output, not_nan), "split_nan")


def _pair_sum() -> Function:
    return Function(4, (Call("add", (Arg(0), Arg(2))), Call("add", (Arg(1), Arg(3)))), "add_pairs")


def _divide() -> Function:
    return Function(2, (Call("div", (Arg(0), Arg(1))),), "sum_over_count")


def _over_count() -> Function:
    v = Arg(0)
    return Function(1, (Call("div", (v, Call("count", (v,)))),), "over_count")


def _with_position() -> Function:
    v = Arg(0)
    return Function(1, (v, Call("position", (v,))), "with_position")


def _second() -> Function:
    return Function(2, (Arg(1),), "position_of")


def _convert(dtype: torch.dtype) -> Function:
    return Function(1, (Call(convert_op(dtype), (Arg(0),)),), convert_op(dtype))


def _core(stage: Reduce | Scan) -> Reduce | Scan:
    """The stage with no derived flag: its operator alone."""
    flags = {"mean": False, "index": False, "skip_nan": False} if isinstance(stage, Reduce) else {"index": False}
    return dataclasses.replace(stage, dtype=None, **flags)


def _with_dtype(stage: Reduce | Scan, fold: list[Stage]) -> list[Stage]:
    """``fold`` (the stages computing ``stage`` on its converted values) between the conversions of ``dtype=``."""
    if stage.dtype is None:
        return fold
    after = [] if stage.dtype.is_floating_point else [Map(_convert(stage.dtype), stage.location)]
    return [Map(_convert(stage.dtype), stage.location), *fold, *after]


def _indexed(stage: Reduce | Scan, entering: torch.dtype) -> list[Stage]:
    """argmax/argmin or cummax/cummin as a fold of (value, position) pairs."""
    if entering == torch.bool and isinstance(stage, Reduce):  # (torch.cummax takes bools)
        raise DTypeError(f"{stage_text(stage)} does not take bool values, as torch's does not; map them to integers "
                         "first (tc.map(lambda v: v * 1))", stage.location)
    kind = "reduce" if isinstance(stage, Reduce) else "scan"
    step = TUPLE_OPS[INDEX_SHORTHANDS[kind, operator_spec(stage.op).name]]
    pairs = dataclasses.replace(_core(stage), op=step.function, identity=step.identity)
    if isinstance(stage, Scan):
        return [Map(_with_position(), stage.location), pairs]
    return [Map(_with_position(), stage.location), pairs, Map(_second(), stage.location)]


def _derived(stage: Stage) -> bool:
    return isinstance(stage, (Reduce, Scan)) and (stage.index or stage.dtype is not None or (
        isinstance(stage, Reduce) and (stage.mean or stage.skip_nan)))


def _rewritten(stage: Reduce | Scan, entering: torch.dtype) -> list[Stage]:
    """The core stages computing the derived ``stage`` on a stream of dtype ``entering``."""
    if stage.index:
        return _indexed(stage, entering)
    if isinstance(stage, Scan):
        return _with_dtype(stage, [_core(stage)])
    if stage.mean and stage.skip_nan:
        pairs = Reduce(_pair_sum(), stage.axis, stage.keepdim, identity=(0, 0), location=stage.location)
        return _with_dtype(stage, [Map(_nan_split(), stage.location), pairs, Map(_divide(), stage.location)])
    fold: list[Stage] = [_core(stage)] + ([Map(_over_count(), stage.location)] if stage.mean else [])
    fold = _with_dtype(stage, fold)
    if stage.skip_nan and entering.is_floating_point:
        fold = [Map(_nan_to_zero(), stage.location), *fold]
    return fold


def expand(pipeline: PipelineIR, binding: Binding) -> PipelineIR:
    """``pipeline`` with its derived stages written as core ones (an attached pipeline's too), for inputs of
    ``binding``'s layout class. Raises :class:`~tricomb.errors.DTypeError` for argmax/argmin of bool values."""
    expanded = PipelineIR(tuple(_expanded(pipeline, binding, 0)))
    return resolve(expanded, binding.ranks, binding.rank, binding.axes)


def _expanded(pipeline: PipelineIR, binding: Binding, start: int) -> list[Stage]:
    """The stages of ``pipeline`` from ``start`` on, expanded; an attached pipeline is expanded as the
    continuation of the stages before it (its derived stages' dtypes are those of the stream it reduces)."""
    stages: list[Stage] = []
    for at, stage in enumerate(pipeline.stages[start:], start):
        if isinstance(stage, Attach):
            context = PipelineIR(pipeline.stages[:at] + stage.pipeline.stages)
            stages.append(dataclasses.replace(stage, pipeline=PipelineIR(tuple(_expanded(context, binding, at)))))
            continue
        if not _derived(stage):
            stages.append(stage)
            continue
        entering = combined_dtypes(pipeline, binding, at - 1)[0] if at else binding.dtypes[0]
        stages += _rewritten(stage, entering)
    return stages

"""Stages a kernel computes as a composition of simpler ones, rewritten before planning.

``nanmean`` (torch.nanmean) is the mean of the elements that are not NaN: a map to pairs (the value with NaN as 0,
and 1.0 where it is not NaN: a count in the value's own dtype, so that a float16 count is accumulated in float32
like the sum and divides it without being rounded to float16 first), a reduce of the pairs by addition, and a map
dividing the sum by the count (0 / 0 is NaN, torch's answer for a row of NaN). The kernel stays one; the torch
meaning and the oracle keep the original stage.
"""
from __future__ import annotations

from ..pipeline.ir import Map, PipelineIR, Reduce
from ..scalar.ir import Arg, Call, Const, Function


def _nan_split() -> Function:
    """``v -> (where(v != v, 0, v), where(v != v, 0.0, 1.0))``."""
    v = Arg(0)
    nan = Call("ne", (v, v))
    return Function(1, (Call("where", (nan, Const(0), v)), Call("where", (nan, Const(0.0), Const(1.0)))),
                    "split_nan")


def _pair_sum() -> Function:
    return Function(4, (Call("add", (Arg(0), Arg(2))), Call("add", (Arg(1), Arg(3)))), "add_pairs")


def _divide() -> Function:
    return Function(2, (Call("div", (Arg(0), Arg(1))),), "sum_over_count")


def expand(pipeline: PipelineIR) -> PipelineIR:
    """``pipeline`` with each nanmean written as map, pair reduce, map."""
    stages = []
    for stage in pipeline.stages:
        if not (isinstance(stage, Reduce) and stage.mean and stage.skip_nan):
            stages.append(stage)
            continue
        pairs = Reduce(_pair_sum(), stage.axis, stage.keepdim, identity=(0, 0), location=stage.location)
        stages += [Map(_nan_split(), stage.location), pairs, Map(_divide(), stage.location)]
    return PipelineIR(tuple(stages))

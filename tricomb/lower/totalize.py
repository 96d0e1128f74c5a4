"""Making an operator without an identity total, with a validity flag.

A kernel fills the lanes past the end of a tile, and starts each accumulator, with the operator's identity.
An operator without one (``first = lambda a, b: a``, a Welford merge) gets a bool field in front of its k
fields instead: an element is ``(True, x...)``, an empty lane ``(False, 0...)``, and

    (va, a...) op' (vb, b...) = (va or vb, where(va and vb, a op b, where(va, a, b)))

so an invalid side gives way and ``(False, 0...)`` is the identity of ``op'``. ``op'`` is associative when
``op`` is, and commutes when ``op`` does (the construction is the usual adjunction of an identity to a
semigroup). The pass rewrites the pipeline around the stage: a map adds the flag, the stage combines with
``op'``, and a map drops the flag, so the fields after it are the operator's own; the kernel stays one.
"""
from __future__ import annotations

import dataclasses

from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan
from ..pipeline.verify import operator_spec
from ..scalar.ir import Arg, Call, Function, substitute


def _needs_flag(stage) -> bool:
    if not isinstance(stage, (Reduce, Scan)) or stage.identity is not None:
        return False
    spec = operator_spec(stage.op)
    return spec is None or spec.identity is None


def flagged_operator(op: Function) -> Function:
    """``op'`` of the module docstring: arguments ``(va, a..., vb, b...)``, results ``(valid, fields...)``."""
    k = len(op.outputs)
    va, vb = Arg(0), Arg(k + 1)
    left, right = [Arg(1 + j) for j in range(k)], [Arg(k + 2 + j) for j in range(k)]
    both = Call("logical_and", (va, vb))
    combined = substitute(op, left + right)
    fields = [Call("where", (both, c, Call("where", (va, a, b)))) for c, a, b in zip(combined, left, right)]
    return Function(2 * k + 2, (Call("logical_or", (va, vb)), *fields), op.name, op.location)


def _add_flag(k: int) -> Function:
    """``(x...) -> (True, x...)``, the flag a bool: ``x == x or x != x`` (a constant True returned by a function
    would take the arguments' dtype, as a weak scalar does in torch)."""
    x = Arg(0)
    true = Call("logical_or", (Call("eq", (x, x)), Call("ne", (x, x))))
    return Function(k, (true, *(Arg(j) for j in range(k))), "with_valid_flag")


def _drop_flag(k: int) -> Function:
    return Function(k + 1, tuple(Arg(1 + j) for j in range(k)), "without_valid_flag")


def totalize(pipeline: PipelineIR) -> PipelineIR:
    """``pipeline`` with each reduce/scan whose operator has no identity combining with a validity flag (an
    attached pipeline's too)."""
    stages = []
    for stage in pipeline.stages:
        if isinstance(stage, Attach):
            stages.append(dataclasses.replace(stage, pipeline=totalize(stage.pipeline)))
            continue
        if not _needs_flag(stage):
            stages.append(stage)
            continue
        k = len(stage.op.outputs)
        identity = (False,) + (0,) * k
        stages += [Map(_add_flag(k), stage.location),
                   dataclasses.replace(stage, op=flagged_operator(stage.op), identity=identity),
                   Map(_drop_flag(k), stage.location)]
    return PipelineIR(tuple(stages))

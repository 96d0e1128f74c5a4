"""Which pipeline inputs each field of the result depends on.

torch gives each result field the broadcast shape of the tensors it was computed from: ``zip_with (x, y) ->
(x, x + y)`` on x of shape (2,) and y of shape (2, 2) returns (2,) and (2, 2). The kernel iterates over the
broadcast of all inputs, and each field is stored at its own shape: the broadcast of its inputs' shapes.
"""
from __future__ import annotations

from ..scalar.builtins import COORDINATES
from ..scalar.ir import Call, fold
from .ir import Attach, Map, PipelineIR, ZipWith, new_inputs, stream_widths

Inputs = frozenset[int]


def _union(sets) -> Inputs:
    return frozenset().union(*sets)


def _inputs_of_calls(args: list[Inputs]):
    """An op's inputs: the union of its tensor operands'; an op on constants only (exp(1.0)) is a constant; an
    ``index``, a coordinate in the shape all of the function's arguments broadcast to, has all of theirs."""
    def inputs(node, operands):
        if isinstance(node, Call) and node.op in COORDINATES:
            return _union(args)
        sets = [o for o in operands if isinstance(o, frozenset)]
        return _union(sets) if sets else None
    return inputs


def field_inputs(pipeline: PipelineIR) -> tuple[Inputs, ...]:
    """For each field of ``pipeline``'s result, the indices of the inputs it is computed from.

    Mirrors :func:`tricomb.pipeline.evaluate.evaluate`: an op's result broadcasts its tensor operands; a constant
    (or an op on constants only) returned by a function broadcasts with all the function's arguments; a reduce or scan depends on all of its
    stream's inputs.
    """
    stream: list[Inputs] = []
    taken = 0
    for i, (stage, count) in enumerate(zip(pipeline.stages, new_inputs(pipeline.stages))):
        new = [frozenset({taken + k}) for k in range(count)]
        taken += count
        if isinstance(stage, (Map, ZipWith)):
            args = stream + new
            outputs = fold(stage.fn, args, _inputs_of_calls(args))
            stream = [o if isinstance(o, frozenset) else _union(args) for o in outputs]
        elif isinstance(stage, Attach):  # the stream is broadcast together, and the result broadcast along it
            stream = [_union(stream + new)] * (len(stream + new) + stage.pipeline.width)
        else:
            stream = [_union(stream + new)] * stream_widths((stage,))[0]
    return tuple(stream)

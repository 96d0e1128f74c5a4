"""``index(axis)``: the element's coordinate, resolved against the iteration space.

A function's ``index(axis)`` is the coordinate along ``axis`` of the shape its arguments broadcast to
(:func:`~tricomb.pipeline.evaluate.coordinate`). Which dimension of the iteration space that is depends on the
stage: stages before the first fold see the inputs right-aligned against it (as broadcasting aligns them); a
reduce removes its axes (or keeps them at size 1 with ``keepdim``); a scan and an attach keep every one.

:func:`coordinate_dims` gives ``bind`` the iteration dimensions some ``index`` reads, which ``coalesce`` then
keeps as groups of their own (a merged group has no coordinate of a single dimension); :func:`resolve`, run by
``expand``, rewrites each ``index`` into the op table's ``coordinate_<phase>`` leaf: the dimension, and where
the kernel stands when it computes it (the element as read, as written after a scan, or the row a reduce left),
which decides the kernel variable it reads.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, Stage, ZipWith, new_inputs
from ..scalar.builtins import INDEX
from ..scalar.ir import Arg, Call, Const, Function, as_expr, fold, rebuilt, walk

# (a function, the iteration dimensions its arguments span, the phase) -> the function to keep
Visit = Callable[[Function, list, str], Function]


def index_axes(fn: Function) -> list[int]:
    """The axes ``fn``'s ``index`` calls read, in first-use order."""
    return [node.args[0].value for node in walk(*fn.outputs) if isinstance(node, Call) and node.op == INDEX.name]


def _after_reduce(dims: list[int], axes: tuple[int, ...], keepdim: bool) -> list[int]:
    """The dimensions a reduce leaves: its axes kept (at size 1, coordinate 0) or removed."""
    return dims if keepdim else [d for d in dims if d not in axes]


def _walk(stages: tuple[Stage, ...], ranks: tuple[int, ...], rank: int, axes: tuple[int, ...],
          visit: Visit) -> list[Stage]:
    """Every stage with its functions passed through ``visit`` along with the dimensions their arguments span."""
    owners = [at for at, count in enumerate(new_inputs(stages)) for _ in range(count)]
    dims: list[int] | None = None
    phase = "in"
    out: list[Stage] = []
    for at, stage in enumerate(stages):
        joining = [ranks[i] for i, owner in enumerate(owners) if owner == at]
        width = max([len(dims) if dims is not None else 0] + joining)
        if dims is None or width > len(dims):  # (only before a fold: bind refuses an input that grows it later)
            dims = list(range(rank - width, rank - len(dims or []))) + (dims or [])
        if isinstance(stage, (Map, ZipWith)):
            out.append(dataclasses.replace(stage, fn=visit(stage.fn, dims, phase)))
        elif isinstance(stage, Attach):
            inner = _attached(stage, dims, axes, visit)
            out.append(dataclasses.replace(stage, pipeline=PipelineIR(tuple(inner))))
            phase = "in"
        else:
            out.append(stage)
            if isinstance(stage, Reduce):
                dims, phase = _after_reduce(dims, axes, stage.keepdim), "row"
            elif isinstance(stage, Scan):
                phase = "out"
    return out


def _attached(stage: Attach, dims: list[int], axes: tuple[int, ...], visit: Visit) -> list[Stage]:
    """An attached pipeline's stages: on the whole stream before its reduce, on the row after it."""
    inner, phase = [], "in"
    for s in stage.pipeline.stages:
        if isinstance(s, (Map, ZipWith)):
            inner.append(dataclasses.replace(s, fn=visit(s.fn, dims, phase)))
            continue
        inner.append(s)
        if isinstance(s, Reduce):
            dims, phase = _after_reduce(dims, axes, s.keepdim), "row"
    return inner


def coordinate_dims(pipeline: PipelineIR, ranks: tuple[int, ...], rank: int, axes: tuple[int, ...]) -> frozenset[int]:
    """The iteration dimensions that some ``index`` of the pipeline reads (a reduced one read after its reduce
    has coordinate 0, and is not among them). The axes are in range: bind's meta evaluation checked them."""
    found: set[int] = set()

    def visit(fn: Function, dims: list[int], phase: str) -> Function:
        read = [dims[a] for a in index_axes(fn)]
        found.update(d for d in read if not (phase == "row" and d in axes))
        return fn

    _walk(pipeline.stages, ranks, rank, axes, visit)
    return frozenset(found)


def resolve(pipeline: PipelineIR, ranks: tuple[int, ...], rank: int, axes: tuple[int, ...]) -> PipelineIR:
    """``pipeline`` with every ``index(axis)`` rewritten as ``coordinate_<phase>(dim)``: the iteration dimension
    it reads, and where the kernel stands when it reads it (in the row phase a reduced dimension, kept at size 1,
    has coordinate 0)."""
    def visit(fn: Function, dims: list[int], phase: str) -> Function:
        if not index_axes(fn):
            return fn

        def on_call(node, operands):
            if isinstance(node, Call) and node.op == INDEX.name:
                return Call(f"coordinate_{phase}", (Const(dims[operands[0]]),))
            return rebuilt(node, operands)

        outputs = fold(fn, [Arg(i) for i in range(fn.arity)], on_call)
        return dataclasses.replace(fn, outputs=tuple(as_expr(o) for o in outputs))

    return PipelineIR(tuple(_walk(pipeline.stages, ranks, rank, axes, visit)))

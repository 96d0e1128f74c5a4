"""Gradients of pipelines that fold more than once: an attach (a reduction used on every element of its rows),
or a reduce or scan after another one.

Such a pipeline is cut in three: the ``head`` (the stages before the cut, a pipeline of its own), an attach at
the cut (or nothing), and the ``tail`` (the stages after it). Each part is a pipeline whose gradient is derived
by the rule that fits it, this one included, so a pipeline of several attaches is cut again inside its tail;
the chain rule joins them. With ``s`` the stream entering the cut and ``r = P(s)`` the attached reduction's
result (its reduced axes kept, as the attach broadcasts it)::

    tail(s, r, later inputs) -> (ds, dr)          the tail's backward, its stream given as inputs
    ds += P's backward of dr                      r broadcast along the rows: dr summed over them (as any
                                                  broadcast input's gradient)
    head(inputs) -> s: its backward of ds

Every part's forward is recomputed from the inputs (the head's stream, the reduction's result): nothing but the
pipeline's inputs and result is saved. The kernels are those of each part's rule, more than a pipeline with its
own backward launches (tc.library's softmax and norms read each row once or twice), but any such pipeline gets
its gradient, of any operators its parts' rules take.
"""
from __future__ import annotations

import dataclasses

import torch

from ..pipeline.ir import Attach, Map, PipelineIR, Reduce, Scan, Stage, ZipWith, new_inputs, stream_widths
from ..scalar.ir import Arg, Call, Function
from .gather import Run, Tensors, zero_if_none
from .parts import Parts


class Composed:
    """A pipeline with an attach, or with a reduce or scan after its first one: cut (:func:`cut`) into pipelines
    of one fold each, their backwards chained."""

    scans = True  # (its parts may scan: a traced CUDA backward runs the opaque operator)

    @staticmethod
    def applies(p: Parts) -> bool:
        return cut(p.pipeline) is not None

    @staticmethod
    def check(p: Parts) -> None:
        from .backward import check
        for part in Cut(p.pipeline).parts():
            check(part)

    @staticmethod
    def backward(p: Parts, inputs: tuple, result: tuple, grads: Tensors, wanted: tuple[int, ...], run: Run):
        from .backward import backward
        c = Cut(p.pipeline)
        head_in, tail_in = inputs[:c.head_inputs], inputs[c.head_inputs:]
        stream = list(run(c.head, head_in)) if c.head is not None else list(head_in)
        attached = list(run(c.attached, tuple(stream))) if c.attached is not None else []
        entering = stream + attached
        tail_wanted = tuple(i for i, t in enumerate(entering) if t.is_floating_point()) + tuple(
            len(entering) + i - c.head_inputs for i in wanted if i >= c.head_inputs)
        found = dict(zip(tail_wanted, backward(c.tail, (*entering, *tail_in), result, grads, tail_wanted, run)))
        ds = [found.get(j) for j in range(len(stream))]
        dr = [found.get(len(stream) + j) for j in range(len(attached))]
        if c.attached is not None and any(g is not None for g in dr):
            through = _wanted_floats(stream)
            for j, g in zip(through, backward(c.attached, tuple(stream), tuple(attached), dr, through, run)):
                ds[j] = g if ds[j] is None else _added(ds[j], g, run)
        late = [found.get(len(entering) + i - c.head_inputs) for i in wanted if i >= c.head_inputs]
        head_wanted = tuple(i for i in wanted if i < c.head_inputs)
        if c.head is None:  # the attach is the first stage: the stream is input 0
            early = [zero_if_none(ds[0], head_in[0])] if head_wanted else []
        elif any(g is not None for g in ds):
            early = backward(c.head, head_in, tuple(stream), ds, head_wanted, run)
        else:
            early = [torch.zeros_like(head_in[i]) for i in head_wanted]
        return list(early) + late


def cut(pipeline: PipelineIR) -> tuple[int, bool] | None:
    """Where a pipeline that folds more than once is cut: at its first attach (``(position, True)``), else at its
    second reduce or scan (``(position, False)``); None for a pipeline of one fold or none."""
    stages = pipeline.stages
    for i, stage in enumerate(stages):
        if isinstance(stage, Attach):
            return i, True
    folds = [i for i, stage in enumerate(stages) if isinstance(stage, (Reduce, Scan))]
    return (folds[1], False) if len(folds) > 1 else None


class Cut:
    """A pipeline cut (:func:`cut`) into its parts, each a pipeline of its own: ``head`` (None when the cut is the
    first stage, whose stream is then input 0), taking the first ``head_inputs`` inputs; ``attached``, the
    attached reduction on the stream's fields with its reduced axes kept (None without an attach); ``tail``, on
    the stream's fields, the attached ones, then the later inputs."""

    def __init__(self, pipeline: PipelineIR):
        stages = pipeline.stages
        at, attach = cut(pipeline)
        counts = new_inputs(stages)
        width = stream_widths(stages)[at - 1] if at else 1
        self.head = PipelineIR(stages[:at]) if at else None
        self.head_inputs = sum(counts[:at]) if at else counts[0]
        self.attached = _on_stream(_kept(stages[at].pipeline).stages, width) if attach else None
        entering = width + (self.attached.width if attach else 0)
        self.tail = _on_stream(stages[at + 1:] if attach else stages[at:], entering)

    def parts(self) -> list[PipelineIR]:
        return [part for part in (self.head, self.attached, self.tail) if part is not None]


def _kept(pipeline: PipelineIR) -> PipelineIR:
    """An attached pipeline with its reduce keeping the reduced axes, as the attach broadcasts its result."""
    return PipelineIR(tuple(dataclasses.replace(s, keepdim=True) if isinstance(s, Reduce) else s
                            for s in pipeline.stages))


def _on_stream(stages: tuple[Stage, ...], width: int) -> PipelineIR:
    """``stages``, which continue a stream of ``width`` fields, as a pipeline whose first ``width`` inputs are
    those fields: a first map or zip_with takes them as its inputs (a zip_with's checks of the inputs it brings
    in are left to the whole pipeline's call); any other first stage, or none, gets the fields passed in front."""
    first = stages[0] if stages else None
    if isinstance(first, ZipWith) or (isinstance(first, Map) and width > 1):
        return PipelineIR((ZipWith(first.fn, first.location),) + stages[1:])
    if isinstance(first, Map) or (width == 1 and stages):
        return PipelineIR(stages)
    passed = Function(width, tuple(Arg(j) for j in range(width)), "stream")
    return PipelineIR(((ZipWith(passed) if width > 1 else Map(passed)),) + stages)


def _wanted_floats(tensors: list) -> tuple[int, ...]:
    return tuple(j for j, t in enumerate(tensors) if t.is_floating_point())


def _added(a: torch.Tensor, b: torch.Tensor, run: Run) -> torch.Tensor:
    """``a + b`` (gradients of one tensor, of its shape and dtype) by one kernel."""
    add = Function(2, (Call("add", (Arg(0), Arg(1))),), "gradient_sum")
    return run(PipelineIR((ZipWith(add),)), (a, b))[0]

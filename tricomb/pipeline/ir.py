"""Pipeline IR: the stages users compose, and the pipeline that holds them.

Stages are frozen dataclasses: equal stages are equal keys for the kernel cache, and passes build new nodes
instead of changing old ones. ``location`` (where the user built the stage) takes no part in equality.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import torch

from ..errors import Location
from ..scalar.ir import Function


@dataclass(frozen=True, slots=True)
class Map:
    """Apply ``fn`` to every element of the stream."""

    fn: Function
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Lag:
    """One input of a :class:`ZipWith` read ``by`` places back along ``axis``: the element at coordinate ``i``
    there reads the input (broadcast to the stream's shape) at ``i - by``, and ``fill`` where that falls outside
    the axis. ``input`` counts among the inputs the stage brings in. Only derivative rules build lags (a scan's
    backward reads the forward's saved result one step back, its exclusive prefix), on the axis of the pipeline's
    scan, where its kernel reads each row in order."""

    input: int
    axis: int
    by: int
    fill: float | int | bool = 0


@dataclass(frozen=True, slots=True)
class ZipWith:
    """Combine the stream with ``fn.arity - 1`` new inputs, elementwise, after broadcasting.

    As the first stage of a pipeline it takes ``fn.arity`` inputs and no stream. ``constant_along``: axes of the
    stream along which each new input must have size 1 (a ``(N, 1)`` target beside ``(N, C)`` logits), checked
    when the pipeline is called; a ``(N,)`` one would broadcast along the other axis. ``lags``: new inputs read
    at another place along an axis (:class:`Lag`).
    """

    fn: Function
    location: Location | None = field(default=None, compare=False)
    constant_along: tuple[int, ...] = ()
    lags: tuple[Lag, ...] = ()


@dataclass(frozen=True, slots=True)
class Reduce:
    """Combine elements along ``axis`` (None: all axes) with the associative binary operator ``op``.

    ``mean`` divides the combined value by the number of elements combined (the ``mean`` shorthand).
    ``dtype``, as torch.sum's: the stream is converted to it before combining, and the result has it.
    ``index`` (the ``argmax``/``argmin`` shorthands, with ``maximum``/``minimum``): the result is the int64
    position of the chosen element along the reduced axis (the flat row-major position for ``axis=None``), the
    first one on ties, NaN counting as the largest and the smallest value, as torch.argmax/argmin.
    ``skip_nan`` (the ``nansum`` shorthand): NaN elements count as the identity, as torch.nansum.
    ``identity``: the operator's identity, for an operator that is not a builtin (builtins know theirs); a
    k-tuple for an operator on k-tuples (2k arguments, k results), which combines a k-tuple stream.
    """

    op: Function
    axis: tuple[int, ...] | None = None
    keepdim: bool = False
    mean: bool = False
    dtype: torch.dtype | None = None
    index: bool = False
    skip_nan: bool = False
    identity: float | int | bool | tuple | None = None
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Scan:
    """Inclusive prefix combine of the stream along ``axis`` with the associative binary operator ``op``.

    ``dtype``, as torch.cumsum's: the stream is converted to it before combining, and the result has it.
    ``reverse``: combine from the end of the axis (``flip``, scan, ``flip``). ``exclusive``: element i combines
    the elements strictly before it (after it, reversed); the first holds the operator's identity.
    ``identity``: the operator's identity, for an operator that is not a builtin; a k-tuple for an operator
    on k-tuples, as for :class:`Reduce`.
    ``index`` (the ``cummax``/``cummin`` shorthands, with ``maximum``/``minimum``): the result is two fields, the
    running values and the int64 position along the axis where each was seen, the latest one on ties, NaN counting
    as the largest and the smallest value, as torch.cummax/cummin.
    """

    op: Function
    axis: int = -1
    dtype: torch.dtype | None = None
    reverse: bool = False
    exclusive: bool = False
    identity: float | int | bool | tuple | None = None
    location: Location | None = field(default=None, compare=False)
    index: bool = False


@dataclass(frozen=True, slots=True)
class Attach:
    """The stream continues element by element, with the result fields of ``pipeline``, a reduction of the
    stream's fields, appended: each broadcast back along the axes ``pipeline`` reduced (as ``keepdim=True``
    would keep them), so every element of a row sees its row's result.

    ``pipeline`` takes the stream's fields (its first stage is a map, a zip_with of exactly the stream's fields,
    or the reduce itself), holds one reduce and no scan, and brings in no input of its own; stages after its
    reduce act on the reduced values (a mean's division, a softmax denominator's fix-up). The stream entering
    an attach is broadcast together first, so every field after it has the stream's shape.
    """

    pipeline: "PipelineIR"
    location: Location | None = field(default=None, compare=False)

    @property
    def reduce_at(self) -> int:
        """The position of the reduce within ``pipeline``."""
        return next(i for i, s in enumerate(self.pipeline.stages) if isinstance(s, Reduce))

    @property
    def reduce(self) -> Reduce:
        """The reduce of ``pipeline``: its axes are the axes the result is broadcast along."""
        return self.pipeline.stages[self.reduce_at]


Stage = Union[Map, ZipWith, Reduce, Scan, Attach]


@dataclass(frozen=True, slots=True)
class PipelineIR:
    """An ordered, non-empty tuple of stages.

    ``column_sums``: result fields that the kernel sums over the rows instead of storing them element by element,
    for a pipeline of attaches (no reduce or scan outside them): each such field's result has the stream's shape
    with size 1 along every axis the attaches keep, the sum over those axes, accumulated in the field's compute
    dtype (float32 for half types) and rounded once to its dtype. The norms' backward asks for it (a weight's
    gradient, the per-element terms summed over the rows, in the kernel of the input's): no user stage writes it.
    """

    stages: tuple[Stage, ...]
    column_sums: tuple[int, ...] = ()

    @property
    def num_inputs(self) -> int:
        """How many tensors the pipeline takes."""
        return sum(new_inputs(self.stages))

    @property
    def width(self) -> int:
        """How many fields the result has: 1 for a tensor, k for a k-tuple of tensors."""
        return stream_widths(self.stages)[-1]

    @property
    def functions(self) -> tuple[Function, ...]:
        """Every scalar function of the pipeline, in order: a map's or zip_with's function, a reduce's or scan's
        operator, and those of each attached pipeline."""
        return tuple(fn for s in self.stages for fn in stage_functions(s))


def stage_functions(stage: Stage) -> tuple[Function, ...]:
    """The scalar functions of one stage: its function or operator, or an attach's pipeline's functions."""
    if isinstance(stage, Attach):
        return stage.pipeline.functions
    return (stage.fn if isinstance(stage, (Map, ZipWith)) else stage.op,)


def stream_widths(stages: tuple[Stage, ...]) -> list[int]:
    """The number of fields of the stream after each stage (a map or zip_with returning a k-tuple makes k, and so
    does a reduce or scan with an operator on k-tuples)."""
    widths: list[int] = []
    for s in stages:
        if isinstance(s, Attach):
            widths.append((widths[-1] if widths else 1) + s.pipeline.width)
        else:
            widths.append(len(s.fn.outputs) if isinstance(s, (Map, ZipWith)) else 2 if isinstance(s, Scan) and s.index
                          else len(s.op.outputs))
    return widths


def new_inputs(stages: tuple[Stage, ...]) -> list[int]:
    """How many pipeline inputs each stage brings in: the first stage takes its inputs (one, or a zip_with's
    arity); a later zip_with takes the stream's fields as its first arguments and one input per further one. A
    reduce, scan or attach that starts a pipeline takes one input; later, none (an attached pipeline brings in
    no input)."""
    counts = []
    width = 0
    for i, (stage, after) in enumerate(zip(stages, stream_widths(stages))):
        if i == 0:
            counts.append(stage.fn.arity if isinstance(stage, ZipWith) else 1)
        else:
            counts.append(max(stage.fn.arity - width, 0) if isinstance(stage, ZipWith) else 0)
        width = after
    return counts

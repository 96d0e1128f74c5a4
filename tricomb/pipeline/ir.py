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
class ZipWith:
    """Combine the stream with ``fn.arity - 1`` new inputs, elementwise, after broadcasting.

    As the first stage of a pipeline it takes ``fn.arity`` inputs and no stream.
    """

    fn: Function
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Reduce:
    """Combine elements along ``axis`` (None: all axes) with the associative binary operator ``op``.

    ``mean`` divides the combined value by the number of elements combined (the ``mean`` shorthand).
    ``dtype``, as torch.sum's: the stream is converted to it before combining, and the result has it.
    ``index`` (the ``argmax``/``argmin`` shorthands, with ``maximum``/``minimum``): the result is the int64
    position of the chosen element along the reduced axis (the flat row-major position for ``axis=None``), the
    first one on ties, NaN counting as the largest and the smallest value, as torch.argmax/argmin.
    """

    op: Function
    axis: tuple[int, ...] | None = None
    keepdim: bool = False
    mean: bool = False
    dtype: torch.dtype | None = None
    index: bool = False
    location: Location | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Scan:
    """Inclusive prefix combine of the stream along ``axis`` with the associative binary operator ``op``.

    ``dtype``, as torch.cumsum's: the stream is converted to it before combining, and the result has it.
    """

    op: Function
    axis: int = -1
    dtype: torch.dtype | None = None
    location: Location | None = field(default=None, compare=False)


Stage = Union[Map, ZipWith, Reduce, Scan]


@dataclass(frozen=True, slots=True)
class PipelineIR:
    """An ordered, non-empty tuple of stages."""

    stages: tuple[Stage, ...]

    @property
    def num_inputs(self) -> int:
        """How many tensors the pipeline takes."""
        count = 0
        for i, stage in enumerate(self.stages):
            if isinstance(stage, ZipWith):
                count += stage.fn.arity if i == 0 else stage.fn.arity - 1
            elif i == 0:
                count += 1
        return count

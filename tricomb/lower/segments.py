"""The segments of a kernel plan: what the one kernel of a pipeline does, in order.

A plan is a sequence of segments, each a frozen dataclass selected by its type:

* :class:`Elementwise`: map/zip_with stages applied lane by lane;
* :class:`TileReduce` and :class:`TileScan`: the fold of a reduce or scan stage over tiles of its rows;
* :class:`Ticket` and :class:`LookBack`: the cross-program combine after a fold, when programs share a row
  (the last program of a row folds the partials; each tile of a scan finds its prefix by the decoupled
  look-back);
* :class:`Attach`: an attached reduce's row results broadcast back to the row's elements;
* :class:`RowsReduce`: a reduce of the rows' results after the per-row one, finished by the last program;
* :class:`ColumnSums`: fields of the elements summed over the rows, finished by the last programs;
* :class:`Store`: the results written.

``map exp`` is ``Elementwise(map exp), Store``; ``scan maximum | zip_with sub | max`` is ``Elementwise(),
TileScan, LookBack, Elementwise(zip_with sub), TileReduce, Ticket, Elementwise(), Store``; softmax written
``attach max | map exp(v - m) | attach sum | map e / s`` is ``Elementwise(), Elementwise(), TileReduce(max),
Elementwise(), Attach, Elementwise(map exp), Elementwise(), TileReduce(sum), Elementwise(), Attach,
Elementwise(map div), Store`` (each attached pipeline's stages before and after its reduce): a new fusion is a
new composition of these, not a new kind of plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch

from ..pipeline.ir import Reduce, Scan, Stage
from ..scalar.builtins import OpSpec, TupleOpSpec
from ..scalar.ir import Function


@dataclass(frozen=True, slots=True)
class Slot:
    """A tensor the kernel reads or writes: kernel parameter ``name`` of ``dtype``. ``phase`` is how many folds
    come before the kernel reads it (an input) or writes it (an output): 0 for an input loaded with the tiles
    the first fold combines (every input of an elementwise plan), 1 for one joining after the first fold, 2 after
    the reduce fused behind a scan; an output's phase is the number of folds. ``lag``: an input read that many
    places back along the scanned axis, ``fill`` where that is outside it (a zip_with's
    :class:`~tricomb.pipeline.ir.Lag`)."""

    name: str
    dtype: torch.dtype
    phase: int
    lag: int = 0
    fill: float | int | bool = 0


@dataclass(frozen=True, slots=True)
class Elementwise:
    """Map/zip_with ``stages`` applied lane by lane; ``first`` is the pipeline position of ``stages[0]`` (of
    where they would start, when there are none). ``within``: for stages of an attached pipeline, the pipeline
    position of the attach (``first`` then counts within its pipeline, and the stages bring in no input)."""

    stages: tuple[Stage, ...]
    first: int
    within: int | None = None


@dataclass(frozen=True, slots=True)
class _Fold:
    """What every fold knows: the reduce or scan ``stage`` at pipeline position ``at``; ``combined_dtypes``,
    torch's dtype of each stream field after it; ``acc_dtypes``, the compute dtype of each accumulator field;
    ``identities``, the operator's identity in each accumulator field's dtype (masked lanes hold it);
    ``operator``, the builtin's table row (of :data:`~tricomb.scalar.builtins.OPS`, or of
    :data:`~tricomb.scalar.builtins.TUPLE_OPS` for an operator on tuples), or None."""

    stage: Reduce | Scan
    at: int
    combined_dtypes: tuple[torch.dtype, ...]
    acc_dtypes: tuple[torch.dtype, ...]
    identities: tuple
    operator: OpSpec | TupleOpSpec | None

    @property
    def width(self) -> int:
        """How many fields the operator combines (k for an operator on k-tuples)."""
        return len(self.acc_dtypes)


@dataclass(frozen=True, slots=True)
class TileReduce(_Fold):
    """The fold of a reduce into per-row accumulators.

    ``ordered``: the operator does not commute, so elements fold in row-major order. ``share``: for a reduce
    right after its lift map whose operator is an online normalizer's pair, the declared share of an element at
    a maximum (:func:`~tricomb.pipeline.operators.declare_share`, or derived for a user's operator:
    :func:`~tricomb.pipeline.operators.derived_share`; ``declared`` tells them apart), by which whole tiles fold (the lift is then
    not computed); else None."""

    ordered: bool = False
    share: Function | None = None
    declared: bool = False  # the share is the library's own: NaN exactly where an element is
    attached: bool = False  # an attach's reduce: its result is broadcast back over the row (:class:`Attach`)

    @property
    def per_row(self) -> bool:
        """The accumulators hold one value per row (``[BLOCK_M]``), not one per lane: an operator that does not
        commute folds in order, and an online normalizer's pair folds whole tiles (``share``)."""
        return self.ordered or self.share is not None


@dataclass(frozen=True, slots=True)
class TileScan(_Fold):
    """The fold of a scan, tile by tile, carrying each row's prefix. ``commutes``: the operator commutes, so a
    tile's aggregate may fold as a tree."""

    commutes: bool = False


Fold = Union[TileReduce, TileScan]


@dataclass(frozen=True, slots=True)
class Ticket:
    """After ``fold``: a row's elements split over programs, each folding its part; the program that draws the
    last ticket of the row tile folds the partials in order."""

    fold: TileReduce


@dataclass(frozen=True, slots=True)
class LookBack:
    """After ``fold``: one tile per program, each finding the prefix of the tiles before it by the decoupled
    look-back."""

    fold: TileScan


@dataclass(frozen=True, slots=True)
class Attach:
    """After ``fold`` (an attach's reduce) and the attached pipeline's stages after it: each row's result
    fields join the stream of every element of the row again, broadcast along the reduced axes; the stages
    after it act on the row's elements."""

    fold: TileReduce


@dataclass(frozen=True, slots=True)
class OneHot:
    """A derived form of the reduce after attaches (:func:`~tricomb.lower.derive.one_hot`): its fields are sums
    whose summands are 0 but at one position of the row, ``position`` (a function of the stage before the reduce's
    arguments, of which it reads only those known per row), so a row swept in tiles reads that one element after
    its attached folds instead of sweeping again. ``sources`` gives each argument's origin: ``("attached", n,
    j)``, field j of attached fold n's row results; ``("input", name)``, an input slot constant along the row; or
    ``("element",)``, which ``position`` does not read."""

    fold: TileReduce
    position: Function
    sources: tuple[tuple, ...]


@dataclass(frozen=True, slots=True)
class RowsReduce(_Fold):
    """A reduce after the per-row one, over all the axes it leaves: each program folds its rows' results into a
    partial, then the program drawing the last ticket folds the programs' partials in index order (so a run
    gives the same result as the last) and writes the one result. Its operator commutes (the rows are not met
    in order); rows are never split over programs in a plan that has one."""

    ordered = False  # (read by the ticket's emitter, as a TileReduce's)


@dataclass(frozen=True, slots=True)
class ColumnSums:
    """Result fields ``fields`` summed over the rows into ``outputs`` instead of stored element by element
    (:attr:`~tricomb.pipeline.ir.PipelineIR.column_sums`), accumulated in ``acc_dtypes``: the programs step
    through the row tiles (as many programs as fill the GPU), each folding its rows' elements into a partial per
    position along the row; the program drawing the last ticket of a group of programs folds the group's
    partials, and the one drawing the last group's ticket folds the groups' and stores the sums, each in index
    order (so a run gives the same result as the last)."""

    fields: tuple[int, ...]
    outputs: tuple[Slot, ...]
    acc_dtypes: tuple[torch.dtype, ...]


@dataclass(frozen=True, slots=True)
class Store:
    """The results written: one output slot per result field."""

    outputs: tuple[Slot, ...]


Segment = Union[Elementwise, TileReduce, TileScan, Ticket, LookBack, Attach, OneHot, RowsReduce, ColumnSums, Store]

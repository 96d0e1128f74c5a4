"""Fusion: a bound pipeline becomes one kernel plan, a sequence of segments (:mod:`.segments`).

Every pipeline becomes exactly one kernel:

* no reduce or scan: one :class:`~.segments.Elementwise` segment over a flat index of the output;
* a reduce: ``M`` rows (the kept groups) by ``K`` reduced elements; the stages before the reduce run inside the
  loop over ``K``, its :class:`~.segments.TileReduce` folds them, a :class:`~.segments.Ticket` finishes rows split
  over programs, and the stages after it run in the epilogue;
* a scan: ``M`` rows by ``K`` scanned elements, tile by tile, carrying the running prefix (a
  :class:`~.segments.TileScan`, its :class:`~.segments.LookBack` when tiles are one per program); stages before
  the scan run on loaded tiles, stages after it on the scanned tile; a reduce over the scanned axis after it
  folds the scanned tiles in the same loop (its own TileReduce and Ticket).

The planner takes the pipeline after the rewrites :func:`~.expand.expand` and :func:`~.totalize.totalize`;
what must be read from the stages as written (their laws in the values' dtypes, whether each operator commutes)
is read before them: :func:`check_dtypes` and :func:`fold_commutes`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..errors import DTypeError
from ..pipeline.fields import field_inputs
from ..pipeline import ir
from ..pipeline.ir import Map, PipelineIR, Reduce, Scan
from ..pipeline.operators import declared_share, derived_share, identities
from ..pipeline.verify import check_in_dtypes, operator_commutes, operator_identity, operator_spec
from ..scalar.builtins import TupleOpSpec, tuple_operator
from ..scalar.ir import Function
from ..scalar.dtypes import compute_dtype, typed_identity
from .bind import Binding, combined_dtypes, fold_context, input_stages, rows_reduce
from .derive import one_hot, one_pass
from .segments import (Attach, ColumnSums, Elementwise, Fold, LookBack, OneHot, RowsReduce, Segment, Slot, Store,
                       Ticket, TileReduce, TileScan)


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Everything the emitter needs to write the one kernel of a pipeline and its launcher: the shared facts and
    the kernel's ``segments``, in order."""

    pipeline: PipelineIR  # after the rewrites
    written: PipelineIR  # as the user wrote it (what the module's docstring names)
    binding: Binding
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]  # one per result field: ``out``, or ``out0``, ``out1``, ... for a tuple
    field_inputs: tuple[frozenset[int], ...]  # per result field, the inputs it is computed from
    compute_dtype: torch.dtype  # widest float compute dtype of the inputs (half types computed in float32)
    segments: tuple[Segment, ...]
    long_rows: "KernelPlan | None" = None  # for rows swept in tiles, when they take another form (derive.py)
    one_hot: OneHot | None = None  # the reduce after attaches read at one position a row (derive.one_hot), where
    # ``long_rows`` is None

    @property
    def num_kernels(self) -> int:
        return 1

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self.inputs + self.outputs

    @property
    def folds(self) -> tuple[Fold, ...]:
        """The reduce and scan folds, in pipeline order (none, one, or a scan and the reduce fused after it)."""
        return tuple(s for s in self.segments if isinstance(s, (TileReduce, TileScan)))

    @property
    def over_rows(self) -> RowsReduce | None:
        """The reduce over the rows' results after the per-row one, if any."""
        return next((s for s in self.segments if isinstance(s, RowsReduce)), None)

    @property
    def column_sums(self) -> ColumnSums | None:
        """The result fields summed over the rows, if any."""
        return next((s for s in self.segments if isinstance(s, ColumnSums)), None)

    @property
    def shareable(self) -> bool:
        """Programs may share its rows (a few long rows, a whole array): attaches, and nothing folded after them
        (their result is the stream's elements, each program storing its own; fields summed over the rows are
        folded by programs that each hold whole rows)."""
        return (bool(self.folds) and self.folds[-1].attached and self.over_rows is None
                and self.column_sums is None)

    def following(self, segment: Segment, kind: type) -> Segment:
        """The first segment of type ``kind`` after ``segment``."""
        at = self.segments.index(segment)
        return next(s for s in self.segments[at + 1:] if isinstance(s, kind))

    def phase_after(self, fold: Fold) -> int:
        """The phase (:class:`~.segments.Slot`) of what the kernel reads or writes after ``fold``."""
        return self.folds.index(fold) + 1

    def joining(self, phase: int) -> tuple[Slot, ...]:
        """The inputs of ``phase``: loaded before the first fold (0), or after the fold ``phase`` counts."""
        return tuple(s for s in self.inputs if s.phase == phase)


def _compute_dtype(dtypes) -> torch.dtype:
    from ..scalar.dtypes import kernel_compute_dtype
    return kernel_compute_dtype(dtypes)


def _check_identity_fits(stage, accs: tuple[torch.dtype, ...]) -> None:
    """Each field's identity is a value of the field's dtype: an integer within its range, and a bool only for
    bool values (the law check samples a field with a bool identity as truth values alone)."""
    for e, acc in zip(identities(stage.identity), accs):
        if isinstance(e, bool) and acc != torch.bool:
            raise DTypeError(f"identity={stage.identity!r} gives {e!r} for {str(acc)[6:]} values; give a number "
                             f"({int(e)} is the same value as a number)", stage.location)
        value = typed_identity(e, acc)
        if not acc.is_floating_point and acc != torch.bool and not (
                torch.iinfo(acc).min <= value <= torch.iinfo(acc).max):
            raise DTypeError(f"identity={stage.identity!r} does not fit the {str(acc)[6:]} values this stage "
                             f"combines; give one in [{torch.iinfo(acc).min}, {torch.iinfo(acc).max}]",
                             stage.location)


def _fold_positions(pipeline: PipelineIR) -> list[int]:
    """The positions of the stages that fold: reduces, scans and attaches (each attach folds its reduce)."""
    return [i for i, s in enumerate(pipeline.stages) if isinstance(s, (Reduce, Scan, ir.Attach))]


def check_dtypes(pipeline: PipelineIR, binding: Binding) -> None:
    """The laws each reduce's or scan's values' dtypes decide (:func:`~tricomb.pipeline.verify.check_in_dtypes`),
    on the stages as written (before :func:`~.expand.expand` and :func:`~.totalize.totalize`). Raises
    :class:`~tricomb.errors.LawError`."""
    for i in _fold_positions(pipeline):
        context, at, stage = fold_context(pipeline, i)
        check_in_dtypes(stage, tuple(compute_dtype(c) for c in combined_dtypes(context, binding, at)))


def fold_commutes(pipeline: PipelineIR) -> tuple[bool, ...]:
    """Per reduce or scan stage, in order, whether its operator commutes. Read from the stages as written: the
    validity flag :func:`~.totalize.totalize` gives an operator without identity makes an operator whose law
    check fails (its identity holds only for valid lanes). (A builtin operator on tuples that the ``expand`` pass
    wrote says itself: :func:`plan` reads it from the op table.)"""
    return tuple(operator_commutes(fold_context(pipeline, i)[2]) for i in _fold_positions(pipeline))


def plan(pipeline: PipelineIR, written: PipelineIR, binding: Binding) -> KernelPlan:
    """The kernel plan for ``pipeline``, the pipeline ``written`` rewritten by :func:`~.expand.expand` and
    :func:`~.totalize.totalize`, on inputs of ``binding``'s layout class (whether each operator commutes is read
    from ``written``: :func:`fold_commutes`); with attaches whose chain has a one-pass form
    (:func:`~.derive.one_pass`), the plan of that form for rows swept in tiles too. Raises :class:`~tricomb.errors.DTypeError` for an identity that is not a
    value of its fields' dtypes."""
    commutes = fold_commutes(written)
    derived = one_pass(pipeline, binding) if any(isinstance(s, ir.Attach) for s in pipeline.stages) else None
    long_rows = None
    if derived is not None:  # its new folds commute; the others are the pipeline's own stages
        known = {id(pipeline.stages[at]): c for at, c in zip(_fold_positions(pipeline), commutes)}
        long_rows = _plan(derived, written, binding,
                          tuple(known.get(id(derived.stages[at]), True) for at in _fold_positions(derived)))
    base = _plan(pipeline, written, binding, commutes)
    # the one-hot read follows the attached folds of either branch, which leave the same row results only when
    # the long rows keep the plan's own form
    return dataclasses.replace(base, long_rows=long_rows, one_hot=base.one_hot if long_rows is None else None)


def _plan(pipeline: PipelineIR, written: PipelineIR, binding: Binding, commutes: tuple[bool, ...]) -> KernelPlan:
    positions = _fold_positions(pipeline)
    owners = input_stages(pipeline)
    lags = _lags(pipeline)
    inputs = tuple(Slot(f"in{i}", dtype, sum(owner > at for at in positions), *lags.get(i, ()))
                   for i, (dtype, owner) in enumerate(zip(binding.dtypes, owners)))
    names = ["out"] if len(binding.out_dtypes) == 1 else [f"out{k}" for k in range(len(binding.out_dtypes))]
    outputs = tuple(Slot(name, dtype, len(positions)) for name, dtype in zip(names, binding.out_dtypes))
    scans = [at for at in positions if isinstance(pipeline.stages[at], Scan)]
    rows_at, _ = rows_reduce(pipeline)
    folds = [_fold(pipeline, binding, at, c, after_scan=any(s < at for s in scans))
             for at, c in zip(positions, commutes) if at != rows_at]
    over_rows = _rows_fold(pipeline, binding, rows_at) if rows_at < len(pipeline.stages) else None
    segments = _segments(pipeline, folds, outputs, over_rows, written.column_sums)
    return KernelPlan(pipeline, written, binding, inputs, outputs, field_inputs(pipeline), _compute_dtype(binding.dtypes),
                      segments, one_hot=one_hot(segments, pipeline, binding))


def _lags(pipeline: PipelineIR) -> dict[int, tuple]:
    """Per input a zip_with reads with a :class:`~tricomb.pipeline.ir.Lag`, its slot's ``lag`` and ``fill``."""
    owners = input_stages(pipeline)
    found = {}
    for i, owner in enumerate(owners):
        stage = pipeline.stages[owner]
        for lag in stage.lags if isinstance(stage, ir.ZipWith) else ():
            if lag.input == i - owners.index(owner):
                found[i] = (lag.by, lag.fill)
    return found


def _segments(pipeline: PipelineIR, folds: list[Fold], outputs: tuple[Slot, ...],
              over_rows: RowsReduce | None, column_sums: tuple[int, ...]) -> tuple[Segment, ...]:
    """Elementwise stages, then per fold the fold, its cross-program combine and the stages after it; the
    reduce over the rows and the stages after it; the fields summed over the rows; the store of the others."""
    segments: list[Segment] = [Elementwise(pipeline.stages[:folds[0].at] if folds else pipeline.stages, 0)]
    # rows are not split over programs for a reduce after attaches, nor for one whose rows are reduced again
    whole_rows = over_rows is not None or any(isinstance(f, TileReduce) and f.attached for f in folds)
    ends = [f.at for f in folds[1:]] + [over_rows.at if over_rows is not None else len(pipeline.stages)]
    for fold, end in zip(folds, ends):
        after = Elementwise(pipeline.stages[fold.at + 1:end], fold.at + 1)
        if isinstance(fold, TileReduce) and fold.attached:
            segments += [*_attached(pipeline.stages[fold.at], fold), after]
        elif whole_rows:
            segments += [fold, after]
        else:
            segments += [fold, Ticket(fold) if isinstance(fold, TileReduce) else LookBack(fold), after]
    if over_rows is not None:
        segments += [over_rows, Elementwise(pipeline.stages[over_rows.at + 1:], over_rows.at + 1)]
    if column_sums:
        summed = tuple(outputs[j] for j in column_sums)
        segments.append(ColumnSums(column_sums, summed, tuple(compute_dtype(s.dtype) for s in summed)))
    return tuple(segments) + (Store(tuple(s for j, s in enumerate(outputs) if j not in column_sums)),)


def _rows_fold(pipeline: PipelineIR, binding: Binding, at: int) -> RowsReduce:
    """The reduce over the rows at ``at`` (its operator commutes: verify checks it), its dtypes checked."""
    return RowsReduce(pipeline.stages[at], at, *_fold_facts(pipeline, binding, at))


def _fold_facts(pipeline: PipelineIR, binding: Binding, at: int) -> tuple:
    """What every fold of the reduce or scan at ``at`` knows (:class:`~.segments.Fold`'s fields after its
    position): the combined dtypes, the accumulators' dtypes, the identity in them (checked to fit), and the
    operator's table row."""
    stage = pipeline.stages[at]
    combined = combined_dtypes(pipeline, binding, at)
    acc = tuple(compute_dtype(c) for c in combined)
    if stage.identity is not None:
        _check_identity_fits(stage, acc)
    typed = tuple(typed_identity(e, dtype) for e, dtype in zip(identities(operator_identity(stage)), acc))
    return combined, acc, typed, operator_spec(stage.op) or tuple_operator(stage.op)


def _attached(stage: ir.Attach, fold: TileReduce) -> list[Segment]:
    """An attach's segments: its pipeline's stages before the reduce, the fold, the stages after it (on the
    row's results), and the results broadcast back to the row's elements."""
    inner, r = stage.pipeline.stages, stage.reduce_at
    return [Elementwise(inner[:r], 0, fold.at), fold, Elementwise(inner[r + 1:], r + 1, fold.at), Attach(fold)]


def _fold(pipeline: PipelineIR, binding: Binding, at: int, commutes: bool, after_scan: bool) -> Fold:
    """The fold of the reduce, scan or attach at ``at``, its dtypes checked."""
    attached = isinstance(pipeline.stages[at], ir.Attach)
    context, inner, stage = fold_context(pipeline, at)
    combined, acc, typed, spec = _fold_facts(context, binding, inner)
    if isinstance(spec, TupleOpSpec):
        commutes = spec.commutative
    if isinstance(stage, Scan):
        return TileScan(stage, at, combined, acc, typed, spec, commutes=commutes)
    # a reduce after a scan takes the scanned tile as it is
    # (an attach's reduce takes a lift of its own pipeline only: the stream before the attach flows on)
    lifted = not after_scan and not (attached and inner == at)
    share, declared = _share(context, inner, stage, commutes, acc) if lifted else (None, False)
    return TileReduce(stage, at, combined, acc, typed, spec, ordered=not commutes, share=share,
                      declared=declared, attached=attached)


def _share(pipeline: PipelineIR, at: int, stage: Reduce, commutes: bool,
           acc: tuple[torch.dtype, ...]) -> tuple[Function | None, bool]:
    """The share of a reduce right after its lift map and whether it is declared: by the library
    (:func:`declare_share`), or derived for a user's operator that commutes on float accumulators
    (:func:`derived_share`; an integer maximum would meet the float shares' sum), or (None, False)."""
    lift = pipeline.stages[at - 1] if at else None
    if not isinstance(lift, Map):
        return None, False
    declared = declared_share(lift.fn, stage.op, stage.identity)
    if declared is not None:
        return declared, True
    if not commutes or operator_spec(stage.op) is not None or not all(d.is_floating_point for d in acc):
        return None, False
    return derived_share(lift.fn, stage.op, stage.identity), False

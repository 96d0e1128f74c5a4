"""Fusion: a bound pipeline becomes one kernel plan.

Every pipeline becomes exactly one kernel of one of three kinds:

* ``map``: no reduce or scan; one flat index over the output.
* ``reduce``: ``M`` rows (the kept groups) by ``K`` reduced elements; the stages before the reduce run inside
  the loop over ``K``, the stages after it in the epilogue. When rows are few and long, programs split each row
  and the last program to finish a row (an atomic ticket) combines the partials in a fixed order.
* ``scan``: ``M`` rows by ``K`` scanned elements, tile by tile, carrying the running prefix; stages before the
  scan run on loaded tiles, stages after it on the scanned tile before the store.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..errors import DTypeError
from ..pipeline.evaluate import evaluate_fields
from ..pipeline.fields import field_inputs
from ..pipeline.printer import stage_text as stage_name
from ..pipeline.ir import Map, PipelineIR, Reduce, Scan, Stage
from ..pipeline.operators import declared_share, identities
from ..pipeline.verify import check_in_dtypes, operator_commutes, operator_identity, operator_spec
from ..scalar.builtins import OpSpec
from ..scalar.ir import Function
from ..scalar.dtypes import compute_dtype, typed_identity
from .bind import Binding, Group, combine_stage, input_stages
from .expand import expand
from .totalize import totalize


@dataclass(frozen=True, slots=True)
class Slot:
    """A tensor the kernel reads or writes: kernel parameter ``name``."""

    name: str
    dtype: torch.dtype
    after: bool  # read after the reduce/scan (or the output)
    late: bool = False  # read after the reduce that follows a scan (or the output of such a fused pair)


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Everything the emitter needs to write the one kernel of a pipeline and its launcher."""

    kind: str  # "map" | "reduce" | "scan"
    pipeline: PipelineIR
    binding: Binding
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]  # one per result field: ``out``, or ``out0``, ``out1``, ... for a tuple
    field_inputs: tuple[frozenset[int], ...]  # per result field, the inputs it is computed from
    before: tuple[Stage, ...]  # stages applied before the reduce/scan (all of them for a map kernel)
    combine: Reduce | Scan | None
    after: tuple[Stage, ...]  # stages applied to the reduced or scanned values
    compute_dtype: torch.dtype  # widest float compute dtype of the inputs (half types computed in float32)
    combined_dtypes: tuple[torch.dtype, ...] | None  # torch's dtype of each stream field just after the reduce/scan
    acc_dtypes: tuple[torch.dtype, ...] | None  # the compute dtype of each accumulator field (the values, for argmax)
    # a scan fused with a reduce over the scanned axis after it: that reduce, the stages after it, its dtypes
    then: Reduce | None = None
    then_after: tuple[Stage, ...] = ()
    then_combined_dtypes: tuple[torch.dtype, ...] | None = None
    then_acc_dtypes: tuple[torch.dtype, ...] | None = None
    ordered: bool = False  # the plan's reduce (or the one fused after its scan) does not commute: row-major order
    scan_commutes: bool = False  # the plan's scan has an operator that commutes (its tiles may fold as trees)
    # a reduce right after its lift map, whose operator is an online normalizer's pair: the declared share of
    # an element at a maximum (:func:`declare_share`), by which whole tiles fold; the lift is not computed
    share: Function | None = None


    def reduce_view(self) -> "KernelPlan":
        """For a scan fused with a reduce: the plan seen from that reduce, which combines the scanned stream
        (the stages up to the reduce are its ``before``; the inputs joining after it are its ``after`` ones)."""
        at = len(self.before) + 1 + len(self.after)
        inputs = tuple(dataclasses.replace(s, after=s.late, late=False) for s in self.inputs)
        return dataclasses.replace(self, kind="reduce", inputs=inputs, before=self.pipeline.stages[:at],
                                   combine=self.then, after=self.then_after,
                                   combined_dtypes=self.then_combined_dtypes, acc_dtypes=self.then_acc_dtypes,
                                   then=None, then_after=(), then_combined_dtypes=None, then_acc_dtypes=None)

    @property
    def per_row(self) -> bool:
        """The reduce's accumulators hold one value per row (``[BLOCK_M]``), not one per lane: an operator that
        does not commute folds in order, and an online normalizer's pair folds whole tiles (``share``)."""
        return self.ordered or self.share is not None

    @property
    def width(self) -> int:
        """How many fields the reduce/scan combines (k for an operator on k-tuples)."""
        return len(self.acc_dtypes)

    @property
    def combined_dtype(self) -> torch.dtype:
        """The combined dtype of an operator on single values."""
        return self.combined_dtypes[0]

    @property
    def acc_dtype(self) -> torch.dtype:
        """The accumulator dtype of an operator on single values."""
        return self.acc_dtypes[0]

    @property
    def index(self) -> bool:
        """An argmax/argmin: the accumulator pairs each value with its int64 position along the reduced axes."""
        return isinstance(self.combine, Reduce) and self.combine.index

    @property
    def index_scan(self) -> bool:
        """A cummax/cummin: the accumulator's two fields are the values and their int64 positions along the axis."""
        return isinstance(self.combine, Scan) and self.combine.index

    @property
    def identities(self) -> tuple:
        """The operator's identity in each accumulator field's dtype (masked lanes hold it)."""
        found = identities(operator_identity(self.combine)) + ((-1,) if self.index_scan else ())  # -1: no position
        return tuple(typed_identity(e, dtype) for e, dtype in zip(found, self.acc_dtypes))

    @property
    def num_kernels(self) -> int:
        return 1

    @property
    def operator(self) -> OpSpec | None:
        return operator_spec(self.combine.op) if self.combine is not None else None

    @property
    def kept(self) -> tuple[Group, ...]:
        return tuple(g for g in self.binding.groups if g.kind == "kept")

    @property
    def reduced(self) -> tuple[Group, ...]:
        return tuple(g for g in self.binding.groups if g.kind == "reduced")

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self.inputs + self.outputs


def _compute_dtype(dtypes) -> torch.dtype:
    from ..scalar.dtypes import kernel_compute_dtype
    return kernel_compute_dtype(dtypes)


def combined_dtypes(pipeline: PipelineIR, binding: Binding, at: int) -> tuple[torch.dtype, ...]:
    """torch's dtype for each field of the stream right after stage ``at``."""
    owners = input_stages(pipeline)
    metas = [torch.empty((1,) * rank, dtype=dtype, device="meta")
             for dtype, rank, owner in zip(binding.dtypes, binding.ranks, owners) if owner <= at]
    return tuple(t.dtype for t in evaluate_fields(PipelineIR(pipeline.stages[:at + 1]), metas))


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


def _index_values_dtype(pipeline: PipelineIR, binding: Binding, at: int) -> torch.dtype:
    """The dtype of the values an argmax/argmin compares (the stream entering stage ``at``); bool is refused,
    as torch's CPU and CUDA kernels refuse it."""
    dtype = combined_dtypes(pipeline, binding, at - 1)[0] if at else binding.dtypes[0]
    if dtype == torch.bool:
        stage = pipeline.stages[at]
        raise DTypeError(f"{stage_name(stage)} does not take bool values, as torch's does not; map them to integers "
                         "first (tc.map(lambda v: v * 1))", stage.location)
    return dtype


def plan(pipeline: PipelineIR, binding: Binding) -> KernelPlan:
    """The kernel plan for ``pipeline`` on inputs of ``binding``'s layout class (after the rewrites
    :func:`expand` and :func:`totalize`)."""
    ordered = [isinstance(s, Reduce) and not s.index and not operator_commutes(s)
               for s in pipeline.stages if isinstance(s, (Reduce, Scan))]  # (before the rewrites add flags)
    scans = [s for s in pipeline.stages if isinstance(s, Scan)]  # at most one (verify refuses more)
    scan_commutes = bool(scans) and not scans[0].index and operator_commutes(scans[0])
    for i, s in enumerate(pipeline.stages):  # the laws these values' dtypes decide, on the stages as written
        if isinstance(s, (Reduce, Scan)):
            check_in_dtypes(s, tuple(compute_dtype(c) for c in combined_dtypes(pipeline, binding, i)))
    pipeline = totalize(expand(pipeline))
    at, stage = combine_stage(pipeline)
    then_at, then = combine_stage(pipeline, at + 1)
    late = binding.joins_late or (False,) * len(binding.dtypes)
    inputs = tuple(Slot(f"in{i}", dtype, after, lt) for i, (dtype, after, lt)
                   in enumerate(zip(binding.dtypes, binding.joins_after, late)))
    names = ["out"] if len(binding.out_dtypes) == 1 else [f"out{k}" for k in range(len(binding.out_dtypes))]
    outputs = tuple(Slot(name, dtype, True, then is not None) for name, dtype in zip(names, binding.out_dtypes))
    kind = "map" if stage is None else ("reduce" if isinstance(stage, Reduce) else "scan")
    combined = combined_dtypes(pipeline, binding, at) if stage is not None else None
    acc = tuple(compute_dtype(c) for c in combined) if combined is not None else None
    if isinstance(stage, Reduce) and stage.index:
        acc = (compute_dtype(_index_values_dtype(pipeline, binding, at)),)
    if stage is not None and stage.identity is not None:
        _check_identity_fits(stage, acc)
    fused = {}
    if then is not None:
        then_combined = combined_dtypes(pipeline, binding, then_at)
        then_acc = tuple(compute_dtype(c) for c in then_combined)
        if then.identity is not None:
            _check_identity_fits(then, then_acc)
        fused = dict(then=then, then_after=pipeline.stages[then_at + 1:], then_combined_dtypes=then_combined,
                     then_acc_dtypes=then_acc)
    return KernelPlan(kind, pipeline, binding, inputs, outputs, field_inputs(pipeline), pipeline.stages[:at], stage,
                      pipeline.stages[at + 1:then_at], _compute_dtype(binding.dtypes), combined, acc, **fused,
                      ordered=bool(ordered) and ordered[-1], scan_commutes=scan_commutes,
                      share=_share(pipeline, at, stage, then))


def _share(pipeline: PipelineIR, at: int, stage, then) -> Function | None:
    """The declared share of a reduce right after its lift map (:func:`declare_share`), or None."""
    if not isinstance(stage, Reduce) or stage.index or then is not None or at == 0:
        return None
    lift = pipeline.stages[at - 1]
    return declared_share(lift.fn, stage.op, stage.identity) if isinstance(lift, Map) else None


def _group_kind(p: KernelPlan, g: Group) -> str:
    return "scanned" if g.kind == "reduced" and p.kind == "scan" else g.kind


def describe(p: KernelPlan) -> str:
    """A readable account of the plan (what ``pipe.explain(x)`` prints)."""
    from ..pipeline.printer import stage_text
    b = p.binding
    lines = [f"1 kernel: {p.kind}", f"  device: {b.device_type}"
             + (" (Triton interpreter)" if b.device_type == "cpu" else ""),
             "  inputs: " + ", ".join(f"{s.name} {str(s.dtype)[6:]} rank {r}" + (" (joins after)" if s.after else "")
                                      for s, r in zip(p.inputs, b.ranks)),
             "  output" + ("s" if len(p.outputs) > 1 else "") + ": "
             + ", ".join(f"{s.name} {str(s.dtype)[6:]}" for s in p.outputs) + f"; compute in {str(p.compute_dtype)[6:]}",
             "  iteration groups (outer to inner): "
             + (", ".join(f"{_group_kind(p, g)}{list(g.dims)}" for g in b.groups) or "none (a single element)")]
    if p.before:
        lines.append("  per element: " + " | ".join(stage_text(s) for s in p.before))
    if p.combine is not None:
        accs = ", ".join(str(d)[6:] for d in p.acc_dtypes)
        lines.append(f"  {p.kind}: {stage_text(p.combine)} over axes {list(b.axes)}, accumulator"
                     + (f"s ({accs})" if p.width > 1 else f" {accs}"))
        if p.kind == "reduce":
            lines.append("  rows split across programs when few and long; the last program of a row combines "
                         "its partials in order")
    if p.after:
        lines.append("  after: " + " | ".join(stage_text(s) for s in p.after))
    if p.then is not None:
        lines.append(f"  then, in the same loop: {stage_text(p.then)} over the scanned axis")
        if p.then_after:
            lines.append("  after that: " + " | ".join(stage_text(s) for s in p.then_after))
    return "\n".join(lines)

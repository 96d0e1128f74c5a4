"""One class per kernel strategy, chosen by the type of the plan's first fold segment (:func:`strategy_for`).

A strategy owns what differs from one kind of kernel to another: the kernel's parameters (as data,
:class:`~tricomb.codegen.kernel.Param`), its decorator, its body, the schedule call and the functions it needs
copied into the module, the tile entry and sizes the autotuner varies and keys on, the scratch buffers the
launcher allocates, the grid, and the lines :func:`describe` prints. What the kinds share (loads, stages, folds,
stores, the launcher's layout and launch) lives in the emitters the strategies call.

* :class:`ElementwiseKernel`: no fold; a flat index over the output.
* :class:`ReduceKernel`: a :class:`~tricomb.lower.segments.TileReduce` first; rows by K, rows split over programs
  finished by its Ticket.
* :class:`ScanKernel`: a :class:`~tricomb.lower.segments.TileScan` first; tile by tile along K, or one tile per
  program with its LookBack; a reduce fused after it folds each scanned tile with the reduce's own emitters.
"""
from __future__ import annotations

import math
from typing import ClassVar

from ..lower.bind import Group
from ..lower.fuse import KernelPlan
from ..lower.schedule import schedule_attach
from ..lower.segments import Attach, Elementwise, TileReduce, TileScan
from ..pipeline.printer import stage_text
from .attach import emit_attach_body
from .combine import emit_reduce_body, emit_scan_body
from .kernel import Param, emit_map_body, fixed, given, layout_parameters, meta, row_bytes, runtime_words
from .columns import GROUP, group_buffers, partial_buffers
from .launcher import (emit_columns_scratch, emit_launch, emit_look_back_scratch, emit_rows_scratch,
                       emit_shared_scratch, emit_ticket_scratch)
from .lookback import packing
from .scalar import ScalarContext
from .scratch import FLAGS, READY, TICKETS, aggregates, partials, prefixes, shared_partials
from .writer import Writer


class KernelStrategy:
    """The kernel of plan ``plan``, as one kind of kernel writes it."""

    name: ClassVar[str]  # what ``explain`` and the module's docstring call this kind of kernel
    tuned: ClassVar[str]  # the tile entry the autotuner varies, with warps
    key: ClassVar[tuple[str, ...]]  # the sizes the autotuner's choice is keyed on
    do_not_specialize: ClassVar[tuple[str, ...]] = ()  # parameters that change with every launch
    tuner_resets: ClassVar[str] = "False"  # whether the autotuner zeroes the status words before each timing

    def __init__(self, plan: KernelPlan):
        self.plan = plan

    def decorator(self) -> str:
        """The kernel's ``@triton.jit`` line."""
        # (a runtime scalar's words change with every value: a kernel specialized on one would be compiled again)
        names = (*self.do_not_specialize, *runtime_words(self.plan))
        if not names:
            return "@triton.jit"
        names = ", ".join(f'"{n}"' for n in names)
        return f"@triton.jit(do_not_specialize=[{names}])"

    def parameters(self) -> tuple[Param, ...]:
        """The kernel's parameters, in order: those given at each launch first, then tensors, scalars, sizes and
        strides, then constexprs."""
        raise NotImplementedError

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        """The kernel's body; ``combines`` names each fold's combine function."""
        raise NotImplementedError

    def schedule_call(self, inner: str) -> str:
        """The call choosing the launch parameters ``cfg``; ``inner`` is the condition that a row's elements are
        contiguous."""
        raise NotImplementedError

    def runtime_reads(self) -> dict[int, str]:
        """The kernel expressions of the runtime scalars it does not take as words (none, but a foreach's)."""
        return {}

    def emit_host(self, w: Writer, kernel: str) -> None:
        """The module's host code: ``launch`` and ``prepare`` for the kernel named ``kernel``."""
        emit_launch(w, self.plan, self, kernel)

    def emit_scratch(self, w: Writer) -> None:
        """The launcher's lines after the tuning space: the scratch buffers and the look-back's ``status``."""
        w.line("status = None", comment="no status value to pass")

    def grid(self) -> str:
        """The launch grid as a function of the chosen meta-parameters (the autotuner's choice or the schedule's)."""
        raise NotImplementedError

    def group_name(self, group: Group) -> str:
        """How :func:`describe` names a dimension group."""
        return group.kind

    def chosen(self, shape: tuple[int, ...], inner: bool, interpret: bool, num_sms: int = 0,
               shared_mem: int = 0) -> list[str]:
        """What the launch chooses for inputs broadcasting to ``shape`` (``inner``: a row's elements are contiguous)
        on a device of ``num_sms`` SMs and ``shared_mem`` bytes of shared memory a block (0 for the CPU), as lines
        for ``explain``; none where nothing is chosen beyond the tiles."""
        return []

    def description(self) -> list[str]:
        """The lines of :func:`describe` after the layout: the segments, in order."""
        return _stages_line("per element", self.plan.segments[0])

    def _fold_line(self, fold) -> str:
        b = self.plan.binding
        accs = ", ".join(str(d)[6:] for d in fold.acc_dtypes)
        return (f"  {self.name}: {stage_text(fold.stage)} over axes {list(b.axes)}, accumulator"
                + (f"s ({accs})" if fold.width > 1 else f" {accs}"))


def _stages_line(title: str, segment: Elementwise) -> list[str]:
    return [f"  {title}: " + " | ".join(stage_text(s) for s in segment.stages)] if segment.stages else []


def _slots_given(p: KernelPlan) -> list[Param]:
    """The parameters given at each launch before any other: the slots' tensors, then the runtime scalars'
    words."""
    return [given(s.name) for s in p.slots] + [given(name) for name in runtime_words(p)]


class ElementwiseKernel(KernelStrategy):
    """No fold: ``BLOCK`` elements per program over a flat index of the output."""

    name = "map"
    tuned = "BLOCK"
    key = ("numel",)

    def parameters(self) -> tuple[Param, ...]:
        p = self.plan
        return (*_slots_given(p), fixed("numel", "M * K"), *layout_parameters(p), meta("BLOCK"), meta("WIDE", "wide"))

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        emit_map_body(w, ctx, self.plan)

    def schedule_call(self, inner: str) -> str:
        return "schedule_map(M * K, interpret)"

    def grid(self) -> str:
        return "lambda meta: (triton.cdiv(M * K, meta['BLOCK']),)"


class ReduceKernel(KernelStrategy):
    """A reduce: ``BLOCK_M`` rows by ``BLOCK_K`` elements a step; ``SPLIT`` programs share a row when rows are few
    and long, the last one (``TICKET``) finishing it."""

    name = "reduce"
    tuned = "BLOCK_K"
    key = ("M", "K")

    @property
    def fold(self) -> TileReduce:
        return self.plan.folds[0]

    def parameters(self) -> tuple[Param, ...]:
        p = self.plan
        scratch = [fixed(name) for name in partials(self.fold)] + [fixed(TICKETS)]
        return (*_slots_given(p), *scratch, fixed("M"), fixed("K"), fixed("SPLIT", "split"), *layout_parameters(p),
                meta("BLOCK_M"), meta("BLOCK_K"), meta("TICKET", "split > 1"), meta("WIDE", "wide"))

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        emit_reduce_body(w, ctx, self.plan, combines)

    def schedule_call(self, inner: str) -> str:
        return (f"schedule_reduce(M, K, {inner}, _num_sms(in0.device), interpret, "
                f"per_tile={self.fold.share is not None})")

    def emit_scratch(self, w: Writer) -> None:
        emit_ticket_scratch(w, self.plan, self.fold)
        super().emit_scratch(w)

    def grid(self) -> str:
        return "lambda meta: (triton.cdiv(M, meta['BLOCK_M']), split)"

    def description(self) -> list[str]:
        fold = self.fold
        return [*super().description(), self._fold_line(fold),
                "  rows split across programs when few and long; the last program of a row combines its partials "
                "in order", *_stages_line("after", self.plan.following(fold, Elementwise))]


class ScanKernel(KernelStrategy):
    """A scan: ``BLOCK_M`` rows, ``BLOCK_K`` elements a step carrying each row's prefix, or with ``LOOKBACK`` one
    tile per program and the decoupled look-back; a reduce fused after it folds the scanned tiles in the loop."""

    name = "scan"
    tuned = "BLOCK_K"
    key = ("M", "K")
    do_not_specialize = (READY,)  # a new status value each launch
    tuner_resets = "cfg['LOOKBACK']"

    @property
    def scan(self) -> TileScan:
        return self.plan.folds[0]

    @property
    def fused(self) -> TileReduce | None:
        """The reduce fused after the scan, if any."""
        return self.plan.folds[1] if len(self.plan.folds) > 1 else None

    def parameters(self) -> tuple[Param, ...]:
        p, scan, fused = self.plan, self.scan, self.fused
        scratch = [fixed(FLAGS)] + [fixed(name) for name in aggregates(scan) + prefixes(scan)]
        if fused is not None:
            scratch += [fixed(name) for name in partials(fused)] + [fixed(TICKETS)]
        return (*_slots_given(p), given(READY), fixed("M"), fixed("K"), *scratch, *layout_parameters(p),
                meta("BLOCK_M"), meta("BLOCK_K"), meta("LOOKBACK"), meta("WINDOW"), meta("PUBLISH_PREFIX"),
                meta("WIDE", "wide"))

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        emit_scan_body(w, ctx, self.plan, combines)

    def schedule_call(self, inner: str) -> str:
        return (f"schedule_scan(M, K, {inner}, _num_sms(in0.device), interpret, packing={packing(self.scan)!r}, "
                f"width={self.scan.width})")

    def emit_scratch(self, w: Writer) -> None:
        w.line("cfg['LOOKBACK'] = cfg['LOOKBACK'] and K > cfg['BLOCK_K']", comment="one tile per row: nothing to look back at")
        with w.block("if not cfg['LOOKBACK'] and 'maxnreg' not in overrides:"):
            w.line("cfg.pop('maxnreg', None)", comment="the heuristic's register cap is for look-back tiles")
        emit_look_back_scratch(w, self.plan, self.scan, self.fused)

    def grid(self) -> str:
        return ("lambda meta: (triton.cdiv(M, meta['BLOCK_M'])"
                " * (triton.cdiv(K, meta['BLOCK_K']) if meta['LOOKBACK'] else 1),)")

    def group_name(self, group: Group) -> str:
        return "scanned" if group.kind == "reduced" else group.kind

    def description(self) -> list[str]:
        p, scan, fused = self.plan, self.scan, self.fused
        lines = [*super().description(), self._fold_line(scan), *_stages_line("after", p.following(scan, Elementwise))]
        if fused is not None:
            lines.append(f"  then, in the same loop: {stage_text(fused.stage)} over the scanned axis")
            lines += _stages_line("after that", p.following(fused, Elementwise))
        return lines


class AttachKernel(KernelStrategy):
    """Attaches, or a reduce whose rows' results are reduced again: ``BLOCK_M`` whole rows a program; a row of
    ``K <= BLOCK_K`` elements read once and held on chip through every fold, a longer one swept once per attached
    fold and once more to store (:mod:`tricomb.codegen.attach`); a reduce over the rows finished by the last
    program (:mod:`tricomb.codegen.rows`)."""

    tuned = "BLOCK_K"
    key = ("M", "K")

    @property
    def name(self) -> str:
        return "attach" if any(isinstance(s, Attach) for s in self.plan.segments) else "per-row reduce"

    @property
    def do_not_specialize(self) -> tuple[str, ...]:
        return (READY,) if self.plan.shareable else ()  # a new status value each launch

    def parameters(self) -> tuple[Param, ...]:
        p = self.plan
        if p.over_rows is not None:
            return (*_slots_given(p), *[fixed(name) for name in partials(p.over_rows)], fixed(TICKETS),
                    *self._sizes(), meta("WIDE", "wide"))
        if p.column_sums is not None:
            buffers = partial_buffers(p.column_sums) + group_buffers(p.column_sums)
            return (*_slots_given(p), *[fixed(name) for name in buffers], fixed(TICKETS), fixed("PROGRAMS", "programs"),
                    *self._sizes(), meta("ROW_STAGES"), meta("WIDE", "wide"))
        if not p.shareable:
            return (*_slots_given(p), *self._sizes(), meta("WIDE", "wide"))
        shared = [fixed(name) for n, fold in enumerate(_shared_folds(p)) for name in shared_partials(n, fold)]
        return (*_slots_given(p), given(READY), fixed(FLAGS), *shared, fixed("SPLIT", "split"), *self._sizes(),
                meta("SHARED", "split > 1"), meta("WIDE", "wide"))

    def _sizes(self) -> list[Param]:
        return [fixed("M"), fixed("K"), *layout_parameters(self.plan), meta("BLOCK_M"), meta("BLOCK_K")]

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        emit_attach_body(w, ctx, self.plan, combines)

    def schedule_call(self, inner: str) -> str:
        if self.plan.column_sums is not None:
            return (f"schedule_attach(M, K, {inner}, interpret, _num_sms(in0.device), columns=True, "
                    f"row_bytes={row_bytes(self.plan)}, shared_mem=_shared_mem(in0.device))")
        sms = ", _num_sms(in0.device)" if self.plan.shareable else ""
        return f"schedule_attach(M, K, {inner}, interpret{sms})"

    def emit_scratch(self, w: Writer) -> None:
        if self.plan.over_rows is not None:
            emit_rows_scratch(w, self.plan)
        if self.plan.column_sums is not None:
            emit_columns_scratch(w, self.plan)
        if not self.plan.shareable:
            super().emit_scratch(w)
            return
        emit_shared_scratch(w, self.plan, _shared_folds(self.plan))

    def grid(self) -> str:
        if self.plan.over_rows is not None or self.plan.column_sums is not None:
            return "lambda meta: (programs,)"
        if self.plan.shareable:
            return "lambda meta: (triton.cdiv(M, meta['BLOCK_M']), split)"
        return "lambda meta: (triton.cdiv(M, meta['BLOCK_M']),)"

    def chosen(self, shape: tuple[int, ...], inner: bool, interpret: bool, num_sms: int = 0,
               shared_mem: int = 0) -> list[str]:
        axes = self.plan.binding.axes
        K = math.prod(shape[d] for d in axes)
        M = math.prod(n for d, n in enumerate(shape) if d not in axes)
        columns = self.plan.column_sums is not None
        cfg = schedule_attach(M, K, inner, interpret, num_sms if self.plan.shareable or columns else 0, columns,
                              row_bytes(self.plan), shared_mem)
        tiles = f"tiles of {cfg['BLOCK_M']} x {cfg['BLOCK_K']}"
        if cfg["SPLIT"] > 1:
            part = math.ceil(K / cfg["SPLIT"])
            how = "held on chip" if part <= cfg["BLOCK_K"] else "swept"
            return [f"  chosen for these inputs: {M} rows of {K} elements, each shared by {cfg['SPLIT']} programs "
                    f"(one an SM), {tiles}: each part of {part} elements {how}, the programs exchanging each "
                    "attached fold's partials"]
        if columns:
            tiles += f", {cfg['PROGRAMS']} programs stepping through the row tiles"
            if cfg["ROW_STAGES"] > 1:
                tiles += f" ({cfg['ROW_STAGES']} in flight)"
        if K <= cfg["BLOCK_K"]:
            return [f"  chosen for these inputs: {M} rows of {K} elements, {tiles}: each row read once, held on chip"]
        if self.plan.one_hot is not None:
            sweeps = sum(f.attached for f in self.plan.folds)
            return [f"  chosen for these inputs: {M} rows of {K} elements, {tiles}: each row swept {sweeps} "
                    f"time{'s' if sweeps > 1 else ''}, then read at its one position"]
        sweeps = sum(f.attached for f in (self.plan.long_rows or self.plan).folds) + 1
        return [f"  chosen for these inputs: {M} rows of {K} elements, {tiles}: each row swept {sweeps} "
                f"time{'s' if sweeps > 1 else ''}"]

    def description(self) -> list[str]:
        p = self.plan
        plan = ("  plan: a row of at most BLOCK_K elements is read once and held on chip through every fold; a "
                "longer one is swept once per attached fold and once more, every other sweep from the row's end"
                if self.name == "attach" else
                "  plan: whole rows a program, a row of at most BLOCK_K elements read as one tile, a longer one swept")
        lines = [*super().description(), plan]
        for fold in p.folds:
            lines.append(self._fold_line(fold) + ("" if fold.attached else " (the reduce after the attaches)"))
            after = p.following(fold, Elementwise)
            lines += _stages_line("  on the row's result" if fold.attached else "after", after)
            if fold.attached:
                lines += _stages_line("  then per element", p.following(p.following(fold, Attach), Elementwise))
        if p.long_rows is not None:
            lines.append("  a longer row takes the one-pass form of a maximum, then a sum of exp(v - m): one attach of "
                         "the online normalizer's pairs, one sweep fewer (docs/design.md)")
        if p.one_hot is not None:
            lines.append("  the reduce after the attaches sums terms that are 0 but at one position a row: each row "
                         "is read at that position alone, after the attached folds (docs/design.md)")
        if p.column_sums is not None:
            lines.append(f"  result field{'s' if len(p.column_sums.fields) > 1 else ''} "
                         f"{', '.join(map(str, p.column_sums.fields))} summed over the rows: the programs step "
                         "through the row tiles, each keeping a partial per position along the row; the last "
                         f"program of each group of {GROUP} folds the group's partials, the last group's the groups', "
                         "in order")
        if p.over_rows is not None:
            lines.append(f"  then {stage_text(p.over_rows.stage)} over the rows' results: each program folds its "
                         "rows, the program drawing the last ticket folds the programs' partials in order")
            lines += _stages_line("after", p.following(p.over_rows, Elementwise))
        return lines


def _shared_folds(p: KernelPlan) -> list[TileReduce]:
    """The attached folds that programs sharing a row exchange: those of the plan's one-pass form, if any."""
    return list((p.long_rows or p).folds)


_STRATEGIES: dict[type, type[KernelStrategy]] = {TileReduce: ReduceKernel, TileScan: ScanKernel}


def strategy_for(p: KernelPlan) -> KernelStrategy:
    """The strategy writing ``p``'s kernel: attaches when it has an attach segment, else by the type of its
    first fold segment (elementwise when none)."""
    if p.over_rows is not None or any(isinstance(s, Attach) for s in p.segments):
        return AttachKernel(p)
    folds = p.folds
    return (_STRATEGIES[type(folds[0])] if folds else ElementwiseKernel)(p)


def describe(p: KernelPlan) -> str:
    """A readable account of the plan (what ``pipe.explain(x)`` prints)."""
    strategy = strategy_for(p)
    b = p.binding
    lines = [f"1 kernel: {strategy.name}", f"  device: {b.device_type}"
             + (" (Triton interpreter)" if b.device_type == "cpu" else ""),
             "  inputs: " + ", ".join(f"{s.name} {str(s.dtype)[6:]} rank {r}" + (" (joins after)" if s.phase else "")
                                      for s, r in zip(p.inputs, b.ranks)),
             "  output" + ("s" if len(p.outputs) > 1 else "") + ": "
             + ", ".join(f"{s.name} {str(s.dtype)[6:]}" for s in p.outputs) + f"; compute in {str(p.compute_dtype)[6:]}",
             "  iteration groups (outer to inner): "
             + (", ".join(f"{strategy.group_name(g)}{list(g.dims)}" for g in b.groups) or "none (a single element)")]
    return "\n".join(lines + strategy.description())

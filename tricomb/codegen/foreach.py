"""The foreach kernel: one elementwise pipeline over many tensors (lists of them, one list per input) in one launch.

Each program takes ``BLOCK`` elements of one tensor. A table on the device, int64, one row of ``n + 1`` entries
each, tells a program where its elements lie: for each list the kernel reads or writes, the address of its
tensor ``t``; the tensors' sizes; the first program of each tensor (the running count of ``BLOCK`` chunks, the last
entry the total, which is the grid); and, for each runtime scalar given per tensor, its value (a float's bits).
A second table, int32, names each program's tensor (``owners``: one load, where a binary search of the first
programs would wait on a chain of loads as each program starts). A program loads its chunk from each list's
tensor (unmasked when the chunk lies whole inside it), applies the stages, and stores into the output lists'
tensors.

The table depends only on the tensors' addresses and sizes, so the caller keeps it between calls on the same
tensors (an optimizer's parameters, step after step): a call then launches with nothing copied to the device,
and a CUDA graph replays it. An input given as one tensor for every list position (a 0-d learning rate that
lives on the device) is a kernel argument loaded once a program; a runtime scalar shared by all tensors is
passed as words, as in every kernel (:mod:`tricomb.pipeline.scalars`).
"""
from __future__ import annotations

import torch

from ..lower.fuse import KernelPlan
from ..lower.segments import Elementwise, Slot
from ..pipeline.scalars import used_scalars
from .kernel import Param, emit_stages, first_stream, given, meta, runtime_words
from .scalar import ScalarContext, Value, from_storage, runtime_parameter, tl_dtype, to_storage
from .strategies import KernelStrategy
from .writer import Writer

_ROWS = "table"  # the kernel parameter holding the table's address


class ForeachKernel(KernelStrategy):
    """The kernel of an elementwise plan applied tensor by tensor to lists (see the module's docstring).
    ``shared``: the inputs given as one tensor for every position (0-d); ``per_tensor``: the runtime scalars
    given one value a tensor."""

    name = "foreach"
    tuned = "BLOCK"
    key = ()

    def __init__(self, plan: KernelPlan, shared: frozenset[str] = frozenset(), per_tensor: tuple[int, ...] = ()):
        super().__init__(plan)
        self.shared, self.per_tensor = shared, per_tensor

    @property
    def listed(self) -> tuple[Slot, ...]:
        """The slots the table holds an address row for: the inputs given as lists, then the outputs."""
        return tuple(s for s in self.plan.inputs if s.name not in self.shared) + self.plan.outputs

    def _row(self, row: int, column: str) -> str:
        return f"tl.load({_ROWS} + {row} * (n + 1) + {column})"

    def words(self) -> list[str]:
        """The kernel parameters of the runtime scalars shared by every tensor."""
        per_tensor = {runtime_parameter(k) for k in self.per_tensor}
        return [w for w in runtime_words(self.plan) if w.rsplit("_", 1)[0] not in per_tensor and w not in per_tensor]

    def decorator(self) -> str:
        names = ", ".join(f'"{n}"' for n in [*self.words(), "n"])  # (n: one kernel for every count of tensors)
        return f"@triton.jit(do_not_specialize=[{names}])"

    def parameters(self) -> tuple[Param, ...]:
        shared = [given(s.name) for s in self.plan.inputs if s.name in self.shared]
        return (given(_ROWS), given("owners"), *shared, *(given(w) for w in self.words()), given("n"), meta("BLOCK"),
                meta("WIDE"))

    def runtime_reads(self) -> dict[int, str]:
        kinds = dict(used_scalars(self.plan.pipeline))
        first = len(self.listed) + 2
        reads = {}
        for j, k in enumerate(self.per_tensor):
            if k not in kinds:
                continue  # (a number the stages never read)
            bits = self._row(first + j, "t")
            reads[k] = {float: f"{bits}.to(tl.float64, bitcast=True)", int: bits, bool: f"({bits} != 0)"}[kinds[k]]
        return reads

    def emit_body(self, w: Writer, ctx: ScalarContext, combines: tuple[str, ...]) -> None:
        p = self.plan
        sizes, starts = len(self.listed), len(self.listed) + 1
        w.line("pid = tl.program_id(0)")
        w.line("t = tl.load(owners + pid)", comment="the tensor this program's chunk belongs to")
        w.line(f"chunk = pid - {self._row(starts, 't')}")
        with w.block("if WIDE:"):
            w.comment("a tensor of 2**31 elements or more: index in int64")
            w.line("chunk = chunk.to(tl.int64)")
        w.line("idx = chunk * BLOCK + tl.arange(0, BLOCK)")
        w.line(f"numel = {self._row(sizes, 't')}")
        w.line("mask = idx < numel")
        values = {}
        for row, slot in enumerate(self.listed):
            w.line(f"{slot.name} = {self._row(row, 't')}.to(tl.pointer_type({_pointee(slot)}))")
        listed = [s for s in p.inputs if s.name not in self.shared]
        with w.block("if (chunk + 1) * BLOCK <= numel:"):
            w.comment("a whole chunk: no mask, so every load is issued before any use (bench/NOTES.md, P4)")
            w.lines([f"raw_{s.name} = tl.load({s.name} + idx)" for s in listed])
        with w.block("else:"):
            w.lines([f"raw_{s.name} = tl.load({s.name} + idx, mask=mask, other=0)" for s in listed])
        for slot in p.inputs:
            var = f"x_{slot.name}"
            # (a shared value as a block: each lane reads the one address, cached, and every helper takes blocks)
            raw = f"tl.load({slot.name} + idx * 0)" if slot.name in self.shared else f"raw_{slot.name}"
            w.line(f"{var} = {_loaded(ctx, slot, raw)}")
            values[slot.name] = Value(var, slot.dtype, slot.name in self.shared)
        elementwise = next(s for s in p.segments if isinstance(s, Elementwise))
        result = emit_stages(w, ctx, p, elementwise, first_stream(p, values), values, "[BLOCK]")
        for slot, value in zip(p.outputs, result):
            stored = to_storage(ctx, value.text, slot.dtype, value.dtype)
            if slot.dtype == torch.bool:
                stored = f"({stored}).to(tl.int8)"
            w.line(f"tl.store({slot.name} + idx, {stored}, mask=mask)")

    def emit_host(self, w: Writer, kernel: str) -> None:
        emit_foreach_host(w, self, kernel)


def _pointee(slot: Slot) -> str:
    """The element type of a slot's pointer: a bool tensor's bytes as int8."""
    return "tl.int8" if slot.dtype == torch.bool else tl_dtype(slot.dtype)


def _loaded(ctx: ScalarContext, slot: Slot, load: str) -> str:
    """A loaded element as the value the stages take."""
    if slot.dtype == torch.bool:
        return f"({load} != 0)"
    return from_storage(ctx, load, slot.dtype)


def emit_foreach_host(w: Writer, strategy: ForeachKernel, kernel: str) -> None:
    """``prepare(lists, per_tensor)``, returning ``run(*shared, *scalars)``, and ``launch``, which does both."""
    p = strategy.plan
    listed = [s.name for s in strategy.listed]
    shared = [s.name for s in p.inputs if s.name in strategy.shared]
    kinds = dict(used_scalars(p.pipeline))
    words = [f"*_scalar_words(scalars[{k}], {kind.__name__})" for k, kind in kinds.items()
             if k not in strategy.per_tensor]
    per_tensor = ", ".join(f"({k}, {kinds.get(k, float).__name__})" for k in strategy.per_tensor)
    with w.block("def prepare(lists, per_tensor=()):"):
        w.line(f'"""The launch over the tensors of ``lists`` (one list per slot: {", ".join(listed)}), of one device, '
               'each contiguous, the lists\' tensors at one position of one size; ``per_tensor``: one list of '
               'numbers per runtime scalar given a value a tensor. Returns ``run(*shared, *scalars)``: the tensors '
               'given once for all and every runtime scalar, by index (those given per tensor are read from the '
               'table and ignored there)."""')
        w.line(f"table, owners, cfg = _foreach_table(lists, per_tensor, ({per_tensor}{',' if per_tensor else ''}), "
               "schedule_foreach)")
        w.line("n, grid = len(lists[0]), owners.numel()")
        w.line("options = _compile_options(table.device)")
        with w.block(f"def run({', '.join(shared + ['*scalars'])}):"):
            with w.block("if grid:"):
                args = ", ".join(["table", "owners", *shared, *words, "n"])
                w.line(f"{kernel}[(grid,)]({args}, BLOCK=cfg['BLOCK'], WIDE=cfg['WIDE'], num_warps=cfg['num_warps'], **options)")
        w.line("run.tables = table, owners", comment="the device tables the launches read, kept alive with them")
        w.line("return run")
    w.line()
    w.line()
    with w.block("def launch(lists, *scalars, shared=(), per_tensor=()):"):
        w.line('"""One launch over ``lists`` (see ``prepare``), the output lists among them."""')
        w.line("prepare(lists, per_tensor)(*shared, *scalars)")

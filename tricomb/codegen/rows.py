"""Emitting the reduce over the rows (:class:`~tricomb.lower.segments.RowsReduce`): after a program has its rows'
results, it folds them into one partial; the program drawing the last ticket folds every program's partial in
index order (the ticket's emitter, :func:`~tricomb.codegen.fold.emit_last_program`, with the whole output as one
row shared by all programs), applies the stages after the reduce, and stores the one result.

The fold runs on ``[1, BLOCK_M]`` tiles and leaves ``[1]`` values (``one``: the one row), so that the ticket's
emitter and the stages after it see blocks, as everywhere else, never scalars.
"""
from __future__ import annotations

from ..lower.fuse import KernelPlan
from ..lower.segments import Elementwise, Store
from ..pipeline.printer import stage_text
from .fold import emit_last_program, masked_fields, reduce_tile
from .kernel import emit_stages, fields, store
from .scalar import ScalarContext, Value
from .writer import Writer


def emit_rows_reduce(w: Writer, ctx: ScalarContext, p: KernelPlan, values: list[Value], combine: str) -> None:
    """The program's rows' results ``values`` (``[BLOCK_M]``, in range where ``row_mask``) folded by the reduce
    over the rows with ``combine``, the programs' partials folded by the last one, and the result stored."""
    fold = p.over_rows
    w.comment(f"stage {fold.at}: {stage_text(fold.stage)} over the rows: this program's, then every program's "
              "partial in order by the last")
    steps = fields("row_step", fold.width)
    for step, masked in zip(steps, masked_fields(fold, values, "row_mask")):
        w.line(f"{step} = {masked}")
    totals = fields("rows_total", fold.width)
    w.line(f"{', '.join(totals)} = {reduce_tile(fold, [f'{s}[None, :]' for s in steps], combine)}")
    w.line("one = tl.full([1], 0, tl.int32)", comment="the one row all programs share")
    w.line("one_mask = one == 0")
    w.line("programs = tl.num_programs(0)")
    emit_last_program(w, fold, combine, totals, "pid_m", "0", rows="one", row_mask="one_mask", split="programs",
                      block="1")
    zero_dim = not fold.stage.keepdim
    stream = [Value(t, dtype, zero_dim) for t, dtype in zip(totals, fold.combined_dtypes)]
    result = emit_stages(w, ctx, p, p.following(fold, Elementwise), stream, {}, "[1]")
    store(w, ctx, p, p.following(fold, Store), result, {s.name: "one" for s in p.outputs}, "keep")

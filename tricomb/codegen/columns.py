"""Emitting the fields summed over the rows (:class:`~tricomb.lower.segments.ColumnSums`).

The programs step through the row tiles, ``PROGRAMS`` of them at once (as many as fill the GPU), so that each
folds many rows into one partial per position along the row, ``column_parts<j>``: in registers while a row is one
tile, in the program's own row of the partials buffer while it is swept (read back and added to tile by tile).
After its last tile a program takes its group's ticket; the last of each ``GROUP`` programs folds the group's
partials into the group's row of ``group_parts<j>``, then takes the ticket of the groups; the last group's folds the
groups' rows and stores the sums. Two levels, so that no one program reads every partial (a single program
folding 132 partials of 8192 floats would read 4 MB alone, tens of microseconds), and each fold in index order,
so that a run gives the same result as the last.
"""
from __future__ import annotations

from contextlib import contextmanager

from ..lower.fuse import KernelPlan
from ..lower.segments import ColumnSums
from ..scalar.builtins import OPS
from .kernel import emit_offsets, fields, scalar_where
from .scalar import ScalarContext, Value, tl_dtype, to_storage
from .scratch import TICKETS
from .writer import Writer

GROUP = 16  # programs a group's last program folds; and groups the last group's folds at a time
COLUMNS = 512  # positions along the row each step of a fold of partials reads, GROUP rows at a time


def partial_buffers(sums: ColumnSums) -> list[str]:
    """Per summed field, the buffer of the programs' partials (``PROGRAMS`` rows of ``K``)."""
    return fields("column_parts", len(sums.fields))


def group_buffers(sums: ColumnSums) -> list[str]:
    """Per summed field, the buffer of the groups' partials (one row of ``K`` per group)."""
    return fields("group_parts", len(sums.fields))


def _sum_rows(tile: str) -> str:
    """The sum over axis 0 of ``tile``, by the op table's sum (Triton's own combine function)."""
    return OPS["add"].tile_reduce.format(tile, 0)


def column_names(sums: ColumnSums) -> list[str]:
    """Per summed field, the program's partial in registers, while its rows are one tile each."""
    return fields("column", len(sums.fields))


def start_column_sums(w: Writer, sums: ColumnSums) -> None:
    """The register partials (:func:`column_names`), zero before the program's first row."""
    names = column_names(sums)
    for name, dtype in zip(names, sums.acc_dtypes):
        w.line(f"{name} = tl.full([BLOCK_K], 0, {tl_dtype(dtype)})",
               comment="the program's partial, while its rows are one tile" if name == names[0] else None)


def fold_columns(w: Writer, sums: ColumnSums, values: list[Value], whole: bool) -> None:
    """The tile's ``values`` of the summed fields, summed over its rows into the program's partials: in
    registers for a row that is one tile (``whole``), else in the program's row of the partials buffer at the
    tile's positions ``ks`` (written, not added to, at the program's first row tile)."""
    w.comment("the fields summed over the rows: this tile's rows added to the program's partial")
    for name, buffer, value, dtype in zip(column_names(sums), partial_buffers(sums), values, sums.acc_dtypes):
        summed = _sum_rows(f"tl.where(mask, {value.text}.to({tl_dtype(dtype)}), 0)")
        if whole:
            w.line(f"{name} = {name} + {summed}")
            continue
        w.line("at = program.to(tl.int64) * K + ks")
        w.line(f"seen = tl.load({buffer} + at, mask={scalar_where('pid_m >= PROGRAMS', 'ks < K', 'False')}, "
               "other=0)",
               comment="(nothing before the program's first row tile)")
        w.line(f"tl.store({buffer} + at, seen + {summed}, mask=ks < K)")


def emit_column_finish(w: Writer, ctx: ScalarContext, p: KernelPlan, reduced: list[int]) -> None:
    """After the program's last row tile: its register partials stored (rows of one tile), then the two levels
    of tickets (module docstring) and the sums stored at the outputs' offsets along the row (``reduced``, the
    reduced groups)."""
    sums = p.column_sums
    with w.block("if K <= BLOCK_K:"):
        w.line("ks = tl.arange(0, BLOCK_K)")
        for name, buffer in zip(column_names(sums), partial_buffers(sums)):
            w.line(f"tl.store({buffer} + program.to(tl.int64) * K + ks, {name}, mask=ks < K)")
    w.line("tl.debug_barrier()")
    w.line(f"group = program // {GROUP}")
    w.line(f'ticket = tl.atomic_add({TICKETS} + group, 1, sem="acq_rel")')
    w.line(f"group_last = ticket == tl.minimum(PROGRAMS - group * {GROUP}, {GROUP}) - 1")
    w.comment("the last program of the group folds the group's partials into the group's row")
    with _folded(w, sums, partial_buffers(sums), "group_last", f"group * {GROUP}", "PROGRAMS", "1") as totals:
        for buffer, total in zip(group_buffers(sums), totals):
            w.line(f"tl.store({buffer} + group.to(tl.int64) * K + cols, {total}, mask=cols < K)")
    w.line(f"tl.atomic_xchg({TICKETS} + group, 0, mask=group_last)")
    w.line("tl.debug_barrier()")
    w.line(f"groups = (PROGRAMS + {GROUP - 1}) // {GROUP}")
    w.line(f'ticket = tl.atomic_add({TICKETS} + groups, 1, mask=group_last, sem="acq_rel")')
    w.line("last = tl.where(group_last, ticket == groups - 1, False)")
    w.comment("the last group's last program folds the groups' rows and stores the sums")
    with _folded(w, sums, group_buffers(sums), "last", "0", "groups", f"(groups + {GROUP - 1}) // {GROUP}") as totals:
        offsets = emit_offsets(w, "cols", reduced, sums.outputs, "c")
        for slot, total in zip(sums.outputs, totals):
            w.line(f"tl.store({slot.name} + {offsets[slot.name]}, {to_storage(ctx, total, slot.dtype)}, "
                   "mask=cols < K)")
    w.line(f"tl.atomic_xchg({TICKETS} + groups, 0, mask=last)")


@contextmanager
def _folded(w: Writer, sums: ColumnSums, buffers: list[str], when: str, first: str, count: str, steps: str):
    """A loop over the row's positions ``cols``, ``COLUMNS`` at a time (none unless ``when``), folding rows
    ``first`` up to ``count`` of ``buffers`` (``steps`` times ``GROUP`` of them) in index order; the body the
    caller writes in it gets each field's totals at ``cols``."""
    with w.block(f"for c0 in range(0, tl.where({when}, K, 0), {COLUMNS}):"):
        w.line(f"cols = c0 + tl.arange(0, {COLUMNS})")
        accs = fields("fold", len(sums.fields))
        for acc, dtype in zip(accs, sums.acc_dtypes):
            w.line(f"{acc} = tl.full([{GROUP}, {COLUMNS}], 0, {tl_dtype(dtype)})")
        with w.block(f"for step in range(0, {steps}):"):
            w.line(f"parts = {first} + step * {GROUP} + tl.arange(0, {GROUP})")
            w.line(f"read = (parts < {count})[:, None] & (cols < K)[None, :]")
            w.line("at = parts[:, None].to(tl.int64) * K + cols[None, :]")
            for acc, buffer in zip(accs, buffers):
                w.line(f'{acc} = {acc} + tl.load({buffer} + at, mask=read, other=0, cache_modifier=".cg")',
                       comment="(written by other programs: not from this one's L1)" if acc == accs[0] else None)
        totals = fields("column_total", len(sums.fields))
        for acc, total in zip(accs, totals):
            w.line(f"{total} = {_sum_rows(acc)}")
        yield totals

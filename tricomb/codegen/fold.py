"""Folding values with a fold segment's operator (a :class:`~tricomb.lower.segments.TileReduce` or
:class:`~tricomb.lower.segments.TileScan`): the emitted combine function, tile folds (tree or in order), the
accumulator's types and identities, and the :class:`~tricomb.lower.segments.Ticket`: the last program's in-order
fold of partials from programs sharing a row.

An operator on k-tuples has an accumulator of k fields, each in its own dtype and held in its own variable
(``acc0``, ``acc1``, ...; plain ``acc`` for one field); Triton's ``tl.reduce`` and ``tl.associative_scan`` take
the fields as a tuple and call the combine function with the left tuple's fields, then the right one's, which
is the order of a tricomb operator's arguments.
"""
from __future__ import annotations

from ..lower.segments import Fold, TileReduce
from ..scalar.builtins import TupleOpSpec
from ..scalar.dtypes import held_dtype
from .kernel import fields, scalar_where
from .scratch import TICKETS, partials as partial_buffers
from .scalar import ScalarContext, Value, emit_function, render_const, tl_dtype
from .writer import Writer


def emit_combine_function(w: Writer, ctx: ScalarContext, name: str, fold: Fold) -> None:
    """A ``@triton.jit`` function of two accumulator tuples (k fields each) applying the fold's operator: a
    builtin operator on tuples by its native rendering, any other by its scalar function."""
    left, right = fields("a", fold.width), fields("b", fold.width)
    w.line("@triton.jit")
    with w.block(f"def {name}({', '.join(left + right)}):"):
        if isinstance(fold.operator, TupleOpSpec):
            w.line(f"return {fold.operator.combine.format(*left, *right)}")
            return
        args = [Value(n, dtype) for n, dtype in zip(left + right, fold.acc_dtypes * 2)]
        results = emit_function(w, ctx, fold.stage.op, args, "[1]")
        w.line("return " + ", ".join(f"{r.text}.to({acc_type(fold, j)})" for j, r in enumerate(results)))


def acc_type(fold: Fold, j: int = 0) -> str:
    """The ``tl`` dtype accumulator field ``j`` is held in."""
    return tl_dtype(held_dtype(fold.acc_dtypes[j]))


def identity_text(fold: Fold, j: int = 0) -> str:
    return render_const(fold.identities[j])


def packed(names: list[str]) -> str:
    """The fields as one operand of tl.reduce / tl.associative_scan: a name, or a tuple of names."""
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def tile_reduce(fold: Fold, tiles: list[str], axis: int, combine: str) -> str:
    """The expression folding the field tiles ``tiles`` along ``axis`` with the operator: natively where the
    op table has a native fold, else by ``tl.reduce`` with the combine function."""
    spec = fold.operator
    native = spec.tile_reduce if spec is not None else None
    if native is None:
        return f"tl.reduce({packed(tiles)}, {axis}, {combine})"
    # an operator on tuples takes its field tiles one by one; a builtin on values takes the packed operand
    return native.format(*tiles, axis) if isinstance(spec, TupleOpSpec) else native.format(packed(tiles), axis)


def tile_scan(fold: Fold, tiles: list[str], axis: int, combine: str) -> str:
    """The expression scanning the field tiles ``tiles`` along ``axis`` (inclusive)."""
    spec = fold.operator
    if spec is None or isinstance(spec, TupleOpSpec) or spec.tile_scan is None:
        return f"tl.associative_scan({packed(tiles)}, {axis}, {combine})"
    return spec.tile_scan.format(packed(tiles), axis)


def to_accumulator(fold: Fold, value: Value, j: int = 0) -> str:
    """Stream field ``j`` in its accumulator's dtype."""
    return f"{value.text}.to({acc_type(fold, j)})"


def masked_fields(fold: Fold, values: list[Value], mask: str) -> list[str]:
    """Each stream field in its accumulator dtype where ``mask`` holds, the field's identity elsewhere."""
    return [f"tl.where({mask}, {to_accumulator(fold, v, j)}, {identity_text(fold, j)})"
            for j, v in enumerate(values)]


def fold_in_order(w: Writer, fold: TileReduce, accs: list[str], tiles: list[str], width: str,
                  combine: str) -> None:
    """For an operator that does not commute: ``accs`` (one value per row) combined with the tiles' elements in
    order, as the tile's inclusive scan (which keeps the order) read at its last column."""
    scanned = fields("in_order", fold.width)
    w.line(f"{', '.join(scanned)} = {tile_scan(fold, tiles, 1, combine)}",
           comment="in order: the operator does not commute")
    lasts = [f"tc_last({s}, {width}).to({acc_type(fold, j)})" for j, s in enumerate(scanned)]
    w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + lasts)})")


def reduce_tile(fold: TileReduce, tiles: list[str], combine: str) -> str:
    """Fold the accumulator tiles along axis 1."""
    return tile_reduce(fold, tiles, 1, combine)


PARTS = 256  # partials the last program folds per step


def emit_last_program(w: Writer, fold: TileReduce, combine: str, totals: list[str], part: str, ticket: str,
                      rows: str = "rows", row_mask: str = "row_mask", split: str = "SPLIT",
                      block: str = "BLOCK_M") -> None:
    """The ticket (a :class:`~tricomb.lower.segments.Ticket` after ``fold``, or the cross-program step of a
    :class:`~tricomb.lower.segments.RowsReduce`): ``split`` programs share each tile of ``block`` rows
    (``rows``, those in range ``row_mask``), program ``part`` of them holding ``totals``: each publishes its
    partial, takes ticket ``ticket`` with an acquire-release atomic, and the program drawing the last ticket
    combines the partials in index order, ``PARTS`` at a time (so the result is the same from run to run), and
    resets the ticket for the next launch. Sets ``keep``: the rows whose totals are final in this program."""
    for buffer, value in zip(partial_buffers(fold), totals):
        w.line(f"tl.store({buffer} + {rows} * {split} + {part}, {value}, mask={row_mask})")
    w.line("tl.debug_barrier()")
    w.line(f'ticket = tl.atomic_add({TICKETS} + {ticket}, 1, sem="acq_rel")')
    w.line(f"keep = {scalar_where(f'ticket == {split} - 1', row_mask, 'False')}")
    w.line(f"parts_end = {split} * (ticket == {split} - 1).to(tl.int32)", comment="only the last program reads partials")
    accs = fold_partials(w, fold, combine, partial_buffers(fold), rows, split, block, "keep")
    partials_total(w, fold, combine, accs, totals, "keep")
    w.line(f"tl.atomic_xchg({TICKETS} + {ticket}, 0, mask=ticket == {split} - 1)")


def partials_total(w: Writer, fold: TileReduce, combine: str, accs: list[str], names: list[str], mask: str) -> None:
    """``names`` := the total of the partials folded into ``accs`` (:func:`fold_partials`), the identity where
    ``mask`` does not hold for an operator folded in order."""
    if fold.ordered:
        for j, (name, acc) in enumerate(zip(names, accs)):
            w.line(f"{name} = tl.where({mask}, {acc}, {identity_text(fold, j)})",
                   comment="one use of the loop's result" if j == 0 else None)
    else:
        w.line(f"{', '.join(names)} = {reduce_tile(fold, accs, combine)}")


def fold_partials(w: Writer, fold: TileReduce, combine: str, buffers: list[str], rows: str, split: str, block: str,
                  mask: str) -> list[str]:
    """The partials ``buffers`` of the ``split`` programs sharing each of ``block`` rows (``rows``, read where
    ``mask``), folded in index order up to ``parts_end`` (defined before) into accumulators, returned."""
    # Commutative operators fold the partials into a tile-shaped accumulator, reduced once after the loop (as
    # the main reduce loop does); a per-row value updated by a tree reduction inside a loop and used more than
    # once after it fails an assertion in Triton 3.6's thread-locality pass (seen on the H200).
    partials = fields("partial", fold.width)
    accs = fields("part_acc", fold.width)
    shape = f"[{block}]" if fold.ordered else f"[{block}, {PARTS}]"
    for j, acc in enumerate(accs):
        w.line(f"{acc} = tl.full({shape}, {identity_text(fold, j)}, {acc_type(fold, j)})")
    with w.block(f"for p0 in range(0, parts_end, {PARTS}):"):
        w.line(f"parts = p0 + tl.arange(0, {PARTS})")
        w.line(f"part_mask = {mask}[:, None] & (parts < {split})[None, :]")
        w.line(f"part_at = {rows}[:, None] * {split} + parts[None, :]")
        for j, (buffer, partial) in enumerate(zip(buffers, partials)):
            w.line(f'{partial} = tl.load({buffer} + part_at, mask=part_mask, other={identity_text(fold, j)}, '
                   'cache_modifier=".cg")')
        if fold.ordered:
            fold_in_order(w, fold, accs, partials, str(PARTS), combine)
        else:
            w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + partials)})")
    return accs

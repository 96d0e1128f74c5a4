"""Emitting the exchange of programs that share an attach's rows (``SHARED``: a few long rows, a whole array).

``SPLIT`` programs share each row tile, each holding or sweeping its part of the row. At each attached fold a
program stores its part's partial, then sets its status word to the launch's status value (``ready``: the
look-back's status words, :mod:`.lookback`, so that words an earlier launch left read as not yet published),
waits until every program of the row tile has set its word, and folds all their partials in index order. Every
program so finds the same row result, and goes on to its part's elements. A program waits for programs after
it, which is safe only when all are resident at once: the schedule (``share_rows``) gives at most one program an
SM, and Triton's interpreter, which runs programs one after another, never shares.
"""
from __future__ import annotations

from ..lower.segments import TileReduce
from .fold import PARTS, fold_partials, partials_total
from .kernel import fields
from .scratch import FLAGS, shared_partials
from .writer import Writer


def emit_exchange(w: Writer, fold: TileReduce, n: int, count: int, totals: list[str], combine: str) -> list[str]:
    """Attached fold ``n`` (of ``count`` in the plan): this program's partial ``totals`` exchanged with the
    programs sharing its rows; returns the names of the row totals, the same in every program."""
    buffers = shared_partials(n, fold)
    w.comment("the row is shared by SPLIT programs: publish this part's partial, wait for every part's, fold them")
    for buffer, value in zip(buffers, totals):
        w.line(f"tl.store({buffer} + rows * SPLIT + part, {value}, mask=row_mask)")
    w.line("tl.debug_barrier()")
    w.line(f"words = {'pid_m' if count == 1 else f'(pid_m * {count} + {n})'} * SPLIT",
           comment="this row tile's status words for this fold, one per program")
    w.line(f'tl.atomic_xchg({FLAGS} + words + part, ready.to(tl.int64), sem="release")')
    w.line(f"peers = tl.arange(0, {PARTS})")
    status = f'tl.atomic_add({FLAGS} + words + peers, 0, mask=peers < SPLIT, sem="acquire")'
    unpublished = f"tl.min(tl.where(peers < SPLIT, {status}, ready), 0) < ready"
    w.line(f"waiting = {unpublished}")
    with w.block("while waiting:"):
        w.line(f"waiting = {unpublished}", comment="every part of the row is resident: it is coming")
    w.line("parts_end = SPLIT")
    accs = fold_partials(w, fold, combine, buffers, "rows", "SPLIT", "BLOCK_M", "row_mask")
    names = fields(f"row_total{n}_", fold.width) if fold.width > 1 else [f"row_total{n}"]
    partials_total(w, fold, combine, accs, names, "row_mask")
    return names

"""Emitting the body of a kernel with attaches: per row, reductions whose results every element uses again.

The plan's segments are walked once per pass over a row's elements (:class:`_Pass`):

* a row that fits one tile (``K <= BLOCK_K``, chosen at launch) is read once: the tile stays live while each
  attached reduce folds it, its result joins the stream (:class:`~tricomb.lower.segments.Attach`), the stages
  after it run on the same tile, and the row's elements are stored (or folded by a reduce after the attaches);
* a longer row is swept once per attached reduce, each sweep recomputing the stream from the inputs with the
  results found so far, and once more to store (or fold) the elements. Every other sweep runs from the row's
  end, so that it first reads what the sweep before read last, which is likeliest still in L2; a sweep whose
  operator does not commute runs forward, as its fold must meet the elements in order.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..lower.fuse import KernelPlan
from ..lower.segments import Attach, ColumnSums, Elementwise, Store, TileReduce
from ..pipeline.printer import stage_text
from .columns import emit_column_finish, fold_columns, start_column_sums
from .combine import accumulate, after_fold, row_totals, split_groups, start_accumulators, tile_address
from .fold import masked_fields, reduce_tile
from .exchange import emit_exchange
from .rows import emit_rows_reduce
from .kernel import (POSITION, column_slots, emit_coordinates, emit_loads, emit_offsets, emit_stages, fields,
                     first_stream, program_ids, row_slots, store, uses_position)
from .scalar import ScalarContext, Value, emit_function
from .writer import Writer

TILE = "[BLOCK_M, BLOCK_K]"


class _Pass:
    """One pass over a tile of a row's elements, walking the plan's segments. ``until`` is the fold the pass ends
    at (it folds the tile into that fold's accumulators ``accs[until]``), or None for a pass through every segment
    (it stores the elements, or folds them into the reduce after the attaches). ``results`` holds each attach's
    row results found so far; with ``whole`` (the row is one tile) the pass finds them itself, from its own tile,
    and a fold not in order folds the row at once into ``totals``; ``share`` turns a fold's totals of this
    program's part of the row into the row's (:func:`_shared`), or is None when the program holds the row."""

    def __init__(self, w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...], address: dict,
                 results: dict[int, list[Value]], accs: dict[int, list[str]], whole: bool, tile: str = TILE,
                 share=None, hoisted: dict[str, Value] | None = None):
        self.w, self.ctx, self.p, self.combines, self.address = w, ctx, p, combines, address
        self.results, self.accs, self.whole, self.tile = results, accs, whole, tile
        self.share = share or _held
        self.totals: dict[int, list[str]] = {}
        self.hoisted = hoisted or {}  # inputs loaded before the loop over row tiles (:func:`_hoisted`)
        self.values: dict[str, Value] = dict(self.hoisted)

    def run(self, until: int | None) -> None:
        p, w = self.p, self.w
        self._load(0)
        stream = first_stream(p, self.values)
        attached: list[Value] = []  # the attached pipeline's stream, entering its reduce
        for segment in p.segments:
            if isinstance(segment, Elementwise) and segment.within is None:
                stream = emit_stages(w, self.ctx, p, segment, stream, self.values, self.tile)
            elif isinstance(segment, Elementwise):
                n = self._fold_of(segment)
                if p.segments.index(segment) < p.segments.index(p.folds[n]) and (self.whole or n == until):
                    attached = self._before_fold(segment, stream, p.folds[n])
            elif isinstance(segment, TileReduce):
                n = p.folds.index(segment)
                if not segment.attached:  # the reduce after the attaches: the pass's last fold
                    self._fold(n, segment, stream)
                    return
                if self.whole or n == until:
                    self._fold(n, segment, attached)
                if n == until:
                    return
                if self.whole:
                    self.results[n] = row_results(w, self.ctx, p, n, self.share(n, self.totals_of(n)))
            elif isinstance(segment, Attach):
                n = p.folds.index(segment.fold)
                stream = stream + [Value(f"{r.text}[:, None]", r.dtype, r.zero_dim) for r in self.results[n]]
                self._load(n + 1)
            elif isinstance(segment, ColumnSums):
                fold_columns(w, segment, [stream[j] for j in segment.fields], self.whole)
            elif isinstance(segment, Store):
                summed = p.column_sums.fields if p.column_sums is not None else ()
                store(w, self.ctx, p, segment, [v for j, v in enumerate(stream) if j not in summed], self.address,
                      "mask")

    def _load(self, phase: int) -> None:
        """The inputs of ``phase`` (:class:`~tricomb.lower.segments.Slot`), at this tile's addresses."""
        slots = [s for s in self.p.joining(phase) if s.name not in self.hoisted]
        self.values.update(emit_loads(self.w, self.ctx, self.p, slots, self.address, "mask", once=row_slots(self.p)))

    def _fold_of(self, segment: Elementwise) -> int:
        """The number of the attached fold whose pipeline ``segment``'s stages belong to."""
        return next(n for n, f in enumerate(self.p.folds) if f.attached and f.at == segment.within)

    def _before_fold(self, segment: Elementwise, stream: list[Value], fold: TileReduce) -> list[Value]:
        """The attached pipeline's stages before its reduce, on the stream; with the fold's share, without the
        last (the lift, which the fold applies itself)."""
        stages = segment.stages[:-1] if fold.share is not None else segment.stages
        return emit_stages(self.w, self.ctx, self.p, Elementwise(stages, segment.first, segment.within), stream,
                           self.values, self.tile)

    def _fold(self, n: int, fold: TileReduce, values: list[Value]) -> None:
        """The tile folded by fold ``n``: into its accumulators, or, for a whole row not folded in order, at once."""
        self.w.comment(f"stage {fold.at}: {stage_text(fold.stage)}" + (" (attached)" if fold.attached else ""))
        if self.whole and not fold.per_row:
            self.totals[n] = fields(f"total{n}_", fold.width) if fold.width > 1 else [f"total{n}"]
            tile = reduce_tile(fold, masked_fields(fold, values, "mask"), self.combines[n])
            self.w.line(f"{', '.join(self.totals[n])} = {tile}", comment="the whole row at once")
            return
        accumulate(self.w, self.ctx, fold, self.accs[n], values, self.combines[n])

    def totals_of(self, n: int) -> list[str]:
        """Fold ``n``'s row totals, after this pass folded it."""
        if n in self.totals:
            return self.totals[n]
        return totals_of(self.w, self.p, n, self.accs[n], self.combines[n])


def totals_of(w: Writer, p: KernelPlan, n: int, accs: list[str], combine: str) -> list[str]:
    """Fold ``n``'s row totals from its accumulators ``accs``, after its last tile."""
    fold = p.folds[n]
    return row_totals(w, fold, accs, combine, f"total{n}_" if fold.width > 1 else f"total{n}")


def row_results(w: Writer, ctx: ScalarContext, p: KernelPlan, n: int, totals: list[str]) -> list[Value]:
    """Attached fold ``n``'s row results: the attached pipeline's stages after the reduce, applied to its
    ``totals``, each held in a ``row<n>`` variable."""
    fold = p.folds[n]
    rank0 = p.binding.rank == 0
    stream = [Value(t, dtype, rank0) for t, dtype in zip(totals, fold.combined_dtypes)]
    results = emit_stages(w, ctx, p, p.following(fold, Elementwise), stream, {}, "[BLOCK_M]")
    names = fields(f"row{n}_", len(results)) if len(results) > 1 else [f"row{n}"]
    for name, r in zip(names, results):
        w.line(f"{name} = {r.text}", comment="the row's result, for each of its elements" if name == names[0] else None)
    return [Value(name, r.dtype, r.zero_dim) for name, r in zip(names, results)]


@dataclass(frozen=True, slots=True)
class _Rows:
    """A program's rows: each slot's offset to them, their coordinates by kept group (:func:`emit_offsets`),
    and the reduced groups, along which a tile runs."""

    offsets: dict[str, str]
    coords: dict[int, str]
    reduced: list[int]
    over_rows: str | None = None  # the combine function of the reduce over the rows, when the plan has one


def _tile(w: Writer, p: KernelPlan, rows: _Rows, ks: str) -> dict:
    """The offsets, mask and coordinates of the tile at positions ``ks`` along the rows; returns every slot's
    address."""
    w.line(f"ks = {ks}")
    with w.block("if WIDE:"):
        w.line("ks = ks.to(tl.int64)", comment="offsets along the row may pass 2**31 - 1 too")
    w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
    offsets = emit_offsets(w, "ks", rows.reduced, p.slots, "k", k_coords := {})
    emit_coordinates(w, p, "in", [(rows.coords, "[:, None]"), (k_coords, "[None, :]")], "[BLOCK_M, BLOCK_K]")
    if uses_position(p):
        w.line(f"{POSITION} = ks[None, :].to(tl.int64)", comment="positions along the reduced axes")
    return tile_address(rows.offsets, offsets, p.slots, row_slots(p))


def _start(w: Writer, n: int, fold: TileReduce, lanes: str = "BLOCK_K") -> list[str]:
    """Fold ``n``'s accumulators, filled with its identity (``lanes`` a row, where it keeps lanes)."""
    return start_accumulators(w, fold, f"acc{n}_" if fold.width > 1 else f"acc{n}", lanes)


def _one_hot(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...], rows: _Rows,
             results: dict[int, list[Value]]) -> None:
    """The reduce after the attaches as its one-hot form (:class:`~tricomb.lower.segments.OneHot`): each row's
    position, from its attached results and its inputs constant along it, then one pass through every segment at
    that element alone (a tile of one column), whose sum is the term there, or 0 where the position is outside
    the row."""
    hot = p.one_hot
    w.comment("the last reduce sums terms that are 0 but at one position a row: read that element alone")
    emit_coordinates(w, p, "in", [(rows.coords, "[:, None]")], "[BLOCK_M, 1]")
    args = []
    for source in hot.sources:
        if source[0] == "attached":
            r = results[source[1]][source[2]]
            args.append(Value(f"{r.text}[:, None]", r.dtype, r.zero_dim))
        elif source[0] == "input":
            slot = next(s for s in p.inputs if s.name == source[1])
            column = {slot.name: f"{rows.offsets[slot.name]}[:, None]"}
            args += emit_loads(w, ctx, p, [slot], column, "row_mask[:, None]", once=frozenset([slot.name])).values()
        else:
            args.append(Value("0", torch.int64))  # (the position reads none of these)
    position = emit_function(w, ctx, hot.position, args, "[BLOCK_M, 1]")[0]
    w.line(f"at = {position.text}.to(tl.int64)")
    w.line("found = row_mask[:, None] & (at >= 0) & (at < K)", comment="a position outside the row sums nothing")
    w.line("at = tl.where(found, at, 0)")
    offsets = emit_offsets(w, "at", rows.reduced, p.slots, "k", k_coords := {})
    emit_coordinates(w, p, "in", [(rows.coords, "[:, None]"), (k_coords, "")], "[BLOCK_M, 1]")
    address = tile_address(rows.offsets, offsets, p.slots, row_slots(p), along="")
    w.line("mask = found")
    n = len(p.folds) - 1
    accs = {n: _start(w, n, p.folds[n], lanes="1")}
    _Pass(w, ctx, p, combines, address, results, accs, whole=False, tile="[BLOCK_M, 1]").run(None)
    _final(w, ctx, p, totals_of(w, p, n, accs[n], combines[n]), rows)


def _final(w: Writer, ctx: ScalarContext, p: KernelPlan, totals: list[str], rows: _Rows) -> None:
    """After the last pass, for a reduce after the attaches: the stages after it on its row ``totals`` (inputs
    joining there read at the rows' offsets), and the rows stored."""
    fold = p.folds[-1]
    value = after_fold(w, ctx, p, fold, totals, rows.offsets, "row_mask", "[BLOCK_M]")
    if rows.over_rows is not None:
        emit_rows_reduce(w, ctx, p, value, rows.over_rows)
        return
    store(w, ctx, p, p.following(fold, Store), value, rows.offsets, "row_mask")


def _whole_row(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...], rows: _Rows,
               attached_only: bool, hoisted: dict[str, Value] | None = None) -> None:
    """The row in one tile: one pass through every segment (with ``attached_only``, up to the last attached fold's
    row results); ``hoisted``, inputs loaded already (:func:`_hoisted`)."""
    accs = {n: _start(w, n, f) for n, f in enumerate(p.folds) if f.per_row}
    address = _tile(w, p, rows, "tl.arange(0, BLOCK_K)")
    one = _Pass(w, ctx, p, combines, address, {}, accs, whole=True, hoisted=hoisted)
    last = max((n for n, f in enumerate(p.folds) if f.attached), default=None)
    one.run(last if attached_only else None)
    if attached_only:
        row_results(w, ctx, p, last, one.totals_of(last))
    elif not p.folds[-1].attached:
        _final(w, ctx, p, one.totals_of(len(p.folds) - 1), rows)


def _held(n: int, totals: list[str]) -> list[str]:
    """A fold's totals when the program holds the whole row: the row's already."""
    return totals


@dataclass(frozen=True, slots=True)
class _Span:
    """The elements of a row a program sweeps: ``length`` of them from ``start`` (the whole row, or a shared
    row's part), and how a fold's totals over them become the row's (``share``, as :class:`_Pass` takes it)."""

    start: str = ""  # a prefix of the positions ("k_start + "), or nothing
    length: str = "K"
    share: object = None


def _sweep_positions(forward: bool, span: _Span) -> str:
    """The positions of a sweep's tile: from the span's start, or from its end (``k0`` counts tiles swept)."""
    if forward:
        return f"{span.start}k0 + tl.arange(0, BLOCK_K)"
    return f"{span.start}({span.length} - 1) // BLOCK_K * BLOCK_K - k0 + tl.arange(0, BLOCK_K)"


def _sweeps(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...], rows: _Rows,
            attached_only: bool, span: _Span = _Span()) -> dict[int, list[Value]]:
    """A row (or ``span`` of it) in several tiles: one sweep per attached fold, then (unless ``attached_only``)
    one through every segment. Returns the attached folds' row results."""
    results: dict[int, list[Value]] = {}
    accs: dict[int, list[str]] = {}
    last = len(p.folds) - 1
    rest = [] if attached_only else [None]
    for sweep, until in enumerate([n for n, f in enumerate(p.folds) if f.attached] + rest):
        n = last if until is None else until
        folds = until is not None or not p.folds[n].attached
        if folds:
            accs[n] = _start(w, n, p.folds[n])
        forward = sweep % 2 == 0 or (folds and p.folds[n].ordered)
        what = f"fold {stage_text(p.folds[n].stage)}" if until is not None else "every stage"
        w.comment(f"sweep {sweep}: {what}" + ("" if forward else ", from the row's end (what is still in L2 first)"))
        with w.block(f"for k0 in range(0, {span.length}, BLOCK_K):"):
            address = _tile(w, p, rows, _sweep_positions(forward, span))
            _Pass(w, ctx, p, combines, address, results, accs, whole=False).run(until)
        if until is not None:
            totals = totals_of(w, p, n, accs[n], combines[n])
            results[n] = row_results(w, ctx, p, n, (span.share or _held)(n, totals))
        elif folds:
            _final(w, ctx, p, totals_of(w, p, n, accs[n], combines[n]), rows)
    return results


def emit_attach_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...]) -> None:
    """``BLOCK_M`` rows a program; a row that fits one tile is read once and held on chip, a longer one swept
    once per attached fold and once more (module docstring), in the plan's one-pass form when it has one
    (``p.long_rows``); with a one-hot reduce after the attaches (``p.one_hot``), that reduce reads one element a
    row after either. ``combines`` names each fold's combine function: ``p``'s, then the long rows' plan's."""
    kept, reduced = split_groups(p)
    if p.over_rows is not None:
        *combines, over_rows = combines
    else:
        over_rows = None
    whole, swept = combines[:len(p.folds)], combines[len(p.folds):] or combines
    if p.column_sums is not None:
        _row_tiles(w, ctx, p, whole, swept, kept, reduced)
        return
    program_ids(w, ["pid_m", "part"] if p.shareable else ["pid_m"])
    _rows_body(w, ctx, p, whole, swept, kept, reduced, over_rows)


def _row_tiles(w: Writer, ctx: ScalarContext, p: KernelPlan, whole: tuple[str, ...], swept: tuple[str, ...],
               kept: list[int], reduced: list[int]) -> None:
    """With fields summed over the rows: ``PROGRAMS`` programs step through the row tiles, each keeping its
    partial of those fields across them (:mod:`.columns`), which the last programs fold after the loop. One
    loop for rows held in a tile and one for swept rows, so that neither holds the other's registers."""
    w.line("program = tl.program_id(0)")
    start_column_sums(w, p.column_sums)
    with w.block("if K <= BLOCK_K:"):
        w.comment("each row is one tile: read once, held on chip through every fold")
        hoisted = _hoisted(w, ctx, p, reduced)
        with _each_tile(w, pipelined=True):
            _whole_row(w, ctx, p, whole, _row_prologue(w, p, kept, reduced, None), attached_only=False,
                       hoisted=hoisted)
    with w.block("else:"):
        with _each_tile(w):
            _sweeps(w, ctx, p.long_rows or p, swept, _row_prologue(w, p, kept, reduced, None), attached_only=False)
    emit_column_finish(w, ctx, p, reduced)


def _hoisted(w: Writer, ctx: ScalarContext, p: KernelPlan, reduced: list[int]) -> dict[str, Value]:
    """The inputs constant along the rows (:func:`~.kernel.column_slots`: a norm's weight), loaded once as one
    row of a tile for every row tile the program steps through, rather than again for each (from L2, the bytes of
    another input)."""
    slots = [s for s in p.inputs if s.name in column_slots(p)]
    if not slots:
        return {}
    w.comment("inputs constant along the rows: loaded once, for every row tile")
    w.line("ks = tl.arange(0, BLOCK_K)")
    with w.block("if WIDE:"):
        w.line("ks = ks.to(tl.int64)")
    offsets = emit_offsets(w, "ks", reduced, slots, "k")
    return emit_loads(w, ctx, p, slots, {s.name: f"{offsets[s.name]}[None, :]" for s in slots}, "(ks < K)[None, :]")


@contextmanager
def _each_tile(w: Writer, pipelined: bool = False):
    """The loop of a program over its row tiles ``pid_m``: every ``PROGRAMS``-th from its own; ``pipelined``,
    with ``ROW_STAGES`` tiles' loads in flight (Triton's software pipelining: the next tiles' loads are issued
    while this one folds)."""
    stages = ", num_stages=ROW_STAGES" if pipelined else ""
    with w.block(f"for tile in tl.range(program, (M + BLOCK_M - 1) // BLOCK_M, PROGRAMS{stages}):"):
        w.line("pid_m = tile")
        with w.block("if WIDE:"):
            w.line("pid_m = pid_m.to(tl.int64)", comment="offsets may pass 2**31 - 1: index in int64")
        yield


def _row_prologue(w: Writer, p: KernelPlan, kept: list[int], reduced: list[int], over_rows: str | None) -> _Rows:
    """Row tile ``pid_m``'s rows, their mask, offsets and coordinates."""
    w.line("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    offsets = emit_offsets(w, "rows", kept, p.slots, "r", coords := {})
    emit_coordinates(w, p, "row", [(coords, "")], "[BLOCK_M]")
    return _Rows(offsets, coords, reduced, over_rows)


def _rows_body(w: Writer, ctx: ScalarContext, p: KernelPlan, whole: tuple[str, ...], swept: tuple[str, ...],
               kept: list[int], reduced: list[int], over_rows: str | None) -> None:
    """Row tile ``pid_m``: its rows held or swept (:func:`emit_attach_body`)."""
    long = p.long_rows or p
    hot = p.one_hot is not None
    rows = _row_prologue(w, p, kept, reduced, over_rows)
    if p.shareable:
        with w.block("if SHARED:"):
            _shared(w, ctx, long, swept, rows)
    with w.block("elif K <= BLOCK_K:" if p.shareable else "if K <= BLOCK_K:"):
        w.comment("the row is one tile: read once, held on chip through every fold")
        _whole_row(w, ctx, p, whole, rows, attached_only=hot)
    with w.block("else:"):
        if p.long_rows is not None:
            w.comment("a longer row: the one-pass form of the attaches (fewer sweeps)")
        results = _sweeps(w, ctx, long, swept, rows, attached_only=hot)
    if hot:
        _one_hot(w, ctx, p, whole, rows, results)


def _shared(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...], rows: _Rows) -> None:
    """A row tile shared by ``SPLIT`` programs, this one holding or sweeping part ``part`` of it: each attached
    fold's totals over the part are exchanged for the row's (:mod:`.exchange`), and the program stores its part's
    elements. The plan's one-pass form, when it has one: one exchange fewer."""
    count = len(p.folds)

    def share(n: int, totals: list[str]) -> list[str]:
        return emit_exchange(w, p.folds[n], n, count, totals, combines[n])

    w.comment("the row is shared by SPLIT programs, one an SM, all resident at once (few long rows)")
    w.line("CHUNK = ((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K * BLOCK_K", comment="each program's part")
    w.line("k_start = part * CHUNK")
    with w.block("if CHUNK == BLOCK_K:"):
        w.comment("the part is one tile: read once, held on chip through every fold and exchange")
        accs = {n: _start(w, n, f) for n, f in enumerate(p.folds) if f.per_row}
        address = _tile(w, p, rows, "k_start + tl.arange(0, BLOCK_K)")
        _Pass(w, ctx, p, combines, address, {}, accs, whole=True, share=share).run(None)
    with w.block("else:"):
        w.line("span = tl.minimum(K - k_start, CHUNK)", comment="(none for a part past the row's end)")
        _sweeps(w, ctx, p, combines, rows, attached_only=False, span=_Span("k_start + ", "span", share))

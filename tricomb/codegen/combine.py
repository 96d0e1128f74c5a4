"""Emitting the reduce and scan kernels' bodies: the loops over K around their segments.

A reduce keeps a tile-shaped accumulator over its loop and folds it once per row (its
:class:`~tricomb.lower.segments.TileReduce`, :mod:`.fold`); rows split across programs are finished by the last
program (its :class:`~tricomb.lower.segments.Ticket`, :func:`~tricomb.codegen.fold.emit_last_program`). A scan
carries each row's prefix from tile to tile, or, with one tile per program, finds it by the decoupled look-back
(its :class:`~tricomb.lower.segments.LookBack`, :mod:`.lookback`); a reduce fused after it folds each scanned
tile with the reduce's own emitters.
"""
from __future__ import annotations

import dataclasses


from ..lower.bind import input_stages
from ..lower.fuse import KernelPlan
from ..lower.segments import Elementwise, Fold, LookBack, Store, Ticket, TileReduce, TileScan
from ..pipeline.printer import stage_text
from .fold import (acc_type, emit_last_program, fold_in_order, identity_text, masked_fields, reduce_tile,
                   tile_scan, to_accumulator)
from .kernel import (POSITION, emit_coordinates, emit_loads, emit_offsets, emit_stages, fields, first_stream,
                     program_ids, row_slots, store, uses_position)
from .lookback import emit_look_back, emit_publish_aggregate, last_column, tree_aggregate
from .scalar import ScalarContext, Value, emit_function
from .writer import Writer


def split_groups(p: KernelPlan) -> tuple[list[int], list[int]]:
    kept = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "kept"]
    reduced = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "reduced"]
    return kept, reduced


def tile_address(rows: dict[str, str], ks: dict[str, str], slots, once: frozenset[str] = frozenset(),
                 along: str = "[None, :]") -> dict[str, str]:
    """Each slot's offsets for a tile of rows by positions along them (``ks``, laid along the tile by ``along``:
    nothing for positions that already have a row each): a column for a slot in ``once`` (constant along the
    row: :func:`~tricomb.codegen.kernel.row_slots`)."""
    return {s.name: f"{rows[s.name]}[:, None]" if s.name in once else f"({rows[s.name]}[:, None] + {ks[s.name]}{along})"
            for s in slots}


def _before_fold(w: Writer, ctx: ScalarContext, p: KernelPlan, rows, ks, mask: str, whole: str | None = None,
                 lift: bool = False, lagged: dict[str, str] | None = None) -> list[Value]:
    """Inside the loop over K: load the inputs that join before the first fold (unmasked when ``whole`` holds:
    :func:`~tricomb.codegen.kernel.emit_loads`; the ``lagged`` ones under their own masks), apply the stages
    before it, and return the stream's fields (with ``lift``, for a declared share, the stream before the last
    stage, the lift, which the fold applies itself)."""
    before, once = p.joining(0), row_slots(p)
    values = emit_loads(w, ctx, p, before, tile_address(rows, ks, before, once), mask, whole, once, lagged)
    segment = p.segments[0]
    if not lift:
        return emit_stages(w, ctx, p, segment, first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")
    last = segment.first + len(segment.stages) - 1
    head = dataclasses.replace(segment, stages=segment.stages[:-1])
    stream = emit_stages(w, ctx, p, head, first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")
    return stream + [values[f"in{i}"] for i, owner in enumerate(input_stages(p.pipeline)) if owner == last]


def _fold_max_first(w: Writer, ctx: ScalarContext, fold: TileReduce, accs: list[str], values: list[Value],
                    combine: str) -> None:
    """Fold one tile of elements into the per-row accumulators as an online normalizer's pair
    (:func:`~tricomb.pipeline.operators.declare_share`): each row's largest element ``tile_max``, then the sum of
    each element's share at that maximum, joined to the accumulators by the pair combine. (A NaN element, which
    the maximum skips, makes its share and so the sum NaN; the maximum is then made NaN too, as the pair
    combine's would be: for a declared share by the NaN sum, which is NaN exactly where an element is, for a
    derived one by a maximum that keeps NaN.)"""
    w.comment("the tile taken in max first (the operator's share): per row its largest element, then the")
    w.comment("sum of each element's share at that maximum, joined to the row's pair by the combine")
    w.line(f"element = tl.where(mask, {to_accumulator(fold, values[0], 0)}, {identity_text(fold, 0)})")
    w.line("tile_max = tl.reduce(element, 1, tl.standard._elementwise_max)")
    args = [Value("tile_max[:, None]", fold.acc_dtypes[0]), Value("element", fold.acc_dtypes[0])]
    share = emit_function(w, ctx, fold.share, args, "[BLOCK_M, BLOCK_K]")[0]
    w.line(f"share = tl.where(mask, {share.text}, {identity_text(fold, 1)}).to({acc_type(fold, 1)})")
    w.line("tile_sum = tl.reduce(share, 1, tl.standard._sum_combine)")
    if fold.declared:
        w.line("tile_max = tl.where(tile_sum != tile_sum, tile_sum, tile_max)",
               comment="a NaN element: the maximum skipped it, the pair is NaN")
    else:
        w.line("tile_max = tc_extreme_over(element, 1, True)",
               comment="NaN where an element is (a derived share may be NaN at a number too)")
    w.line(f"{', '.join(accs)} = {combine}({', '.join(accs)}, tile_max, tile_sum)")


def after_fold(w: Writer, ctx: ScalarContext, p: KernelPlan, fold: Fold, names: list[str], address, mask: str,
                shape: str, whole: str | None = None, once: frozenset[str] = frozenset(),
                lagged: dict[str, str] | None = None) -> list[Value]:
    """The elementwise stages after ``fold``, on its combined fields ``names``, with the inputs that join there
    loaded at ``address`` (unmasked when ``whole`` holds; as columns for the slots in ``once``; the ``lagged``
    ones under their own masks)."""
    values = emit_loads(w, ctx, p, p.joining(p.phase_after(fold)), address, mask, whole, once, lagged)
    b = p.binding
    rank = b.rank - len(b.axes) if isinstance(fold, TileReduce) and not fold.stage.keepdim else b.rank
    stream = [Value(n, dtype, rank == 0) for n, dtype in zip(names, fold.combined_dtypes)]
    return emit_stages(w, ctx, p, p.following(fold, Elementwise), stream, values, shape)


def accumulate(w: Writer, ctx: ScalarContext, fold: TileReduce, accs: list[str], values: list[Value],
                combine: str) -> None:
    """Fold one tile of the stream's fields (masked lanes as the identity) into the reduce's accumulators: lane
    by lane into tile-shaped ones, or, for an operator that does not commute, in order into per-row ones."""
    if fold.share is not None:
        _fold_max_first(w, ctx, fold, accs, values, combine)
        return
    steps = masked_fields(fold, values, "mask")
    if not fold.ordered:
        w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + steps)})")
        return
    tiles = fields("step", fold.width)
    for tile, step in zip(tiles, steps):
        w.line(f"{tile} = {step}")
    fold_in_order(w, fold, accs, tiles, "BLOCK_K", combine)


def _finish(w: Writer, ctx: ScalarContext, p: KernelPlan, fold: TileReduce, combine: str, accs: list[str],
            rows: dict, split: str, part: str, ticket: str) -> None:
    """After the loop over K: each row's total from the accumulators ``accs`` of ``fold``; when the constexpr
    ``split`` holds, rows are shared by programs and the last one finishes them (the fold's
    :class:`~tricomb.lower.segments.Ticket`, this program being part ``part`` of row tile ``ticket``); then a
    the stages after the reduce and the store."""
    totals = row_totals(w, fold, accs, combine)
    with w.block(f"if {split}:"):
        emit_last_program(w, p.following(fold, Ticket).fold, combine, totals, part, ticket)
    with w.block("else:"):
        w.line("keep = row_mask")
    value = after_fold(w, ctx, p, fold, totals, rows, "keep", "[BLOCK_M]")
    store(w, ctx, p, p.following(fold, Store), value, rows, "keep")


def row_totals(w: Writer, fold: TileReduce, accs: list[str], combine: str, base: str = "total") -> list[str]:
    """Each row's total (named from ``base``) from the accumulators ``accs`` of ``fold`` after its loop: the
    per-row value (the identity for rows past ``M``), or the tile's lanes folded."""
    totals = fields(base, fold.width)
    if fold.per_row:
        for j, (t, acc) in enumerate(zip(totals, accs)):
            w.line(f"{t} = tl.where(row_mask, {acc}, {identity_text(fold, j)})",
                   comment="one use of the loop's result (Triton 3.6's thread-locality pass asserts it)" if j == 0
                   else None)
    else:
        w.line(f"{', '.join(totals)} = {reduce_tile(fold, accs, combine)}")
    return totals


def start_accumulators(w: Writer, fold: TileReduce, base: str = "acc", lanes: str = "BLOCK_K") -> list[str]:
    """The accumulators of ``fold`` (named from ``base``), filled with its identity: one value per row, or one
    per lane of a tile of ``lanes`` columns."""
    accs = fields(base, fold.width)
    shape = "[BLOCK_M]" if fold.per_row else f"[BLOCK_M, {lanes}]"
    for j, acc in enumerate(accs):
        w.line(f"{acc} = tl.full({shape}, {identity_text(fold, j)}, {acc_type(fold, j)})")
    return accs


def emit_reduce_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...]) -> None:
    """Rows by K; a tile-shaped accumulator over the loop, one tree reduction per row at the end; with
    ``TICKET``, rows split across programs (the :class:`~tricomb.lower.segments.Ticket`). ``combines`` names the
    fold's combine function."""
    (fold,), (combine,) = p.folds, combines
    kept, reduced = split_groups(p)
    program_ids(w, ["pid_m", "pid_k"])
    w.line("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r", row_coords := {})
    emit_coordinates(w, p, "row", [(row_coords, "")], "[BLOCK_M]")
    accs = start_accumulators(w, fold)
    w.line("CHUNK = ((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K * BLOCK_K", comment="the part of K each of SPLIT programs reduces")
    w.line("k_start = pid_k * CHUNK")
    with w.block("for k0 in range(0, CHUNK, BLOCK_K):"):
        w.line("ks = k_start + k0 + tl.arange(0, BLOCK_K)")
        w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
        ks = emit_offsets(w, "ks", reduced, p.joining(0), "k", k_coords := {})
        emit_coordinates(w, p, "in", [(row_coords, "[:, None]"), (k_coords, "[None, :]")], "[BLOCK_M, BLOCK_K]")
        if uses_position(p):
            w.line(f"{POSITION} = ks[None, :].to(tl.int64)", comment="positions along the reduced axes")
        values = _before_fold(w, ctx, p, rows, ks, "mask", lift=fold.share is not None)
        w.comment(f"stage {fold.at}: {stage_text(fold.stage)}")
        accumulate(w, ctx, fold, accs, values, combine)
    _finish(w, ctx, p, fold, combine, accs, rows, "TICKET", "pid_k", "pid_m")


@dataclasses.dataclass(frozen=True)
class _Lagged:
    """The inputs of one phase read some places back (:func:`_lagged`): each one's ``masks``, and ``bounds``, a
    scalar condition that holds where every place they read in this tile lies in the row."""

    masks: dict[str, str]
    bounds: str | None

    def whole(self, w: Writer, name: str) -> str:
        """The condition under which this phase loads its tile unmasked: ``whole``, and the lagged places in the
        row (defined as ``name`` when there are lagged inputs)."""
        if self.bounds is None:
            return "whole"
        w.line(f"{name} = whole & {self.bounds}", comment="and every place a lagged input reads is in the row")
        return name


def _position(stage, reads: bool, ks: str) -> str:
    """The position along the axis that the step at scan position ``ks`` reads (``reads``) or writes: one step
    back when exclusive, counted from the row's end when reversed."""
    source = f"({ks} - 1)" if reads and stage.exclusive else ks
    return f"K - 1 - {source}" if stage.reverse else source


def _scan_positions(w: Writer, p: KernelPlan, scan: TileScan, reduced: list[int],
                    coords: tuple[dict, dict]) -> tuple[dict, dict, str, _Lagged, _Lagged]:
    """Offsets of the elements a scan step reads (``k`` in scan order; one step back when exclusive) and writes
    (``ks``), and the mask of the reads. Reversed, scan order ``j`` is position ``K - 1 - j`` along the axis.
    ``coords`` receives the coordinates by group of the reads, then of the writes. Last, the lagged inputs
    (:func:`_lagged`) that join before the scan and after it."""
    stage = scan.stage
    before = p.joining(0)
    after = [s for s in p.slots if s.phase > 0]
    w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
    if not stage.reverse and not stage.exclusive:
        offsets = emit_offsets(w, "ks", reduced, p.slots, "k", coords[0])
        coords[1].update(coords[0])
        writes = dict(offsets)
        return (offsets, writes, "mask", _lagged(w, before, stage, True, "mask", reduced, offsets),
                _lagged(w, after, stage, False, "mask", reduced, writes))
    w.line(f"src = {_position(stage, True, 'ks')}",
           comment=("exclusive: " if stage.exclusive else "") + ("reversed: " if stage.reverse else "")
           + "the position each step reads")
    w.line(f"dst = {_position(stage, False, 'ks')}", comment="the position each step writes")
    read_mask = "mask"
    if stage.exclusive:
        w.line("read_mask = mask & (ks >= 1)[None, :]", comment="the first step reads nothing: the identity")
        read_mask = "read_mask"
    reads = emit_offsets(w, "src", reduced, before, "k", coords[0])
    writes = emit_offsets(w, "dst", reduced, after, "d", coords[1])
    return (reads, writes, read_mask, _lagged(w, before, stage, True, read_mask, reduced, reads),
            _lagged(w, after, stage, False, "mask", reduced, writes))


def _lagged(w: Writer, slots, stage, reads: bool, mask: str, reduced: list[int], offsets: dict[str, str]) -> _Lagged:
    """For each slot with a lag among ``slots`` (read with the places a step reads, or writes): its offsets at
    ``lag`` places back along the axis (replacing its entry in ``offsets``) and its mask, ``mask`` where that place
    lies in the row (the slot's ``fill`` is loaded elsewhere); and the tile's bounds check: the places are a run
    of positions, so its two ends decide."""
    masks, bounds = {}, []
    for slot in slots:
        if not slot.lag:
            continue
        at = f"{slot.name}_at"
        w.line(f"{at} = {_position(stage, reads, 'ks')} - {slot.lag}",
               comment=f"{slot.name} is read {slot.lag} back along the axis")
        offsets.update(emit_offsets(w, at, reduced, [slot], "lag"))
        masks[slot.name] = f"{slot.name}_mask"
        w.line(f"{masks[slot.name]} = {mask} & ((0 <= {at}) & ({at} < K))[None, :]")
        for end in ("k0", "(k0 + BLOCK_K - 1)"):
            place = f"({_position(stage, reads, end)} - {slot.lag})"
            bounds.append(f"(0 <= {place}) & ({place} < K)")
    return _Lagged(masks, " & ".join(bounds) if bounds else None)


def _whole_tile(w: Writer, scan: TileScan) -> None:
    """``whole``: this step's tile lies inside the tensor, every lane of its reads and writes in bounds (an
    exclusive scan's first step reads one place before the row: never whole)."""
    first = " & (k0 >= 1)" if scan.stage.exclusive else ""
    w.line(f"whole = (k0 + BLOCK_K <= K) & (pid * BLOCK_M + BLOCK_M <= M){first}",
           comment="every lane of this tile is in bounds")


def _positions(w: Writer, scan: TileScan) -> None:
    """Each read element's int64 position along the axis (``src`` when reversed or exclusive, else ``ks``)."""
    stage = scan.stage
    source = "src" if stage.reverse or stage.exclusive else "ks"
    w.line(f"{POSITION} = {source}[None, :].to(tl.int64)", comment="positions along the axis")


def _scan_program(w: Writer) -> None:
    """Which rows (``pid``) and which part of them (``chunk``; ``k_first`` to ``k_stop``) this program scans: all
    of K, or with ``LOOKBACK`` one tile, tiles numbered by program id. A program waits only on lower-numbered
    ones, which the GPU starts first (blocks start in index order, which CUB's single-pass scan relies on too);
    Triton's interpreter runs programs one by one in that order. (Tiles numbered by an atomic counter, taken
    before the tile's load, made P4 0.851 ms against 0.816 ms so: bench/NOTES.md.)"""
    _with_and_without_look_back(w, [("SPLIT = (K + BLOCK_K - 1) // BLOCK_K", "programs per row tile"),
                                    ("tile_id = tl.program_id(0)", None),
                                    ("pid = (tile_id // SPLIT).to(tl.int32)", None),
                                    ("chunk = (tile_id % SPLIT).to(tl.int32)", None)],
                                ["pid = tl.program_id(0)", "chunk = pid * 0"])
    with w.block("if WIDE:"):
        w.comment("offsets may pass 2**31 - 1: index in int64")
        w.line("pid = pid.to(tl.int64)")
        w.line("chunk = chunk.to(tl.int64)")
    _with_and_without_look_back(w, [("k_first = chunk * BLOCK_K", None), ("k_stop = k_first + BLOCK_K", None)],
                                ["k_first = chunk * 0", "k_stop = K"])


def _with_and_without_look_back(w: Writer, with_it: list[tuple[str, str | None]], without: list[str]) -> None:
    """``if LOOKBACK:`` the lines ``with_it`` (each with its comment or None), ``else:`` the lines ``without``."""
    with w.block("if LOOKBACK:"):
        for line, comment in with_it:
            w.line(line, comment=comment)
    with w.block("else:"):
        w.lines(without)


def _scan_tile(w: Writer, ctx: ScalarContext, p: KernelPlan, scan: TileScan, combine: str, values: list[Value],
               read_mask: str) -> list[str]:
    """One tile's scan: the tile in accumulator fields, its scan within, its prefix from the tiles before (the
    carries, or the look-back), and the scanned fields returned (:func:`_carry_forward` updates the carries)."""
    carries, tiles, scanned = fields("carry", scan.width), fields("tile", scan.width), fields("scanned", scan.width)
    within = fields("within", scan.width)
    look_back = p.following(scan, LookBack)
    for tile, masked in zip(tiles, masked_fields(scan, values, read_mask)):
        w.line(f"{tile} = {masked}")
    if scan.commutes:
        with w.block("if LOOKBACK:"):
            emit_publish_aggregate(w, look_back, tree_aggregate(scan, tiles, combine))
    w.line(f"{', '.join(within)} = {tile_scan(scan, tiles, 1, combine)}", comment="the scan within the tile")
    with w.block("if LOOKBACK:"):
        if not scan.commutes:
            emit_publish_aggregate(w, look_back, last_column(scan, within))
        emit_look_back(w, look_back, combine)
    w.line(f"{', '.join(scanned)} = {combine}({', '.join(f'{c}[:, None]' for c in carries)}, {', '.join(within)})")
    return scanned


def _carry_forward(w: Writer, scan: TileScan, scanned: list[str]) -> None:
    """The carries for the next tile: the last column of the scanned fields. Emitted after the tile's store:
    Triton 3.6's layout pass (RemoveLayoutConversions) can move a conversion of the scanned tile made for its
    store above an earlier read of the tile, and the module then fails to compile ("operand does not dominate
    this use", triton-lang/triton#8257; tests/test_scans.py, a cummax of int32 plus a broadcast row)."""
    with w.block("if not LOOKBACK:"):
        w.comment("the row's prefix so far, for the next tile (with LOOKBACK there is none)")
        for j, (carry, field) in enumerate(zip(fields("carry", scan.width), scanned)):
            w.line(f"{carry} = tc_last({field}, BLOCK_K).to({acc_type(scan, j)})",
                   comment="masked lanes hold the identity" if j == 0 else None)


def emit_scan_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combines: tuple[str, ...]) -> None:
    """Rows by K, tile by tile along K; ``carry`` holds each row's prefix of the tiles before, carried by the
    loop, or with ``LOOKBACK`` (one tile per program) found by the decoupled look-back. A reduce fused after the
    scan (its own TileReduce and Ticket) folds each scanned tile into its own accumulator, reduced once per row
    after the loop (and across programs by the last one, with ``LOOKBACK``), so the scanned values are never
    stored. ``combines`` names each fold's combine function."""
    scan, *fused = p.folds
    kept, reduced = split_groups(p)
    _scan_program(w)
    w.line("rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r", row_coords := {})
    emit_coordinates(w, p, "row", [(row_coords, "")], "[BLOCK_M]")
    for j, carry in enumerate(fields("carry", scan.width)):
        w.line(f"{carry} = tl.full([BLOCK_M], {identity_text(scan, j)}, {acc_type(scan, j)})")
    accs = start_accumulators(w, fused[0]) if fused else []
    with w.block("for k0 in range(k_first, k_stop, BLOCK_K):"):
        w.line("ks = k0 + tl.arange(0, BLOCK_K)")
        coords: tuple[dict, dict] = ({}, {})
        reads, ks, read_mask, lagged_before, lagged_after = _scan_positions(w, p, scan, reduced, coords)
        for phase, along in zip(("in", "out"), coords):
            emit_coordinates(w, p, phase, [(row_coords, "[:, None]"), (along, "[None, :]")], "[BLOCK_M, BLOCK_K]")
        _whole_tile(w, scan)
        if uses_position(p):
            _positions(w, scan)
        values = _before_fold(w, ctx, p, rows, reads, read_mask, lagged_before.whole(w, "whole_reads"),
                              lagged=lagged_before.masks)
        w.comment(f"stage {scan.at}: {stage_text(scan.stage)}")
        scanned = _scan_tile(w, ctx, p, scan, combines[0], values, read_mask)
        address = tile_address(rows, ks, [s for s in p.slots if s.phase > 0], row_slots(p))
        value = after_fold(w, ctx, p, scan, scanned, address, "mask", "[BLOCK_M, BLOCK_K]",
                           lagged_after.whole(w, "whole_writes"), row_slots(p), lagged_after.masks)
        if not fused:
            store(w, ctx, p, p.following(scan, Store), value, address, "mask")
        else:
            w.comment(f"stage {fused[0].at}: {stage_text(fused[0].stage)}, in the same loop")
            accumulate(w, ctx, fused[0], accs, value, combines[1])
        _carry_forward(w, scan, scanned)
    if fused:
        _finish(w, ctx, p, fused[0], combines[1], accs, rows, "LOOKBACK", "chunk", "pid")

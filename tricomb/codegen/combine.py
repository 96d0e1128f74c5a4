"""Emitting the reduce and scan kernels' bodies: the loops over K around the fold (:mod:`.fold`).

A reduce keeps a tile-shaped accumulator over its loop and folds it once per row; rows split across programs
are finished by the last program (:func:`~tricomb.codegen.fold.emit_last_program`). A scan carries each row's
prefix from tile to tile, or, with one tile per program, finds it by the decoupled look-back
(:mod:`.lookback`).
"""
from __future__ import annotations

import torch

from ..lower.bind import input_stages
from ..lower.fuse import KernelPlan
from ..pipeline.printer import stage_text
from .fold import (NO_INDEX, acc_type, emit_last_program, fold_in_order, identity_text, masked_fields, packed,
                   reduce_tile, tile_scan, to_accumulator)
from .kernel import emit_loads, emit_offsets, emit_stages, fields, first_stream, program_ids, store
from .lookback import emit_look_back, emit_publish_aggregate, last_column, tree_aggregate
from .scalar import ScalarContext, Value, emit_function
from .writer import Writer


def _split_groups(p: KernelPlan) -> tuple[list[int], list[int]]:
    kept = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "kept"]
    reduced = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "reduced"]
    return kept, reduced


def _tile_address(rows: dict[str, str], ks: dict[str, str], slots) -> dict[str, str]:
    return {s.name: f"({rows[s.name]}[:, None] + {ks[s.name]}[None, :])" for s in slots}


def _before_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, rows, ks, mask: str,
                    whole: str | None = None) -> list[Value]:
    """Inside the loop over K: load the inputs that join before the combine (unmasked when ``whole`` holds:
    :func:`~tricomb.codegen.kernel.emit_loads`), apply the stages before it, and return the stream's fields
    (with a declared share, the stream before the lift, which the fold applies itself)."""
    before = [s for s in p.inputs if not s.after]
    values = emit_loads(w, ctx, p, before, _tile_address(rows, ks, before), mask, whole)
    if p.share is None:
        return emit_stages(w, ctx, p, p.before, 0, first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")
    lift = len(p.before) - 1
    stream = emit_stages(w, ctx, p, p.before[:-1], 0, first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")
    return stream + [values[f"in{i}"] for i, owner in enumerate(input_stages(p.pipeline)) if owner == lift]


def _fold_max_first(w: Writer, ctx: ScalarContext, p: KernelPlan, accs: list[str], values: list[Value],
                    combine: str) -> None:
    """Fold one tile of elements into the per-row accumulators as an online normalizer's pair
    (:func:`~tricomb.pipeline.operators.declare_share`): each row's largest element ``tile_max``, then the sum of
    each element's share at that maximum, joined to the accumulators by the pair combine. (A NaN element, which
    the maximum skips, makes its share and so the sum NaN; the maximum is then made NaN too, as the pair
    combine's would be.)"""
    w.comment("the tile taken in max first (the operator's declared share): per row its largest element, then the")
    w.comment("sum of each element's share at that maximum, joined to the row's pair by the combine")
    w.line(f"element = tl.where(mask, {to_accumulator(ctx, p, values[0], 0)}, {identity_text(p, 0)})")
    w.line("tile_max = tl.reduce(element, 1, tl.standard._elementwise_max)")
    args = [Value("tile_max[:, None]", p.acc_dtypes[0]), Value("element", p.acc_dtypes[0])]
    share = emit_function(w, ctx, p.share, args, "[BLOCK_M, BLOCK_K]")[0]
    w.line(f"share = tl.where(mask, {share.text}, {identity_text(p, 1)}).to({acc_type(p, 1)})")
    w.line("tile_sum = tl.reduce(share, 1, tl.standard._sum_combine)")
    w.line("tile_max = tl.where(tile_sum != tile_sum, tile_sum, tile_max)",
           comment="a NaN element: the maximum skipped it, the pair is NaN")
    w.line(f"{', '.join(accs)} = {combine}({', '.join(accs)}, tile_max, tile_sum)")


def _after_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, names: list[str], address, mask: str,
                   shape: str, whole: str | None = None) -> list[Value]:
    """Stages after the reduce/scan, on the combined fields ``names``, with the inputs that join there loaded at
    ``address`` (unmasked when ``whole`` holds)."""
    after = [s for s in p.inputs if s.after and not s.late]
    values = emit_loads(w, ctx, p, after, address, mask, whole)
    b = p.binding
    rank = b.rank - len(b.axes) if p.kind == "reduce" and not p.combine.keepdim else b.rank
    stream = [Value(n, dtype, rank == 0) for n, dtype in zip(names, p.combined_dtypes)]
    return emit_stages(w, ctx, p, p.after, len(p.before) + 1, stream, values, shape)


def _accumulate(w: Writer, ctx: ScalarContext, p: KernelPlan, accs: list[str], values: list[Value],
                combine: str) -> None:
    """Fold one tile of the stream's fields (masked lanes as the identity) into the reduce's accumulators: lane
    by lane into tile-shaped ones, or, for an operator that does not commute, in order into per-row ones."""
    if p.share is not None:
        _fold_max_first(w, ctx, p, accs, values, combine)
        return
    steps = masked_fields(ctx, p, values, "mask")
    if not p.ordered:
        w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + steps)})")
        return
    tiles = fields("step", p.width)
    for tile, step in zip(tiles, steps):
        w.line(f"{tile} = {step}")
    fold_in_order(w, ctx, p, accs, tiles, "BLOCK_K", combine)


def _finish(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str, accs: list[str], rows: dict, split: str,
            part: str, ticket: str) -> None:
    """After the loop over K: each row's total from the accumulators ``accs``; when the constexpr ``split``
    holds, rows are shared by programs and the last one finishes them (:func:`emit_last_program`, this
    program being part ``part`` of row tile ``ticket``); then a mean's division, the stages after the reduce and
    the store."""
    totals = fields("total", p.width)
    if p.per_row:
        for j, (t, acc) in enumerate(zip(totals, accs)):
            w.line(f"{t} = tl.where(row_mask, {acc}, {identity_text(p, j)})",
                   comment="one use of the loop's result (Triton 3.6's thread-locality pass asserts it)" if j == 0
                   else None)
    else:
        w.line(f"{'total, total_i' if p.index else ', '.join(totals)} = {reduce_tile(ctx, p, accs, combine)}")
    with w.block(f"if {split}:"):
        emit_last_program(w, ctx, p, combine, totals, part, ticket)
    with w.block("else:"):
        w.line("keep = row_mask")
    if p.combine.mean:
        w.line("total = total / K", comment="mean: divide by the number of elements combined")
    value = _after_combine(w, ctx, p, ["total_i"] if p.index else totals, rows, "keep", "[BLOCK_M]")
    store(w, ctx, p, value, rows, "keep")


def emit_reduce_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str) -> None:
    """Rows by K; a tile-shaped accumulator over the loop, one tree reduction per row at the end; with
    ``TICKET``, rows split across programs (:func:`emit_last_program`). For argmax/argmin the accumulator is a
    pair of tiles, values and their positions ``ks`` along the reduced axes (``_i``)."""
    kept, reduced = _split_groups(p)
    accs = fields("acc", p.width)
    program_ids(w, ["pid_m", "pid_k"])
    w.line("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    shape = "[BLOCK_M]" if p.per_row else "[BLOCK_M, BLOCK_K]"
    for j, acc in enumerate(accs):
        w.line(f"{acc} = tl.full({shape}, {identity_text(p, j)}, {acc_type(p, j)})")
    if p.index:
        w.line(f"acc_i = tl.full([BLOCK_M, BLOCK_K], {NO_INDEX}, tl.int64)")
    w.line("CHUNK = ((K + SPLIT - 1) // SPLIT + BLOCK_K - 1) // BLOCK_K * BLOCK_K", comment="the part of K each of SPLIT programs reduces")
    w.line("k_start = pid_k * CHUNK")
    with w.block("for k0 in range(0, CHUNK, BLOCK_K):"):
        w.line("ks = k_start + k0 + tl.arange(0, BLOCK_K)")
        w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
        ks = emit_offsets(w, "ks", reduced, [s for s in p.inputs if not s.after], "k")
        values = _before_combine(w, ctx, p, rows, ks, "mask")
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        if p.index:
            step = masked_fields(ctx, p, values, "mask")[0]
            w.line(f"acc, acc_i = {combine}(acc, acc_i, {step}, ks[None, :].to(tl.int64))")
        else:
            _accumulate(w, ctx, p, accs, values, combine)
    _finish(w, ctx, p, combine, accs, rows, "TICKET", "pid_k", "pid_m")


def _scan_positions(w: Writer, p: KernelPlan, reduced: list[int]) -> tuple[dict, dict, str]:
    """Offsets of the elements a scan step reads (``k`` in scan order; one step back when exclusive) and writes
    (``ks``), and the mask of the reads. Reversed, scan order ``j`` is position ``K - 1 - j`` along the axis."""
    stage = p.combine
    before = [s for s in p.inputs if not s.after]
    after = [s for s in p.slots if s.after]
    w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
    if not stage.reverse and not stage.exclusive:
        offsets = emit_offsets(w, "ks", reduced, p.slots, "k")
        return offsets, offsets, "mask"
    source = "ks - 1" if stage.exclusive else "ks"
    w.line(f"src = {'K - 1 - (' + source + ')' if stage.reverse else source}",
           comment=("exclusive: " if stage.exclusive else "") + ("reversed: " if stage.reverse else "")
           + "the position each step reads")
    w.line(f"dst = {'K - 1 - ks' if stage.reverse else 'ks'}", comment="the position each step writes")
    read_mask = "mask"
    if stage.exclusive:
        w.line("read_mask = mask & (ks >= 1)[None, :]", comment="the first step reads nothing: the identity")
        read_mask = "read_mask"
    reads = emit_offsets(w, "src", reduced, before, "k")
    writes = emit_offsets(w, "dst", reduced, after, "d")
    return reads, writes, read_mask


def _whole_tile(w: Writer, p: KernelPlan) -> None:
    """``whole``: this step's tile lies inside the tensor, every lane of its reads and writes in bounds (an
    exclusive scan's first step reads one place before the row: never whole)."""
    first = " & (k0 >= 1)" if p.combine.exclusive else ""
    w.line(f"whole = (k0 + BLOCK_K <= K) & (pid * BLOCK_M + BLOCK_M <= M){first}",
           comment="every lane of this tile is in bounds")


def _positions(w: Writer, p: KernelPlan) -> Value:
    """For cummax/cummin: each read element's int64 position along the axis (``src`` when reversed or exclusive,
    else ``ks``), as a tile."""
    stage = p.combine
    source = "src" if stage.reverse or stage.exclusive else "ks"
    w.line(f"at = tl.broadcast_to({source}[None, :].to(tl.int64), [BLOCK_M, BLOCK_K])",
           comment="positions along the axis, paired with the values")
    return Value("at", torch.int64)


def _scan_program(w: Writer) -> None:
    """Which rows (``pid``) and which part of them (``chunk``; ``k_first`` to ``k_stop``) this program scans: all
    of K, or with ``LOOKBACK`` one tile, tiles numbered by program id. A program waits only on lower-numbered
    ones, which the GPU starts first (blocks start in index order, which CUB's single-pass scan relies on too);
    Triton's interpreter runs programs one by one in that order. (Tiles numbered by an atomic counter, taken
    before the tile's load, made P4 0.851 ms against 0.816 ms so: bench/NOTES.md.)"""
    with w.block("if LOOKBACK:"):
        w.line("SPLIT = (K + BLOCK_K - 1) // BLOCK_K", comment="programs per row tile")
        w.line("tile_id = tl.program_id(0)")
        w.line("pid = (tile_id // SPLIT).to(tl.int32)")
        w.line("chunk = (tile_id % SPLIT).to(tl.int32)")
    with w.block("else:"):
        w.line("pid = tl.program_id(0)")
        w.line("chunk = pid * 0")
    with w.block("if WIDE:"):
        w.comment("offsets may pass 2**31 - 1: index in int64")
        w.line("pid = pid.to(tl.int64)")
        w.line("chunk = chunk.to(tl.int64)")
    with w.block("if LOOKBACK:"):
        w.line("k_first = chunk * BLOCK_K")
        w.line("k_stop = k_first + BLOCK_K")
    with w.block("else:"):
        w.line("k_first = chunk * 0")
        w.line("k_stop = K")


def emit_scan_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str, then: str | None = None) -> None:
    """Rows by K, tile by tile along K; ``carry`` holds each row's prefix of the tiles before, carried by the
    loop, or with ``LOOKBACK`` (one tile per program) found by the decoupled look-back. A reduce fused after the
    scan (combine function ``then``) folds each scanned tile into its own tile-shaped accumulator, reduced once
    per row after the loop (and across programs by the last one, with ``LOOKBACK``), so the scanned values are
    never stored."""
    kept, reduced = _split_groups(p)
    carries, tiles, scanned = fields("carry", p.width), fields("tile", p.width), fields("scanned", p.width)
    within = fields("within", p.width)
    _scan_program(w)
    w.line("rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    for j, carry in enumerate(carries):
        w.line(f"{carry} = tl.full([BLOCK_M], {identity_text(p, j)}, {acc_type(p, j)})")
    fused = p.reduce_view() if p.then is not None else None
    if fused is not None:
        shape = "[BLOCK_M]" if fused.per_row else "[BLOCK_M, BLOCK_K]"
        for j, acc in enumerate(fields("acc", fused.width)):
            w.line(f"{acc} = tl.full({shape}, {identity_text(fused, j)}, {acc_type(fused, j)})")
    with w.block("for k0 in range(k_first, k_stop, BLOCK_K):"):
        w.line("ks = k0 + tl.arange(0, BLOCK_K)")
        reads, ks, read_mask = _scan_positions(w, p, reduced)
        _whole_tile(w, p)
        values = _before_combine(w, ctx, p, rows, reads, read_mask, "whole")
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        if p.index_scan:
            values = values + [_positions(w, p)]
        for tile, masked in zip(tiles, masked_fields(ctx, p, values, read_mask)):
            w.line(f"{tile} = {masked}")
        if p.scan_commutes:
            with w.block("if LOOKBACK:"):
                emit_publish_aggregate(w, p, tree_aggregate(ctx, p, tiles, combine))
        w.line(f"{', '.join(within)} = {tile_scan(p, packed(tiles), 1, combine)}", comment="the scan within the tile")
        with w.block("if LOOKBACK:"):
            if not p.scan_commutes:
                emit_publish_aggregate(w, p, last_column(ctx, p, within))
            emit_look_back(w, ctx, p, combine)
        w.line(f"{', '.join(scanned)} = {combine}({', '.join(f'{c}[:, None]' for c in carries)}, {', '.join(within)})")
        with w.block("if not LOOKBACK:"):
            w.comment("the row's prefix so far, for the next tile (with LOOKBACK there is none)")
            for j, (carry, field) in enumerate(zip(carries, scanned)):
                w.line(f"{carry} = tc_last({field}, BLOCK_K).to({acc_type(p, j)})",
                       comment="masked lanes hold the identity" if j == 0 else None)
        address = _tile_address(rows, ks, [s for s in p.slots if s.after])
        value = _after_combine(w, ctx, p, scanned, address, "mask", "[BLOCK_M, BLOCK_K]", "whole")
        if fused is None:
            store(w, ctx, p, value, address, "mask")
        else:
            w.comment(f"stage {len(fused.before)}: {stage_text(fused.combine)}, in the same loop")
            _accumulate(w, ctx, fused, fields("acc", fused.width), value, then)
    if fused is not None:
        _finish(w, ctx, fused, then, fields("acc", fused.width), rows, "LOOKBACK", "chunk", "pid")

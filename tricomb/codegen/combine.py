"""Emitting the reduce and scan kernels: the combine function and the two loop bodies around it.

An operator on k-tuples has an accumulator of k fields, each in its own dtype and held in its own variable
(``acc0``, ``acc1``, ...; plain ``acc`` for one field); Triton's ``tl.reduce`` and ``tl.associative_scan`` take
the fields as a tuple and call the combine function with the left tuple's fields, then the right one's, which
is the order of a tricomb operator's arguments.
"""
from __future__ import annotations

import torch

from ..lower.fuse import KernelPlan
from ..pipeline.ir import Reduce
from ..pipeline.printer import stage_text
from ..scalar.dtypes import held_dtype
from .kernel import emit_loads, emit_offsets, emit_stages, fields, first_stream, program_ids, store
from .scalar import ScalarContext, Value, emit_function, render_const, tl_dtype, to_integer, to_storage
from .writer import Writer

_NO_INDEX = "9223372036854775807"  # int64 max: loses every tie, so masked lanes are never chosen


def emit_combine_function(w: Writer, ctx: ScalarContext, name: str, p: KernelPlan) -> None:
    """A ``@triton.jit`` function of two accumulator tuples (k fields each) applying the reduce/scan operator."""
    left, right = fields("a", p.width), fields("b", p.width)
    w.line("@triton.jit")
    with w.block(f"def {name}({', '.join(left + right)}):"):
        args = [Value(n, dtype) for n, dtype in zip(left + right, p.acc_dtypes * 2)]
        results = emit_function(w, ctx, p.combine.op, args, "[1]")
        w.line("return " + ", ".join(f"{r.text}.to({_acc(p, j)})" for j, r in enumerate(results)))


def _acc(p: KernelPlan, j: int = 0) -> str:
    """The ``tl`` dtype accumulator field ``j`` is held in."""
    return tl_dtype(held_dtype(p.acc_dtypes[j]))


def _identity(p: KernelPlan, j: int = 0) -> str:
    return render_const(p.identities[j])


def _packed(names: list[str]) -> str:
    """The fields as one operand of tl.reduce / tl.associative_scan: a name, or a tuple of names."""
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def tile_reduce(ctx: ScalarContext, p: KernelPlan, tile: str, axis: int, combine: str) -> str:
    """The expression folding ``tile`` (a name, or a tuple of field names) along ``axis`` with the operator."""
    spec = p.operator
    if spec is None or spec.tile_reduce is None:
        return f"tl.reduce({tile}, {axis}, {combine})"
    ctx.use_helpers([h for h in ("tc_max_over", "tc_min_over") if spec.tile_reduce.startswith(h)])
    return spec.tile_reduce.format(tile, axis)


def tile_scan(p: KernelPlan, tile: str, axis: int, combine: str) -> str:
    """The expression scanning ``tile`` (a name, or a tuple of field names) along ``axis`` (inclusive)."""
    spec = p.operator
    if spec is None or spec.tile_scan is None or p.index_scan:
        return f"tl.associative_scan({tile}, {axis}, {combine})"
    return spec.tile_scan.format(tile, axis)


def _split_groups(p: KernelPlan) -> tuple[list[int], list[int]]:
    kept = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "kept"]
    reduced = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "reduced"]
    return kept, reduced


def _tile_address(rows: dict[str, str], ks: dict[str, str], slots) -> dict[str, str]:
    return {s.name: f"({rows[s.name]}[:, None] + {ks[s.name]}[None, :])" for s in slots}


def _before_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, rows, ks, mask: str) -> list[Value]:
    """Inside the loop over K: load the inputs that join before the combine, apply the stages before it, and
    return the stream's fields."""
    before = [s for s in p.inputs if not s.after]
    values = emit_loads(w, p, before, _tile_address(rows, ks, before), mask)
    return emit_stages(w, ctx, p, p.before, 0, first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")


def _to_accumulator(ctx: ScalarContext, p: KernelPlan, value: Value, j: int = 0) -> str:
    """Stream field ``j`` in its accumulator's dtype; through the stage's ``dtype=`` first, which rounds (or wraps)
    as torch's conversion before the combine does (:func:`to_storage`). (``dtype=`` and NaN skipping come with
    builtin operators only, so with one field.)"""
    text = value.text
    wanted = p.combine.dtype
    skip_nan = isinstance(p.combine, Reduce) and p.combine.skip_nan
    if skip_nan and value.dtype.is_floating_point:
        # nansum: a NaN counts as 0, before any dtype= conversion (torch drops it first)
        text = f"tc_nan_to({text}, 0.0)"
        ctx.use_helpers(["tc_nan_to"])
    if wanted is not None and wanted != value.dtype:
        integral = not wanted.is_floating_point and wanted != torch.bool
        text = to_integer(ctx, text, value.dtype, wanted) if integral else to_storage(ctx, text, wanted, value.dtype)
    return f"{text}.to({_acc(p, j)})"


def _masked_fields(ctx: ScalarContext, p: KernelPlan, values: list[Value], mask: str) -> list[str]:
    """Each stream field in its accumulator dtype where ``mask`` holds, the field's identity elsewhere."""
    return [f"tl.where({mask}, {_to_accumulator(ctx, p, v, j)}, {_identity(p, j)})" for j, v in enumerate(values)]


def _after_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, names: list[str], address, mask: str,
                   shape: str) -> list[Value]:
    """Stages after the reduce/scan, on the combined fields ``names``, with the inputs that join there loaded at
    ``address``."""
    after = [s for s in p.inputs if s.after and not s.late]
    values = emit_loads(w, p, after, address, mask)
    b = p.binding
    rank = b.rank - len(b.axes) if p.kind == "reduce" and not p.combine.keepdim else b.rank
    stream = [Value(n, dtype, rank == 0) for n, dtype in zip(names, p.combined_dtypes)]
    return emit_stages(w, ctx, p, p.after, len(p.before) + 1, stream, values, shape)


def _fold_in_order(w: Writer, ctx: ScalarContext, p: KernelPlan, accs: list[str], tiles: list[str], width: str,
                   combine: str) -> None:
    """For an operator that does not commute: ``accs`` (one value per row) combined with the tiles' elements in
    order, as the tile's inclusive scan (which keeps the order) read at its last column."""
    scanned = fields("in_order", p.width)
    w.line(f"{', '.join(scanned)} = {tile_scan(p, _packed(tiles), 1, combine)}",
           comment="in order: the operator does not commute")
    ctx.use_helpers(["tc_last"])
    lasts = [f"tc_last({s}, {width}).to({_acc(p, j)})" for j, s in enumerate(scanned)]
    w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + lasts)})")


def _accumulate(w: Writer, ctx: ScalarContext, p: KernelPlan, accs: list[str], values: list[Value],
                combine: str) -> None:
    """Fold one tile of the stream's fields (masked lanes as the identity) into the reduce's accumulators: lane
    by lane into tile-shaped ones, or, for an operator that does not commute, in order into per-row ones."""
    steps = _masked_fields(ctx, p, values, "mask")
    if not p.ordered:
        w.line(f"{', '.join(accs)} = {combine}({', '.join(accs + steps)})")
        return
    tiles = fields("step", p.width)
    for tile, step in zip(tiles, steps):
        w.line(f"{tile} = {step}")
    _fold_in_order(w, ctx, p, accs, tiles, "BLOCK_K", combine)


def _reduce_tile(ctx: ScalarContext, p: KernelPlan, tiles: list[str], combine: str) -> str:
    """Fold the accumulator tiles (and ``<tile>_i``, the positions, for argmax/argmin) along axis 1."""
    if p.index:
        ctx.use_helpers([f"{combine[:-5]}_over"])
        return f"{combine[:-5]}_over({tiles[0]}, {tiles[0]}_i, 1)"
    return tile_reduce(ctx, p, _packed(tiles), 1, combine)


def emit_reduce_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str) -> None:
    """Rows by K; a tile-shaped accumulator over the loop, one tree reduction per row at the end.

    With ``TICKET``, ``SPLIT`` programs share each row tile: each publishes its partial, takes a ticket with an
    acquire-release atomic, and the program drawing the last ticket combines all partials in index order (so
    the result is the same from run to run) and resets the ticket for the next launch. For argmax/argmin the
    accumulator is a pair of tiles, values and their positions ``ks`` along the reduced axes (``_i``).
    """
    kept, reduced = _split_groups(p)
    accs, totals = fields("acc", p.width), fields("total", p.width)
    buffers, partials = fields("partials", p.width), fields("partial", p.width)
    total = "total, total_i" if p.index else ", ".join(totals)
    program_ids(w, ["pid_m", "pid_k"])
    w.line("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    shape = "[BLOCK_M]" if p.ordered else "[BLOCK_M, BLOCK_K]"
    for j, acc in enumerate(accs):
        w.line(f"{acc} = tl.full({shape}, {_identity(p, j)}, {_acc(p, j)})")
    if p.index:
        w.line(f"acc_i = tl.full([BLOCK_M, BLOCK_K], {_NO_INDEX}, tl.int64)")
    w.line("k_start = pid_k * CHUNK")
    with w.block("for k0 in range(0, CHUNK, BLOCK_K):"):
        w.line("ks = k_start + k0 + tl.arange(0, BLOCK_K)")
        w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
        ks = emit_offsets(w, "ks", reduced, [s for s in p.inputs if not s.after], "k")
        values = _before_combine(w, ctx, p, rows, ks, "mask")
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        if p.index:
            step = _masked_fields(ctx, p, values, "mask")[0]
            w.line(f"acc, acc_i = {combine}(acc, acc_i, {step}, ks[None, :].to(tl.int64))")
        else:
            _accumulate(w, ctx, p, accs, values, combine)
    if p.ordered:
        w.line(f"{total} = {', '.join(accs)}")
    else:
        w.line(f"{total} = {_reduce_tile(ctx, p, accs, combine)}")
    with w.block("if TICKET:"):
        for buffer, value in zip(buffers, totals):
            w.line(f"tl.store({buffer} + rows * SPLIT + pid_k, {value}, mask=row_mask)")
        if p.index:
            w.line("tl.store(partial_index + rows * SPLIT + pid_k, total_i, mask=row_mask)")
        w.line("tl.debug_barrier()")
        w.line('ticket = tl.atomic_add(tickets + pid_m, 1, sem="acq_rel")')
        w.line("keep = row_mask & (ticket == SPLIT - 1)")
        w.line("parts = tl.arange(0, SPLIT_BLOCK)")
        w.line("part_mask = keep[:, None] & (parts < SPLIT)[None, :]")
        w.line("part_at = rows[:, None] * SPLIT + parts[None, :]")
        for j, (buffer, partial) in enumerate(zip(buffers, partials)):
            w.line(f'{partial} = tl.load({buffer} + part_at, mask=part_mask, other={_identity(p, j)}, '
                   'cache_modifier=".cg")')
        if p.index:
            w.line(f'partial_i = tl.load(partial_index + part_at, mask=part_mask, other={_NO_INDEX}, '
                   'cache_modifier=".cg")')
        if p.ordered:
            for j, t in enumerate(totals):
                w.line(f"{t} = tl.full([BLOCK_M], {_identity(p, j)}, {_acc(p, j)})")
            _fold_in_order(w, ctx, p, totals, partials, "SPLIT_BLOCK", combine)
        else:
            w.line(f"{total} = {_reduce_tile(ctx, p, partials, combine)}")
        w.line("tl.atomic_xchg(tickets + pid_m, 0, mask=ticket == SPLIT - 1)")
    with w.block("else:"):
        w.line("keep = row_mask")
    if isinstance(p.combine, Reduce) and p.combine.mean:
        w.line("total = total / K", comment="mean: divide by the number of elements combined")
    value = _after_combine(w, ctx, p, ["total_i"] if p.index else totals, rows, "keep", "[BLOCK_M]")
    store(w, ctx, p, value, rows, "keep")


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


def _positions(w: Writer, p: KernelPlan) -> Value:
    """For cummax/cummin: each read element's int64 position along the axis (``src`` when reversed or exclusive,
    else ``ks``), as a tile."""
    stage = p.combine
    source = "src" if stage.reverse or stage.exclusive else "ks"
    w.line(f"at = tl.broadcast_to({source}[None, :].to(tl.int64), [BLOCK_M, BLOCK_K])",
           comment="positions along the axis, paired with the values")
    return Value("at", torch.int64)


def emit_scan_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str, then: str | None = None) -> None:
    """Rows by K, tile by tile along K; ``carry`` holds each row's prefix of the tiles before. A reduce fused
    after the scan (combine function ``then``) folds each scanned tile into its own tile-shaped accumulator,
    reduced once per row after the loop, so the scanned values are never stored."""
    kept, reduced = _split_groups(p)
    carries, tiles, scanned = fields("carry", p.width), fields("tile", p.width), fields("scanned", p.width)
    program_ids(w, ["pid"])
    w.line("rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    for j, carry in enumerate(carries):
        w.line(f"{carry} = tl.full([BLOCK_M], {_identity(p, j)}, {_acc(p, j)})")
    fused = p.reduce_view() if p.then is not None else None
    if fused is not None:
        shape = "[BLOCK_M]" if fused.ordered else "[BLOCK_M, BLOCK_K]"
        for j, acc in enumerate(fields("acc", fused.width)):
            w.line(f"{acc} = tl.full({shape}, {_identity(fused, j)}, {_acc(fused, j)})")
    with w.block("for k0 in range(0, K, BLOCK_K):"):
        w.line("ks = k0 + tl.arange(0, BLOCK_K)")
        reads, ks, read_mask = _scan_positions(w, p, reduced)
        values = _before_combine(w, ctx, p, rows, reads, read_mask)
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        if p.index_scan:
            values = values + [_positions(w, p)]
        for tile, masked in zip(tiles, _masked_fields(ctx, p, values, read_mask)):
            w.line(f"{tile} = {masked}")
        within = tile_scan(p, _packed(tiles), 1, combine)
        if p.width > 1:
            w.line(f"{', '.join(fields('within', p.width))} = {within}", comment="the scan within the tile")
            within = ", ".join(fields("within", p.width))
        prefix = ", ".join(f"{c}[:, None]" for c in carries)
        w.line(f"{', '.join(scanned)} = {combine}({prefix}, {within})")
        for j, (carry, field) in enumerate(zip(carries, scanned)):
            w.line(f"{carry} = tc_last({field}, BLOCK_K).to({_acc(p, j)})",
                   comment="masked lanes hold the identity: the row's prefix so far" if j == 0 else None)
        ctx.use_helpers(["tc_last"])
        address = _tile_address(rows, ks, [s for s in p.slots if s.after])
        value = _after_combine(w, ctx, p, scanned, address, "mask", "[BLOCK_M, BLOCK_K]")
        if fused is None:
            store(w, ctx, p, value, address, "mask")
            return
        accs = fields("acc", fused.width)
        w.comment(f"stage {len(fused.before)}: {stage_text(fused.combine)}, in the same loop")
        _accumulate(w, ctx, fused, accs, value, then)
    totals = fields("total", fused.width)
    w.line(f"{', '.join(totals)} = {', '.join(accs) if fused.ordered else _reduce_tile(ctx, fused, accs, then)}")
    if fused.combine.mean:
        w.line("total = total / K", comment="mean: divide by the number of elements combined")
    value = _after_combine(w, ctx, fused, totals, rows, "row_mask", "[BLOCK_M]")
    store(w, ctx, fused, value, rows, "row_mask")

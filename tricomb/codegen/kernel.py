"""Emitting the kernel of a plan: the ``@triton.jit`` kernel itself.

One emitter per concept: :func:`emit_offsets` (an index split over dimension groups into per-tensor
offsets), :func:`emit_loads`, :func:`emit_stages` (map/zip_with bodies), :func:`emit_combine_function`, and
one body emitter per kernel kind that composes them. Each emitted line that comes from a pipeline stage carries
a comment naming that stage.
"""
from __future__ import annotations

import torch

from ..lower.bind import input_stages
from ..lower.fuse import KernelPlan, Slot
from ..pipeline.ir import Map, Reduce, Stage, ZipWith
from ..pipeline.printer import stage_text
from ..scalar.dtypes import held_dtype
from .scalar import ScalarContext, Value, emit_function, render_const, tl_dtype, to_integer, to_storage
from .writer import Writer


def group_size(g: int) -> str:
    return f"n{g}"


def group_stride(slot: Slot, g: int) -> str:
    return f"s_{slot.name}_{g}"


def kernel_parameters(p: KernelPlan) -> list[str]:
    """The kernel's parameters, in order: tensors, scalars, sizes and strides, then constexprs."""
    params = [s.name for s in p.slots]
    groups = range(len(p.binding.groups))
    if p.kind == "map":
        params.append("numel")
    else:
        params += ["M", "K"]
    if p.kind == "reduce":
        scratch = ["partials", "partial_index"] if p.index else ["partials"]
        params = params[:len(p.slots)] + scratch + ["tickets"] + params[len(p.slots):] + ["SPLIT", "CHUNK"]
    params += [group_size(g) for g in groups]
    params += [group_stride(s, g) for s in p.slots for g in groups]
    if p.kind == "map":
        params.append("BLOCK: tl.constexpr")
    else:
        params += ["BLOCK_M: tl.constexpr", "BLOCK_K: tl.constexpr"]
    if p.kind == "reduce":
        params += ["SPLIT_BLOCK: tl.constexpr", "TICKET: tl.constexpr"]
    params.append("WIDE: tl.constexpr")
    return params


def emit_offsets(w: Writer, index: str, groups: list[int], slots, tag: str,
                 coords: dict[int, str] | None = None) -> dict[str, str]:
    """Split the index vector ``index`` over ``groups`` (outer to inner); one offset variable per slot.
    ``coords``, when given, receives each group's coordinate expression."""
    offsets = {}
    if not groups:
        for slot in slots:
            offsets[slot.name] = f"{tag}_{slot.name}"
            w.line(f"{tag}_{slot.name} = {index} * 0")
        return offsets
    coords = {} if coords is None else coords
    rest = index
    for j, g in enumerate(reversed(groups)):
        if j == len(groups) - 1:
            coords[g] = rest
            continue
        coords[g] = f"{tag}_i{g}"
        w.line(f"{coords[g]} = {rest} % {group_size(g)}")
        w.line(f"{tag}_q{g} = {rest} // {group_size(g)}")
        rest = f"{tag}_q{g}"
    for slot in slots:
        offsets[slot.name] = f"{tag}_{slot.name}"
        terms = " + ".join(f"{coords[g]} * {group_stride(slot, g)}" for g in groups)
        w.line(f"{tag}_{slot.name} = {terms}")
    return offsets


def emit_loads(w: Writer, p: KernelPlan, slots, address: dict[str, str], mask: str) -> dict[str, Value]:
    """Load each slot at its address expression, converted to its compute dtype."""
    values = {}
    ranks = dict(zip((s.name for s in p.inputs), p.binding.ranks))
    for slot in slots:
        var = f"x_{slot.name}"
        load = f"tl.load({slot.name} + {address[slot.name]}, mask={mask}, other=0)"
        if held_dtype(slot.dtype) != slot.dtype:
            load += f".to({tl_dtype(held_dtype(slot.dtype))})"
        w.line(f"{var} = {load}")
        values[slot.name] = Value(var, slot.dtype, ranks[slot.name] == 0)
    return values


def emit_stages(w: Writer, ctx: ScalarContext, p: KernelPlan, stages: tuple[Stage, ...], first: int,
                stream: list[Value], values: dict[str, Value], shape: str) -> list[Value]:
    """Apply the map/zip_with ``stages`` (pipeline positions from ``first``) to the stream's fields; return the
    resulting fields. A stage's function takes the stream's fields, then the inputs the stage brings in."""
    owners = input_stages(p.pipeline)
    for offset, stage in enumerate(stages):
        index = first + offset
        new = [values[f"in{i}"] for i, owner in enumerate(owners) if owner == index]
        w.comment(f"stage {index}: {stage_text(stage)}")
        stream = emit_function(w, ctx, stage.fn, stream + new, shape)
    return stream


def emit_combine_function(w: Writer, ctx: ScalarContext, name: str, p: KernelPlan) -> None:
    """A ``@triton.jit`` function of two accumulator values applying the reduce/scan operator."""
    w.line("@triton.jit")
    with w.block(f"def {name}(a, b):"):
        args = [Value(n, p.acc_dtype) for n in ("a", "b")]
        result = emit_function(w, ctx, p.combine.op, args, "[1]")[0]
        w.line(f"return {result.text}.to({_acc(p)})")


def _store(w: Writer, ctx: ScalarContext, p: KernelPlan, values: list[Value], addresses: dict[str, str], mask: str,
           coords: dict[int, str] | None = None) -> None:
    """Store each result field at its address. With ``coords`` (elementwise plans), a field computed from only
    some of the inputs is smaller than the iteration space (torch's shape for it): along a dimension group where
    its stride is 0, only coordinate 0 stores, so no element is written twice."""
    every = frozenset(range(len(p.inputs)))
    for slot, value, inputs in zip(p.outputs, values, p.field_inputs):
        where = mask
        if coords is not None and inputs != every:
            where += "".join(f" & (({group_stride(slot, g)} != 0) | ({c} == 0))" for g, c in sorted(coords.items()))
        w.line(f"tl.store({slot.name} + {addresses[slot.name]}, {to_storage(ctx, value.text, slot.dtype)}, "
               f"mask={where})")


def _program_ids(w: Writer, names: list[str]) -> None:
    for axis, name in enumerate(names):
        w.line(f"{name} = tl.program_id({axis})")
    with w.block("if WIDE:"):
        w.comment("offsets may pass 2**31 - 1: index in int64")
        for name in names:
            w.line(f"{name} = {name}.to(tl.int64)")


def emit_map_body(w: Writer, ctx: ScalarContext, p: KernelPlan) -> None:
    """A flat index over the output; every stage elementwise."""
    _program_ids(w, ["pid"])
    w.line("idx = pid * BLOCK + tl.arange(0, BLOCK)")
    w.line("mask = idx < numel")
    groups = list(range(len(p.binding.groups)))
    coords: dict[int, str] = {}
    offsets = emit_offsets(w, "idx", groups, p.slots, "o", coords)
    values = emit_loads(w, p, p.inputs, offsets, "mask")
    result = emit_stages(w, ctx, p, p.before, 0, _first_stream(p, values), values, "[BLOCK]")
    _store(w, ctx, p, result, offsets, "mask", coords)


def _split_groups(p: KernelPlan) -> tuple[list[int], list[int]]:
    kept = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "kept"]
    reduced = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "reduced"]
    return kept, reduced


def _tile_address(rows: dict[str, str], ks: dict[str, str], slots) -> dict[str, str]:
    return {s.name: f"({rows[s.name]}[:, None] + {ks[s.name]}[None, :])" for s in slots}


def _first_stream(p: KernelPlan, values: dict[str, Value]) -> list[Value]:
    """The stream entering stage 0: nothing when stage 0 is a map or zip_with (it takes its inputs as new ones),
    else input 0 itself (a pipeline that starts with its reduce or scan)."""
    return [] if isinstance(p.pipeline.stages[0], (Map, ZipWith)) else [values["in0"]]


def _before_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, rows, ks, mask: str) -> Value:
    """Inside the loop over K: load the inputs that join before the combine and apply the stages before it."""
    before = [s for s in p.inputs if not s.after]
    values = emit_loads(w, p, before, _tile_address(rows, ks, before), mask)
    return emit_stages(w, ctx, p, p.before, 0, _first_stream(p, values), values, "[BLOCK_M, BLOCK_K]")[0]


def tile_reduce(ctx: ScalarContext, p: KernelPlan, tile: str, axis: int, combine: str) -> str:
    """The expression folding ``tile`` along ``axis`` with the plan's operator."""
    spec = p.operator
    if spec is None or spec.tile_reduce is None:
        return f"tl.reduce({tile}, {axis}, {combine})"
    ctx.use_helpers([h for h in ("tc_max_over", "tc_min_over") if spec.tile_reduce.startswith(h)])
    return spec.tile_reduce.format(tile, axis)


def tile_scan(p: KernelPlan, tile: str, axis: int, combine: str) -> str:
    """The expression scanning ``tile`` along ``axis`` (inclusive) with the plan's operator."""
    spec = p.operator
    if spec is None or spec.tile_scan is None:
        return f"tl.associative_scan({tile}, {axis}, {combine})"
    return spec.tile_scan.format(tile, axis)


def _to_accumulator(ctx: ScalarContext, p: KernelPlan, value: Value) -> str:
    """The stream value in the accumulator's dtype; through the stage's ``dtype=`` first, which rounds (or wraps)
    as torch's conversion before the combine does (:func:`to_storage`)."""
    text = value.text
    wanted = p.combine.dtype
    skip_nan = isinstance(p.combine, Reduce) and p.combine.skip_nan
    if skip_nan and value.dtype.is_floating_point:
        # nansum: a NaN counts as 0, before any dtype= conversion (torch drops it first)
        text = f"tc_nan_to({text}, 0.0)"
        ctx.use_helpers(["tc_nan_to"])
    if wanted is not None and wanted != value.dtype:
        integral = not wanted.is_floating_point and wanted != torch.bool
        text = to_integer(text, value.dtype, wanted) if integral else to_storage(ctx, text, wanted, value.dtype)
    return f"{text}.to({_acc(p)})"


def _acc(p: KernelPlan) -> str:
    """The ``tl`` dtype the accumulator is held in."""
    return tl_dtype(held_dtype(p.acc_dtype))


def _identity(p: KernelPlan) -> str:
    return render_const(p.identity)


def _after_combine(w: Writer, ctx: ScalarContext, p: KernelPlan, var: str, address, mask: str,
                   shape: str) -> list[Value]:
    """Stages after the reduce/scan, with the inputs that join there loaded at ``address``."""
    after = [s for s in p.inputs if s.after]
    values = emit_loads(w, p, after, address, mask)
    b = p.binding
    rank = b.rank - len(b.axes) if p.kind == "reduce" and not p.combine.keepdim else b.rank
    stream = Value(var, p.combined_dtype, rank == 0)
    return emit_stages(w, ctx, p, p.after, len(p.before) + 1, [stream], values, shape)


_NO_INDEX = "9223372036854775807"  # int64 max: loses every tie, so masked lanes are never chosen


def _reduce_tile(ctx: ScalarContext, p: KernelPlan, tile: str, combine: str) -> str:
    """Fold the accumulator tile ``tile`` (and ``tile_i``, its positions, for argmax/argmin) along axis 1."""
    if p.index:
        ctx.use_helpers([f"{combine[:-5]}_over"])
        return f"{combine[:-5]}_over({tile}, {tile}_i, 1)"
    return tile_reduce(ctx, p, tile, 1, combine)


def emit_reduce_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str) -> None:
    """Rows by K; a tile-shaped accumulator over the loop, one tree reduction per row at the end.

    With ``TICKET``, ``SPLIT`` programs share each row tile: each publishes its partial, takes a ticket with an
    acquire-release atomic, and the program drawing the last ticket combines all partials in index order (so
    the result is the same from run to run) and resets the ticket for the next launch. For argmax/argmin the
    accumulator is a pair of tiles, values and their positions ``ks`` along the reduced axes (``_i``).
    """
    kept, reduced = _split_groups(p)
    acc = _acc(p)
    ident = _identity(p)
    total = "total, total_i" if p.index else "total"
    _program_ids(w, ["pid_m", "pid_k"])
    w.line("rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    w.line(f"acc = tl.full([BLOCK_M, BLOCK_K], {ident}, {acc})")
    if p.index:
        w.line(f"acc_i = tl.full([BLOCK_M, BLOCK_K], {_NO_INDEX}, tl.int64)")
    w.line("k_start = pid_k * CHUNK")
    with w.block("for k0 in range(0, CHUNK, BLOCK_K):"):
        w.line("ks = k_start + k0 + tl.arange(0, BLOCK_K)")
        w.line("mask = row_mask[:, None] & (ks < K)[None, :]")
        ks = emit_offsets(w, "ks", reduced, [s for s in p.inputs if not s.after], "k")
        value = _before_combine(w, ctx, p, rows, ks, "mask")
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        step = f"tl.where(mask, {_to_accumulator(ctx, p, value)}, {ident})"
        if p.index:
            w.line(f"acc, acc_i = {combine}(acc, acc_i, {step}, ks[None, :].to(tl.int64))")
        else:
            w.line(f"acc = {combine}(acc, {step})")
    w.line(f"{total} = {_reduce_tile(ctx, p, 'acc', combine)}")
    with w.block("if TICKET:"):
        w.line("tl.store(partials + rows * SPLIT + pid_k, total, mask=row_mask)")
        if p.index:
            w.line("tl.store(partial_index + rows * SPLIT + pid_k, total_i, mask=row_mask)")
        w.line("tl.debug_barrier()")
        w.line('ticket = tl.atomic_add(tickets + pid_m, 1, sem="acq_rel")')
        w.line("keep = row_mask & (ticket == SPLIT - 1)")
        w.line("parts = tl.arange(0, SPLIT_BLOCK)")
        w.line("part_mask = keep[:, None] & (parts < SPLIT)[None, :]")
        w.line("part_at = rows[:, None] * SPLIT + parts[None, :]")
        w.line(f'partial = tl.load(partials + part_at, mask=part_mask, other={ident}, cache_modifier=".cg")')
        if p.index:
            w.line(f'partial_i = tl.load(partial_index + part_at, mask=part_mask, other={_NO_INDEX}, '
                   'cache_modifier=".cg")')
        w.line(f"{total} = {_reduce_tile(ctx, p, 'partial', combine)}")
        w.line("tl.atomic_xchg(tickets + pid_m, 0, mask=ticket == SPLIT - 1)")
    with w.block("else:"):
        w.line("keep = row_mask")
    if isinstance(p.combine, Reduce) and p.combine.mean:
        w.line("total = total / K", comment="mean: divide by the number of elements combined")
    value = _after_combine(w, ctx, p, "total_i" if p.index else "total", rows, "keep", "[BLOCK_M]")
    _store(w, ctx, p, value, rows, "keep")


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


def emit_scan_body(w: Writer, ctx: ScalarContext, p: KernelPlan, combine: str) -> None:
    """Rows by K, tile by tile along K; ``carry`` holds each row's prefix of the tiles before."""
    kept, reduced = _split_groups(p)
    acc = _acc(p)
    ident = _identity(p)
    _program_ids(w, ["pid"])
    w.line("rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)")
    w.line("row_mask = rows < M")
    rows = emit_offsets(w, "rows", kept, p.slots, "r")
    w.line(f"carry = tl.full([BLOCK_M], {ident}, {acc})")
    with w.block("for k0 in range(0, K, BLOCK_K):"):
        w.line("ks = k0 + tl.arange(0, BLOCK_K)")
        reads, ks, read_mask = _scan_positions(w, p, reduced)
        value = _before_combine(w, ctx, p, rows, reads, read_mask)
        w.comment(f"stage {len(p.before)}: {stage_text(p.combine)}")
        w.line(f"tile = tl.where({read_mask}, {_to_accumulator(ctx, p, value)}, {ident})")
        w.line(f"scanned = {combine}(carry[:, None], {tile_scan(p, 'tile', 1, combine)})")
        w.line(f"carry = tc_last(scanned, BLOCK_K).to({acc})",
               comment="masked lanes hold the identity: the row's prefix so far")
        ctx.use_helpers(["tc_last"])
        address = _tile_address(rows, ks, [s for s in p.slots if s.after])
        value = _after_combine(w, ctx, p, "scanned", address, "mask", "[BLOCK_M, BLOCK_K]")
        _store(w, ctx, p, value, address, "mask")


def emit_kernel(w: Writer, ctx: ScalarContext, p: KernelPlan, name: str, combine: str | None) -> None:
    """The plan's ``@triton.jit`` kernel, named ``name``."""
    w.line("@triton.jit")
    with w.block(f"def {name}({', '.join(kernel_parameters(p))}):"):
        if p.kind == "map":
            emit_map_body(w, ctx, p)
        elif p.kind == "reduce":
            emit_reduce_body(w, ctx, p, combine)
        else:
            emit_scan_body(w, ctx, p, combine)

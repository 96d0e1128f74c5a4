"""Emitting ``launch(*inputs, out=None, **overrides)``: the host side of the emitted module.

``launch`` recomputes, from the tensors it is given, only what varies within a layout class: the broadcast
shape, group sizes and strides, the schedule, and whether offsets need int64. The group structure, dtypes and
axes are fixed by the plan and written in as constants. What differs from one kind of kernel to another (the
schedule call, the scratch buffers, the grid, the kernel's parameters) comes from the kernel's strategy
(:mod:`tricomb.codegen.strategies`), which calls the scratch emitters here. The functions they call (``_broadcast``,
``_Launcher``, ...) are :mod:`.host`'s, copied into the module with whatever they call in turn (:mod:`.sources`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lower.fuse import KernelPlan
from ..lower.segments import ColumnSums, RowsReduce, Slot, Ticket, TileReduce, TileScan
from ..pipeline.scalars import used_scalars
from ..scalar.dtypes import held_dtype
from ..scalar.literals import number_literal
from .columns import GROUP, group_buffers, partial_buffers
from .kernel import group_size, group_stride
from .lookback import FENCED, SIXTEEN_BYTES, packing
from .scratch import FLAGS, TICKETS, aggregates, partials, prefixes, shared_partials
from .writer import Writer

if TYPE_CHECKING:  # the strategies call this module's emitters
    from .strategies import KernelStrategy


def _shape_expr(names: list[str]) -> str:
    return "(" + "".join(f"{n}, " for n in names) + ")"


def _int_tuple(values) -> str:
    """A tuple of plain ints (axes, dimensions, ranks) as source, each through :func:`number_literal`, which
    refuses anything but an exact ``int``; nested tuples as nested tuples."""
    items = [_int_tuple(v) if isinstance(v, tuple) else number_literal(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _final_reduce(p: KernelPlan) -> TileReduce | None:
    """The reduce whose result the kernel stores: the plan's own, or the one fused after its scan."""
    final = p.folds[-1] if p.folds else None
    return final if isinstance(final, TileReduce) and not final.attached else None


def _out_shape(p: KernelPlan) -> str:
    b = p.binding
    if _final_reduce(p) is None:
        return "tuple(shape)"
    keepdim = _final_reduce(p).stage.keepdim
    parts = [("1" if keepdim else None) if d in b.axes else f"shape[{d}]" for d in range(b.rank)]
    return _shape_expr([x for x in parts if x is not None])


def _emit_out_shape(w: Writer, p: KernelPlan) -> None:
    """``out_shape``, the result's shape; with a reduce over the rows, ``row_shape`` too, the per-row reduce's
    (an input joining between the two has it)."""
    rows = p.over_rows
    if p.column_sums is not None:
        axes = p.binding.axes
        w.line(f"column_shape = {_shape_expr([f'shape[{d}]' if d in axes else '1' for d in range(p.binding.rank)])}",
               comment="a field summed over the rows")
    if rows is None:
        w.line(f"out_shape = {_out_shape(p)}")
        return
    w.line(f"row_shape = {_out_shape(p)}")
    w.line("out_shape = " + ("(1,) * len(row_shape)" if rows.stage.keepdim else "()"),
           comment="every axis the per-row reduce leaves is reduced again")


def _strides_line(w: Writer, p: KernelPlan, slot: Slot) -> None:
    """``st_<slot>``: the slot's stride for every dimension of the iteration space (0 where it broadcasts); a
    slot read or written after a reduce is shaped like the reduce's result."""
    if p.over_rows is not None and slot in p.outputs:
        w.line(f"st_{slot.name} = [0] * len(shape)", comment="the one element the reduce over the rows writes")
        return
    after = p.folds[slot.phase - 1] if slot.phase else None
    if not isinstance(after, TileReduce) or after.attached:  # (an attach keeps the stream's shape)
        w.line(f"st_{slot.name} = {slot.name}.expand(shape).stride()")
        return
    b = p.binding
    reduced = "row_shape" if p.over_rows is not None else "out_shape"
    if after.stage.keepdim:
        w.line(f"st_{slot.name} = [0 if d in {_int_tuple(b.axes)} else s "
               f"for d, s in enumerate({slot.name}.expand({reduced}).stride())]")
        return
    w.line(f"st_{slot.name} = list({slot.name}.expand({reduced}).stride())")
    with w.block(f"for axis in {_int_tuple(b.axes)}:"):
        w.line(f"st_{slot.name}.insert(axis, 0)", comment="a reduced axis: the same element for every k")


def _field_shape(p: KernelPlan, inputs: frozenset[int]) -> str:
    """A result field's shape: the broadcast of the inputs it is computed from (elementwise plans); the stream's
    shape after a reduce or scan."""
    before = frozenset(i for i, s in enumerate(p.inputs) if s.phase == 0)
    if p.folds or inputs == before:
        return "out_shape"
    return f"_broadcast({', '.join(f'{p.inputs[i].name}.shape' for i in sorted(inputs))})"


def _product(terms: list[str]) -> str:
    return " * ".join(terms) if terms else "1"


def emit_launch(w: Writer, p: KernelPlan, strategy: KernelStrategy, kernel: str) -> None:
    """``launch`` and ``prepare`` for plan ``p`` whose kernel, written by ``strategy``, is named ``kernel``."""
    ins = ", ".join(_parameters(p))
    with w.block(f"def launch({ins}, {'' if '*' in ins else '*, '}out=None, _checked=False, **overrides):"):
        kinds = ", ".join(str(s.dtype)[6:] for s in p.outputs)
        w.line(f'"""{strategy.name} kernel: returns new tensors ({kinds}), or fills ``out`` (a tensor, or a tuple of '
               f'them for several results). ``overrides`` replace schedule entries."""')
        w.line(f"return prepare({ins}, out=out, _checked=_checked, **overrides)({ins}, out=out)")
    w.line()
    w.line()
    _emit_prepare(w, p, strategy, kernel)


def _emit_prepare(w: Writer, p: KernelPlan, strategy: KernelStrategy, kernel: str) -> None:
    b = p.binding
    ins = _parameters(p)
    before = [s.name for s in p.joining(0)]
    outs = [s.name for s in p.outputs]
    result = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
    with w.block(f"def prepare({', '.join(ins)}, {'' if ins[-1].startswith('*') else '*, '}out=None, _checked=False, "
                 "**overrides):"):
        w.line('"""Everything about a launch that the inputs\' dtypes, shapes, strides and device fix (and ``out``\'s, '
               'when given): returns ``run(*inputs, out=None)``, which launches on inputs laid out like these with '
               'nothing recomputed."""')
        with w.block("if not _checked:"):
            w.line(f"_check_inputs(({', '.join(s.name for s in p.inputs)},), {tuple(b.dtypes)!r}, {_int_tuple(b.ranks)})")
            used = used_scalars(p.pipeline)
            if used:
                w.line(f"_check_scalars(scalars, {max(index for index, _ in used) + 1})")
        w.line(f"shape = _broadcast({', '.join(f'{n}.shape' for n in before)})")
        _emit_out_shape(w, p)
        w.line("device = in0.device")
        with w.block("def new_outputs():"):
            summed = p.column_sums.outputs if p.column_sums is not None else ()
            news = [f"_empty({'column_shape' if slot in summed else _field_shape(p, inputs)}, {_int_tuple(order)}, "
                    f"{slot.dtype}, device)" for slot, order, inputs in zip(p.outputs, b.out_orders, p.field_inputs)]
            w.line(f"return {news[0] if len(news) == 1 else '(' + ', '.join(news) + ',)'}")
        w.line(f"{', '.join(outs)}{',' if len(outs) > 1 else ''} = new_outputs() if out is None else out",
               comment="when new: a template, for the strides")
        _emit_layout(w, p)
        if p.column_sums is not None:
            with w.block("if M == 0 or K == 0:"):
                w.comment("nothing to compute: launch no empty grid; a sum over no rows is 0")
                summed = _int_tuple(p.column_sums.fields)
                w.line(f"return lambda {', '.join(ins)}, out=None: _zeroed(new_outputs() if out is None else out, "
                       f"{summed})")
        with w.block(f"if {outs[0]}.numel() == 0:"):
            w.comment("nothing to compute: launch no empty grid")
            w.line(f"return lambda {', '.join(ins)}, out=None: new_outputs() if out is None else out")
        w.line(f"wide = _needs_int64(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}])")
        w.line("interpret = not in0.is_cuda")
        w.line("traced = _traced(in0)", comment="recorded into a graph (torch.compile), not run")
        with w.block(f"if interpret and not isinstance({kernel}, InterpretedFunction):"):
            w.line('raise RuntimeError("launch: CPU tensors run through Triton\'s interpreter, which was off when this "')
            w.line('                   "module was imported; set TRITON_INTERPRET=1 before importing triton, or pass "')
            w.line('                   "CUDA tensors")')
        _emit_schedule(w, p, strategy, kernel)
        with w.block(f"def run({', '.join(ins)}, out=None):"):
            w.line(f"{', '.join(outs)}{',' if len(outs) > 1 else ''} = new_outputs() if out is None else out")
            w.line(f"start({', '.join([s.name for s in p.slots] + _words_arguments(p))})")
            w.line(f"return {result}")
        w.line("run.launcher = start", comment="the launch itself, for tools that time it alone")
        w.line("return run")


def _parameters(p: KernelPlan) -> list[str]:
    """``launch``'s and ``prepare``'s positional parameters: the input tensors, then, for a pipeline that reads
    runtime scalars, ``*scalars`` (every one of the pipeline's, by index)."""
    return [s.name for s in p.inputs] + (["*scalars"] if used_scalars(p.pipeline) else [])


def _words_arguments(p: KernelPlan) -> list[str]:
    """The launch's arguments for the runtime scalars the kernel reads, from ``scalars`` (all of the pipeline's,
    by index): each one's words, in the kernel's order (:func:`~tricomb.codegen.kernel.runtime_words`)."""
    return [f"*_scalar_words(scalars[{index}], {kind.__name__})" for index, kind in used_scalars(p.pipeline)]


def _emit_layout(w: Writer, p: KernelPlan) -> None:
    """Every slot's strides, checked against the layout class; the groups' sizes and strides; ``M`` and ``K``."""
    b = p.binding
    for slot in p.slots:
        _strides_line(w, p, slot)
    groups = list(enumerate(b.groups))
    with w.block("if not _checked:"):
        w.line(f"_check_layout(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}], "
               f"{_int_tuple(tuple(g.dims for g in b.groups))})")
        constant = [(s.name, along) for s, row, column in zip(p.inputs, b.row_inputs or [False] * len(p.inputs),
                                                               b.column_inputs or [False] * len(p.inputs))
                    for along, held in (("folded", row), ("kept", column)) if held]
        if constant:
            w.line(f"_check_constant(shape, {_int_tuple(b.axes)}, "
                   f"[{', '.join(f'(st_{name}, {along!r})' for name, along in constant)}])")
    for g, grp in groups:
        w.line(f"{group_size(g)} = {_product([f'shape[{number_literal(d)}]' for d in grp.dims])}")
    for slot in p.slots:
        for g, grp in groups:
            w.line(f"{group_stride(slot, g)} = st_{slot.name}[{number_literal(grp.dims[-1])}]")
    w.line(f"M = {_product([group_size(g) for g, grp in groups if grp.kind == 'kept'])}")
    w.line(f"K = {_product([group_size(g) for g, grp in groups if grp.kind == 'reduced'])}")


def inner_contiguous(p: KernelPlan) -> str:
    """The launch-time condition that the reduced or scanned elements of a row are contiguous in memory (the
    innermost reduced group of input 0 has stride 1)."""
    reduced = [g for g, grp in enumerate(p.binding.groups) if grp.kind == "reduced"]
    return f"s_in0_{reduced[-1]} == 1" if reduced else "True"


def emit_look_back_scratch(w: Writer, p: KernelPlan, scan: TileScan, fused: TileReduce | None) -> None:
    """A scan's scratch: with ``LOOKBACK``, per tile its status words and, unless packed with them, the aggregate
    and inclusive prefix they announce (and the partials and tickets of the reduce ``fused`` after the scan), for
    the smallest tile the autotuner may choose; unused otherwise."""
    announced = aggregates(scan) + prefixes(scan)
    fused_partials = partials(fused) if fused is not None else []
    with w.block("if cfg['LOOKBACK']:"):
        w.comment("one tile per program; per tile its status words and the values they announce (decoupled look-back)")
        w.line("tiles = triton.cdiv(M, cfg['BLOCK_M']) * cfg['BLOCK_M'] * triton.cdiv(K, min(c['BLOCK_K'] for c in space))")
        words = "2 * tiles" if packing(scan) == SIXTEEN_BYTES else "tiles"
        w.line(f"status = _status_words(in0.device, {words}, traced)", comment="and the status each launch publishes")
        w.line(f"{FLAGS} = status.words")
        if packing(scan) != FENCED:
            w.line(f"{' = '.join(announced)} = {FLAGS}", comment="unused: the values travel in their status word")
        else:
            for name, dtype in zip(announced, scan.acc_dtypes * 2):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
        if fused is not None:
            for name, dtype in zip(fused_partials, fused.acc_dtypes):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
            w.line(f"{TICKETS} = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']), traced)")
    with w.block("else:"):
        w.line("status = _StatusWords(None)", comment="the kernel ignores its status value")
        unused = [FLAGS] + announced + fused_partials + ([TICKETS] if fused is not None else [])
        w.line(f"{' = '.join(unused)} = {p.outputs[0].name}", comment="unused without LOOKBACK")


def emit_rows_scratch(w: Writer, p: KernelPlan) -> None:
    """The scratch of a reduce over the rows (:class:`~tricomb.lower.segments.RowsReduce`): a partial per program
    (at least one program runs, so that no rows still give the identity's result) and one ticket."""
    w.line("programs = max(1, triton.cdiv(M, cfg['BLOCK_M']))")
    for buffer, dtype in zip(partials(p.over_rows), p.over_rows.acc_dtypes):
        w.line(f"{buffer} = torch.empty(programs, dtype={held_dtype(dtype)}, device=in0.device)")
    w.line(f"{TICKETS} = _tickets(in0.device, 1, traced)")


def emit_columns_scratch(w: Writer, p: KernelPlan) -> None:
    """The scratch of fields summed over the rows (:mod:`.columns`): ``programs`` of them step through the row
    tiles (``PROGRAMS``, :func:`~tricomb.lower.schedule.schedule_attach`); per field a
    partial per program and per group of programs, and a ticket per group and one for the groups."""
    w.line("programs = max(1, min(cfg['PROGRAMS'], triton.cdiv(M, cfg['BLOCK_M'])))",
           comment="(no more than there are row tiles)")
    w.line(f"groups = triton.cdiv(programs, {GROUP})")
    sums = p.column_sums
    for name, dtype in zip(partial_buffers(sums), sums.acc_dtypes):
        w.line(f"{name} = torch.empty(programs * K, dtype={held_dtype(dtype)}, device=device)")
    for name, dtype in zip(group_buffers(sums), sums.acc_dtypes):
        w.line(f"{name} = torch.empty(groups * K, dtype={held_dtype(dtype)}, device=device)")
    w.line(f"{TICKETS} = _tickets(device, groups + 1, traced)")


def emit_shared_scratch(w: Writer, p: KernelPlan, folds: list[TileReduce]) -> None:
    """The scratch of programs sharing an attach's rows (:mod:`.exchange`): per attached fold ``folds``, a
    partial per (row, program) and a status word per (row tile, program), with the status each launch
    publishes; none when rows are not shared. Triton's interpreter runs programs one after another, so a program
    there could never see a later one's partial: rows are never shared on it. Shared launches are not tuned: the
    autotuner's timed launches all pass one status value, so the launch after them would find every word set."""
    w.line("split = 1 if interpret or traced else cfg['SPLIT']",
           comment="(a recorded launch does not wait on others: bench/NOTES.md, triton_op)")
    with w.block("if split > 1:"):
        w.line("tune, space = False, [cfg]", comment="the autotuner's timed launches would leave the words set")
        w.line("tiles = triton.cdiv(M, cfg['BLOCK_M'])")
        w.line(f"status = _status_words(in0.device, tiles * {len(folds)} * split, traced)",
               comment="and the status each launch publishes")
        w.line(f"{FLAGS} = status.words")
        for n, fold in enumerate(folds):
            for buffer, dtype in zip(shared_partials(n, fold), fold.acc_dtypes):
                w.line(f"{buffer} = torch.empty(tiles * cfg['BLOCK_M'] * split, dtype={held_dtype(dtype)}, "
                       "device=in0.device)")
    with w.block("else:"):
        w.line("status = _StatusWords(None)", comment="the kernel ignores its status value")
        unused = [FLAGS] + [b for n, fold in enumerate(folds) for b in shared_partials(n, fold)]
        w.line(f"{' = '.join(unused)} = {p.outputs[0].name}", comment="unused unless rows are shared")


def emit_ticket_scratch(w: Writer, p: KernelPlan, fold: TileReduce) -> None:
    """A reduce's scratch when rows are split: a partial per (row, part) and a ticket per row tile."""
    w.line("chunk = triton.cdiv(triton.cdiv(K, cfg['SPLIT']), cfg['BLOCK_K']) * cfg['BLOCK_K']")
    w.line("split = triton.cdiv(K, chunk) if chunk else 1")
    with w.block("if split > 1:"):
        w.comment("split rows: partials per (row, split); tickets pick the program that finishes each row tile")
        for buffer, dtype in zip(partials(fold), fold.acc_dtypes):
            w.line(f"{buffer} = torch.empty(M * split, dtype={held_dtype(dtype)}, device=in0.device)")
        w.line(f"{TICKETS} = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']), traced)")
    with w.block("else:"):
        w.line(f"{' = '.join(partials(fold))} = {TICKETS} = {p.outputs[0].name}", comment="unused without TICKET")


def _emit_schedule(w: Writer, p: KernelPlan, strategy: KernelStrategy, kernel: str) -> None:
    """The schedule (or the autotuner's space), the scratch, the grid and ``start``: the kernel's launch
    with every argument but the slots' tensors fixed."""
    tuned = strategy.tuned
    w.line(f"cfg = {strategy.schedule_call(inner_contiguous(p))}")
    ins = ", ".join(s.name for s in p.inputs)
    outs = ", ".join(s.name for s in p.outputs)
    w.line(f"tune = _tuning(interpret, M * K, overrides, traced, ({outs},), ({ins},))")
    w.line("cfg.update(overrides)")
    w.line(f"space = tuning_space(cfg, {tuned!r}) if tune else [cfg]")
    strategy.emit_scratch(w)
    params = strategy.parameters()
    positional = [a.host for a in params if not a.constexpr and a.host is not None]
    fixed = [f"{a.name}={a.host}" for a in params if a.constexpr and a.name != tuned]
    w.line(f"grid = {strategy.grid()}")
    w.line(f"rest = ({''.join(a + ', ' for a in positional)})")
    w.line(f"meta = dict({', '.join(fixed)})")
    with w.block("if not tune:"):
        w.line(f"meta.update({tuned}=cfg[{tuned!r}], num_warps=cfg['num_warps'])")
        with w.block("if 'maxnreg' in cfg:"):
            w.line("meta['maxnreg'] = cfg['maxnreg']", comment="a cap on registers per thread (a compile option)")
    reset = ", _reset_tickets" if any(isinstance(s, (Ticket, RowsReduce, ColumnSums)) for s in p.segments) else ""
    w.line(f"start = _Launcher(_tuner({kernel}, space, {list(strategy.key)!r}, {strategy.tuner_resets}) if tune else "
           f"{kernel}, grid, rest, meta, device, status{reset}, traced=traced)", comment="tuned: Triton's autotuner, its choice cached on disk")

"""Emitting ``launch(*inputs, out=None, **overrides)``: the host side of the emitted module.

``launch`` recomputes, from the tensors it is given, only what varies within a layout class: the broadcast
shape, group sizes and strides, the schedule, and whether offsets need int64. The group structure, dtypes and
axes are fixed by the plan and written in as constants. The functions they call (``_broadcast``, ``_Launcher``,
...) are :mod:`.host`'s, copied into the module with whatever they call in turn (:mod:`.sources`).
"""
from __future__ import annotations

from ..lower.fuse import KernelPlan
from ..pipeline.ir import Reduce
from ..scalar.dtypes import held_dtype
from .kernel import fields, group_size, group_stride, kernel_parameters
from .lookback import FENCED, SIXTEEN_BYTES, packing
from ..scalar.literals import number_literal
from .writer import Writer


def _shape_expr(names: list[str]) -> str:
    return "(" + "".join(f"{n}, " for n in names) + ")"


def _int_tuple(values) -> str:
    """A tuple of plain ints (axes, dimensions, ranks) as source, each through :func:`number_literal`, which
    refuses anything but an exact ``int``; nested tuples as nested tuples."""
    items = [_int_tuple(v) if isinstance(v, tuple) else number_literal(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _final_reduce(p: KernelPlan) -> Reduce | None:
    """The reduce whose result the kernel stores: the plan's own, or the one fused after its scan."""
    final = p.then or p.combine
    return final if isinstance(final, Reduce) else None


def _out_shape(p: KernelPlan) -> str:
    b = p.binding
    if _final_reduce(p) is None:
        return "tuple(shape)"
    keepdim = _final_reduce(p).keepdim
    parts = [("1" if keepdim else None) if d in b.axes else f"shape[{d}]" for d in range(b.rank)]
    return _shape_expr([x for x in parts if x is not None])


def _strides_line(w: Writer, p: KernelPlan, slot) -> None:
    """``st_<slot>``: the slot's stride for every dimension of the iteration space (0 where it broadcasts)."""
    if not ((slot.after and p.kind == "reduce") or slot.late):
        w.line(f"st_{slot.name} = {slot.name}.expand(shape).stride()")
        return
    b = p.binding
    if _final_reduce(p).keepdim:
        w.line(f"st_{slot.name} = [0 if d in {_int_tuple(b.axes)} else s "
               f"for d, s in enumerate({slot.name}.expand(out_shape).stride())]")
        return
    w.line(f"st_{slot.name} = list({slot.name}.expand(out_shape).stride())")
    with w.block(f"for axis in {_int_tuple(b.axes)}:"):
        w.line(f"st_{slot.name}.insert(axis, 0)", comment="a reduced axis: the same element for every k")


def _field_shape(p: KernelPlan, inputs: frozenset[int]) -> str:
    """A result field's shape: the broadcast of the inputs it is computed from (elementwise plans); the stream's
    shape after a reduce or scan."""
    before = frozenset(i for i, s in enumerate(p.inputs) if not s.after)
    if p.kind != "map" or inputs == before:
        return "out_shape"
    return f"_broadcast({', '.join(f'{p.inputs[i].name}.shape' for i in sorted(inputs))})"


def _product(terms: list[str]) -> str:
    return " * ".join(terms) if terms else "1"


def emit_launch(w: Writer, p: KernelPlan, kernel: str) -> None:
    """``launch`` and ``prepare`` for plan ``p`` whose kernel is named ``kernel``."""
    ins = ", ".join(s.name for s in p.inputs)
    with w.block(f"def launch({ins}, *, out=None, _checked=False, **overrides):"):
        kinds = ", ".join(str(s.dtype)[6:] for s in p.outputs)
        w.line(f'"""{p.kind} kernel: returns new tensors ({kinds}), or fills ``out`` (a tensor, or a tuple of them for '
               f'several results). ``overrides`` replace schedule entries."""')
        w.line(f"return prepare({ins}, out=out, _checked=_checked, **overrides)({ins}, out=out)")
    w.line()
    w.line()
    _emit_prepare(w, p, kernel)


def _emit_prepare(w: Writer, p: KernelPlan, kernel: str) -> None:
    b = p.binding
    ins = [s.name for s in p.inputs]
    before = [s.name for s in p.inputs if not s.after]
    outs = [s.name for s in p.outputs]
    result = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
    with w.block(f"def prepare({', '.join(ins)}, *, out=None, _checked=False, **overrides):"):
        w.line('"""Everything about a launch that the inputs\' dtypes, shapes, strides and device fix (and ``out``\'s, '
               'when given): returns ``run(*inputs, out=None)``, which launches on inputs laid out like these with '
               'nothing recomputed."""')
        with w.block("if not _checked:"):
            w.line(f"_check_inputs(({', '.join(ins)},), {tuple(b.dtypes)!r}, {_int_tuple(b.ranks)})")
        w.line(f"shape = _broadcast({', '.join(f'{n}.shape' for n in before)})")
        w.line(f"out_shape = {_out_shape(p)}")
        w.line("device = in0.device")
        with w.block("def new_outputs():"):
            news = [f"_empty({_field_shape(p, inputs)}, {_int_tuple(order)}, {slot.dtype}, device)"
                    for slot, order, inputs in zip(p.outputs, b.out_orders, p.field_inputs)]
            w.line(f"return {news[0] if len(news) == 1 else '(' + ', '.join(news) + ',)'}")
        w.line(f"{', '.join(outs)}{',' if len(outs) > 1 else ''} = new_outputs() if out is None else out",
               comment="when new: a template, for the strides")
        for slot in p.slots:
            _strides_line(w, p, slot)
        groups = list(enumerate(b.groups))
        with w.block("if not _checked:"):
            w.line(f"_check_layout(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}], "
                   f"{_int_tuple(tuple(g.dims for g in b.groups))})")
        for g, grp in groups:
            w.line(f"{group_size(g)} = {_product([f'shape[{number_literal(d)}]' for d in grp.dims])}")
        for slot in p.slots:
            for g, grp in groups:
                w.line(f"{group_stride(slot, g)} = st_{slot.name}[{number_literal(grp.dims[-1])}]")
        w.line(f"M = {_product([group_size(g) for g, grp in groups if grp.kind == 'kept'])}")
        w.line(f"K = {_product([group_size(g) for g, grp in groups if grp.kind == 'reduced'])}")
        with w.block(f"if {outs[0]}.numel() == 0:"):
            w.comment("nothing to compute: launch no empty grid")
            w.line(f"return lambda {', '.join(ins)}, out=None: new_outputs() if out is None else out")
        w.line(f"wide = _needs_int64(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}])")
        w.line("interpret = not in0.is_cuda")
        with w.block(f"if interpret and not isinstance({kernel}, InterpretedFunction):"):
            w.line('raise RuntimeError("launch: CPU tensors run through Triton\'s interpreter, which was off when this "')
            w.line('                   "module was imported; set TRITON_INTERPRET=1 before importing triton, or pass "')
            w.line('                   "CUDA tensors")')
        _emit_schedule(w, p, kernel, groups)
        with w.block(f"def run({', '.join(ins)}, out=None):"):
            w.line(f"{', '.join(outs)}{',' if len(outs) > 1 else ''} = new_outputs() if out is None else out")
            w.line(f"start({', '.join(s.name for s in p.slots)})")
            w.line(f"return {result}")
        w.line("run.launcher = start", comment="the launch itself, for tools that time it alone")
        w.line("return run")


_TUNED = {"map": "BLOCK", "reduce": "BLOCK_K", "scan": "BLOCK_K"}  # the tile entry the autotuner varies, with warps


def _emit_look_back_scratch(w: Writer, p: KernelPlan) -> None:
    """A scan's scratch: with ``LOOKBACK``, per tile its status words and, unless packed with them, the aggregate
    and inclusive prefix they announce (and the partials and tickets of a reduce fused after the scan), for the
    smallest tile the autotuner may choose; unused otherwise."""
    announced = fields("aggregates", p.width) + fields("prefixes", p.width)
    partials = fields("partials", p.reduce_view().width) if p.then is not None else []
    with w.block("if cfg['LOOKBACK']:"):
        w.comment("one tile per program; per tile its status words and the values they announce (decoupled look-back)")
        w.line("tiles = triton.cdiv(M, cfg['BLOCK_M']) * cfg['BLOCK_M'] * triton.cdiv(K, min(c['BLOCK_K'] for c in space))")
        words = "2 * tiles" if packing(p) == SIXTEEN_BYTES else "tiles"
        w.line(f"status = _status_words(in0.device, {words})", comment="and the status each launch publishes")
        w.line("flags = status.words")
        if packing(p) != FENCED:
            w.line(f"{' = '.join(announced)} = flags", comment="unused: the values travel in their status word")
        else:
            for name, dtype in zip(announced, p.acc_dtypes * 2):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
        if p.then is not None:
            for name, dtype in zip(partials, p.reduce_view().acc_dtypes):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
            w.line("tickets = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']))")
    with w.block("else:"):
        w.line("status = _StatusWords(None)", comment="the kernel ignores its status value")
        unused = ["flags"] + announced + partials + (["tickets"] if p.then is not None else [])
        w.line(f"{' = '.join(unused)} = {p.outputs[0].name}", comment="unused without LOOKBACK")


def _emit_reduce_scratch(w: Writer, p: KernelPlan) -> None:
    """A reduce's scratch when rows are split: a partial per (row, part) and a ticket per row tile."""
    w.line("chunk = triton.cdiv(triton.cdiv(K, cfg['SPLIT']), cfg['BLOCK_K']) * cfg['BLOCK_K']")
    w.line("split = triton.cdiv(K, chunk) if chunk else 1")
    with w.block("if split > 1:"):
        w.comment("split rows: partials per (row, split); tickets pick the program that finishes each row tile")
        for buffer, dtype in zip(fields("partials", p.width), p.acc_dtypes):
            w.line(f"{buffer} = torch.empty(M * split, dtype={held_dtype(dtype)}, device=in0.device)")
        if p.index:
            w.line("partial_index = torch.empty(M * split, dtype=torch.int64, device=in0.device)")
        w.line("tickets = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']))")
    with w.block("else:"):
        scratch = ["partials", "partial_index"] if p.index else fields("partials", p.width)
        w.line(f"{' = '.join(scratch)} = tickets = {p.outputs[0].name}", comment="unused without TICKET")


def _grid(p: KernelPlan) -> str:
    """The launch grid as a function of the chosen meta-parameters (the autotuner's choice or the schedule's)."""
    if p.kind == "map":
        return "lambda meta: (triton.cdiv(M * K, meta['BLOCK']),)"
    if p.kind == "reduce":
        return "lambda meta: (triton.cdiv(M, meta['BLOCK_M']), split)"
    return ("lambda meta: (triton.cdiv(M, meta['BLOCK_M'])"
            " * (triton.cdiv(K, meta['BLOCK_K']) if meta['LOOKBACK'] else 1),)")


def _emit_schedule(w: Writer, p: KernelPlan, kernel: str, groups) -> None:
    """The schedule (or the autotuner's space), the scratch, the grid and ``start``: the kernel's launch
    with every argument but the slots' tensors fixed."""
    reduced = [g for g, grp in groups if grp.kind == "reduced"]
    inner = f"s_in0_{reduced[-1]} == 1" if reduced else "True"
    if p.kind == "map":
        w.line("cfg = schedule_map(M * K, interpret)")
    elif p.kind == "reduce":
        w.line(f"cfg = schedule_reduce(M, K, {inner}, _num_sms(in0.device), interpret, per_tile={p.share is not None})")
    else:
        w.line(f"cfg = schedule_scan(M, K, {inner}, _num_sms(in0.device), interpret, packing={packing(p)!r}, "
               f"width={p.width})")
    tuned = _TUNED[p.kind]
    w.line("tune = _tuning(interpret, M * K, overrides)")
    w.line("cfg.update(overrides)")
    w.line(f"space = tuning_space(cfg, {tuned!r}) if tune else [cfg]")
    if p.kind == "scan":
        w.line("cfg['LOOKBACK'] = cfg['LOOKBACK'] and K > cfg['BLOCK_K']", comment="one tile per row: nothing to look back at")
        with w.block("if not cfg['LOOKBACK'] and 'maxnreg' not in overrides:"):
            w.line("cfg.pop('maxnreg', None)", comment="the heuristic's register cap is for look-back tiles")
    args = kernel_parameters(p)
    values = {name: name for name in args}
    values.update({"numel": "M * K", "WIDE: tl.constexpr": "wide"})
    for name in ("BLOCK", "BLOCK_M", "BLOCK_K", "LOOKBACK", "WINDOW", "PUBLISH_PREFIX"):
        values[f"{name}: tl.constexpr"] = f"cfg[{name!r}]"
    if p.kind == "reduce":
        _emit_reduce_scratch(w, p)
        values.update({"SPLIT": "split", "TICKET: tl.constexpr": "split > 1"})
    if p.kind == "scan":
        _emit_look_back_scratch(w, p)
    else:
        w.line("status = None", comment="no status value to pass")
    positional = [values[a] for a in args if "constexpr" not in a]
    fixed = [f"{a.split(':')[0]}={values[a]}" for a in args if "constexpr" in a and not a.startswith(tuned + ":")]
    w.line(f"grid = {_grid(p)}")
    after_slots = len(p.slots) + (p.kind == "scan")  # a scan's ``ready`` comes from ``status`` at each launch
    w.line(f"rest = ({''.join(a + ', ' for a in positional[after_slots:])})")
    w.line(f"meta = dict({', '.join(fixed)})")
    with w.block("if not tune:"):
        w.line(f"meta.update({tuned}=cfg[{tuned!r}], num_warps=cfg['num_warps'])")
        with w.block("if 'maxnreg' in cfg:"):
            w.line("meta['maxnreg'] = cfg['maxnreg']", comment="a cap on registers per thread (a compile option)")
    key = ["numel"] if p.kind == "map" else ["M", "K"]
    look_back = "cfg['LOOKBACK']" if p.kind == "scan" else "False"
    reset = ", _reset_tickets" if p.kind == "reduce" or p.then is not None else ""  # (kernels that take tickets)
    w.line(f"start = _Launcher(_tuner({kernel}, space, {key!r}, {look_back}) if tune else {kernel}, grid, rest, meta, "
           f"device, status{reset})", comment="tuned: Triton's autotuner, its choice cached on disk")

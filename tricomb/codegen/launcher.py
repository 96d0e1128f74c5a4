"""Emitting ``launch(*inputs, out=None, **overrides)``: the host side of the emitted module.

``launch`` recomputes, from the tensors it is given, only what varies within a layout class: the broadcast
shape, group sizes and strides, the schedule, and whether offsets need int64. The group structure, dtypes and
axes are fixed by the plan and written in as constants.
"""
from __future__ import annotations

from ..lower.fuse import KernelPlan
from ..pipeline.ir import Reduce
from ..scalar.dtypes import held_dtype
from .kernel import fields, group_size, group_stride, kernel_parameters
from .writer import Writer

RUNTIME_HELPERS = '''
_ZEROED = {}
_NUM_SMS = {}


def _zeroed(device, use, count, dtype=torch.int32):
    """A buffer of at least ``count`` words, zero when first made and kept per device and ``use``: the
    last-program tickets (each kernel resets its own), the look-back's tile counter and epoch (reset and advanced
    by each launch's last program), and its status words (which stale launches leave below the epoch's)."""
    have = _ZEROED.get((device, use))
    if have is None or have.numel() < count:
        have = torch.zeros(max(count, 64), dtype=dtype).to(device)
        _ZEROED[(device, use)] = have
    return have


def _num_sms(device):
    if device.type != "cuda":
        return 1
    if device not in _NUM_SMS:
        _NUM_SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _NUM_SMS[device]


def _empty(shape, order, dtype, device):
    """A new tensor of ``shape`` laid out with its dimensions in ``order`` (outer to inner), as torch lays out
    the result of an elementwise op on permuted inputs."""
    if list(order) == sorted(order):
        return torch.empty(shape, dtype=dtype, device=device)
    inverse = sorted(range(len(order)), key=lambda d: order[d])
    return torch.empty([shape[d] for d in order], dtype=dtype, device=device).permute(inverse)


def _check_inputs(inputs, dtypes, ranks):
    """The dtypes and ranks this module was generated for."""
    for i, (t, dtype, rank) in enumerate(zip(inputs, dtypes, ranks)):
        if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != rank:
            got = f"{t.dtype} of rank {t.dim()}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"launch: input {i} must be a {dtype} tensor of rank {rank} (this module was generated "
                            f"for such inputs), got {got}; emit a module for these inputs with pipe.source(...)")


def _check_layout(shape, strides, groups):
    """The layout class this module was generated for: dims outside every group have size 1, and the dims of a
    group are one run in memory in every tensor."""
    grouped = {d for group in groups for d in group}
    same = all(n == 1 for d, n in enumerate(shape) if d not in grouped) and all(
        st[outer] == st[inner] * shape[inner] for st in strides for group in groups
        for outer, inner in zip(group, group[1:]))
    if not same:
        raise ValueError("launch: these inputs are laid out differently (strides, broadcasting or size-1 axes) "
                         "from those the module was generated for; emit a module for them with pipe.source(...)")


def _needs_int64(shape, strides):
    """True when an element index or offset can pass 2**31 - 1."""
    limit = 2**31 - 1
    numel = 1
    for n in shape:
        numel *= n
    if numel > limit:
        return True
    return any(sum((n - 1) * abs(s) for n, s in zip(shape, st)) > limit for st in strides)
'''


def _shape_expr(names: list[str]) -> str:
    return "(" + "".join(f"{n}, " for n in names) + ")"


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
        w.line(f"st_{slot.name} = [0 if d in {tuple(b.axes)!r} else s "
               f"for d, s in enumerate({slot.name}.expand(out_shape).stride())]")
        return
    w.line(f"st_{slot.name} = list({slot.name}.expand(out_shape).stride())")
    with w.block(f"for axis in {tuple(b.axes)!r}:"):
        w.line(f"st_{slot.name}.insert(axis, 0)", comment="a reduced axis: the same element for every k")


def _field_shape(p: KernelPlan, inputs: frozenset[int]) -> str:
    """A result field's shape: the broadcast of the inputs it is computed from (elementwise plans); the stream's
    shape after a reduce or scan."""
    before = frozenset(i for i, s in enumerate(p.inputs) if not s.after)
    if p.kind != "map" or inputs == before:
        return "out_shape"
    return f"torch.broadcast_shapes({', '.join(f'{p.inputs[i].name}.shape' for i in sorted(inputs))})"


def _product(terms: list[str]) -> str:
    return " * ".join(terms) if terms else "1"


def emit_launch(w: Writer, p: KernelPlan, kernel: str) -> None:
    """The ``launch`` function for plan ``p`` whose kernel is named ``kernel``."""
    b = p.binding
    ins = [s.name for s in p.inputs]
    before = [s.name for s in p.inputs if not s.after]
    outs = [s.name for s in p.outputs]
    result = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
    with w.block(f"def launch({', '.join(ins)}, *, out=None, _checked=False, **overrides):"):
        kinds = ", ".join(str(s.dtype)[6:] for s in p.outputs)
        w.line(f'"""{p.kind} kernel: returns new tensors ({kinds}), or fills ``out`` (a tensor, or a tuple of them for '
               f'several results). ``overrides`` replace schedule entries."""')
        with w.block("if not _checked:"):
            w.line(f"_check_inputs(({', '.join(ins)},), {tuple(b.dtypes)!r}, {tuple(b.ranks)!r})")
        w.line(f"shape = torch.broadcast_shapes({', '.join(f'{n}.shape' for n in before)})")
        w.line(f"out_shape = {_out_shape(p)}")
        with w.block("if out is None:"):
            for slot, order, inputs in zip(p.outputs, b.out_orders, p.field_inputs):
                w.line(f"{slot.name} = _empty({_field_shape(p, inputs)}, {order!r}, {slot.dtype}, in0.device)")
        if len(outs) > 1:
            with w.block("else:"):
                w.line(f"{', '.join(outs)} = out")
        for slot in p.slots:
            _strides_line(w, p, slot)
        groups = list(enumerate(b.groups))
        with w.block("if not _checked:"):
            w.line(f"_check_layout(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}], "
                   f"{tuple(g.dims for g in b.groups)!r})")
        for g, grp in groups:
            w.line(f"{group_size(g)} = {_product([f'shape[{d}]' for d in grp.dims])}")
        for slot in p.slots:
            for g, grp in groups:
                w.line(f"{group_stride(slot, g)} = st_{slot.name}[{grp.dims[-1]}]")
        w.line(f"M = {_product([group_size(g) for g, grp in groups if grp.kind == 'kept'])}")
        w.line(f"K = {_product([group_size(g) for g, grp in groups if grp.kind == 'reduced'])}")
        with w.block(f"if {outs[0]}.numel() == 0:"):
            w.line(f"return {result}", comment="nothing to compute: launch no empty grid")
        w.line(f"wide = _needs_int64(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}])")
        w.line("interpret = not in0.is_cuda")
        with w.block(f"if interpret and not isinstance({kernel}, InterpretedFunction):"):
            w.line('raise RuntimeError("launch: CPU tensors run through Triton\'s interpreter, which was off when this "')
            w.line('                   "module was imported; set TRITON_INTERPRET=1 before importing triton, or pass "')
            w.line('                   "CUDA tensors")')
        _emit_schedule_and_call(w, p, kernel, groups)
        w.line(f"return {result}")


_SPLIT_BLOCK = "min(triton.next_power_of_2(split), 256)"


def _emit_look_back_scratch(w: Writer, p: KernelPlan) -> None:
    """A scan's scratch: with ``LOOKBACK``, per tile its status word, aggregate and inclusive prefix (and the
    partials and tickets of a reduce fused after the scan); unused otherwise."""
    names = fields("aggregates", p.width) + fields("prefixes", p.width)
    dtypes = p.acc_dtypes * 2
    if p.then is not None:
        view = p.reduce_view()
        names += fields("partials", view.width)
        dtypes += view.acc_dtypes
    with w.block("if cfg['LOOKBACK']:"):
        w.comment("one tile per program; per tile a status word and the values it announces (decoupled look-back)")
        w.line("split = triton.cdiv(K, cfg['BLOCK_K'])")
        w.line("tiles = triton.cdiv(M, cfg['BLOCK_M']) * cfg['BLOCK_M'] * split")
        w.line("flags = _zeroed(in0.device, 'flags', tiles, torch.int64)")
        w.line("state = _zeroed(in0.device, 'state', 2, torch.int64)", comment="the tile counter and the epoch")
        for name, dtype in zip(names, dtypes):
            w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
        if p.then is not None:
            w.line("tickets = _zeroed(in0.device, 'tickets', triton.cdiv(M, cfg['BLOCK_M']))")
    with w.block("else:"):
        w.line("split = 1")
        unused = ["flags", "state"] + names + (["tickets"] if p.then is not None else [])
        w.line(f"{' = '.join(unused)} = {p.outputs[0].name}", comment="unused without LOOKBACK")


def _emit_schedule_and_call(w: Writer, p: KernelPlan, kernel: str, groups) -> None:
    reduced = [g for g, grp in groups if grp.kind == "reduced"]
    inner = f"s_in0_{reduced[-1]} == 1" if reduced else "True"
    if p.kind == "map":
        w.line("cfg = schedule_map(M * K, interpret)")
    elif p.kind == "reduce":
        w.line(f"cfg = schedule_reduce(M, K, {inner}, _num_sms(in0.device), interpret)")
    else:
        w.line(f"cfg = schedule_scan(M, K, {inner}, _num_sms(in0.device), interpret)")
    w.line("cfg.update(overrides)")
    args = kernel_parameters(p)
    values = {name: name for name in args}
    values.update({"numel": "M * K", "WIDE: tl.constexpr": "wide"})
    if p.kind == "map":
        grid = "(triton.cdiv(M * K, cfg['BLOCK']),)"
        values["BLOCK: tl.constexpr"] = "cfg['BLOCK']"
    else:
        values.update({"BLOCK_M: tl.constexpr": "cfg['BLOCK_M']", "BLOCK_K: tl.constexpr": "cfg['BLOCK_K']"})
        grid = "(triton.cdiv(M, cfg['BLOCK_M']),)"
    if p.kind == "reduce":
        w.line("chunk = triton.cdiv(triton.cdiv(K, cfg['SPLIT']), cfg['BLOCK_K']) * cfg['BLOCK_K']")
        w.line("split = triton.cdiv(K, chunk) if chunk else 1")
        with w.block("if split > 1:"):
            w.comment("split rows: partials per (row, split); tickets pick the program that finishes each row tile")
            for buffer, dtype in zip(fields("partials", p.width), p.acc_dtypes):
                w.line(f"{buffer} = torch.empty(M * split, dtype={held_dtype(dtype)}, device=in0.device)")
            if p.index:
                w.line("partial_index = torch.empty(M * split, dtype=torch.int64, device=in0.device)")
            w.line("tickets = _zeroed(in0.device, 'tickets', triton.cdiv(M, cfg['BLOCK_M']))")
        with w.block("else:"):
            scratch = ["partials", "partial_index"] if p.index else fields("partials", p.width)
            w.line(f"{' = '.join(scratch)} = tickets = {p.outputs[0].name}",
                   comment="unused without TICKET")
        values.update({"SPLIT": "split", "CHUNK": "chunk", "SPLIT_BLOCK: tl.constexpr": _SPLIT_BLOCK,
                       "TICKET: tl.constexpr": "split > 1"})
        grid = "(triton.cdiv(M, cfg['BLOCK_M']), split)"
    if p.kind == "scan":
        _emit_look_back_scratch(w, p)
        values.update({"SPLIT": "split", "SPLIT_BLOCK: tl.constexpr": _SPLIT_BLOCK,
                       "LOOKBACK: tl.constexpr": "cfg['LOOKBACK']", "WINDOW: tl.constexpr": "cfg['WINDOW']",
                       "PUBLISH_PREFIX: tl.constexpr": "cfg['PUBLISH_PREFIX']"})
        grid = "(triton.cdiv(M, cfg['BLOCK_M']) * split,)"
    positional = [values[a] for a in args if "constexpr" not in a]
    keywords = [f"{a.split(':')[0]}={values[a]}" for a in args if "constexpr" in a]
    call = f"{kernel}[{grid}]({', '.join(positional + keywords + ['num_warps=cfg[' + repr('num_warps') + ']'])})"
    with w.block("if interpret:"):
        w.line(call)
    with w.block("else:"):
        with w.block("with torch.cuda.device(in0.device):"):
            w.line(call)

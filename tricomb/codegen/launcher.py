"""Emitting ``launch(*inputs, out=None, **overrides)``: the host side of the emitted module.

``launch`` recomputes, from the tensors it is given, only what varies within a layout class: the broadcast
shape, group sizes and strides, the schedule, and whether offsets need int64. The group structure, dtypes and
axes are fixed by the plan and written in as constants. What differs from one kind of kernel to another (the
schedule call, the scratch buffers, the grid, the kernel's parameters) comes from the kernel's strategy
(:mod:`tricomb.codegen.strategies`), which calls the scratch emitters here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lower.fuse import KernelPlan
from ..lower.segments import Slot, TileReduce, TileScan
from ..scalar.dtypes import held_dtype
from ..scalar.literals import number_literal
from .kernel import group_size, group_stride
from .lookback import FENCED, SIXTEEN_BYTES, packing
from .scratch import FLAGS, PARTIAL_INDEX, TICKETS, aggregates, partials, prefixes, ticket_buffers
from .writer import Writer

if TYPE_CHECKING:  # the strategies call this module's emitters
    from .strategies import KernelStrategy

RUNTIME_HELPERS = '''
_TICKETS = {}
_STATUS_WORDS = {}
_NUM_SMS = {}
_TUNERS = {}
TUNING = {"done": 0, "total": 0, "reporters": []}  # reporters(configs timed, configs): tricomb's progress bar


def _tuning(interpret, numel, overrides):
    """Whether Triton's autotuner picks this launch's tile and warps: on the GPU, for 2**22 elements or more
    (where a kernel's time is worth seconds of tuning, once per size: the choice is cached on disk), unless
    ``TRICOMB_AUTOTUNE=0`` or ``overrides`` fix the schedule."""
    return not interpret and not overrides and numel >= 1 << 22 and os.environ.get("TRICOMB_AUTOTUNE", "1") != "0"


def _start_tuning(configs, named_args, **kwargs):
    TUNING["done"], TUNING["total"] = 0, len(configs)
    return configs


def _bench_config(fn, quantiles):
    """Triton's do_bench for one config, after telling the reporters how far tuning has come."""
    for report in TUNING["reporters"]:
        report(TUNING["done"], TUNING["total"])
    TUNING["done"] += 1
    return triton.testing.do_bench(fn, quantiles=quantiles)


def _tuner(space, key, look_back):
    """Triton's autotuner over ``space`` (dicts of meta-parameters and ``num_warps``), keyed on the sizes ``key``;
    its choice is cached on disk (``cache_results``), so a second process does not tune again. With
    ``look_back`` it zeroes the status words (``flags``) before each timed launch: they all pass one status."""
    name = (tuple(tuple(sorted(c.items())) for c in space), look_back)
    if name not in _TUNERS:
        options = ("num_warps", "maxnreg")  # compile options, not meta-parameters
        configs = [triton.Config({k: v for k, v in c.items() if k not in options}, num_warps=c["num_warps"],
                                 maxnreg=c.get("maxnreg")) for c in space]
        _TUNERS[name] = triton.autotune(configs=configs, key=key, cache_results=True, do_bench=_bench_config,
                                        reset_to_zero=["flags"] if look_back else None,
                                        prune_configs_by={"early_config_prune": _start_tuning})(kernel)
    return _TUNERS[name]


def _tickets(device, count):
    """At least ``count`` last-program tickets, zero when first made and kept per device (the last program of
    each row tile resets its own). Made by a fill kernel, which a CUDA graph capture may record."""
    have = _TICKETS.get(device)
    if have is None or have.numel() < count:
        have = torch.zeros(max(count, 64), dtype=torch.int32, device=device)
        _TICKETS[device] = have
    return have


class _StatusWords:
    """A look-back's status words (``words``, int64) and the status value each launch publishes (``ready``, and
    ``ready + 1`` for a prefix), so that words left by earlier launches read as unpublished without being
    cleared: launch n passes ``2 * n + 2``, more than any word of an earlier launch holds. The words are zeroed
    (one fill) only

    * when a launch is captured into a CUDA graph, which replays the value it captured: it passes ``CAPTURED``
      (2), below every direct launch's (4 and up), and its fill replays with it;
    * when the count reaches ``LAST``, well before ``ready + 1`` would pass the kernel's int32 (2**31 - 1): the
      count starts again at 1;
    * and by Triton's autotuner before each launch it times (``reset_to_zero``).

    ``words`` is None for a scan without the look-back: its kernel ignores the value, 0. Launches on one stream
    may come from several host threads (a lock orders their counts); launches that overlap in time (several
    streams) would read each other's words, which the README rules out."""
    CAPTURED, LAST = 2, 2**29

    def __init__(self, words):
        self.words, self.launches, self.lock = words, 0, threading.Lock()

    def next_ready(self) -> int:
        if self.words is None:
            return 0
        if self.words.is_cuda and torch.cuda.is_current_stream_capturing():
            self.words.zero_()
            return self.CAPTURED
        with self.lock:
            self.launches += 1
            if self.launches == self.LAST:
                self.words.zero_()
                self.launches = 1
            return 2 * self.launches + 2


def _status_words(device, count):
    """At least ``count`` status words for this module's look-back launches on ``device``. A larger need makes
    new zeroed words; the old ones stay allocated (launches prepared before, or a captured graph, still use
    them)."""
    made = _STATUS_WORDS.setdefault(device, [])
    if not made or made[-1].words.numel() < count:
        made.append(_StatusWords(torch.zeros(max(count, 64), dtype=torch.int64, device=device)))
    return made[-1]


def _reset_scratch(device):
    """Zero ``device``'s last-program tickets, as when first made. (A look-back's status words need no reset:
    the next launch publishes a larger status.)"""
    if device in _TICKETS:
        _TICKETS[device].zero_()


def _no_hooks():
    """No launch hook is set (a hook is None, or an empty chain of them in newer Triton)."""
    runtime = triton.knobs.runtime
    return all(h is None or not getattr(h, "calls", True) for h in (runtime.launch_enter_hook, runtime.launch_exit_hook))


class _Launcher:
    """One kernel launch with every argument fixed but the tensors of the slots. The first call goes through
    Triton's ``kernel[grid](...)``, which binds the arguments, compiles (or tunes) and returns the compiled
    kernel; later calls on the GPU hand the same arguments to that kernel's launcher directly, as Triton's own
    ``run`` does after its cache lookup (arguments whose types and values cannot have changed are not bound
    again). A launch hook (a profiler) or another current device takes Triton's path. ``adopt`` gives it a
    compiled kernel before its first call (tricomb's runtime keeps them across processes). A scan's kernel
    takes one more argument after the slots: its look-back's status value, from ``status``."""

    def __init__(self, fn, grid, rest, meta, device, status=None):
        self.fn, self.grid, self.rest, self.meta, self.device = fn, grid, rest, meta, device
        self.status = status
        self.compiled = self.chosen = None

    def __call__(self, *slots):
        try:
            self._launch(slots)
        except BaseException:
            _reset_scratch(self.device)  # a launch cut off part-way (an error, Ctrl-C) leaves counters mid-count
            raise

    def _launch(self, slots):
        if self.status is not None:
            slots = slots + (self.status.next_ready(),)
        compiled = self.compiled
        if compiled is not None and _no_hooks() and torch.cuda.current_device() == self.device.index:
            stream = triton.runtime.driver.active.get_current_stream(self.device.index)
            compiled.run(*self.dims, stream, compiled.function, compiled.packed_metadata, None, None, None,
                         *slots, *self.tail)
            return
        if self.device.type != "cuda":
            self.fn[self.grid](*slots, *self.rest, **self.meta)
            return
        with torch.cuda.device(self.device):
            compiled = self.fn[self.grid](*slots, *self.rest, **self.meta)
        chosen = getattr(self.fn, "best_config", None)
        self.adopt(compiled, chosen.all_kwargs() if chosen is not None else None)

    def adopt(self, compiled, chosen=None):
        """Launch ``compiled`` from now on: the kernel Triton returns for these arguments, compiled with the
        autotuner's ``chosen`` meta-parameters when tuned. Keeps what the direct launch needs: the grid and every
        argument after the slots, in Triton's order."""
        if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
            return
        meta = {**self.meta, **(chosen or {})}
        jit = self.fn.fn if chosen is not None else self.fn
        grid = tuple(self.grid(meta))
        self.dims = grid + (1,) * (3 - len(grid))
        positional = len(jit.arg_names) - len([a for a in jit.arg_names if a in meta])
        self.tail = tuple(self.rest) + tuple(meta[a] for a in jit.arg_names[positional:])
        self.compiled, self.chosen = compiled, chosen


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


def _broadcast(*shapes):
    """The broadcast of ``shapes`` by torch's rule (align right; sizes equal, or 1). torch.broadcast_shapes
    gives the same, but its first call imports sympy (seconds), which a new process would pay on its first
    launch."""
    rank = max(len(s) for s in shapes)
    result = [1] * rank
    for s in shapes:
        for d, n in enumerate(s, rank - len(s)):
            if n != 1 and result[d] not in (1, n):
                raise ValueError(f"launch: shapes {[tuple(x) for x in shapes]} do not broadcast")
            result[d] = n if n != 1 else result[d]
    return torch.Size(result)


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


def _int_tuple(values) -> str:
    """A tuple of plain ints (axes, dimensions, ranks) as source, each through :func:`number_literal`, which
    refuses anything but an exact ``int``; nested tuples as nested tuples."""
    items = [_int_tuple(v) if isinstance(v, tuple) else number_literal(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _final_reduce(p: KernelPlan) -> TileReduce | None:
    """The reduce whose result the kernel stores: the plan's own, or the one fused after its scan."""
    final = p.folds[-1] if p.folds else None
    return final if isinstance(final, TileReduce) else None


def _out_shape(p: KernelPlan) -> str:
    b = p.binding
    if _final_reduce(p) is None:
        return "tuple(shape)"
    keepdim = _final_reduce(p).stage.keepdim
    parts = [("1" if keepdim else None) if d in b.axes else f"shape[{d}]" for d in range(b.rank)]
    return _shape_expr([x for x in parts if x is not None])


def _strides_line(w: Writer, p: KernelPlan, slot: Slot) -> None:
    """``st_<slot>``: the slot's stride for every dimension of the iteration space (0 where it broadcasts); a
    slot read or written after a reduce is shaped like the reduce's result."""
    after = p.folds[slot.phase - 1] if slot.phase else None
    if not isinstance(after, TileReduce):
        w.line(f"st_{slot.name} = {slot.name}.expand(shape).stride()")
        return
    b = p.binding
    if after.stage.keepdim:
        w.line(f"st_{slot.name} = [0 if d in {_int_tuple(b.axes)} else s "
               f"for d, s in enumerate({slot.name}.expand(out_shape).stride())]")
        return
    w.line(f"st_{slot.name} = list({slot.name}.expand(out_shape).stride())")
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
    ins = ", ".join(s.name for s in p.inputs)
    with w.block(f"def launch({ins}, *, out=None, _checked=False, **overrides):"):
        kinds = ", ".join(str(s.dtype)[6:] for s in p.outputs)
        w.line(f'"""{strategy.name} kernel: returns new tensors ({kinds}), or fills ``out`` (a tensor, or a tuple of '
               f'them for several results). ``overrides`` replace schedule entries."""')
        w.line(f"return prepare({ins}, out=out, _checked=_checked, **overrides)({ins}, out=out)")
    w.line()
    w.line()
    _emit_prepare(w, p, strategy, kernel)


def _emit_prepare(w: Writer, p: KernelPlan, strategy: KernelStrategy, kernel: str) -> None:
    b = p.binding
    ins = [s.name for s in p.inputs]
    before = [s.name for s in p.joining(0)]
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
        _emit_layout(w, p)
        with w.block(f"if {outs[0]}.numel() == 0:"):
            w.comment("nothing to compute: launch no empty grid")
            w.line(f"return lambda {', '.join(ins)}, out=None: new_outputs() if out is None else out")
        w.line(f"wide = _needs_int64(shape, [{', '.join(f'st_{s.name}' for s in p.slots)}])")
        w.line("interpret = not in0.is_cuda")
        with w.block(f"if interpret and not isinstance({kernel}, InterpretedFunction):"):
            w.line('raise RuntimeError("launch: CPU tensors run through Triton\'s interpreter, which was off when this "')
            w.line('                   "module was imported; set TRITON_INTERPRET=1 before importing triton, or pass "')
            w.line('                   "CUDA tensors")')
        _emit_schedule(w, p, strategy, kernel)
        with w.block(f"def run({', '.join(ins)}, out=None):"):
            w.line(f"{', '.join(outs)}{',' if len(outs) > 1 else ''} = new_outputs() if out is None else out")
            w.line(f"start({', '.join(s.name for s in p.slots)})")
            w.line(f"return {result}")
        w.line("run.launcher = start", comment="the launch itself, for tools that time it alone")
        w.line("return run")


def _emit_layout(w: Writer, p: KernelPlan) -> None:
    """Every slot's strides, checked against the layout class; the groups' sizes and strides; ``M`` and ``K``."""
    b = p.binding
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
        w.line(f"status = _status_words(in0.device, {words})", comment="and the status each launch publishes")
        w.line(f"{FLAGS} = status.words")
        if packing(scan) != FENCED:
            w.line(f"{' = '.join(announced)} = {FLAGS}", comment="unused: the values travel in their status word")
        else:
            for name, dtype in zip(announced, scan.acc_dtypes * 2):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
        if fused is not None:
            for name, dtype in zip(fused_partials, fused.acc_dtypes):
                w.line(f"{name} = torch.empty(tiles, dtype={held_dtype(dtype)}, device=in0.device)")
            w.line(f"{TICKETS} = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']))")
    with w.block("else:"):
        w.line("status = _StatusWords(None)", comment="the kernel ignores its status value")
        unused = [FLAGS] + announced + fused_partials + ([TICKETS] if fused is not None else [])
        w.line(f"{' = '.join(unused)} = {p.outputs[0].name}", comment="unused without LOOKBACK")


def emit_ticket_scratch(w: Writer, p: KernelPlan, fold: TileReduce) -> None:
    """A reduce's scratch when rows are split: a partial per (row, part) and a ticket per row tile."""
    w.line("chunk = triton.cdiv(triton.cdiv(K, cfg['SPLIT']), cfg['BLOCK_K']) * cfg['BLOCK_K']")
    w.line("split = triton.cdiv(K, chunk) if chunk else 1")
    with w.block("if split > 1:"):
        w.comment("split rows: partials per (row, split); tickets pick the program that finishes each row tile")
        for buffer, dtype in zip(partials(fold), fold.acc_dtypes):
            w.line(f"{buffer} = torch.empty(M * split, dtype={held_dtype(dtype)}, device=in0.device)")
        if fold.index:
            w.line(f"{PARTIAL_INDEX} = torch.empty(M * split, dtype=torch.int64, device=in0.device)")
        w.line(f"{TICKETS} = _tickets(in0.device, triton.cdiv(M, cfg['BLOCK_M']))")
    with w.block("else:"):
        w.line(f"{' = '.join(ticket_buffers(fold))} = {TICKETS} = {p.outputs[0].name}", comment="unused without TICKET")


def _emit_schedule(w: Writer, p: KernelPlan, strategy: KernelStrategy, kernel: str) -> None:
    """The schedule (or the autotuner's space), the scratch, the grid and ``start``: the kernel's launch
    with every argument but the slots' tensors fixed."""
    tuned = strategy.tuned
    w.line(f"cfg = {strategy.schedule_call(inner_contiguous(p))}")
    w.line("tune = _tuning(interpret, M * K, overrides)")
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
    w.line(f"start = _Launcher(_tuner(space, {list(strategy.key)!r}, {strategy.tuner_resets}) if tune else {kernel}, "
           "grid, rest, meta, device, status)", comment="tuned: Triton's autotuner, its choice cached on disk")

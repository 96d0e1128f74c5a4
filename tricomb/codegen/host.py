"""The host side of an emitted module's runtime: scratch buffers, the launcher, the autotuner's hooks, the checks
of ``prepare``, as real Python.

Nothing here runs inside tricomb: an emitted module holds a copy of each definition its ``launch`` and
``prepare`` read, found by name and copied with its source (:mod:`tricomb.codegen.sources`), so that the module
runs on its own. So this module imports only what every emitted module may import (``os``, ``threading``,
``torch``, ``triton``), and its state (``_TICKETS``, ``TUNING``, ...) is per emitted module, each module's own
copy; the one here only serves its tests.
"""
import os
import struct
import threading

import torch
import triton
import triton.testing

_TICKETS = {}
_STATUS_WORDS = {}
_NUM_SMS = {}
_SHARED_MEM = {}
_TUNERS = {}
TUNING = {"done": 0, "total": 0, "reporters": []}  # reporters(configs timed, configs): tricomb's progress bar


def _tuning(interpret, numel, overrides, traced=False, outs=(), inputs=()):
    """Whether Triton's autotuner picks this launch's tile and warps: on the GPU, for 2**22 elements or more
    (where a kernel's time is worth seconds of tuning, once per size: the choice is cached on disk), unless
    ``TRICOMB_AUTOTUNE=0`` or ``overrides`` fix the schedule, or the launch is ``traced`` (recorded into a graph,
    which launches it as the heuristic chose), or writes one of ``outs`` over one of ``inputs`` (in place: each
    timed launch would update the result again)."""
    return (not interpret and not traced and not overrides and numel >= 1 << 22
            and os.environ.get("TRICOMB_AUTOTUNE", "1") != "0" and not _in_place(outs, inputs))


def _in_place(outs, inputs):
    """Whether a tensor of ``outs`` shares memory with one of ``inputs`` (tricomb's checks let only a result
    written over the input it is exactly through)."""
    stored = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    return any(o.numel() and o.untyped_storage().data_ptr() in stored for o in outs)


def _traced(t):
    """Whether ``t`` is a tracer's tensor (fake, or functional over fake: torch.compile tracing the registered
    operator), so that the launch is recorded by ``torch.library.wrap_triton`` rather than run. (No tracer has
    run where torch's fake tensors were never imported: importing them would add torch._dynamo's import time to
    a new process's first call.)"""
    import sys
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is not None and fake.is_fake(t)


def _start_tuning(configs, named_args, **kwargs):
    TUNING["done"], TUNING["total"] = 0, len(configs)
    return configs


def _bench_config(fn, quantiles):
    """Triton's do_bench for one config, after telling the reporters how far tuning has come."""
    for report in TUNING["reporters"]:
        report(TUNING["done"], TUNING["total"])
    TUNING["done"] += 1
    return triton.testing.do_bench(fn, quantiles=quantiles)


def _tuner(kernel, space, key, look_back):
    """Triton's autotuner of ``kernel`` over ``space`` (dicts of meta-parameters and ``num_warps``), keyed on the
    sizes ``key``; its choice is cached on disk (``cache_results``), so a second process does not tune again.
    With ``look_back`` it zeroes the status words (``flags``) before each timed launch: they all pass one
    status."""
    name = (id(kernel), tuple(tuple(sorted(c.items())) for c in space), look_back)
    if name not in _TUNERS:
        options = ("num_warps", "maxnreg")  # compile options, not meta-parameters
        configs = [triton.Config({k: v for k, v in c.items() if k not in options}, num_warps=c["num_warps"],
                                 maxnreg=c.get("maxnreg")) for c in space]
        _TUNERS[name] = triton.autotune(configs=configs, key=key, cache_results=True, do_bench=_bench_config,
                                        reset_to_zero=["flags"] if look_back else None,
                                        prune_configs_by={"early_config_prune": _start_tuning})(kernel)
    return _TUNERS[name]


def _tickets(device, count, traced=False):
    """At least ``count`` last-program tickets, zero when first made and kept per device (the last program of
    each row tile resets its own). Made by a fill kernel, which a CUDA graph capture may record. A ``traced``
    launch gets new zeroed ones: a graph may hold no tensor made outside it."""
    if traced:
        return torch.zeros(count, dtype=torch.int32, device=device)
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

    A traced launch's words are new each time the graph runs (``fresh``): it passes ``CAPTURED`` too.
    ``words`` is None for a scan without the look-back: its kernel ignores the value, 0. Launches on one stream
    may come from several host threads (a lock orders their counts); launches that overlap in time (several
    streams) would read each other's words, which the README rules out."""
    CAPTURED, LAST = 2, 2**29

    def __init__(self, words, fresh=False):
        self.words, self.fresh, self.launches, self.lock = words, fresh, 0, threading.Lock()

    def next_ready(self) -> int:
        if self.words is None:
            return 0
        if self.fresh:
            return self.CAPTURED
        if self.words.is_cuda and torch.cuda.is_current_stream_capturing():
            self.words.zero_()
            return self.CAPTURED
        with self.lock:
            self.launches += 1
            if self.launches == self.LAST:
                self.words.zero_()
                self.launches = 1
            return 2 * self.launches + 2


def _status_words(device, count, traced=False):
    """At least ``count`` status words for this module's look-back launches on ``device``. A larger need makes
    new zeroed words; the old ones stay allocated (launches prepared before, or a captured graph, still use
    them). A ``traced`` launch gets new zeroed words of its own (the graph allocates and fills them each run)."""
    if traced:
        return _StatusWords(torch.zeros(count, dtype=torch.int64, device=device), fresh=True)
    made = _STATUS_WORDS.setdefault(device, [])
    if not made or made[-1].words.numel() < count:
        made.append(_StatusWords(torch.zeros(max(count, 64), dtype=torch.int64, device=device)))
    return made[-1]


def _zeroed(outs, fields):
    """The result ``outs`` (a tensor, or a tuple of them) with the fields at ``fields`` zeroed: sums over no
    rows."""
    for j in fields:
        (outs[j] if isinstance(outs, tuple) else outs).zero_()
    return outs


def _reset_tickets(device):
    """Zero ``device``'s last-program tickets, as when first made: after a launch cut off part-way. (A
    look-back's status words need no reset: the next launch publishes a larger status.)"""
    if device in _TICKETS:
        _TICKETS[device].zero_()


def _no_hooks():
    """No launch hook is set (a hook is None, or an empty chain of them in newer Triton)."""
    runtime = triton.knobs.runtime
    return all(h is None or not getattr(h, "calls", True) for h in (runtime.launch_enter_hook, runtime.launch_exit_hook))


def _compile_options(device):
    """Triton's compile options beyond the schedule's: on CUDA, libdevice without flush-to-zero, as torch's own
    kernels are built (with Triton's default, ``__CUDA_FTZ``, sqrt, sin, floor, ... of a float32 subnormal give
    0 or inf: ``bench/experiments/subnormals.py``)."""
    cuda = device.type == "cuda" and torch.version.hip is None
    return {"enable_reflect_ftz": False} if cuda else {}


class _Launcher:
    """One kernel launch with every argument fixed but the tensors of the slots. The first call goes through
    Triton's ``kernel[grid](...)``, which binds the arguments, compiles (or tunes) and returns the compiled
    kernel; later calls on the GPU hand the same arguments to that kernel's launcher directly, as Triton's own
    ``run`` does after its cache lookup (arguments whose types and values cannot have changed are not bound
    again). A launch hook (a profiler) or another current device takes Triton's path. ``adopt`` gives it a
    compiled kernel before its first call (tricomb's runtime keeps them across processes). A scan's kernel
    takes one more argument after the slots: its look-back's status value, from ``status``. A kernel that
    counts with tickets passes ``reset``, called with the device when a launch is cut off part-way (an error,
    Ctrl-C), which leaves the counters mid-count. A ``traced`` launch (:func:`_traced`) is recorded into the
    tracer's graph by ``torch.library.wrap_triton``, where Inductor compiles and launches the kernel itself."""

    def __init__(self, fn, grid, rest, meta, device, status=None, reset=None, traced=False):
        if not traced:  # (a traced launch is compiled by Inductor, with its own options)
            meta = {**meta, **_compile_options(device)}
        self.fn, self.grid, self.rest, self.meta, self.device = fn, grid, rest, meta, device
        self.status, self.reset, self.traced = status, reset, traced
        self.compiled = self.chosen = None

    def __call__(self, *slots):
        try:
            self._launch(slots)
        except BaseException:
            if self.reset is not None:
                self.reset(self.device)
            raise

    def _launch(self, slots):
        if self.status is not None:
            slots = slots + (self.status.next_ready(),)
        if self.traced:
            from torch.library import wrap_triton
            wrap_triton(self.fn)[self.grid](*slots, *self.rest, **self.meta)
            return
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


def _shared_mem(device):
    """The shared memory a block on ``device`` may opt in to, in bytes, as Triton reads it to check a kernel's
    (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    if device not in _SHARED_MEM:
        index = device.index if device.index is not None else torch.cuda.current_device()
        _SHARED_MEM[device] = triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
    return _SHARED_MEM[device]


def _scalar_words(value, kind):
    """A runtime scalar as the int32 words its kernel parameters take: a bool as 0 or 1; an int as the high and
    low halves of its int64, a float as those of its double. Two int32 words are one Triton type whatever the
    value, where a Python int would be int32 or int64 by its size, and a float a float32."""
    if kind is bool:
        return (1 if value else 0,)
    lo, hi = struct.unpack("<ii", struct.pack("<q" if kind is int else "<d", value))
    return hi, lo


def _foreach_table(lists, per_tensor, kinds, schedule):
    """A foreach launch's device tables (see ``tricomb.codegen.foreach``) over ``lists`` (one list of tensors per
    slot) and ``per_tensor`` (one list of numbers per runtime scalar given per tensor, of ``kinds``: pairs of its
    index and kind): the int64 table, the int32 owner of each program (its length is the grid), and the
    schedule: ``schedule(largest, total, interpret)``'s (``BLOCK``, ``num_warps``) with ``WIDE``, whether an
    index may pass 2**31 - 1."""
    first = lists[0]
    numels = [t.numel() for t in first]
    largest = max(numels, default=0)
    cfg = schedule(largest, sum(numels), not first[0].is_cuda if first else True)
    block = cfg["BLOCK"]
    chunks = [-(-numel // block) for numel in numels]
    starts = [0]
    for count in chunks:
        starts.append(starts[-1] + count)
    rows = [[t.data_ptr() for t in tensors] + [0] for tensors in lists] + [numels + [0], starts]
    for values, (_, kind) in zip(per_tensor, kinds):
        rows.append([_scalar_bits(v, kind) for v in values] + [0])
    table = torch.tensor(rows, dtype=torch.int64)
    owners = torch.tensor([t for t, count in enumerate(chunks) for _ in range(count)], dtype=torch.int32)
    if first and first[0].is_cuda:
        table, owners = table.to(first[0].device), owners.to(first[0].device)
    cfg.update(WIDE=largest + block > 2**31 - 1)
    return table, owners, cfg


def _scalar_bits(value, kind):
    """A runtime scalar as one int64: an int itself, a bool 0 or 1, a float the bits of its double."""
    if kind is float:
        return struct.unpack("<q", struct.pack("<d", value))[0]
    return int(value)


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


def _check_scalars(scalars, count):
    """The runtime scalars this module reads: ``count`` numbers after the tensors, by position."""
    if len(scalars) < count or not all(isinstance(s, (bool, int, float)) or hasattr(s, "__index__") or
                                       hasattr(s, "__float__") for s in scalars):
        raise TypeError(f"launch: after its input tensors this module takes {count} runtime scalar(s), numbers, by "
                        f"position (the pipeline's, in order), got {len(scalars)}: {scalars!r}")


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


def _check_constant(shape, axes, held):
    """The inputs the module reads once a row (constant along the ``folded`` axes) or once a program (along the
    ``kept`` ones) broadcast along those axes here too: each ``(strides, along)`` of ``held`` has stride 0 along
    every such dimension of size > 1."""
    for strides, along in held:
        dims = [d for d in range(len(shape)) if (d in axes) == (along == "folded")]
        if any(strides[d] != 0 and shape[d] > 1 for d in dims):
            raise ValueError(f"launch: an input the module was generated to read once along the {along} axes "
                             "varies along them here; emit a module for these inputs with pipe.source(...)")


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

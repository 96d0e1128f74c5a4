"""The call path: bind the inputs, find (or emit and load) the kernel module, launch it.

Each :class:`~tricomb.api.Pipeline` keeps its compiled entries keyed by :class:`~tricomb.lower.bind.Binding`,
so a repeated call with inputs of the same dtypes, ranks and layout re-emits and re-loads nothing; and its
prepared launches keyed by :func:`fast_key`, so a call with inputs of the same shapes and strides as an
earlier one goes straight to the kernel.
"""
from __future__ import annotations

import contextlib
import contextvars
import struct
import warnings
from dataclasses import dataclass
from types import ModuleType

import numpy
import torch
import torch.autograd.forward_ad as forward_ad
from torch._subclasses.fake_tensor import is_fake

from .. import compiler
from ..lower.bind import Binding, check_arity
from ..lower.fuse import KernelPlan
from ..errors import ArgumentError, UnsupportedError, caller_location, too_deeply_nested
from ..pipeline.ir import PipelineIR, stage_functions
from ..pipeline.scalars import KIND_NAMES, is_number, not_an_input, plain_scalar, used_scalars, with_runtime_scalars
from ..pipeline.verify import verify
from ..scalar.inline import globals_key
from ..scalar.ir import jit_functions
from . import binaries, index
from ..serial import SERIAL
from .loader import load_module
from .lru import LRU

_OVERRIDES: contextvars.ContextVar[dict] = contextvars.ContextVar("tricomb_schedule_overrides", default={})


@dataclass(frozen=True)
class Compiled:
    """A plan, its emitted source, and the imported module (interpreted or compiled) that runs it."""

    plan: KernelPlan
    source: str
    module: ModuleType


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _power_of_two(value) -> bool:
    return _count(value) and value & (value - 1) == 0


_POWER = (_power_of_two, "a power of two (1, 2, 4, ...)")
_FLAG = (lambda value: isinstance(value, bool), "True or False")
# what each schedule entry may be: a check and its words for the error
_SCHEDULE_ENTRIES = {
    "BLOCK": _POWER, "BLOCK_M": _POWER, "BLOCK_K": _POWER, "WINDOW": _POWER, "num_warps": _POWER,
    "SPLIT": (_count, "an integer of 1 or more"),
    "LOOKBACK": _FLAG, "PUBLISH_PREFIX": _FLAG,
    "PROGRAMS": (_count, "a positive integer"), "ROW_STAGES": (_count, "a positive integer"),
    "maxnreg": (lambda value: value is None or _count(value) and value <= 255, "None or an integer from 1 to 255"),
}


@contextlib.contextmanager
def schedule_overrides(**overrides):
    """Within the block, every launch uses these schedule entries instead of the heuristics': ``BLOCK``,
    ``BLOCK_M``, ``BLOCK_K``, ``WINDOW`` and ``num_warps`` (powers of two), ``SPLIT`` (programs per row of a
    reduce, 1 or more), ``PROGRAMS`` (programs stepping through the row tiles of fields summed over the rows) and
    ``ROW_STAGES`` (how many of those tiles' loads are in flight, 1 or more: each takes a tile of shared memory),
    ``LOOKBACK`` and ``PUBLISH_PREFIX`` (bools), and ``maxnreg`` (a cap on registers per thread, a compile
    option: None, or 1 to 255, the most a thread can hold). Tests use it to force tiny tiles,
    split rows and one-pass scans; ``bench/experiments`` to time schedules. Raises ValueError, before anything
    runs, for another name or a value outside these."""
    for name, value in overrides.items():
        if name not in _SCHEDULE_ENTRIES:
            raise ValueError(f"schedule_overrides: unknown entry {name!r}; the entries are "
                             f"{', '.join(_SCHEDULE_ENTRIES)}")
        check, allowed = _SCHEDULE_ENTRIES[name]
        if not check(value):
            raise ValueError(f"schedule_overrides: {name}={value!r} must be {allowed}")
    token = _OVERRIDES.set({**_OVERRIDES.get(), **overrides})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def compile_for(pipeline: PipelineIR, cache: dict, tensors: tuple, out=None) -> Compiled:
    """The compiled entry for ``tensors`` (lowered by :mod:`tricomb.compiler`, emitted and loaded on first use)."""
    unit = compiler.lower(pipeline, tensors, out, until="bind")
    entry = cache.get(unit.binding)
    if entry is None:
        unit = compiler.compile_unit(unit)
        entry = Compiled(unit.plan, unit.source, load_module(unit.source, interpret=unit.binding.device_type == "cpu"))
        cache[unit.binding] = entry
    return entry


def _input_key(t) -> tuple | type:
    if not isinstance(t, torch.Tensor):
        return type(t)  # a runtime scalar (or what the full path refuses): its value takes no part
    if type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        raise TypeError  # a FakeTensor or a wrapper subclass: no data_ptr() to read (the full path says what to do)
    return t.dtype, t.shape, t.stride(), t.device, t.data_ptr() % 16, t.is_neg(), t.is_conj(), t.requires_grad


def fast_key(tensors: tuple) -> tuple | None:
    """What fixes a prepared launch: each input's dtype, shape, strides, device and 16-byte alignment (Triton
    specializes pointers on it), its lazy negation and conjugation bits and whether it requires grad, and torch's
    default dtype (the dtype of Python floats meeting integers); a runtime scalar's type alone. None, so that the
    full path says what is wrong, when an input is not a strided tensor, or requires grad in grad mode (which goes
    through the operator: a launch prepared under ``torch.no_grad()``, or found in the disk index, must not serve
    such a call)."""
    try:
        inputs = tuple(_input_key(t) for t in tensors)
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):  # sparse, nested, mkldnn, subclasses
        return None
    if torch.is_grad_enabled() and any(type(key) is tuple and key[-1] for key in inputs):
        return None
    if forward_ad._current_level >= 0:  # (a dual level is open: the full path refuses tangents)
        return None
    return inputs, torch.get_default_dtype()


def refuse_tangents(tensors: tuple, out=None) -> None:
    """Raise UnsupportedError, at the user's call, for an input or an ``out=`` tensor carrying a forward-mode
    tangent (a dual tensor of ``torch.autograd.forward_ad``): a kernel would drop an input's, and leave an
    ``out=``'s stale, a silently wrong derivative."""
    if forward_ad._current_level < 0:
        return
    outs = () if out is None else tuple(out) if isinstance(out, (tuple, list)) else (out,)
    named = [(f"input {i}", t) for i, t in enumerate(tensors)] + [("out=", t) for t in outs]
    for what, t in named:
        if isinstance(t, torch.Tensor) and forward_ad.unpack_dual(t).tangent is not None:
            raise UnsupportedError(f"{what} carries a forward-mode tangent (torch.autograd.forward_ad), which a "
                                   "tricomb kernel would drop: forward-mode AD is not supported; take derivatives "
                                   "in reverse mode (torch.autograd.grad, .backward()), or compute the JVP with "
                                   "torch ops", caller_location())


class PipelineCache:
    """What a pipeline keeps between calls: its compiled entries and prepared launches for the 64 layouts used
    most recently (:meth:`entries`). For a pipeline calling user ``@triton.jit`` functions they are kept for what
    those functions read now from their globals and closure cells (:func:`~tricomb.scalar.inline.globals_key`,
    recursively through the functions they call): a changed global gets a new kernel, as in Triton (whose
    interpreter reads globals at each call), and the entries for earlier values are dropped."""

    __slots__ = ("pipeline", "named", "jit_refs", "reads_scalars", "layouts", "forms", "_globals")

    def __init__(self, pipeline: PipelineIR, named: int = 0):
        self.pipeline = pipeline
        self.named = named  # the runtime scalars the pipeline names (by index), before the numbers among its inputs
        self.reads_scalars = bool(used_scalars(pipeline))
        self.jit_refs = tuple(dict.fromkeys(r for fn in pipeline.functions for r in jit_functions(fn)))
        self.layouts: LRU = LRU(64)
        self.forms: dict = {}
        self._globals = None

    def form(self, inputs: tuple) -> "ScalarForm":
        """The pipeline taking the numbers among ``inputs`` as runtime scalars (:class:`ScalarForm`), kept by
        their kinds: a new value, or a new number of a known kind, finds it."""
        check_arity(self.pipeline, inputs)
        return self.form_for(tuple(None if isinstance(t, torch.Tensor) else _kind(t, i) for i, t in enumerate(inputs)))

    def form_for(self, kinds: tuple[str | None, ...]) -> "ScalarForm":
        """:meth:`form` for inputs of ``kinds`` (None for a tensor, else the name of a number's kind), numbered
        after the ``named`` runtime scalars."""
        found = self.forms.get(kinds)
        if found is None:
            types = tuple(None if k is None else KIND_NAMES[k] for k in kinds)
            ir = verify(with_runtime_scalars(self.pipeline, types, first=self.named))
            found = self.forms[kinds] = ScalarForm(ir, PipelineCache(ir), tuple(i for i, k in enumerate(kinds) if k is None),
                                                   tuple(i for i, k in enumerate(kinds) if k is not None))
        return found

    def entries(self) -> LRU:
        """The entries for the globals read now (all of them for a pipeline that calls no jit function)."""
        if self.jit_refs:
            key = globals_key(self.jit_refs)
            if key != self._globals:
                with SERIAL:
                    self.layouts, self._globals = LRU(64), key
        return self.layouts


@dataclass
class ScalarForm:
    """A pipeline called with numbers among its inputs: ``ir``, which reads them as runtime scalars
    (:mod:`tricomb.pipeline.scalars`), its own ``cache``, where the inputs that are tensors are (``tensors``) and
    where the numbers are (``numbers``), and, once a call needed it, its operator key (``key``)."""

    ir: PipelineIR
    cache: "PipelineCache"
    tensors: tuple[int, ...]
    numbers: tuple[int, ...]
    key: object = None

    def split(self, inputs: tuple, named: tuple = ()) -> tuple[tuple, tuple]:
        """``inputs`` as the form's tensors and its runtime scalars (``named`` first, as numbered; none where its
        stages read none, as its module takes none)."""
        scalars = (*named, *(inputs[i] for i in self.numbers)) if self.cache.reads_scalars else ()
        return tuple(inputs[i] for i in self.tensors), scalars


def _kind(value, at: int) -> str:
    """The kind of runtime scalar the number ``value``, input ``at``, is read as. Raises DTypeError for what is
    not a number, ArgumentError for a number no runtime scalar holds (:func:`plain_scalar`)."""
    if not is_number(value):
        raise not_an_input(value, at)
    return type(plain_scalar(value, f"input {at}")).__name__


def _with_numbers(form: ScalarForm, prepared):
    """A prepared launch of ``form`` as the call with numbers among its inputs runs it."""
    def run(*inputs, out=None):
        tensors, scalars = form.split(inputs[:len(form.tensors) + len(form.numbers)],
                                      inputs[len(form.tensors) + len(form.numbers):])
        try:
            return prepared(*tensors, *scalars, out=out)
        except struct.error:
            checked = [plain_scalar(inputs[i], f"input {i}") for i in form.numbers]
            raise ArgumentError(f"a runtime scalar does not fit its kernel argument ({checked})", caller_location())
    run.launcher = getattr(prepared, "launcher", None)
    return run


def quiet(start):
    """For the interpreter: one launch at a time in the process (:data:`~tricomb.serial.SERIAL`). Masked-off lanes of
    its numpy arrays compute log(0), 0/0, ...; nothing reads them. And Triton 3.6's interpreter calls int() on
    1-element arrays, which numpy 1.25 to 2.3 warn of (an error under ``-W error``); its result is right."""
    def run(*arguments, **keywords):
        with SERIAL, numpy.errstate(all="ignore"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Conversion of an array with ndim > 0 to a scalar", DeprecationWarning)
            return start(*arguments, **keywords)
    run.launcher = getattr(start, "launcher", None)
    return run


def traced(tensors) -> bool:
    """Whether a call must go through the torch operator (:mod:`.operator`): under torch.compile, or on fake
    tensors (a tracer's)."""
    return torch.compiler.is_compiling() or any(isinstance(t, torch.Tensor) and is_fake(t) for t in tensors)


def records_grad(tensors) -> bool:
    """Whether a call records autograd history: an input requires grad, in grad mode."""
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def needs_graph(tensors) -> bool:
    """Whether a call records autograd history or is traced."""
    return records_grad(tensors) or traced(tensors)


def run(pipeline: PipelineIR, kept: PipelineCache, tensors: tuple, out: torch.Tensor | None, graph=None,
        scalars: tuple = ()):
    """Run the pipeline on ``tensors``: one kernel launch (none for an empty result).

    A call like an earlier one (same :func:`fast_key`, no ``out``, no schedule overrides) reuses that call's
    prepared launch: no binding, planning or argument computation, one dictionary lookup. The first such call
    in a process finds the module in the disk index when an earlier process built it (:mod:`.index`), and its
    compiled kernel among those recorded (:mod:`.binaries`). A call that must record autograd history or is
    traced (:func:`needs_graph`) is ``graph(tensors, out)`` instead, when ``graph`` is given (the torch
    operator's call). ``scalars``: the values of the runtime scalars the pipeline names (a parsed ``param``), by
    index; a number among ``tensors`` is a runtime scalar too, numbered after them."""
    cache = kept.entries() if kept.jit_refs else kept.layouts
    if scalars and not kept.reads_scalars:
        scalars = ()  # (a backward kernel reading none of the forward's)
    overrides = _OVERRIDES.get()
    key = fast_key(tensors) if out is None and not overrides else None
    prepared = cache.get(key) if key is not None else None
    if prepared is not None:
        return prepared(*tensors, *scalars)
    refuse_tangents(tensors, out)
    if graph is not None and needs_graph(tensors):
        return graph(tensors, out)
    try:
        with SERIAL:
            result = _first_call(kept, cache, tensors, scalars, out, key, overrides)
    except RecursionError:
        raise too_deeply_nested() from None
    if out is not None:  # (written in place: autograd must see that a tensor it saved has changed)
        torch.autograd.graph.increment_version(list(out) if isinstance(out, (tuple, list)) else out)
    return result


def _first_call(kept: PipelineCache, cache: dict, tensors: tuple, scalars: tuple, out, key,
                overrides: dict) -> torch.Tensor:
    """The call path when no prepared launch fits: find or build the module, prepare, launch (and keep). With
    numbers among the inputs, the module of the pipeline reading them as runtime scalars."""
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        form = kept.form(tensors)
        inner, named = form.split(tensors, scalars)
        inner_cache = form.cache.entries() if form.cache.jit_refs else form.cache.layouts
        inner_key = fast_key(inner) if key is not None else None
        result = _first_call(form.cache, inner_cache, inner, named, out, inner_key, overrides)
        if key is not None and inner_key in inner_cache:
            cache[key] = _with_numbers(form, inner_cache[inner_key])
        return result
    pipeline = kept.pipeline
    module, interpret = _module(pipeline, cache, tensors, out, key)
    with numpy.errstate(all="ignore") if interpret else contextlib.nullcontext():
        prepared = module.prepare(*tensors, *scalars, out=out, _checked=True, **overrides)
    with _triton_failures(pipeline):
        if interpret:
            prepared = quiet(prepared)
        elif key is not None:
            return _first_launch(module, prepared, cache, key, (*tensors, *scalars))
        if key is not None:
            cache[key] = prepared
        return prepared(*tensors, *scalars, out=out)


@contextlib.contextmanager
def _triton_failures(pipeline: PipelineIR):
    """Triton failing to compile or interpret a kernel (which tricomb's own checks let through only for what a
    user's @triton.jit function does: tl.rand, libdevice or inline assembly under the interpreter, say) raises
    UnsupportedError, once, at the first stage that calls a @triton.jit function."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import InterpreterError
    try:
        yield
    except (CompilationError, InterpreterError) as exc:
        stages = [st for st in pipeline.stages if any(jit_functions(fn) for fn in stage_functions(st))]
        where = stages[0].location if stages else None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(f"Triton could not {'compile' if isinstance(exc, CompilationError) else 'run'} "
                               f"this pipeline's kernel ({type(exc).__name__}: {first[:300]})"
                               + ("; the @triton.jit function this stage calls may use what Triton cannot run "
                                  "here (under the interpreter: tl.rand, libdevice, inline assembly)" if stages else
                                  "; please report it"), where) from exc


def _first_launch(module: ModuleType, prepared, cache: dict, key, tensors: tuple):
    """A prepared GPU launch's first call: with the kernel an earlier process recorded for it (:mod:`.binaries`),
    else compiled through Triton and then recorded."""
    launcher = getattr(prepared, "launcher", None)  # none when the result is empty
    adopted = launcher is not None and binaries.adopt(module, launcher, key)
    result = prepared(*tensors)
    cache[key] = prepared
    if launcher is not None and not adopted:
        binaries.keep(module, launcher, key)
    return result


def _module(pipeline: PipelineIR, cache: dict, tensors: tuple, out, key) -> tuple[ModuleType, bool]:
    """The kernel module for ``tensors`` and whether it runs interpreted: from the disk index when ``key`` is
    there, else bound, planned, emitted and loaded (and then entered in the index)."""
    found = index.find(pipeline, key) if key is not None else None
    if found is not None:
        return found
    entry = compile_for(pipeline, cache, tensors, out)
    interpret = entry.plan.binding.device_type == "cpu"
    if key is not None:
        index.enter(pipeline, key, entry.source, interpret)
    return entry.module, interpret


def emit_source(pipeline: PipelineIR, tensors: tuple) -> str:
    """The emitted module for inputs like ``tensors``, without loading it."""
    with SERIAL:
        return compiler.lower(pipeline, tensors).source


def lowered(pipeline: PipelineIR, tensors: tuple, until: str = "fuse", record: list | None = None) -> compiler.Unit:
    """``pipeline`` on inputs like ``tensors`` through the compiler's passes up to ``until``
    (:func:`tricomb.compiler.lower`)."""
    with SERIAL:
        return compiler.lower(pipeline, tensors, until=until, record=record)


__all__ = ["Binding", "Compiled", "compile_for", "emit_source", "lowered", "needs_graph", "PipelineCache", "quiet",
           "records_grad", "run", "schedule_overrides", "traced"]

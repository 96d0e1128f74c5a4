"""Pipelines as a torch operator: ``tricomb::pipeline``, registered through ``torch.library``.

One custom operator runs every pipeline: ``tricomb::pipeline(str key, Tensor[] inputs, Scalar[] scalars) ->
Tensor[]``, where ``key`` names a pipeline in this process's table (a digest of its IR, :func:`op_key`) and
``scalars`` are its runtime scalars' values (:mod:`tricomb.pipeline.scalars`). Its fake implementation
is tricomb's own shape and dtype inference (the pipeline evaluated by torch on meta tensors, whose sizes may be
symbolic), so ``torch.compile`` traces a call as one node with no graph break and no recompile when only sizes
change; its autograd formula runs backward pipelines derived from the IR (:mod:`tricomb.autograd`): directly in
an eager backward, and inside a second operator, ``tricomb::pipeline_backward``, in a traced one.

On CUDA tensors torch.compile records ``tricomb::pipeline_cuda`` (and ``tricomb::pipeline_backward_cuda``)
instead: the same operators as ``torch.library.triton_op``, which Inductor traces through, so that its own code
launches the pipeline's kernels (``torch.library.wrap_triton``) with no opaque call, where the sizes are static
and no kernel scans; elsewhere their bodies call the opaque operator (:func:`_recordable` says why). The opaque
operator serves CPU tensors too, which Triton's interpreter runs and Inductor cannot.

The eager call does not go through the operator: :meth:`tricomb.api.Pipeline.__call__` launches directly, and
takes this path only under ``torch.compile`` (or another tracer: fake or functional tensors), or when an input
requires grad in grad mode.
"""
from __future__ import annotations

import functools
import hashlib
import weakref
from typing import Optional, Sequence

from torch.types import Number

import torch
from torch._subclasses.fake_tensor import is_fake

from ..autograd import backward as autograd
from ..lower.bind import check_constant_along, check_readable
from ..errors import DTypeError, ShapeError, UnsupportedError, caller_location
from ..pipeline.evaluate import evaluate_fields
from ..pipeline.ir import PipelineIR, Scan
from ..pipeline.key import ir_key
from ..pipeline.verify import verify
from ..serial import SERIAL
from . import index, launch
from .lru import LRU

_NAME = "tricomb::pipeline"
_BACKWARD = "tricomb::pipeline_backward"
# the same operators as triton_ops, for CUDA tensors under torch.compile (the opaque ones serve the interpreter)
_CUDA = "tricomb::pipeline_cuda"
_BACKWARD_CUDA = "tricomb::pipeline_backward_cuda"


class _Entry:
    """A pipeline known to the operator: its IR, its compiled entries (the pipeline's own, where it has them:
    one module serves its eager and its recorded calls), and whether its gradient is derived (checked once)."""

    __slots__ = ("ir", "cache", "_derivable", "__weakref__")

    def __init__(self, ir: PipelineIR, cache: launch.PipelineCache | None = None):
        self.ir = ir
        self.cache = cache if cache is not None else launch.PipelineCache(ir)
        self._derivable = False

    def check_gradient(self) -> None:
        """Raise UnsupportedError, naming the stage, where the pipeline's gradient is not derived
        (:func:`tricomb.autograd.backward.check`; a pipeline that passes is not checked again)."""
        if not self._derivable:
            autograd.check(self.ir)
            self._derivable = True


# key -> entry, while something holds the entry: the pipeline (its key function), or a recorded backward (its
# ctx); a pipeline that is gone frees its entry, as its own compiled entries
_ENTRIES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _digest(ir: PipelineIR) -> str:
    return "p" + hashlib.sha256((index.code_digest() + ir_key(ir)).encode()).hexdigest()[:40]


def _constant_to_dynamo(fn):
    """``fn`` marked as ``torch.compiler.assume_constant_result`` marks it (Dynamo calls it while tracing and
    takes its result as a constant), without importing torch._dynamo, which that function does and which
    would add its import time to every process's first call (tests/test_compile.py checks the two agree)."""
    fn._dynamo_marked_constant = True
    return fn


def key_function(ir: PipelineIR, cache: launch.PipelineCache | None = None):
    """A function of no argument returning the operator's name for ``ir``, a digest of the IR
    (:func:`~tricomb.pipeline.key.ir_key`) and of tricomb's code, and entering it in the table. A pipeline keeps
    one (which holds its entry, sharing the pipeline's ``cache``); torch.compile calls it while tracing and takes the result as a constant, so that
    tracing passes no IR object and the digest is computed only when needed. The digest makes a graph torch
    cached on disk name the same pipeline in the process that reads it back, and no graph cached by other
    tricomb code match (a ``@triton.jit`` function is named by its identity, which no other process shares)."""
    held: list = []

    @_constant_to_dynamo
    def key() -> str:
        if not held:
            with SERIAL:
                name = _digest(ir)
                entry = _ENTRIES.get(name)
                if entry is None:
                    entry = _ENTRIES[name] = _Entry(ir, cache)
                held.append((name, entry))
        return held[0][0]
    return key


def form_key_function(cache: launch.PipelineCache):
    """A function of a call's input kinds (None for a tensor, else a number kind's name) returning the operator's
    name for the pipeline of ``cache`` reading those numbers as runtime scalars (its
    :meth:`~tricomb.runtime.launch.PipelineCache.form_for`), entering it in the table; torch.compile calls it
    while tracing and takes the result as a constant."""
    @_constant_to_dynamo
    def key(kinds: tuple) -> str:
        form = cache.form_for(kinds)
        if form.key is None:
            form.key = key_function(form.ir, form.cache)
        return form.key()
    return key


def op_key(pipe) -> str:
    """The operator's name for the pipeline ``pipe``, for calling ``torch.ops.tricomb.pipeline`` yourself
    (``torch.library.opcheck``); the pipeline holds its entry."""
    return pipe._key()


def _entry(key: str) -> _Entry:
    entry = _ENTRIES.get(key)
    if entry is None:
        raise KeyError(f"tricomb::pipeline: no pipeline {key!r} in this process: the pipeline is gone, or a graph "
                       "naming it was cached by another process and this one has not traced its caller (keep the "
                       "pipeline alive while its graphs run; call or trace it here first)")
    return entry


def _run(key: str, inputs: list[torch.Tensor], scalars: Sequence[Number]) -> list[torch.Tensor]:
    entry = _entry(key)
    result = launch.run(entry.ir, entry.cache, tuple(inputs), None, scalars=tuple(scalars))
    return list(result) if isinstance(result, tuple) else [result]


@torch.library.custom_op(_NAME, mutates_args=())
def _pipeline(key: str, inputs: list[torch.Tensor], scalars: Sequence[Number]) -> list[torch.Tensor]:
    return _run(key, inputs, scalars)


def _recordable(tensors: list, scans: bool) -> bool:
    """Whether a trace records a kernel's launch through ``wrap_triton`` (else the opaque operator runs it): the
    sizes are static and no kernel scans. Measured on the H200 (bench/NOTES.md, "triton_op"): over symbolic
    sizes, which reach Triton unspecialized, a graph ran softmax 32768 x 8192 in 1391 us against 522 us with static
    ones (the opaque operator specializes each launch as eager calls do, 524 us); a look-back scan's recorded
    launch failed Inductor's analysis of what it mutates, then its post-grad pass."""
    return not scans and not any(isinstance(n, torch.SymInt) for t in tensors if t is not None
                                 for n in (*t.shape, *t.stride()))


def _pipeline_cuda(key: str, inputs: list[torch.Tensor], scalars: Sequence[Number]) -> list[torch.Tensor]:
    """The pipeline on CUDA tensors, as torch.compile records it: traced through, its kernel's launch recorded by
    ``torch.library.wrap_triton`` (``tricomb.codegen.host._Launcher``), so Inductor compiles and launches the
    kernel in its own code, allocating the results with the graph's other buffers; where that is not what works
    (:func:`_recordable`), the opaque operator, a node of the graph."""
    if scalars or not _recordable(inputs, any(isinstance(s, Scan) for s in _entry(key).ir.stages)):
        # (a runtime scalar may be a tracer's symbol, which a recorded launch cannot split into its words)
        return torch.ops.tricomb.pipeline(key, inputs, scalars)
    return _run(key, inputs, scalars)


@_pipeline.register_fake
def _pipeline_fake(key: str, inputs: list[torch.Tensor], scalars: Sequence[Number]) -> list[torch.Tensor]:
    entry = _entry(key)
    metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in inputs]
    check_constant_along(entry.ir, metas)  # (an eager call's own words for a target missing its class axis)
    fields = evaluate_fields(entry.ir, metas, explain_errors=True)
    device = inputs[0].device
    # a field that is an input passed through is a new tensor laid out as torch's clone (as the launch makes it)
    return [torch.empty_like(f, device=device) if any(f is m for m in metas) else
            torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=device) for f in fields]


def _setup(ctx, inputs, output) -> None:
    key, tensors, scalars = inputs
    ctx.key, ctx.entry, ctx.scalars = key, _entry(key), list(scalars)  # (the entry lives as long as the recorded graph)
    ctx.wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
    ctx.count = len(tensors)
    if ctx.wanted:
        ctx.entry.check_gradient()
    ctx.save_for_backward(*tensors, *output)


def _backward(ctx, grads):
    if torch.is_grad_enabled():
        raise UnsupportedError("a backward of a tricomb pipeline records no graph of its own, so a second derivative "
                               "(create_graph=True, torch.func.hessian) is not computed; take first derivatives "
                               "only, or write the pipeline with torch ops for higher ones")
    saved = ctx.saved_tensors
    inputs, result = list(saved[:ctx.count]), list(saved[ctx.count:])
    grads = list(grads)
    if launch.traced(inputs + [g for g in grads if g is not None]):
        op = torch.ops.tricomb.pipeline_backward_cuda if inputs[0].is_cuda and _cuda_registered() else \
            torch.ops.tricomb.pipeline_backward
        computed = op(ctx.key, ctx.wanted, inputs, result, grads, ctx.scalars)
    else:
        computed = autograd.backward(ctx.entry.ir, inputs, result, grads, tuple(ctx.wanted),
                                     functools.partial(run_fields, scalars=tuple(ctx.scalars)))
    per_input: list = [None] * ctx.count
    for i, g in zip(ctx.wanted, computed):
        per_input[i] = g
    return None, per_input, None if ctx.scalars else []


_pipeline.register_autograd(_backward, setup_context=_setup)


def _gradients(key: str, wanted: list[int], inputs: list[torch.Tensor], result: list[torch.Tensor],
               grads: list[Optional[torch.Tensor]], scalars: Sequence[Number]) -> list[torch.Tensor]:
    computed = autograd.backward(_entry(key).ir, inputs, result, grads, tuple(wanted),
                                 functools.partial(run_fields, scalars=tuple(scalars)))
    return [_fresh(g, inputs[i], inputs + result + [g for g in grads if g is not None])
            for g, i in zip(computed, wanted)]


@torch.library.custom_op(_BACKWARD, mutates_args=())
def _pipeline_backward(key: str, wanted: list[int], inputs: list[torch.Tensor], result: list[torch.Tensor],
                       grads: list[Optional[torch.Tensor]], scalars: Sequence[Number]) -> list[torch.Tensor]:
    """The gradients of the inputs in ``wanted``, by the backward pipelines of the pipeline ``key``: what a
    traced backward calls, so that a graph names only the forward pipeline (a graph read back from torch's
    cache in another process finds it there, since tracing the caller entered it), and derives the backward
    pipelines where it runs."""
    return _gradients(key, wanted, inputs, result, grads, scalars)


def _pipeline_backward_cuda(key: str, wanted: list[int], inputs: list[torch.Tensor], result: list[torch.Tensor],
                            grads: list[Optional[torch.Tensor]], scalars: Sequence[Number]) -> list[torch.Tensor]:
    """:func:`_pipeline_backward` on CUDA tensors, traced through as :func:`_pipeline_cuda` is (the opaque operator
    where a backward kernel scans: a scan's, and the adjoint rule's)."""
    parts = autograd.check(_entry(key).ir)  # (None: the pipeline's own backward, attach kernels)
    if scalars or not _recordable(inputs + result + grads, parts is not None and autograd.rule(parts).scans):
        return torch.ops.tricomb.pipeline_backward(key, wanted, inputs, result, grads, scalars)
    return _gradients(key, wanted, inputs, result, grads, scalars)


@functools.cache
def _register_cuda() -> None:
    """The CUDA operators, as triton_ops, registered on first use: defining one reads its function's source with
    torch._inductor's helpers, whose import (torch._dynamo's: about a second) a process that never traces should
    not pay."""
    torch.library.triton_op(_CUDA, _pipeline_cuda, mutates_args=()).register_autograd(_backward, setup_context=_setup)
    torch.library.triton_op(_BACKWARD_CUDA, _pipeline_backward_cuda, mutates_args=())


@_constant_to_dynamo
def _cuda_registered() -> bool:
    """True, once the CUDA operators are registered: torch.compile calls it while tracing, not tracing into it."""
    _register_cuda()
    return True


@_pipeline_backward.register_fake
def _pipeline_backward_fake(key, wanted, inputs, result, grads, scalars):
    return [torch.empty_like(inputs[i]) for i in wanted]


def _fresh(g: torch.Tensor, like: torch.Tensor, arguments: list) -> torch.Tensor:
    """``g`` as the operator must return it: a tensor of its own (an operator's result never aliases its
    arguments, and a sum's gradient is its cotangent expanded), laid out as ``torch.empty_like(like)``, which
    the fake implementation promises."""
    expected = torch.empty_like(like)
    if launch.traced([g]):  # (a tracer's tensors have no addresses: torch's own test of aliasing)
        shares = any(torch._C._is_alias_of(g, a) for a in arguments)
    else:
        shares = any(g.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in arguments)
    if not shares and g.stride() == expected.stride():
        return g
    return expected.copy_(g)


# derived (backward) pipelines, verified and with their compiled entries: run eagerly, never named by a graph
_DERIVED = LRU(256)


def run_fields(ir: PipelineIR, tensors: tuple, scalars: tuple = ()) -> list[torch.Tensor]:
    """Run a derived (backward) pipeline on real tensors, returning its result's fields; ``scalars``: the
    forward's runtime scalars, which the derived pipeline reads by the same indices."""
    entry = _DERIVED.get(ir)
    if entry is None:
        with SERIAL:
            entry = _DERIVED[ir] = _Entry(verify(ir))
    result = launch.run(entry.ir, entry.cache, tuple(tensors), None, scalars=scalars)
    return list(result) if isinstance(result, tuple) else [result]


def backward_kernels(ir: PipelineIR, inputs: tuple) -> list[tuple[PipelineIR, tuple]]:
    """The backward pipelines, each with inputs like its own, that a backward of ``ir`` on inputs like ``inputs``
    runs for the gradients of the inputs that require grad (of every float input, when none does), derived
    without running one: each records itself and answers with tensors of torch's result (allocated, not
    computed). Raises UnsupportedError as a call with grad would."""
    wanted = tuple(i for i, t in enumerate(inputs) if t.requires_grad) or \
        tuple(i for i, t in enumerate(inputs) if t.is_floating_point())
    if not wanted:
        return []
    autograd.check(ir)
    device = inputs[0].device

    def like(fields_of, tensors):
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors]
        return [torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=device)
                for f in evaluate_fields(fields_of, metas)]
    recorded: list = []

    def record(derived: PipelineIR, tensors: tuple) -> list:
        checked = verify(derived)
        recorded.append((checked, tuple(tensors)))
        return like(checked, tensors)
    result = like(ir, inputs)
    grads = [torch.empty_like(r) if r.is_floating_point() else None for r in result]
    with torch.no_grad():
        autograd.backward(ir, tuple(t.detach() for t in inputs), result, grads, wanted, record)
    return recorded


_NO_OUT_WITH_GRAD = ("out= records no autograd history (as torch's out= arguments): with an input that requires "
                     "grad, drop out= and use the result, or call under torch.no_grad()")


def call(key, inputs: tuple, out=None, scalars: tuple = ()):
    """The pipeline named by ``key()`` (a :func:`key_function`) on ``inputs`` through the operator, eagerly
    (inputs that need a graph): a tensor, or a tuple for a tuple result; ``scalars``: its runtime scalars' values.
    With grad wanted, a pipeline whose gradient is not derived, or an ``out``, is refused here, before anything
    runs."""
    for i, t in enumerate(inputs):  # (before torch's autograd sees them: a torch.func transform's, a wrapper)
        check_readable(i, t, caller_location())
    name = key()
    if launch.records_grad(inputs):
        if out is not None:
            raise UnsupportedError(_NO_OUT_WITH_GRAD, caller_location())
        _entry(name).check_gradient()
    return _result(torch.ops.tricomb.pipeline(name, list(inputs), list(scalars)), out)


def traced_call(key, inputs: tuple, out=None, scalars: tuple = ()):
    """The call torch.compile traces: the operator on ``inputs``, the pipeline named by ``key()`` (a
    :func:`key_function`). ``out`` gets the result copied in, after its shape and dtype are checked."""
    if out is not None:  # (torch._check: a raise of tricomb's own error is not traceable)
        torch._check(not launch.records_grad(inputs), lambda: _NO_OUT_WITH_GRAD)
    name = key()
    op = torch.ops.tricomb.pipeline_cuda if inputs and inputs[0].is_cuda and _cuda_registered() else \
        torch.ops.tricomb.pipeline
    return _result(op(name, list(inputs), list(scalars)), out)


def _result(fields, out):
    result = fields[0] if len(fields) == 1 else tuple(fields)
    return result if out is None else _into(out, result)


def _into(out, result):
    """``result`` copied into ``out`` (a tensor, or a tuple of tensors for a tuple result)."""
    pairs = list(zip(out, result)) if isinstance(result, tuple) and isinstance(out, (tuple, list)) else [(out, result)]
    if len(pairs) != (len(result) if isinstance(result, tuple) else 1):
        raise ShapeError(f"out= holds {len(pairs)} tensor(s) for a result of {len(result)} fields")
    for o, r in pairs:
        if not isinstance(o, torch.Tensor) or o.dtype != r.dtype:
            raise DTypeError(f"out= must be a {r.dtype} tensor here, got {getattr(o, 'dtype', type(o).__name__)}")
        if not torch.compiler.is_compiling() and is_fake(o) != is_fake(r):
            raise DTypeError("out= must be a fake tensor for fake inputs (a tracer's), and a real one for real "
                             "inputs; pass out= of the inputs' kind")
        torch._check(o.shape == r.shape, lambda: "out= must have the result's shape")
        o.copy_(r)
    return out


__all__ = ["backward_kernels", "call", "key_function", "op_key", "run_fields", "traced_call"]

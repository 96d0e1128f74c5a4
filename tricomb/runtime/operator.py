"""Pipelines as a torch operator: ``tricomb::pipeline``, registered through ``torch.library``.

One custom operator runs every pipeline: ``tricomb::pipeline(str key, Tensor[] inputs) -> Tensor[]``, where
``key`` names a pipeline in this process's table (a digest of its IR, :func:`op_key`). Its fake implementation
is tricomb's own shape and dtype inference (the pipeline evaluated by torch on meta tensors, whose sizes may be
symbolic), so ``torch.compile`` traces a call as one node with no graph break and no recompile when only sizes
change; its autograd formula runs backward pipelines derived from the IR (:mod:`tricomb.autograd`): directly in
an eager backward, and inside a second operator, ``tricomb::pipeline_backward``, in a traced one.

The eager call does not go through the operator: :meth:`tricomb.api.Pipeline.__call__` launches directly, and
takes this path only under ``torch.compile`` (or another tracer: fake or functional tensors), or when an input
requires grad in grad mode.
"""
from __future__ import annotations

import hashlib
import weakref
from typing import Optional

import torch
from torch._subclasses.fake_tensor import is_fake

from ..autograd import backward as autograd
from ..errors import DTypeError, ShapeError, UnsupportedError, caller_location
from ..pipeline.evaluate import evaluate_fields
from ..pipeline.ir import PipelineIR
from ..pipeline.key import ir_key
from ..pipeline.verify import verify
from ..serial import SERIAL
from . import index, launch
from .lru import LRU

_NAME = "tricomb::pipeline"
_BACKWARD = "tricomb::pipeline_backward"


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


@torch.library.custom_op(_NAME, mutates_args=())
def _pipeline(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    entry = _entry(key)
    result = launch.run(entry.ir, entry.cache, tuple(inputs), None)
    return list(result) if isinstance(result, tuple) else [result]


@_pipeline.register_fake
def _pipeline_fake(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    entry = _entry(key)
    metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in inputs]
    fields = evaluate_fields(entry.ir, metas, explain_errors=True)
    device = inputs[0].device
    # a field that is an input passed through is a new tensor laid out as torch's clone (as the launch makes it)
    return [torch.empty_like(f, device=device) if any(f is m for m in metas) else
            torch.empty_strided(f.shape, f.stride(), dtype=f.dtype, device=device) for f in fields]


def _setup(ctx, inputs, output) -> None:
    key, tensors = inputs
    ctx.key, ctx.entry = key, _entry(key)  # (the entry lives as long as the recorded graph)
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
        computed = torch.ops.tricomb.pipeline_backward(ctx.key, ctx.wanted, inputs, result, grads)
    else:
        computed = autograd.backward(ctx.entry.ir, inputs, result, grads, tuple(ctx.wanted), run_fields)
    per_input: list = [None] * ctx.count
    for i, g in zip(ctx.wanted, computed):
        per_input[i] = g
    return None, per_input


_pipeline.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op(_BACKWARD, mutates_args=())
def _pipeline_backward(key: str, wanted: list[int], inputs: list[torch.Tensor], result: list[torch.Tensor],
                       grads: list[Optional[torch.Tensor]]) -> list[torch.Tensor]:
    """The gradients of the inputs in ``wanted``, by the backward pipelines of the pipeline ``key``: what a
    traced backward calls, so that a graph names only the forward pipeline (a graph read back from torch's
    cache in another process finds it there, since tracing the caller entered it), and derives the backward
    pipelines where it runs."""
    computed = autograd.backward(_entry(key).ir, inputs, result, grads, tuple(wanted), run_fields)
    return [_fresh(g, inputs[i], inputs + result + [g for g in grads if g is not None])
            for g, i in zip(computed, wanted)]


@_pipeline_backward.register_fake
def _pipeline_backward_fake(key, wanted, inputs, result, grads):
    return [torch.empty_like(inputs[i]) for i in wanted]


def _fresh(g: torch.Tensor, like: torch.Tensor, arguments: list) -> torch.Tensor:
    """``g`` as the operator must return it: a tensor of its own (an operator's result never aliases its
    arguments, and a sum's gradient is its cotangent expanded), laid out as ``torch.empty_like(like)``, which
    the fake implementation promises."""
    expected = torch.empty_like(like)
    shares = any(g.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in arguments)
    if not shares and g.stride() == expected.stride():
        return g
    return expected.copy_(g)


# derived (backward) pipelines, verified and with their compiled entries: run eagerly, never named by a graph
_DERIVED = LRU(256)


def run_fields(ir: PipelineIR, tensors: tuple) -> list[torch.Tensor]:
    """Run a derived (backward) pipeline on real tensors, returning its result's fields."""
    entry = _DERIVED.get(ir)
    if entry is None:
        with SERIAL:
            entry = _DERIVED[ir] = _Entry(verify(ir))
    result = launch.run(entry.ir, entry.cache, tuple(tensors), None)
    return list(result) if isinstance(result, tuple) else [result]


def backward_kernels(ir: PipelineIR, inputs: tuple) -> list[tuple[PipelineIR, tuple]]:
    """The backward pipelines, each with inputs like its own, that a backward of ``ir`` on inputs like ``inputs``
    runs for the gradients of the float inputs, derived without running one: each records itself and answers
    with tensors of torch's result (allocated, not computed). Raises UnsupportedError as a call with grad
    would."""
    wanted = tuple(i for i, t in enumerate(inputs) if t.is_floating_point())
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


def call(key, inputs: tuple, out=None):
    """The pipeline named by ``key()`` (a :func:`key_function`) on ``inputs`` through the operator, eagerly
    (inputs that need a graph): a tensor, or a tuple for a tuple result. With grad wanted, a pipeline whose
    gradient is not derived, or an ``out``, is refused here, before anything runs."""
    name = key()
    if launch.records_grad(inputs):
        if out is not None:
            raise UnsupportedError(_NO_OUT_WITH_GRAD, caller_location())
        _entry(name).check_gradient()
    return _result(torch.ops.tricomb.pipeline(name, list(inputs)), out)


def traced_call(key, inputs: tuple, out=None):
    """The call torch.compile traces: the operator on ``inputs``, the pipeline named by ``key()`` (a
    :func:`key_function`). ``out`` gets the result copied in, after its shape and dtype are checked."""
    if out is not None:  # (torch._check: a raise of tricomb's own error is not traceable)
        torch._check(not launch.records_grad(inputs), lambda: _NO_OUT_WITH_GRAD)
    return _result(torch.ops.tricomb.pipeline(key(), list(inputs)), out)


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

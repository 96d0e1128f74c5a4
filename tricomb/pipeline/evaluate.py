"""Evaluating the IR with torch, stage by stage.

This is the meaning of a pipeline written as torch calls. It runs on meta tensors to learn result dtypes and
shapes (torch decides promotion, weak scalars and reduction dtypes), and on float64 CPU tensors as the oracle
(:mod:`tricomb.testing.reference`).
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import AxisError, StageError, TricombError
from ..scalar.builtins import COORDINATES, INDEX, OPS
from ..scalar.dtypes import typed_identity
from ..scalar.ir import Call, Function, JitCall, fold
from .ir import Attach, Lag, Map, PipelineIR, Reduce, Scan, ZipWith, new_inputs
from .jit_apply import apply_jit
from .operators import fold_reduce, fold_scan, identities
from .scalars import CARRIERS
from .verify import builtin_parts, iteration_axes, operator_identity, operator_spec

OpHook = Callable[[torch.Tensor], torch.Tensor]


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def constant_dtype(value, dtypes: list[torch.dtype], zero_dim: bool) -> torch.dtype:
    """torch's dtype for a Python constant returned by a function of tensors of ``dtypes``."""
    if not dtypes:
        return torch.tensor(value).dtype
    promoted = dtypes[0]
    for d in dtypes[1:]:
        promoted = torch.promote_types(promoted, d)
    return torch.result_type(torch.empty(() if zero_dim else (1,), dtype=promoted, device="meta"), value)


@dataclass(frozen=True)
class Weak:
    """A runtime scalar's value in an evaluation (:mod:`tricomb.pipeline.scalars`): a Python number, which
    torch promotes as a weak scalar where it meets a tensor, and which ops of runtime scalars and constants alone
    compute as Python does (:func:`weak_call`), their result a runtime scalar's again."""

    value: bool | int | float


# the values of the runtime scalars an evaluation reads, by index; None: a number of each one's kind (dtypes only)
_RUNTIME_VALUES: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("tricomb_runtime_values", default=None)


@contextlib.contextmanager
def runtime_values(values: tuple):
    """Within the block, evaluations read the runtime scalars ``values`` (by index)."""
    token = _RUNTIME_VALUES.set(tuple(values))
    try:
        yield
    finally:
        _RUNTIME_VALUES.reset(token)


def runtime_value(kind: type, index: int) -> Weak:
    """Runtime scalar ``index``, of ``kind``: its value in :func:`runtime_values`, else a number of its kind."""
    values = _RUNTIME_VALUES.get()
    return Weak(kind(values[index]) if values is not None else kind(1))


# ops whose bools stay bools in Python (True & True is True); in every other, a bool counts as the int it is
# (True + True is 2), where torch's bool arithmetic would keep a bool
_BOOLEAN_OPS = frozenset(["logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt",
                          "le", "gt", "ge", "where", "maximum", "minimum"])


def weak_call(op: str, operands: list) -> Weak:
    """``op`` of runtime scalars and constants alone, as Python computes it: a float result in float64, an int
    one in int64 (a bool counting as an int in arithmetic), a bool as a bool; the result is a runtime scalar's
    value."""
    values = [weak_number(o) for o in operands]
    if op not in _BOOLEAN_OPS:
        values = [int(v) if type(v) is bool else v for v in values]
    elif op == "where":
        values = values[:1] + [int(v) if type(v) is bool and any(type(w) is not bool for w in values[1:]) else v
                               for v in values[1:]]
    carriers = [torch.tensor(v, dtype=CARRIERS[type(v)]) for v in values]
    result = OPS[op].torch(*carriers)
    if result.is_floating_point() and result.dtype != torch.float64:
        result = OPS[op].torch(*(c.to(torch.float64) for c in carriers))
    return Weak(result.item())


def weak_number(value):
    """A runtime scalar's value as the Python number it is; anything else as it is."""
    return value.value if isinstance(value, Weak) else value


def _as_tensor(value, like: list) -> torch.Tensor:
    value = weak_number(value)
    if isinstance(value, torch.Tensor):
        return value
    tensors = [t for t in like if isinstance(t, torch.Tensor)]
    if not tensors:
        return torch.tensor(value)
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dtype = constant_dtype(value, [t.dtype for t in tensors], len(shape) == 0)
    return torch.full(shape, value, dtype=dtype, device=tensors[0].device)


def promoted_dtype(tensors: list[torch.Tensor]) -> torch.dtype:
    """torch's result dtype of an elementwise op on ``tensors``, any number of them (a 0-d tensor promotes as
    torch's scalars do): a ``@triton.jit`` function's result dtype. torch.result_type takes two."""
    result = torch.empty(tensors[0].shape, dtype=tensors[0].dtype, device="meta")
    for t in tensors[1:]:
        other = torch.empty(t.shape, dtype=t.dtype, device="meta")
        result = torch.empty(torch.broadcast_shapes(result.shape, other.shape), dtype=torch.result_type(result, other),
                             device="meta")
    return result.dtype


def _jit_call(expr: JitCall, operands: list) -> torch.Tensor:
    tensors = [t if isinstance(t, torch.Tensor) else torch.tensor(t) for t in operands]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dtype = promoted_dtype(tensors)
    device = next((t.device for t in operands if isinstance(t, torch.Tensor)), tensors[0].device)
    if device.type == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    # The meaning of a user @triton.jit function is the function itself: run it alone, elementwise.
    return apply_jit(expr.fn, [t.to(device=device, dtype=dtype).expand(shape) for t in tensors])


def coordinate(axis: int, args: list) -> torch.Tensor:
    """``index(axis)`` in a function of ``args``: each element's int64 coordinate along ``axis`` of the shape the
    tensors among ``args`` broadcast to. Raises AxisError for an axis out of range, or for 0-d arguments."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    if not shape:
        raise AxisError(f"index({axis}) in a function of 0-d arguments: a 0-d stream has no axis to count along "
                        "(after a reduce over every axis, keepdim=True keeps them at size 1)")
    if not -len(shape) <= axis < len(shape):
        raise AxisError(f"index({axis}) is out of range for the function's arguments, of shape {tuple(shape)}: an "
                        f"axis of a rank-{len(shape)} stream is in [{-len(shape)}, {len(shape) - 1}]")
    axis %= len(shape)
    along = torch.arange(shape[axis], dtype=torch.int64, device=tensors[0].device)
    return along.view([-1 if d == axis else 1 for d in range(len(shape))]).expand(shape)


def _coordinate_leaf(args: list) -> torch.Tensor:
    """The expand pass's rewrite of ``index`` (a ``coordinate_<phase>`` leaf, whose values exist in a kernel
    alone): int64 zeros of the shape and on the device of ``args``, as ``index``'s dtype and shape."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return torch.zeros(torch.broadcast_shapes(*(t.shape for t in tensors)), dtype=torch.int64,
                       device=tensors[0].device if tensors else None)


def evaluate_function(fn: Function, args: list, after_op: OpHook = _identity) -> list[torch.Tensor]:
    """``fn``'s outputs computed by torch from the tensors ``args``; ``after_op`` is applied to each op's result."""
    def on_call(expr, operands):
        if isinstance(expr, Call) and OPS[expr.op].runtime is not None:
            return runtime_value(OPS[expr.op].runtime, operands[0])
        if any(isinstance(o, Weak) for o in operands):
            if isinstance(expr, Call) and not any(isinstance(o, torch.Tensor) for o in operands):
                return weak_call(expr.op, operands)
            operands = [weak_number(o) for o in operands]
        if isinstance(expr, JitCall):
            return after_op(_jit_call(expr, operands))
        if expr.op == INDEX.name:
            return coordinate(operands[0], args)
        if expr.op in COORDINATES:
            return _coordinate_leaf(args)
        if not any(isinstance(o, torch.Tensor) for o in operands):
            operands[0] = torch.tensor(operands[0])
        return after_op(OPS[expr.op].torch(*operands))

    return [_as_tensor(v, args) for v in fold(fn, args, on_call)]


def reduce_tensor(stage: Reduce, x: torch.Tensor) -> torch.Tensor:
    """torch's result for ``stage`` (an operator on single values) applied to ``x``."""
    return reduce_fields(stage, [x])[0]


def reduce_fields(stage: Reduce, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """torch's result for ``stage`` applied to the stream fields ``xs`` (one per field of its operator; fields of
    different shapes are broadcast together first, as the operator combines them element by element)."""
    xs = list(torch.broadcast_tensors(*xs)) if len(xs) > 1 else xs
    x = xs[0]
    dims = iteration_axes(stage, x.dim())
    if stage.mean:
        mean = torch.nanmean if stage.skip_nan else torch.mean
        return [mean(x, dim=dims, keepdim=stage.keepdim, dtype=stage.dtype)]
    if stage.index:
        return [_arg_reduce(stage, x)]
    if stage.skip_nan:
        return [torch.nansum(x, dim=dims, keepdim=stage.keepdim, dtype=stage.dtype)]
    reduce_ref, _ = _references(stage)
    xs = [_converted(x, stage.dtype) for x in xs]
    if x.dim() == 0:
        return [_converted(o.reshape(()), stage.dtype) for o in reduce_ref([x.reshape(1) for x in xs], (0,))]
    outs = reduce_ref(xs, dims)
    if stage.keepdim:
        for d in dims:
            outs = [o.unsqueeze(d) for o in outs]
    return [_converted(o, stage.dtype) for o in outs]


def _arg_reduce(stage: Reduce, x: torch.Tensor) -> torch.Tensor:
    """torch.argmax/argmin: over everything (flat positions) or along one axis."""
    fn = torch.argmax if operator_spec(stage.op).name == "maximum" else torch.argmin
    if stage.axis is None:
        out = fn(x)
        return out.reshape((1,) * x.dim()) if stage.keepdim else out
    return fn(x, dim=stage.axis[0], keepdim=stage.keepdim)


def _converted(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``x`` in ``dtype`` (unchanged for None): torch.sum(x, dtype=d) is torch.sum(x.to(d)) with result dtype d,
    and integer sums and products wrap alike in any width, so converting the int64 result back is exact."""
    return x if dtype is None else x.to(dtype)


def scan_tensor(stage: Scan, x: torch.Tensor) -> torch.Tensor:
    """torch's result for ``stage`` (an operator on single values) applied to ``x``."""
    return scan_fields(stage, [x])[0]


def scan_fields(stage: Scan, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """torch's result for ``stage`` applied to the stream fields ``xs`` (one per field of its operator, broadcast
    together first)."""
    xs = list(torch.broadcast_tensors(*xs)) if len(xs) > 1 else xs
    xs = [_converted(x, stage.dtype) for x in xs]
    if xs[0].dim() == 0:
        return [o.reshape(()) for o in _scan_along(stage, [x.reshape(1) for x in xs], 0)]
    return _scan_along(stage, xs, stage.axis % xs[0].dim())


def _references(stage: Reduce | Scan):
    """torch's reduce and scan for the stage's operator, on lists of fields: the builtin's own ops, or a user
    operator's sequential fold, each field in the dtype the operator gives for two stream values."""
    parts = builtin_parts(stage.op)  # a builtin, or a builtin per field (fanout): torch's own reductions
    if parts is not None:
        return (lambda xs, dims: [p.reduce_ref(x, dims) for p, x in zip(parts, xs)],
                lambda xs, axis: [p.scan_ref(x, axis) for p, x in zip(parts, xs)])
    fn, identity = stage.op, stage.identity

    def in_dtypes(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        ones = [torch.empty((), dtype=x.dtype, device="meta") for x in xs]
        return [x.to(o.dtype) for x, o in zip(xs, evaluate_function(fn, ones + ones))]

    return (lambda xs, dims: fold_reduce(fn, identity, in_dtypes(xs), dims),
            lambda xs, axis: fold_scan(fn, identity, in_dtypes(xs), axis))


def _index_scan(stage: Scan, xs: list[torch.Tensor], axis: int) -> list[torch.Tensor]:
    """torch.cummax/cummin: the running values and their positions in scan order."""
    fn = torch.cummax if operator_spec(stage.op).name == "maximum" else torch.cummin
    if xs[0].device.type == "meta":
        return [xs[0], torch.empty(xs[0].shape, dtype=torch.int64, device="meta")]
    return list(fn(xs[0], axis))


def _scan_along(stage: Scan, xs: list[torch.Tensor], axis: int) -> list[torch.Tensor]:
    _, scan_ref = _references(stage)
    if stage.reverse:
        xs = [x.flip(axis) for x in xs]
    outs = _index_scan(stage, xs, axis) if stage.index else [_converted(o, stage.dtype) for o in scan_ref(xs, axis)]
    if stage.reverse and stage.index:  # positions along the axis, not in scan order
        outs[1] = outs[1].shape[axis] - 1 - outs[1]
    if stage.exclusive and outs[0].shape[axis] > 0:
        identity = identities(operator_identity(stage)) + ((-1,) if stage.index else ())
        firsts = [torch.full_like(o.narrow(axis, 0, 1), typed_identity(e, o.dtype))
                  for o, e in zip(outs, identity)]
        outs = [torch.cat([first, o.narrow(axis, 0, o.shape[axis] - 1)], axis) for first, o in zip(firsts, outs)]
    return [o.flip(axis) for o in outs] if stage.reverse else outs


def evaluate(pipeline: PipelineIR, inputs: list[torch.Tensor], after_op: OpHook = _identity,
             explain_errors: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The pipeline's result computed by torch, stage by stage: a tensor, or a tuple of tensors for a tuple
    stream. With ``explain_errors``, an error torch raises for a stage becomes a :class:`StageError` naming it."""
    fields = evaluate_fields(pipeline, inputs, after_op, explain_errors)
    return fields[0] if len(fields) == 1 else tuple(fields)


def evaluate_fields(pipeline: PipelineIR, inputs: list[torch.Tensor], after_op: OpHook = _identity,
                    explain_errors: bool = False) -> list[torch.Tensor]:
    """:func:`evaluate`, always as a list of the result's fields."""
    pending = list(inputs)
    stream: list[torch.Tensor] = []
    for i, stage in enumerate(pipeline.stages):
        try:
            stream, pending = _evaluate_stage(stage, i, stream, pending, after_op)
        except TricombError as exc:
            if exc.location is not None:
                raise
            raise type(exc)(exc.message, stage.location) from None
        except (RuntimeError, TypeError, ValueError, OverflowError, IndexError) as exc:
            if not explain_errors or isinstance(exc, TricombError):
                raise
            from .printer import stage_text
            what = "a stream of " + ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in stream) if i else \
                "inputs " + ", ".join(f"{tuple(t.shape)} {str(t.dtype)[6:]}" for t in inputs)
            raise StageError(f"torch rejects stage {i} ({stage_text(stage)}) on {what}: {exc}",
                             stage.location) from None
    return column_summed(pipeline, stream) if pipeline.column_sums else stream


def column_summed(pipeline: PipelineIR, stream: list[torch.Tensor]) -> list[torch.Tensor]:
    """The result fields ``pipeline.column_sums`` names, summed over the rows: every axis the attaches keep, kept
    with size 1, in the field's dtype (torch accumulates a half type's sum in float32)."""
    rank = stream[0].dim()
    folded = iteration_axes(next(s for s in pipeline.stages if isinstance(s, Attach)).reduce, rank)
    kept = [d for d in range(rank) if d not in folded]
    return [f.sum(dim=kept, keepdim=True, dtype=f.dtype) if j in pipeline.column_sums and kept else f
            for j, f in enumerate(stream)]


def with_lags(stage: Map | ZipWith, args: list[torch.Tensor], first: int) -> list[torch.Tensor]:
    """A stage's arguments with each input one of its :class:`~.ir.Lag` names (``args[first + lag.input]``) broadcast
    to the arguments' shape and read as the lag says."""
    lags = stage.lags if isinstance(stage, ZipWith) else ()
    if not lags:
        return args
    shape = torch.broadcast_shapes(*(a.shape for a in args))
    out = list(args)
    for lag in lags:
        out[first + lag.input] = lagged(args[first + lag.input].expand(shape), lag)
    return out


def lagged(t: torch.Tensor, lag: Lag) -> torch.Tensor:
    """``t`` read ``lag.by`` places back along ``lag.axis``: element i holds ``t``'s element ``i - by`` there, and
    ``lag.fill`` where that is outside the axis (everywhere, for a 0-d ``t``)."""
    fill = torch.full((), lag.fill, dtype=t.dtype, device=t.device)
    if t.dim() == 0:
        return t if lag.by == 0 else fill
    axis = lag.axis % t.dim()
    n = t.shape[axis]
    source = torch.arange(n, device=t.device).view([-1 if d == axis else 1 for d in range(t.dim())]) - lag.by
    inside = (source >= 0) & (source < n)
    return torch.where(inside, torch.roll(t, lag.by, axis) if n else t, fill)


def attach_fields(stage: Attach, xs: list[torch.Tensor], after_op: OpHook = _identity) -> list[torch.Tensor]:
    """torch's stream after ``stage`` on the stream fields ``xs``: the fields broadcast together, then the
    attached pipeline's result fields, each with the reduced axes kept (as ``keepdim=True``) and expanded to the
    stream's shape; after an attach every field is laid out row-major, as torch.softmax's result is. (An empty
    stream attaches empty fields.)"""
    xs = list(torch.broadcast_tensors(*xs)) if len(xs) > 1 else list(xs)
    if xs[0].numel() == 0:
        return xs + [after_op(t) for t in _attached_to_nothing(stage, xs)]
    stream = list(xs)
    for stage_ in stage.pipeline.stages:  # a continuation: every stage takes the stream (none brings an input)
        stream, _ = _evaluate_stage(stage_, 1, stream, [], after_op)
    reduce = stage.reduce
    axes = iteration_axes(reduce, xs[0].dim())
    if not reduce.keepdim:
        for d in axes:
            stream = [r.unsqueeze(d) for r in stream]
    # row-major, as torch.softmax and layer_norm lay out their results whatever the input's layout
    return [x.contiguous() for x in xs] + [after_op(r.expand(xs[0].shape).contiguous()) for r in stream]


def _attached_to_nothing(stage: Attach, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """An attach to an empty stream attaches empty fields: there is no element to use a result, so the reduction
    is not taken (a max over a row of nothing, which torch refuses, is never asked for). Their dtypes are those
    the reduction gives for one element a row."""
    one = [torch.empty([max(n, 1) for n in x.shape], dtype=x.dtype, device="meta") for x in xs]
    return [torch.empty(xs[0].shape, dtype=t.dtype, device=xs[0].device)
            for t in attach_fields(stage, one)[len(xs):]]


def _evaluate_stage(stage, i: int, stream: list, pending: list, after_op: OpHook):
    """One stage: returns the new stream (its fields) and the inputs not yet consumed."""
    if isinstance(stage, (Map, ZipWith)):
        take = new_inputs((stage,))[0] if i == 0 else max(stage.fn.arity - len(stream), 0)
        args = with_lags(stage, stream + pending[:take], len(stream))
        return evaluate_function(stage.fn, args, after_op), pending[take:]
    xs = stream if i else pending[:1]
    if isinstance(stage, Attach):
        return attach_fields(stage, xs, after_op), pending[0 if i else 1:]
    combined = reduce_fields(stage, xs) if isinstance(stage, Reduce) else scan_fields(stage, xs)
    return [after_op(c) for c in combined], pending[0 if i else 1:]
